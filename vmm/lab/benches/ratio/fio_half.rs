//! The fio half of the guest-vs-host ratio (hardware KVM only): the same
//! fio job in the guest on /dev/pmem0 and on the host on the DIMM's backing
//! file (a file on a tmpfs mounted huge=always when root can mount one,
//! else in $TMPDIR), read and write bandwidth compared. On a host without
//! vmx/svm, or with PVM KVM, a Linux guest cannot run under pmemvm, and this
//! half returns the reason instead of figures.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lab::guest_job::GuestJob;
use lab::run::{run_job, Engine, RunSpec};
use vmm::host::machine::MachineDescription;
use vmm::host::HostKvm;

const SIZE: u64 = 1 << 30;

fn job(filename: &str, rw: &str) -> String {
    format!(
        "[ratio]\nfilename={filename}\nrw={rw}\nbs=4k\nioengine=psync\ndirect=0\nsize={SIZE}\n\
         runtime=10\ntime_based=1\nnumjobs=1\n"
    )
}

/// Bytes per second of `kind` ("read"/"write") in fio's JSON.
fn bandwidth(fio: &serde_json::Value, kind: &str) -> Option<f64> {
    fio["jobs"][0][kind]["bw_bytes"].as_f64()
}

fn host_fio(file: &Path, rw: &str) -> Result<f64, String> {
    let dir = std::env::temp_dir().join(format!("pmemvm-ratio-fio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let jobfile = dir.join("job.fio");
    std::fs::write(&jobfile, job(&file.display().to_string(), rw)).map_err(|e| e.to_string())?;
    let out = Command::new("fio")
        .arg("--output-format=json")
        .arg(&jobfile)
        .output()
        .map_err(|e| format!("fio is not installed on the host (apt-get install fio): {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("host fio JSON: {e}"))?;
    bandwidth(
        &v,
        if rw.contains("write") {
            "write"
        } else {
            "read"
        },
    )
    .ok_or_else(|| "host fio reported no bandwidth".into())
}

fn guest_fio(file: &Path, rw: &str) -> Result<(f64, MachineDescription), String> {
    let spec = RunSpec {
        gdb: None,
        gdb_wait: false,
        control: Default::default(),
        command: None,
        engine: Engine::Pmemvm,
        kernel: None,
        initrd: None,
        modules: None,
        cmdline: None,
        extra_cmdline: Vec::new(),
        cpus: 1,
        memory: 1 << 30,
        ram_pages: vmm::hugepages::RamPages::Thp,
        placement: vmm::placement::Placement::default(),
        nvdimms: vec![format!("1G,file={},label-size=0", file.display())
            .parse()
            .map_err(|e: vmm::config::ConfigError| e.to_string())?],
        disks: Vec::new(),
        legacy_pmem: Vec::new(),
        job: GuestJob {
            fio_job: job("/dev/pmem0", rw),
            ..GuestJob::default()
        },
        stream_console: false,
        console_log: None,
        timeout: Duration::from_secs(300),
    };
    let r = run_job(&spec).map_err(|e| e.to_string())?;
    let fio = r.fio.ok_or("the guest sent no fio results")?;
    let bw = bandwidth(
        &fio,
        if rw.contains("write") {
            "write"
        } else {
            "read"
        },
    )
    .ok_or("guest fio reported no bandwidth")?;
    Ok((bw, r.machine))
}

/// Figures (or why there are none) as text for the report.
pub fn run_or_reason(machine: &MachineDescription) -> String {
    let kvm = HostKvm::probe();
    if let Some(why) = kvm.explanation() {
        return format!(
            "skipped: {why}. Only a host with hardware KVM shows fio in the guest on /dev/pmem0 \
             against fio on the host on the backing file (CPU {}).",
            machine.cpu_model
        );
    }
    let file = std::env::temp_dir().join(format!("pmemvm-ratio-{}.img", std::process::id()));
    let mut lines = Vec::new();
    for rw in ["randread", "randwrite"] {
        let _ = std::fs::remove_file(&file);
        // The guest run creates the file (region + identity page); the host then reads it.
        let line = match guest_fio(&file, rw) {
            Ok((guest, m)) => match host_fio(&file, rw) {
                Ok(host) => format!(
                    "{rw} 4k psync: guest {:.0} MiB/s, host {:.0} MiB/s, ratio {:.3} (DIMM pages {:?})",
                    guest / 1048576.0,
                    host / 1048576.0,
                    guest / host,
                    m.dimm_page_size
                ),
                Err(e) => format!("{rw}: host fio failed: {e}"),
            },
            Err(e) => format!("{rw}: guest fio failed: {e}"),
        };
        lines.push(line);
    }
    let _ = std::fs::remove_file(&file);
    lines.join("\n  ")
}
