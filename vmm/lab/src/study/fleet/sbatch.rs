//! What every pmemvm Slurm script needs: words quoted so that sbatch's
//! `#SBATCH` parser and sh read them alike, paths no quoting carries refused,
//! the scripts written without overwriting, and where they start from
//! (`bench --slurm` in [`super::slurm`], `crash-check --slurm` in
//! [`super::crash_array`]).

use std::path::{Path, PathBuf};

use super::task::Task;

/// Errors of writing the Slurm scripts.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The scripts exist already.
    #[error("{0} already exists; choose another --out directory or remove it")]
    Exists(PathBuf),
    /// The directory cannot be made or a script written.
    #[error("cannot write {path}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A path that cannot go into a script as it is.
    #[error("{what} {path:?} cannot be written into the Slurm scripts: it holds {why}; choose a path without it")]
    UnusablePath {
        /// Which path (`--out`, the working directory, this pmemvm).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The character at fault, in words.
        why: &'static str,
    },
    /// Two tasks whose result directories would be one.
    #[error("tasks {a} and {b} would both write {dir}; rename one of the sides")]
    SameDirectory {
        /// One task.
        a: Task,
        /// The other.
        b: Task,
        /// The directory name.
        dir: String,
    },
    /// The bench request cannot be written for the tasks.
    #[error(transparent)]
    Request(crate::study::bench::request_file::RequestFileError),
    /// The path of this pmemvm or the working directory is unknown.
    #[error("cannot tell {what}")]
    Where {
        /// What.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for SlurmError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Exists(_) | Self::UnusablePath { .. } | Self::SameDirectory { .. } => Usage,
            _ => Environment,
        }
    }
}

/// The lines every pmemvm job script starts with after its comments: the job's name, its
/// array (`0-last`, for an array job), the directory it starts in, its log (`log`, a file
/// name pattern in `out/logs/`), `set -eu` and `PMEMVM` (this pmemvm unless set).
pub(crate) fn script_head(
    s: &mut String,
    job: &str,
    array_last: Option<usize>,
    workdir: &Path,
    out: &Path,
    log: &str,
    pmemvm: &Path,
) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "#SBATCH --job-name={job}");
    if let Some(last) = array_last {
        let _ = writeln!(s, "#SBATCH --array=0-{last}");
    }
    let _ = writeln!(
        s,
        "#SBATCH --chdir={}",
        sbatch_quote(&workdir.display().to_string())
    );
    let _ = writeln!(
        s,
        "#SBATCH --output={}",
        sbatch_quote(&format!("{}/logs/{log}", pattern_escape(out)))
    );
    s.push_str("set -eu\n");
    let _ = writeln!(s, "PMEMVM=${{PMEMVM:-{}}}", quote_path(pmemvm));
}

/// `value` quoted for sh.
pub fn sh_quote(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

pub(crate) fn quote_path(p: &Path) -> String {
    sh_quote(&p.display().to_string())
}

/// `value` quoted for an `#SBATCH` line: in double quotes, with `\`, `"`, `$` and `` ` ``
/// escaped by a backslash. sbatch's parser of `#SBATCH` lines groups quoted text and takes a
/// backslash as an escape inside quotes too (unlike sh between single quotes), so this is the
/// one quoting that sbatch and sh read alike: a reader can paste the word into a shell.
pub fn sbatch_quote(value: &str) -> String {
    let mut s = String::with_capacity(value.len() + 2);
    s.push('"');
    for c in value.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

/// `path` as the literal start of an sbatch filename pattern (`--output`, `--error`): every
/// `%` doubled, since sbatch replaces `%A`, `%a`, `%j`... in them and reads `%%` as `%`.
pub fn pattern_escape(path: &Path) -> String {
    path.display().to_string().replace('%', "%%")
}

/// Refuses a path that no quoting carries into the scripts: a control character (a newline
/// ends an `#SBATCH` line) or a backslash (in a filename pattern it turns off every `%`
/// replacement, so every task would write one log).
pub(crate) fn check_path(what: &'static str, path: &Path) -> Result<(), SlurmError> {
    let text = path.display().to_string();
    let why = if text.chars().any(char::is_control) {
        Some("a control character (such as a newline)")
    } else if text.contains('\\') {
        Some("a backslash, which turns off sbatch's %-patterns in log file names")
    } else {
        None
    };
    match why {
        Some(why) => Err(SlurmError::UnusablePath {
            what,
            path: path.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// Writes `files` (name, text) into `out` and makes its directories `dirs`; refuses, before
/// writing anything, when one of the files exists.
pub(crate) fn write_files(
    out: &Path,
    files: &[(&str, String)],
    dirs: &[&str],
) -> Result<Vec<PathBuf>, SlurmError> {
    if let Some(p) = files.iter().map(|(n, _)| out.join(n)).find(|p| p.exists()) {
        return Err(SlurmError::Exists(p));
    }
    for d in dirs.iter().map(|d| out.join(d)) {
        std::fs::create_dir_all(&d).map_err(|source| SlurmError::Write {
            path: d.clone(),
            source,
        })?;
    }
    let mut written = Vec::new();
    for (name, text) in files {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|source| SlurmError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

/// The working directory and this pmemvm's path, which the scripts start from.
pub(crate) fn here() -> Result<(PathBuf, PathBuf), SlurmError> {
    let workdir = std::env::current_dir().map_err(|source| SlurmError::Where {
        what: "the working directory",
        source,
    })?;
    let pmemvm = std::env::current_exe().map_err(|source| SlurmError::Where {
        what: "where this pmemvm is",
        source,
    })?;
    Ok((workdir, pmemvm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_what_sh_would_split() {
        assert_eq!(sh_quote("a'b c"), r"'a'\''b c'");
        assert_eq!(sh_quote("/x/y.z"), "/x/y.z");
        assert_eq!(sh_quote(""), "''");
    }
}
