//! `pmemvm crash-check`: a fresh guest on each crash image of a flush
//! recording, running the user's check (a repair tool, a mount and an
//! application's recovery check), with each image's status, output and
//! time in a table and JSON. The images come from [`vmm::nvdimm::record::images`];
//! each boot gets a read-write copy, so the images stay as written.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use vmm::config::NvdimmSpec;
use vmm::nvdimm::record::images::{self, ImageError, Manifest, Request};

use crate::guest::run::{RunError, RunResult, RunSpec};

/// Errors of a crash check (its inputs; a failing image is a result).
#[derive(Debug, thiserror::Error)]
pub enum CrashCheckError {
    /// The log or the selection cannot be used.
    #[error(transparent)]
    Images(#[from] ImageError),
    /// A run could not be started at all.
    #[error("the check of the image after flush {flush}{torn} could not run: {source}")]
    Run {
        /// The flush.
        flush: u64,
        /// ", torn" for a torn variant.
        torn: &'static str,
        /// Why.
        #[source]
        source: Box<RunError>,
    },
    /// The recorded DIMM's geometry cannot be given to a guest again.
    #[error("the recording's DIMM ({region} bytes of region in a {file} byte file) cannot be booted: {why}")]
    Geometry {
        /// Region bytes.
        region: u64,
        /// File bytes.
        file: u64,
        /// Why.
        why: String,
    },
    /// A Slurm array task number past the array's end.
    #[error("--slurm-task {task} is not a task of this array, whose {tasks} task(s) are numbered from 0 (one per selected flush)")]
    NoSuchTask {
        /// The task asked for.
        task: usize,
        /// How many there are.
        tasks: usize,
    },
    /// An argument the Slurm scripts cannot carry.
    #[error("the argument {0:?} is not valid UTF-8; the Slurm scripts carry text only")]
    NotText(String),
    /// Host I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for CrashCheckError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Images(e) => e.kind(),
            Self::Run { source, .. } => source.kind(),
            Self::Geometry { .. } | Self::NoSuchTask { .. } | Self::NotText(_) => Usage,
            Self::Io { .. } => Environment,
        }
    }
}

/// One image's check.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageCheck {
    /// The flush after which power was lost.
    pub flush: u64,
    /// True for the torn variant.
    pub torn: bool,
    /// The image file.
    pub image: String,
    /// The check's exit status (pmemvm's, when the guest did not report).
    pub status: u8,
    /// Why the run failed, when pmemvm or the guest did.
    pub error: Option<String>,
    /// Seconds the boot and check took.
    pub seconds: f64,
    /// The check's standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl ImageCheck {
    /// True when the check passed.
    pub fn passed(&self) -> bool {
        self.status == 0 && self.error.is_none()
    }

    /// "flush 7" or "flush 7 (torn)".
    pub fn name(&self) -> String {
        format!(
            "flush {}{}",
            self.flush,
            if self.torn { " (torn)" } else { "" }
        )
    }
}

/// What `crash-check` found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CrashCheck {
    /// The images and what they hold.
    pub manifest: Manifest,
    /// The check, as typed.
    pub command: Vec<String>,
    /// One per image, in flush order (each plain image before its torn variant).
    pub checks: Vec<ImageCheck>,
}

impl CrashCheck {
    /// The first image whose check failed.
    pub fn first_failure(&self) -> Option<&ImageCheck> {
        self.checks.iter().find(|c| !c.passed())
    }

    /// The table printed at the end.
    pub fn table(&self) -> String {
        let mut t = format!(
            "{:<18} {:>6} {:>9}  {}\n",
            "image", "status", "seconds", "output (last line)"
        );
        for c in &self.checks {
            let last = c
                .error
                .clone()
                .or_else(|| {
                    c.stdout
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map(str::to_string)
                })
                .unwrap_or_default();
            t.push_str(&format!(
                "{:<18} {:>6} {:>9.1}  {}\n",
                c.name(),
                c.status,
                c.seconds,
                last
            ));
        }
        let failed = self.checks.iter().filter(|c| !c.passed()).count();
        let command = self.command_text();
        t.push_str(&match self.first_failure() {
            None => format!("all {} images passed `{command}`\n", self.checks.len()),
            Some(f) => format!(
                "{failed} of {} images failed `{command}`; the first: the image after {} ({})\n",
                self.checks.len(),
                f.name(),
                f.image
            ),
        });
        t
    }

    /// The check as one short line: a script given to `sh -c` is cut at its
    /// first line or 60 characters (the JSON keeps it whole).
    fn command_text(&self) -> String {
        let whole = self.command.join(" ");
        let line = whole.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        match line.chars().count() > 60 || line.len() < whole.trim().len() {
            true => format!("{} …", line.chars().take(60).collect::<String>().trim_end()),
            false => whole,
        }
    }
}

/// The `--nvdimm` of a recorded DIMM's image: its region (`region` bytes)
/// and label area as they were (the file is region, labels, 4 KiB identity
/// block).
pub fn image_spec(region: u64, file_size: u64, path: &Path) -> Result<NvdimmSpec, CrashCheckError> {
    let bad = |why: String| CrashCheckError::Geometry {
        region,
        file: file_size,
        why,
    };
    let label = file_size
        .checked_sub(region + vmm::layout::NVDIMM_IDENTITY_SIZE)
        .ok_or_else(|| bad("the file is smaller than its region and identity block".into()))?;
    let text = format!("{region},file={},label-size={label}", path.display());
    text.parse()
        .map_err(|e: vmm::config::ConfigError| bad(e.to_string()))
}

/// What happens to each image once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterCheck {
    /// It stays in the images directory (the user named it: `--images`).
    Keep,
    /// It is removed before the next is made (a temporary directory): a
    /// check of hundreds of images needs room for one at a time.
    Remove,
}

/// Makes the images `req` asks for (into `req.out`), one at a time, and
/// boots `template` on a copy of each, the image as its first DIMM, through
/// `run`, before the next is made.
pub fn check(
    template: &RunSpec,
    req: &Request,
    command: &[String],
    after: AfterCheck,
    mut run: impl FnMut(&RunSpec) -> Result<RunResult, RunError>,
    mut progress: impl FnMut(&ImageCheck),
) -> Result<CrashCheck, CrashCheckError> {
    let io = |what: String| move |source| CrashCheckError::Io { what, source };
    let work = req.out.join(".check.img");
    let mut checks = Vec::new();
    let manifest = images::write_each(req, |info, region| {
        let mut files: Vec<(bool, &str)> = vec![(false, info.file.as_str())];
        if let Some(t) = &info.torn {
            files.push((true, t.file.as_str()));
        }
        for (torn, file) in files {
            let image = req.out.join(file);
            let size = std::fs::metadata(&image)
                .map_err(io(format!("reading {}", image.display())))?
                .len();
            copy_image(&image, &work, size)?;
            let mut spec = template.clone();
            spec.machine
                .nvdimms
                .insert(0, image_spec(region, size, &work)?);
            let start = Instant::now();
            let result = run(&spec);
            let _ = std::fs::remove_file(&work);
            if after == AfterCheck::Remove {
                let _ = std::fs::remove_file(&image);
            }
            let result = result.map_err(|e| CrashCheckError::Run {
                flush: info.flush,
                torn: if torn { ", torn" } else { "" },
                source: Box::new(e),
            })?;
            let (stdout, stderr) = result
                .command
                .as_ref()
                .map(|c| (c.stdout.clone(), c.stderr.clone()))
                .unwrap_or_default();
            let c = ImageCheck {
                flush: info.flush,
                torn,
                image: image.display().to_string(),
                status: result.status,
                error: result.error.clone(),
                seconds: start.elapsed().as_secs_f64(),
                stdout,
                stderr,
            };
            progress(&c);
            checks.push(c);
        }
        Ok::<(), CrashCheckError>(())
    })?;
    Ok(CrashCheck {
        manifest,
        command: command.to_vec(),
        checks,
    })
}

/// A fresh read-write copy of `image` at `work` (sparse).
fn copy_image(image: &Path, work: &PathBuf, size: u64) -> Result<(), CrashCheckError> {
    let io = |what: String| move |source| CrashCheckError::Io { what, source };
    let _ = std::fs::remove_file(work);
    let src = std::fs::File::open(image).map_err(io(format!("opening {}", image.display())))?;
    let dst = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(work)
        .map_err(io(format!("creating {}", work.display())))?;
    vmm::nvdimm::record::sparse::copy(&src, &dst, size)
        .map_err(io(format!("copying {}", image.display())))
}

/// A temporary images directory, removed when dropped.
#[derive(Debug)]
pub struct TempImages(Option<PathBuf>);

impl TempImages {
    /// `keep` when the user named it (`--images`), else a new directory
    /// under the temporary directory, removed at the end: the directory and
    /// its guard.
    pub fn for_check(keep: Option<&Path>, tag: &str) -> (PathBuf, Self) {
        match keep {
            Some(d) => (d.to_owned(), Self(None)),
            None => {
                let d =
                    std::env::temp_dir().join(format!("pmemvm-crash-{tag}-{}", std::process::id()));
                (d.clone(), Self(Some(d)))
            }
        }
    }
}

impl Drop for TempImages {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Where the task of `flush` writes its result in `out`.
pub fn result_path(out: &Path, flush: u64) -> PathBuf {
    out.join("results").join(format!("flush-{flush:06}.json"))
}

/// One Slurm array task of `crash-check --slurm SHARED`: checks the image
/// after flush `flushes[task]` (with its torn variant when `req` asks for
/// them) and writes the report where the report job finds it, whole or not
/// at all. Returns the report and that path.
pub fn slurm_task(
    template: &RunSpec,
    req: &Request,
    (flushes, task): (&[u64], usize),
    command: &[String],
    shared: &Path,
    run: impl FnMut(&RunSpec) -> Result<RunResult, RunError>,
    progress: impl FnMut(&ImageCheck),
) -> Result<(CrashCheck, PathBuf), CrashCheckError> {
    let flush = *flushes.get(task).ok_or(CrashCheckError::NoSuchTask {
        task,
        tasks: flushes.len(),
    })?;
    let (work, _temp) = TempImages::for_check(None, &format!("task-{task}"));
    let req = Request {
        out: work,
        select: images::Selection::At(flush),
        ..req.clone()
    };
    let report = check(template, &req, command, AfterCheck::Remove, run, progress)?;
    let path = result_path(shared, flush);
    let text = serde_json::to_vec_pretty(&report).unwrap_or_default();
    // Whole or absent: the report job must not read half a result.
    let part = path.with_extension("json.part");
    std::fs::write(&part, text)
        .and_then(|()| std::fs::rename(&part, &path))
        .map_err(|source| CrashCheckError::Io {
            what: format!("writing {}", path.display()),
            source,
        })?;
    Ok((report, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_given_its_region_and_label_area() {
        let m = Manifest {
            dimm: "pm0.img".into(),
            region_size: 32 << 20,
            last_flush: 3,
            complete: true,
            cut: None,
            images: Vec::new(),
        };
        let s = image_spec(
            m.region_size,
            (32 << 20) + (128 << 10) + 4096,
            Path::new("/x/c.img"),
        )
        .unwrap();
        assert_eq!((s.size, s.label_size), (32 << 20, 128 << 10));
        assert_eq!(s.file.as_deref(), Some(Path::new("/x/c.img")));
        assert!(s.record.is_none());
        let e = image_spec(m.region_size, 4096, Path::new("/x/c.img"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("smaller than its region"), "{e}");
    }

    #[test]
    fn the_table_names_the_first_failing_flush() {
        let c = |flush, torn, status| ImageCheck {
            flush,
            torn,
            image: format!("/o/flush-{flush:06}{}.img", if torn { "-torn" } else { "" }),
            status,
            error: None,
            seconds: 1.0,
            stdout: format!("records {flush}\n"),
            stderr: String::new(),
        };
        let mut r = CrashCheck {
            manifest: Manifest {
                dimm: "pm0.img".into(),
                region_size: 16 << 20,
                last_flush: 2,
                complete: true,
                cut: None,
                images: Vec::new(),
            },
            command: vec!["check".into()],
            checks: vec![c(0, false, 0), c(1, false, 0), c(1, true, 1), c(2, true, 1)],
        };
        let t = r.table();
        assert!(
            t.contains("2 of 4 images failed `check`; the first: the image after flush 1 (torn)"),
            "{t}"
        );
        assert!(t.contains("records 1"), "{t}");
        r.checks.truncate(2);
        assert!(r.first_failure().is_none());
        assert!(r.table().contains("all 2 images passed `check`"));
        r.command = vec![
            "sh".into(),
            "-c".into(),
            "\nfs=$1\nmount /dev/pmem0 /mnt\n".into(),
        ];
        assert!(
            r.table().contains("all 2 images passed `sh -c …`"),
            "{}",
            r.table()
        );
    }
}
