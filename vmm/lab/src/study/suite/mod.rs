//! Other projects' test suites run in the guest as their maintainers run them, with a
//! table of what passed: `pmemvm suite ndctl` (ndctl's own `meson test`, see [`ndctl`]).

pub mod junit;
pub mod machines;
pub mod ndctl;
pub mod nfit_test;
pub mod rows;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::guest::engine::Engine;
use crate::guest::run::{RunError, RunSpec};
use crate::guest::transfer::{CommandJob, GetSpec, PutSpec};

/// The build script of ndctl and its tests (host side).
pub const NDCTL_BUILD: &str = "guest-images/suites/ndctl-build.sh";
/// The guest side.
pub const NDCTL_SUITE: &str = "guest-images/suites/ndctl-suite.sh";
/// The Debian packages of the guest's root file system.
pub const NDCTL_PACKAGES: &str = "guest-images/suites/ndctl-packages";
/// Where to get ndctl when no tree is given.
pub const NDCTL_GET: &str = "git clone --branch v81 https://github.com/pmem/ndctl";

/// Errors of a suite run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// No ndctl source tree.
    #[error("--src {}: not an ndctl source tree (no meson.build and test/meson.build there); get one with `{NDCTL_GET}` and give its path", .0.display())]
    NoSource(PathBuf),
    /// The test list.
    #[error(transparent)]
    Plan(#[from] ndctl::PlanError),
    /// `--nfit-test` without its kernel, or its options without it.
    #[error("{0}")]
    NfitTestArgs(&'static str),
    /// `--nfit-test`'s kernel, modules, tree or build.
    #[error(transparent)]
    NfitTest(#[from] nfit_test::NfitTestError),
    /// `--kernel` is not a file that can be read.
    #[error("--kernel {}: {source}; give a bzImage or vmlinux file", path.display())]
    Kernel {
        /// The path given.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: std::io::Error,
    },
    /// Two engines that are one here.
    #[error(
        "--engine names {0} twice (auto is pmemvm or qemu on this host); name each engine once"
    )]
    EngineTwice(&'static str),
    /// `--out` exists and is not an empty directory.
    #[error("--out {}: it exists and is not an empty directory; give a new or empty one (nothing was written)", .0.display())]
    OutNotEmpty(PathBuf),
    /// A script of the source tree is not there.
    #[error("{rel} is not in a source tree above {} (pmemvm suite runs from its source tree's build)", start.display())]
    NoScript {
        /// The script.
        rel: &'static str,
        /// Where the search started.
        start: PathBuf,
    },
    /// Building ndctl failed.
    #[error("building ndctl from {} failed ({script}): {detail}", src.display())]
    Build {
        /// The source tree.
        src: PathBuf,
        /// The script.
        script: &'static str,
        /// Its last words.
        detail: String,
    },
    /// A machine shape of the plan does not parse (pmemvm's error, not the user's).
    #[error("a machine of the suite's plan is not valid ({0}); this is pmemvm's error, please report it")]
    Shape(String),
    /// A file could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The root file system.
    #[error(transparent)]
    Rootfs(#[from] crate::guest::rootfs::RootfsError),
    /// A boot could not be set up or started.
    #[error(transparent)]
    Run(#[from] RunError),
}

impl vmm::exit_status::Classified for SuiteError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::NoSource(_)
            | Self::Plan(_)
            | Self::OutNotEmpty(_)
            | Self::EngineTwice(_)
            | Self::Kernel { .. }
            | Self::NfitTestArgs(_) => Usage,
            Self::Run(e) => e.kind(),
            Self::NfitTest(e) => e.kind(),
            Self::Shape(_) => Guest,
            Self::Rootfs(_) | Self::NoScript { .. } | Self::Build { .. } | Self::Io { .. } => {
                Environment
            }
        }
    }
}

/// What `pmemvm suite ndctl` was asked.
#[derive(Debug, Clone)]
pub struct NdctlRequest {
    /// The ndctl source tree.
    pub src: PathBuf,
    /// The tests (empty: every one [`ndctl::KNOWN`] places).
    pub tests: Vec<String>,
    /// The engines, each running every boot (one column each in the table).
    pub engines: Vec<Engine>,
    /// Guest vCPUs.
    pub cpus: u8,
    /// Guest RAM.
    pub memory: u64,
    /// The results: a new or empty directory.
    pub out: PathBuf,
    /// Each boot's time limit.
    pub timeout: Duration,
    /// Stream the guests' consoles.
    pub stream_console: bool,
    /// `--nfit-test`: ndctl's default set on the kernel's nfit_test emulation, built
    /// against this kernel (the plan is [`nfit_test::TESTS`] instead of [`ndctl::KNOWN`]).
    pub nfit_test: Option<nfit_test::NfitTestKernel>,
    /// `--kernel` without `--nfit-test`: the guest kernel of every boot (the guest
    /// image's when `None`).
    pub kernel: Option<PathBuf>,
}

/// One boot's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootOutcome {
    /// The engine it ran on.
    pub engine: String,
    /// Its machine.
    pub shape: ndctl::Shape,
    /// The guest command's status (pmemvm's exit status of the run).
    pub status: u8,
    /// What went wrong, when the run says.
    pub error: Option<String>,
    /// Wall time of the run.
    pub wall_seconds: f64,
    /// Its results directory.
    pub dir: PathBuf,
}

/// The whole run (`summary.json` in `--out`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NdctlOutcome {
    /// The source tree.
    pub src: PathBuf,
    /// Every chosen test, in the order they ran.
    pub rows: Vec<ndctl::Row>,
    /// Every boot.
    pub boots: Vec<BootOutcome>,
    /// The signal (SIGINT, SIGTERM, SIGHUP) that stopped the run during a boot: the boots
    /// after it did not start.
    #[serde(default)]
    pub stopped_by: Option<u8>,
}

impl NdctlOutcome {
    /// 0 when every test passed or skipped itself and every boot's guest command
    /// ended with 0, 1 otherwise; 128 + the signal when one stopped the run (as a
    /// shell reports it). A boot whose guest failed although its rows do not say
    /// so (a setup step failed, the script met an error) fails the run too.
    pub fn status(&self) -> u8 {
        match self.stopped_by {
            Some(sig) => 128u8.saturating_add(sig),
            None => u8::from(
                !ndctl::failed(&self.rows).is_empty() || self.boots.iter().any(|b| b.status != 0),
            ),
        }
    }
}

/// The signal that stopped a boot, from its run's record: every engine ends a boot it was
/// signalled in with status 128 + the signal and "stopped by signal N" in its error.
pub fn stopped_by(result: &crate::guest::run::RunResult) -> Option<u8> {
    let signal = result.status.checked_sub(128).filter(|s| *s > 0)?;
    result
        .error
        .as_deref()
        .is_some_and(|e| e.contains(&format!("stopped by signal {signal}")))
        .then_some(signal)
}

/// `rel` in the source tree above this executable.
pub fn source_file(rel: &'static str) -> Result<PathBuf, SuiteError> {
    crate::study::source_tree::find(rel).map_err(|start| SuiteError::NoScript { rel, start })
}

/// Why the e820 tests do not run on QEMU's engine.
pub const QEMU_NO_LEGACY: &str =
    "pmemvm's --pmem-legacy (E820 type 12 backed by a file) is pmemvm's; QEMU's engine has none";

/// The engines of `req` as they resolve on this host, in order.
pub fn engines(req: &NdctlRequest) -> Result<Vec<Engine>, SuiteError> {
    let host = vmm::host::HostKvm::probe();
    let mut out: Vec<Engine> = Vec::new();
    for e in &req.engines {
        let r = e.resolve(&host).map_err(RunError::from)?;
        if out.contains(&r) {
            return Err(SuiteError::EngineTwice(r.name()));
        }
        out.push(r);
    }
    Ok(out)
}

/// The boots of `req`'s tests (a `--kernel` that cannot be read refused first): [`nfit_test::plan`] with `--nfit-test`, else [`ndctl::plan`].
pub fn plan(req: &NdctlRequest) -> Result<Vec<ndctl::Boot>, SuiteError> {
    if let Some(path) = &req.kernel {
        let readable = std::fs::File::open(path).and_then(|f| match f.metadata()?.is_file() {
            true => Ok(()),
            false => Err(std::io::Error::other("not a regular file")),
        });
        readable.map_err(|source| SuiteError::Kernel {
            path: path.clone(),
            source,
        })?;
    }
    Ok(match req.nfit_test {
        Some(_) => nfit_test::plan(&req.tests)?,
        None => ndctl::plan(&req.tests)?,
    })
}

/// Checks what can be checked before anything is built or booted; creates nothing.
/// Returns the boots and, with `--nfit-test`, the kernel's module and build trees.
pub fn check(
    req: &NdctlRequest,
) -> Result<(Vec<ndctl::Boot>, Option<nfit_test::Resolved>), SuiteError> {
    if !req.src.join("meson.build").is_file() || !req.src.join("test/meson.build").is_file() {
        return Err(SuiteError::NoSource(req.src.clone()));
    }
    let boots = plan(req)?;
    let resolved = match &req.nfit_test {
        Some(k) => {
            let r = nfit_test::check(k)?;
            source_file(nfit_test::NFIT_TEST_BUILD)?;
            Some(r)
        }
        None => None,
    };
    engines(req)?;
    if req.out.exists() && !req.out.is_dir() {
        return Err(SuiteError::OutNotEmpty(req.out.clone()));
    }
    if let Ok(mut entries) = std::fs::read_dir(&req.out) {
        if entries.next().is_some() {
            return Err(SuiteError::OutNotEmpty(req.out.clone()));
        }
    }
    for rel in [NDCTL_BUILD, NDCTL_SUITE, NDCTL_PACKAGES] {
        source_file(rel)?;
    }
    Ok((boots, resolved))
}

/// Builds ndctl and its tests (or finds them in the cache): the tree holding `path`,
/// `src/` and `build/`.
pub fn build_ndctl(src: &Path) -> Result<PathBuf, SuiteError> {
    let script = source_file(NDCTL_BUILD)?;
    log::info!(
        "building or finding ndctl and its tests ({})",
        src.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .arg(src)
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| SuiteError::Build {
            src: src.to_path_buf(),
            script: NDCTL_BUILD,
            detail: e.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(PathBuf::from) {
        Some(build) if out.status.success() && build.join("meson-private").is_dir() => {
            Ok(build.parent().map(Path::to_path_buf).unwrap_or(build))
        }
        _ => {
            let err = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = err.lines().collect();
            Err(SuiteError::Build {
                src: src.to_path_buf(),
                script: NDCTL_BUILD,
                detail: lines[lines.len().saturating_sub(3)..].join(" / "),
            })
        }
    }
}

/// The root file system's packages: the suite's list (comma separated) and the build's
/// runtime packages (one per line) not already in it.
pub fn package_list(list: &str, runtime: &str) -> String {
    let mut out: Vec<&str> = list
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    for p in runtime.lines().map(str::trim).filter(|p| !p.is_empty()) {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out.join(",")
}

/// The specs of a shape, parsed (they are constants: an error is pmemvm's).
fn parse_all<T>(specs: &[&str]) -> Result<Vec<T>, SuiteError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    specs
        .iter()
        .map(|s| {
            s.parse()
                .map_err(|e: T::Err| SuiteError::Shape(format!("{s}: {e}")))
        })
        .collect()
}

/// The run of one boot.
fn boot_spec(
    req: &NdctlRequest,
    engine: Engine,
    boot: &ndctl::Boot,
    tree: &Path,
    rootfs: &Path,
    dir: &Path,
    modules: Option<&Path>,
) -> Result<RunSpec, SuiteError> {
    let nvdimms = parse_all(boot.shape.nvdimms())?;
    let legacy_pmem = parse_all(boot.legacy_specs())?;
    let put = |host: &Path, guest: &str| PutSpec {
        host: host.to_path_buf(),
        guest: guest.to_string(),
    };
    let job = CommandJob {
        argv: boot.argv(),
        puts: vec![
            put(tree, ndctl::GUEST_TREE),
            put(
                &source_file(NDCTL_SUITE)?,
                &format!("{}/ndctl-suite.sh", ndctl::GUEST_JOB),
            ),
        ],
        gets: vec![GetSpec {
            text: ndctl::GUEST_RESULTS.into(),
            guest: ndctl::GUEST_RESULTS.into(),
        }],
        out: Some(dir.to_path_buf()),
        area: crate::guest::transfer::DEFAULT_TRANSFER_SIZE,
        rootfs: Some(rootfs.to_path_buf()),
    };
    job.validate().map_err(RunError::from)?;
    // A boot that runs `hugetlb` reserves its 1 GiB huge pages, on top of --memory.
    let (memory, extra_cmdline) = if nfit_test::wants_huge_pages(boot) {
        (
            req.memory.saturating_add(nfit_test::HUGETLB_BYTES),
            vec![nfit_test::HUGETLB_CMDLINE.to_string()],
        )
    } else {
        (req.memory, Vec::new())
    };
    Ok(RunSpec {
        engine,
        boot: vmm::config::BootFiles {
            kernel: req
                .nfit_test
                .as_ref()
                .map(|k| k.kernel.clone())
                .or_else(|| req.kernel.clone()),
            initrd: None,
            modules: modules.map(Path::to_path_buf),
            cmdline: None,
            append: extra_cmdline,
        },
        machine: vmm::config::MachineSpec {
            cpus: req.cpus,
            memory,
            ram_pages: vmm::memory::hugepages::RamPages::Default,
            placement: vmm::memory::placement::Placement::default(),
            nvdimms,
            disks: Vec::new(),
            legacy_pmem,
            nvdimm_slots: 0,
            cxl_pmem: parse_all(boot.shape.cxl_pmem())?,
        },
        workload: crate::guest::run::Workload::Command { job, setup: None },
        stream_console: req.stream_console,
        console_log: Some(dir.with_extension("console.log")),
        timeout: req.timeout,
        gdb: None,
        gdb_wait: false,
        control: crate::guest::run::RunControl::default(),
    })
}

/// Runs the suite: builds ndctl and the root file system (cached), then each boot of the
/// plan; `on_boot` hears of each boot as it ends. Writes `summary.json` into `--out`.
pub fn run_ndctl(
    req: &NdctlRequest,
    mut on_boot: impl FnMut(&BootOutcome, &[ndctl::Row]),
) -> Result<NdctlOutcome, SuiteError> {
    let (boots, resolved) = check(req)?;
    let tree = build_ndctl(&req.src)?;
    let rootfs = guest_rootfs(&tree)?;
    create_dir(&req.out)?;
    // --nfit-test: the test modules, built against the user's kernel, in a module tree of
    // this run's own (the user's --modules is only read).
    let modules = match &resolved {
        Some(r) => Some(nfit_test::build(
            &source_file(nfit_test::NFIT_TEST_BUILD)?,
            r,
            &req.out.join("nfit-test-modules"),
        )?),
        None => None,
    };
    let mut outcome = NdctlOutcome {
        src: req.src.clone(),
        rows: Vec::new(),
        boots: Vec::new(),
        stopped_by: None,
    };
    let built = Built {
        tree: &tree,
        rootfs: &rootfs,
        modules: modules.as_deref(),
    };
    for engine in engines(req)? {
        run_engine(req, engine, &boots, &built, &mut outcome, &mut on_boot)?;
        if outcome.stopped_by.is_some() {
            break;
        }
    }
    let json = serde_json::to_vec_pretty(&outcome).map_err(|e| SuiteError::Io {
        what: "writing summary.json".into(),
        source: e.into(),
    })?;
    let summary = req.out.join("summary.json");
    std::fs::write(&summary, json).map_err(|source| SuiteError::Io {
        what: format!("writing {}", summary.display()),
        source,
    })?;
    Ok(outcome)
}

/// What every boot of the suite takes from the host's builds.
struct Built<'a> {
    /// ndctl's built tree.
    tree: &'a Path,
    /// The Debian root file system the tests run in.
    rootfs: &'a Path,
    /// `--nfit-test`: the test modules.
    modules: Option<&'a Path>,
}

fn create_dir(dir: &Path) -> Result<(), SuiteError> {
    std::fs::create_dir_all(dir).map_err(|source| SuiteError::Io {
        what: format!("creating {}", dir.display()),
        source,
    })
}

/// The Debian root file system of ndctl's packages and of the libraries the
/// build links (its own list: ldd + dpkg -S on the host), so a newer ndctl's
/// libraries reach the guest too.
fn guest_rootfs(tree: &Path) -> Result<PathBuf, SuiteError> {
    let list =
        std::fs::read_to_string(source_file(NDCTL_PACKAGES)?).map_err(|source| SuiteError::Io {
            what: format!("reading {NDCTL_PACKAGES}"),
            source,
        })?;
    let runtime = std::fs::read_to_string(tree.join("runtime-packages")).unwrap_or_default();
    Ok(crate::guest::rootfs::resolve(
        "debian",
        Some(&package_list(&list, &runtime)),
    )?)
}

/// Every boot of the plan on `engine`, its rows and outcome added to
/// `outcome`; a stop signal ends the whole run (`outcome.stopped_by`), not
/// only its boot (the user asked to stop).
fn run_engine(
    req: &NdctlRequest,
    engine: Engine,
    boots: &[ndctl::Boot],
    built: &Built<'_>,
    outcome: &mut NdctlOutcome,
    on_boot: &mut impl FnMut(&BootOutcome, &[ndctl::Row]),
) -> Result<(), SuiteError> {
    let name = engine.name();
    let engine_dir = req.out.join(name);
    create_dir(&engine_dir)?;
    // The default set shows the destructive tests no plan runs, with why.
    if req.tests.is_empty() && req.nfit_test.is_none() {
        outcome.rows.extend(ndctl::not_planned_rows(name));
    }
    for (i, boot) in boots.iter().enumerate() {
        let (boot, absent) = match engine {
            Engine::Qemu => ndctl::without_e820(boot, name, QEMU_NO_LEGACY),
            // The default set on an emulated CPU: without the tests that would only
            // meet their time limit (a named test always runs).
            Engine::Nested if req.tests.is_empty() && req.nfit_test.is_none() => {
                ndctl::without_slow(boot, name)
            }
            _ => (boot.clone(), Vec::new()),
        };
        outcome.rows.extend(absent);
        if boot.tests.is_empty() {
            continue;
        }
        let dir = ndctl::boot_dir(&engine_dir, i, &boot);
        let spec = boot_spec(
            req,
            engine,
            &boot,
            built.tree,
            built.rootfs,
            &dir,
            built.modules,
        )?;
        log::info!(
            "{name}: boot {} of {} ({}): {}",
            i + 1,
            boots.len(),
            boot.shape.name(),
            boot.argv().join(" ")
        );
        let result = crate::guest::run::run_job(&spec)?;
        if let Ok(json) = serde_json::to_vec_pretty(&result) {
            let _ = std::fs::write(dir.with_extension("run.json"), json);
        }
        let rows = ndctl::rows(&boot, name, &dir.join("ndctl-results"));
        let b = BootOutcome {
            engine: name.into(),
            shape: boot.shape,
            status: result.status,
            error: result.error.clone(),
            wall_seconds: result.wall_seconds,
            dir: dir.clone(),
        };
        on_boot(&b, &rows);
        outcome.boots.push(b);
        outcome.rows.extend(rows);
        if let Some(sig) = stopped_by(&result) {
            log::warn!("stopped by signal {sig}: the boots after this one do not start");
            outcome.stopped_by = Some(sig);
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
