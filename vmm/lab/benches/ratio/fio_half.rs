//! The fio half of the guest-vs-host ratio (hardware KVM only): **the same work on the same
//! bytes** on both sides. The guest makes its label-less DIMM a device-DAX namespace
//! (`ndctl create-namespace -m devdax --map=mem`) and runs fio's `mmap` engine on
//! `/dev/dax0.0`: 4 KiB random loads or stores through a shared mapping of the DIMM itself.
//! The host then runs the same job with the `mmap` engine on the DIMM's backing file at the
//! namespace's data offset (which the guest reports): the same 4 KiB copies through a shared
//! mapping of the same file pages. (The earlier version compared buffered `psync` through the
//! guest's page cache with buffered I/O on the host: not the same work.) On a host without
//! vmx/svm, or with PVM KVM, a Linux guest cannot run under pmemvm, and this half returns the
//! reason instead of figures.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lab::guest::guest_job::GuestJob;
use lab::guest::run::{run_job, Engine, RunSpec, Workload};
use vmm::host::machine::MachineDescription;
use vmm::host::HostKvm;

/// The DIMM, and the bytes each side's job covers (inside the devdax data area).
const DIMM: u64 = 1 << 30;
const SPAN: u64 = 512 << 20;

/// The job both sides run; `offset` is where the devdax data starts in `filename`.
pub fn job(filename: &str, offset: u64, rw: &str) -> String {
    format!(
        "[ratio]\nfilename={filename}\noffset={offset}\nsize={SPAN}\nrw={rw}\nbs=4k\n\
         ioengine=mmap\nruntime=10\ntime_based=1\nnumjobs=1\nrandrepeat=1\n"
    )
}

/// The guest's setup: the devdax namespace, and its data offset in the region (the DIMM's
/// first byte) as `$PMEMVM_OUT/data-offset`.
pub const SETUP: &str = r#"
ndctl create-namespace -f -e namespace0.0 -m devdax --map=mem --align 2M >/dev/null
data=$(cat /sys/bus/dax/devices/dax0.0/resource 2>/dev/null || cat /sys/bus/nd/devices/dax0.*/resource | head -n 1)
region=$(cat /sys/bus/nd/devices/region0/resource)
echo $((data - region)) >$PMEMVM_OUT/data-offset
"#;

/// The data offset the guest reported, checked against the DIMM and the job's span.
pub fn data_offset(text: &str) -> Result<u64, String> {
    let off: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("the guest reported no devdax data offset ({text:?})"))?;
    if !off.is_multiple_of(4096) || off.checked_add(SPAN).is_none_or(|end| end > DIMM) {
        return Err(format!(
            "the devdax data offset {off} is not 4 KiB-aligned or leaves less than {SPAN} bytes"
        ));
    }
    Ok(off)
}

/// Bytes per second of `kind` ("read"/"write") in fio's JSON.
fn bandwidth(fio: &serde_json::Value, kind: &str) -> Option<f64> {
    fio["jobs"][0][kind]["bw_bytes"].as_f64()
}

fn kind(rw: &str) -> &'static str {
    if rw.contains("write") {
        "write"
    } else {
        "read"
    }
}

fn host_fio(file: &Path, offset: u64, rw: &str) -> Result<f64, String> {
    let dir = std::env::temp_dir().join(format!("pmemvm-ratio-fio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let jobfile = dir.join("job.fio");
    std::fs::write(&jobfile, job(&file.display().to_string(), offset, rw))
        .map_err(|e| e.to_string())?;
    let out = Command::new("fio")
        .arg("--output-format=json")
        .arg(&jobfile)
        .output()
        .map_err(|e| format!("fio is not installed on the host (apt-get install fio): {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("host fio JSON: {e}"))?;
    bandwidth(&v, kind(rw)).ok_or_else(|| "host fio reported no bandwidth".into())
}

fn guest_fio(file: &Path, rw: &str) -> Result<(f64, u64, MachineDescription), String> {
    let spec = RunSpec {
        gdb: None,
        gdb_wait: false,
        control: Default::default(),
        engine: Engine::Pmemvm,
        boot: vmm::config::BootFiles::default(),
        machine: vmm::config::MachineSpec {
            cpus: 1,
            memory: 1 << 30,
            ram_pages: vmm::memory::hugepages::RamPages::Thp,
            nvdimms: vec![format!("1G,file={},label-size=0", file.display())
                .parse()
                .map_err(|e: vmm::config::ConfigError| e.to_string())?],
            ..Default::default()
        },
        workload: Workload::Fio(GuestJob {
            // The devdax data starts at offset 0 of /dev/dax0.0.
            fio_job: job("/dev/dax0.0", 0, rw),
            setup: Some(SETUP.into()),
            ..GuestJob::default()
        }),
        stream_console: false,
        console_log: None,
        timeout: Duration::from_secs(300),
    };
    let r = run_job(&spec).map_err(|e| e.to_string())?;
    let offset = data_offset(r.guest_files.get("data-offset").map_or("", String::as_str))?;
    let fio = r.fio.ok_or("the guest sent no fio results")?;
    let bw = bandwidth(&fio, kind(rw)).ok_or("guest fio reported no bandwidth")?;
    Ok((bw, offset, r.machine))
}

/// Figures (or why there are none) as text for the report.
pub fn run_or_reason(machine: &MachineDescription) -> String {
    let kvm = HostKvm::probe();
    if let Some(why) = kvm.explanation() {
        return format!(
            "skipped: {why}. Only a host with hardware KVM runs fio's mmap engine in the guest on \
             /dev/dax0.0 against the same job on the host on the same bytes of the backing file \
             (CPU {}).",
            machine.host.cpu_model
        );
    }
    let file = std::env::temp_dir().join(format!("pmemvm-ratio-{}.img", std::process::id()));
    let mut lines = Vec::new();
    for rw in ["randread", "randwrite"] {
        let _ = std::fs::remove_file(&file);
        // The guest run creates the file (region + identity page); the host then maps it.
        let line = match guest_fio(&file, rw) {
            Ok((guest, offset, m)) => match host_fio(&file, offset, rw) {
                Ok(host) => format!(
                    "{rw} 4k mmap on the same {} MiB: guest {:.0} MiB/s, host {:.0} MiB/s, ratio \
                     {:.3} (host pages {:?}, KVM's mappings {})",
                    SPAN >> 20,
                    guest / 1048576.0,
                    host / 1048576.0,
                    guest / host,
                    m.dimm_page_size,
                    m.kvm_pages.map_or("not reported".into(), |p| p.describe())
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
