//! The bench request a Slurm array task runs: `pmemvm bench EXP --slurm` writes the whole
//! [`BenchRequest`] as JSON into the shared directory (`request.json`), and each task runs
//! `pmemvm bench EXP --request FILE --only SIDE:BOOT --out DIR` — the machine, the engine and
//! the experiment's scaling arrive as the one description, not as options spelled again.
//!
//! Paths in the request (kernel, initrd, modules, `--api`) are made absolute against the
//! directory `--slurm` ran in, so a task started by hand from elsewhere finds them too.

use std::path::{Path, PathBuf};

use super::BenchRequest;

/// The file's name in the shared directory.
pub const FILE_NAME: &str = "request.json";

/// The request file's format; a task refuses a file of another version.
pub const VERSION: u32 = 1;

/// Errors of reading a task's request file.
#[derive(Debug, thiserror::Error)]
pub enum RequestFileError {
    /// The file cannot be read.
    #[error("cannot read the bench request {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Not a request this pmemvm can run.
    #[error("{path} is not a bench request pmemvm {version} can run ({why}); write it again with `pmemvm bench EXP --slurm`")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// This pmemvm's version.
        version: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The request is of another experiment than the command line names.
    #[error("{path} is a request of experiment {found}, not {asked}")]
    OtherExperiment {
        /// The file.
        path: PathBuf,
        /// The experiment in the file.
        found: String,
        /// The experiment on the command line.
        asked: String,
    },
    /// The request cannot be serialized (not expected: every field is plain data).
    #[error("cannot serialise the bench request: {0}")]
    Serialise(#[source] serde_json::Error),
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    version: u32,
    request: BenchRequest,
}

fn absolute(base: &Path, p: &mut Option<PathBuf>) {
    if let Some(path) = p {
        if path.is_relative() {
            *path = base.join(&*path);
        }
    }
}

/// The text of the request file for the tasks of `req`: its own `--out` and `--only` left
/// out (each task gets its own), relative paths joined to `workdir`.
pub fn task_text(req: &BenchRequest, workdir: &Path) -> Result<String, RequestFileError> {
    let mut request = req.clone();
    request.only = None;
    request.out = PathBuf::new();
    absolute(workdir, &mut request.boot.kernel);
    absolute(workdir, &mut request.boot.initrd);
    absolute(workdir, &mut request.boot.modules);
    absolute(workdir, &mut request.api);
    let mut text = serde_json::to_string_pretty(&File {
        version: VERSION,
        request,
    })
    .map_err(RequestFileError::Serialise)?;
    text.push('\n');
    Ok(text)
}

/// The request in `path`, which must be of `experiment`.
pub fn read(path: &Path, experiment: &str) -> Result<BenchRequest, RequestFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| RequestFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |why: String| RequestFileError::Invalid {
        path: path.to_owned(),
        version: env!("CARGO_PKG_VERSION"),
        why,
    };
    let file: File = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if file.version != VERSION {
        return Err(invalid(format!(
            "format version {}, this pmemvm reads {VERSION}",
            file.version
        )));
    }
    if file.request.experiment != experiment {
        return Err(RequestFileError::OtherExperiment {
            path: path.to_owned(),
            found: file.request.experiment,
            asked: experiment.to_owned(),
        });
    }
    Ok(file.request)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::guest::run::Engine;
    use crate::study::bench::Runner;

    fn request() -> BenchRequest {
        BenchRequest {
            experiment: "pmem-verify".into(),
            runs: 2,
            cpus: None,
            memory: Some(3 << 30),
            jobs: Some(4),
            nvdimm: Some(512 << 20),
            pmem_device: crate::study::bench::cxl::PmemDevice::Cxl,
            runtime: None,
            iodepth: Some(8),
            size: Some(8 << 20),
            sides: vec!["a b:append=x".into()],
            out: "here".into(),
            engine: Engine::Nested,
            timeout: Duration::from_secs(123),
            boot: vmm::config::BootFiles {
                kernel: Some("k/bzImage".into()),
                initrd: Some("/abs/initrd".into()),
                ..Default::default()
            },
            only: Some(crate::study::results::task::Task::new("off", 1)),
            runner: Runner::Child("/opt/pmemvm".into()),
            ram_pages: vmm::memory::hugepages::RamPages::Hugetlb,
            placement: vmm::memory::placement::Placement {
                host_node: Some(1),
                ..Default::default()
            },
            api: Some("api.sock".into()),
            fail_on_check: true,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pmemvm-request-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_task_reads_back_the_whole_request_but_its_own_out_only_and_runner() {
        let dir = scratch("round");
        let req = request();
        let path = dir.join(FILE_NAME);
        std::fs::write(&path, task_text(&req, Path::new("/work")).unwrap()).unwrap();
        let back = read(&path, "pmem-verify").unwrap();
        let want = BenchRequest {
            only: None,
            out: PathBuf::new(),
            runner: Runner::InProcess,
            boot: vmm::config::BootFiles {
                kernel: Some("/work/k/bzImage".into()),
                initrd: Some("/abs/initrd".into()),
                ..Default::default()
            },
            api: Some("/work/api.sock".into()),
            ..req
        };
        assert_eq!(back, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_this_experiments_request_is_refused_with_the_reason() {
        let dir = scratch("bad");
        let path = dir.join(FILE_NAME);
        let good = task_text(&request(), Path::new("/w")).unwrap();
        std::fs::write(&path, &good).unwrap();
        let e = read(&path, "pmem-nowait").unwrap_err().to_string();
        assert!(
            e.ends_with("is a request of experiment pmem-verify, not pmem-nowait"),
            "{e}"
        );
        for (text, why) in [
            (
                good.replace("\"version\": 1", "\"version\": 9"),
                "format version 9",
            ),
            (good[..good.len() / 2].to_owned(), "EOF while parsing"),
            ("{\"version\": 1}".to_owned(), "missing field `request`"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = read(&path, "pmem-verify").unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
            assert!(e.contains("is not a bench request pmemvm"), "{e}");
        }
        let e = read(&dir.join("absent.json"), "pmem-verify").unwrap_err();
        assert!(
            e.to_string().starts_with("cannot read the bench request"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
