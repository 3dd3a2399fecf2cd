//! What a run records about itself (`pmemvm run --json`, and each boot of a
//! bench): the inputs by path and hash, the host, the DIMMs, the engine's
//! counters, fio's JSON and the command's outcome.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::Digest;
use vmm::host::HostKvm;
use vmm::stats::{ExitCounts, NvdimmCounts};

use super::Engine;

/// A file's path and SHA-256.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HashedFile {
    /// Path.
    pub path: String,
    /// Hex SHA-256 (empty if unreadable).
    pub sha256: String,
}

pub(super) fn hash_file(p: &Path) -> HashedFile {
    HashedFile {
        path: p.display().to_string(),
        sha256: sha256_of(p).unwrap_or_default(),
    }
}

/// The file's SHA-256 in hex, streamed through the hasher (a vmlinux with
/// DWARF is over 100 MiB: it is never held whole).
fn sha256_of(p: &Path) -> std::io::Result<String> {
    let mut hash = sha2::Sha256::new();
    std::io::copy(&mut std::fs::File::open(p)?, &mut hash)?;
    Ok(format!("{:x}", hash.finalize()))
}

/// The kernel's and initrd's hashes.
type Hashes = (HashedFile, Option<HashedFile>);

/// The kernel's and initrd's hashes for the run's record, computed on a
/// thread of their own while the guest boots, off the startup path: in a
/// nested L1 (one vCPU, TCG) hashing the image's 118 MB vmlinux before the
/// boot put `startup: ... hashed` at 9.0 s of a 26 s run (`-vv`); the record
/// needs the hashes only at the end.
pub(super) enum PendingHashes {
    /// Being computed.
    Running(std::thread::JoinHandle<Hashes>),
    /// Computed already (no thread could be started).
    Done(Hashes),
}

impl PendingHashes {
    /// Starts hashing `kernel` and `initrd`.
    pub(super) fn start(kernel: &Path, initrd: Option<&Path>) -> Self {
        let (k, i) = (kernel.to_path_buf(), initrd.map(Path::to_path_buf));
        match std::thread::Builder::new()
            .name("pmemvm-hash".into())
            .spawn(move || (hash_file(&k), i.as_deref().map(hash_file)))
        {
            Ok(worker) => PendingHashes::Running(worker),
            Err(_) => PendingHashes::Done((hash_file(kernel), initrd.map(hash_file))),
        }
    }

    /// The hashes.
    pub(super) fn finish(self) -> Hashes {
        match self {
            PendingHashes::Running(worker) => worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            PendingHashes::Done(hashes) => hashes,
        }
    }
}

/// The host, for reports: which host and its KVM.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostDescription {
    /// Which host (`cpu_model`, `host_cpus`, `host_kernel`, `hostname` in the
    /// JSON; results written before read back from `cpu`, `cpus`, `kernel`).
    #[serde(flatten)]
    pub identity: vmm::host::machine::HostIdentity,
    /// Its KVM (`hw_virt`, `pvm` in the JSON, beside the fields above).
    #[serde(flatten)]
    pub kvm: HostKvm,
}

/// Describes this host.
pub fn describe_host() -> HostDescription {
    HostDescription {
        identity: vmm::host::machine::HostIdentity::probe(),
        kvm: HostKvm::probe(),
    }
}

/// The DIMMs of a run, for reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DimmDescription {
    /// Region size (`--nvdimm` SIZE; the backing file adds labels and an identity page).
    pub size: u64,
    /// Backing file (None = temporary).
    pub file: Option<String>,
    /// Read-only.
    pub readonly: bool,
    /// Label bytes.
    pub label_size: u64,
}

/// Everything a run produced (also when it failed: `error` says why).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// Version of the result layout shared with `bench` results
    /// ([`crate::study::results::record::SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// pmemvm version.
    pub pmemvm_version: String,
    /// Engine.
    pub engine: Engine,
    /// "kvm" or "tcg" (QEMU), "kvm" (pmemvm).
    pub accelerator: String,
    /// True on TCG or nested hosts: numbers are functional only.
    pub functional_only: bool,
    /// The job's exit status (or pmemvm's own status when the job did not report).
    pub status: u8,
    /// Why the run failed, if it did; results are partial then.
    pub error: Option<String>,
    /// Kernel used.
    pub kernel: HashedFile,
    /// Initrd used (before the job archive was appended).
    pub initrd: Option<HashedFile>,
    /// The `--modules` tree packed into the job archive, and the modules loaded from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<crate::guest::modules::PackedModules>,
    /// The guest image manifest, when the image was used.
    pub image_manifest: Option<serde_json::Value>,
    /// Kernel command line.
    pub cmdline: String,
    /// vCPUs.
    pub cpus: u8,
    /// RAM bytes.
    pub memory: u64,
    /// DIMMs.
    pub nvdimms: Vec<DimmDescription>,
    /// Host.
    pub host: HostDescription,
    /// VM exits by reason (pmemvm engine).
    pub exits: Option<ExitCounts>,
    /// Per-DIMM flush and label counters (pmemvm engine).
    pub nvdimm_stats: Vec<NvdimmCounts>,
    /// What the run was: host CPU, THP/KSM/SMT, mitigations, pinning, and
    /// (pmemvm engine) the page sizes measured behind RAM and each DIMM.
    #[serde(default)]
    pub machine: vmm::host::machine::MachineDescription,
    /// Wall time of the run in seconds.
    pub wall_seconds: f64,
    /// fio's JSON output.
    pub fio: Option<serde_json::Value>,
    /// The command of `run -- CMD`: its output and transfers.
    pub command: Option<crate::guest::transfer::CommandOutcome>,
    /// Other files the guest sent (setup.log, fio.stderr), as text.
    pub guest_files: std::collections::BTreeMap<String, String>,
    /// The last lines of the console.
    #[serde(default)]
    pub console_tail: String,
}

impl RunResult {
    /// fio's report, typed (`None` without fio or when it is not fio's JSON).
    pub fn fio_output(&self) -> Option<crate::study::fio::FioOutput> {
        self.fio
            .as_ref()
            .and_then(|v| crate::study::fio::FioOutput::deserialize(v).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_come_back_from_their_thread_as_sha256sum_gives_them() {
        let dir = std::env::temp_dir().join(format!("pmemvm-hash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (k, i) = (dir.join("kernel"), dir.join("initrd"));
        // Over one read piece, so the pieces are joined right.
        std::fs::write(&k, vec![7u8; (1 << 20) + 3]).unwrap();
        std::fs::write(&i, b"abc").unwrap();
        let (kh, ih) = PendingHashes::start(&k, Some(&i)).finish();
        assert_eq!(
            kh.sha256,
            format!("{:x}", sha2::Sha256::digest(vec![7u8; (1 << 20) + 3]))
        );
        assert_eq!(
            ih.map(|h| h.sha256).as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(kh.path, k.display().to_string());
        // An unreadable file is recorded with an empty hash, as before.
        let (gone, none) = PendingHashes::start(&dir.join("missing"), None).finish();
        assert_eq!((gone.sha256.as_str(), none), ("", None));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_host_reads_the_json_it_had_and_writes_the_one_host_description() {
        let stored = r#"{"cpu":"EPYC","cpus":2,"kernel":"6.1.0","hw_virt":true,"pvm":false}"#;
        let host: HostDescription = serde_json::from_str(stored).unwrap();
        assert_eq!(
            host.kvm,
            HostKvm {
                hw_virt: true,
                pvm: false
            }
        );
        assert_eq!(host.identity.cpu_model, "EPYC");
        assert_eq!(
            serde_json::to_string(&host).unwrap(),
            r#"{"cpu_model":"EPYC","host_cpus":2,"host_kernel":"6.1.0","hostname":"","hw_virt":true,"pvm":false}"#
        );
    }
}
