//! The guest's data path against the host's own access to the same mapping,
//! measured in one run (docs/performance.md has the figures and what they mean).
//!
//! * Ring-3 half (any KVM, also this workplace's PVM, which runs ring-3 guest
//!   code natively): the tiny guest tests/guests/ring3ratio.S drops to ring 3
//!   and runs `ratio_loop` (tests/guests/ratio_loops.inc: random 64-byte and
//!   4 KiB reads and writes at fixed-seed xorshift offsets) over its NVDIMM;
//!   this program runs the very same instructions (global_asm! of the same
//!   file) over the same host mapping, on the same host CPU, before the guest
//!   starts. Ratio = host cycles / guest cycles for the same work (1.0: the
//!   guest is as fast as the host). Done for a 4 KiB-backed DIMM (a file on
//!   a tmpfs mounted huge=never), a hugetlb DIMM
//!   (`hugepages,label-size=0`) and a DIMM file on a tmpfs mounted
//!   huge=always; the host side's page size is measured from smaps, the
//!   guest side's is how KVM maps the VM's memory (its binary statistics,
//!   `pages_4k`/`pages_2m`/`pages_1g`, RAM and DIMM together), or "not
//!   measured" where KVM does not report them. Mode 0 (xorshift only, no memory access) checks that the guest's
//!   and the host's TSC count alike.
//! * fio half (hardware KVM only: vmx/svm in /proc/cpuinfo and no PVM; see
//!   `fio_half.rs`): fio in the guest on /dev/pmem0 against fio on the host on
//!   the backing file, same job; skipped here with the reason printed.
//!
//! Run (root: it reserves hugetlb pages and mounts a tmpfs, restoring both):
//! `cargo bench -p pmemvm-lab --bench guest_host_ratio -- [--size 64M]
//! [--runs 3] [--iters 2000000] [--iters-4k 200000] [--json PATH]`

use std::path::{Path, PathBuf};
use std::process::Command;

use vm_memory::{Bytes, GuestAddress};
use vmm::config::{ConsoleMode, MachineSpec, NvdimmSpec, VmConfig};
use vmm::host::machine::MachineDescription;
use vmm::memory::hugepages::RamPages;
use vmm::memory::placement::{pin_current_thread, Placement};

#[path = "ratio/fio_half.rs"]
mod fio_half;

std::arch::global_asm!(
    include_str!("../../../tests/guests/ratio_loops.inc"),
    options(att_syntax)
);

extern "sysv64" {
    fn ratio_loop(base: *mut u8, slot_mask: u64, iterations: u64, mode: u64) -> u64;
}

/// Where the guest reads its parameters and leaves its results (ring3ratio.S).
const PARAMS: u64 = 0x20_0000;
const RESULTS: u64 = 0x20_0100;
const MAGIC: u64 = u64::from_le_bytes(*b"R3RATIO1");
const MODES: [&str; 5] = [
    "xorshift only",
    "random 64 B read",
    "random 64 B write",
    "random 4 KiB read",
    "random 4 KiB write",
];

struct Args {
    size: u64,
    runs: usize,
    iters: u64,
    iters_4k: u64,
    json: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        size: 64 << 20,
        runs: 3,
        iters: 2_000_000,
        iters_4k: 200_000,
        json: None,
    };
    let mut it = std::env::args().skip(1).filter(|s| s != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag} {v} is not a whole number"))
        };
        match flag.as_str() {
            "--size" => a.size = vmm::config::parse_size(&value()?).map_err(|e| e.to_string())?,
            "--runs" => a.runs = usize::try_from(num(value()?)?).unwrap_or(1).max(1),
            "--iters" => a.iters = num(value()?)?.max(1),
            "--iters-4k" => a.iters_4k = num(value()?)?.max(1),
            "--json" => a.json = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown option {other}; see the file's header")),
        }
    }
    if !a.size.is_power_of_two() || a.size < (16 << 20) || a.size > (1 << 30) {
        return Err(format!(
            "--size {} must be a power of two from 16M to 1G",
            a.size
        ));
    }
    Ok(a)
}

/// Assembles ring3ratio.S with GNU as/ld (as tests/build.rs does).
fn assemble(dir: &Path) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/guests");
    let obj = dir.join("ring3ratio.o");
    let elf = dir.join("ring3ratio.elf");
    let run = |c: &mut Command| match c.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{c:?} failed: {s}")),
        Err(e) => Err(format!(
            "GNU binutils are needed (apt-get install binutils): {e}"
        )),
    };
    run(Command::new("as")
        .args(["--64", "-I"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .arg(src.join("ring3ratio.S")))?;
    run(Command::new("ld")
        .args([
            "-m",
            "elf_x86_64",
            "-Ttext=0x100000",
            "-e",
            "_start",
            "--build-id=none",
            "-o",
        ])
        .arg(&elf)
        .arg(&obj))?;
    Ok(elf)
}

/// One backing of the DIMM under test.
struct Backing {
    name: &'static str,
    spec: NvdimmSpec,
}

/// What one run of one backing measured.
#[derive(Debug, Clone, serde::Serialize)]
struct Measured {
    backing: String,
    host_cycles: [u64; 5],
    guest_cycles: [u64; 5],
    host_page_size: u64,
    /// KVM's mappings of the whole VM (16 MiB RAM and the DIMM) when the guest ended;
    /// None when this host's KVM does not report them.
    guest_kvm_pages: Option<vmm::host::kvm_stats::KvmPages>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One VM: host loop over the DIMM mapping, then the guest's loop; both on `cpu`.
fn measure(elf: &Path, b: &Backing, a: &Args, cpu: u32) -> Result<Measured, String> {
    let config = VmConfig {
        kernel: elf.into(),
        initrd: None,
        initrd_append: Vec::new(),
        cmdline: String::new(),
        machine: MachineSpec {
            cpus: 1,
            memory: 16 << 20,
            ram_pages: RamPages::Default,
            placement: Placement {
                pin: vec![cpu],
                pin_text: cpu.to_string(),
                host_node: None,
            },
            nvdimms: vec![b.spec.clone()],
            disks: Vec::new(),
            legacy_pmem: Vec::new(),
            nvdimm_slots: 0,
            cxl_pmem: Vec::new(),
        },
        console: ConsoleMode::Null,
        channel: None,
    };
    let vm = vmm::vstate::vm::Vm::build(&config).map_err(|e| format!("{}: {e}", b.name))?;
    let slots = a.size / 64 - 1;
    let mem = vm.memory().clone();
    for (i, v) in [a.size, slots, a.iters, a.iters_4k].into_iter().enumerate() {
        mem.write_obj(v, GuestAddress(PARAMS + 8 * i as u64))
            .map_err(|e| e.to_string())?;
    }
    let dimm = &vm.nvdimms()[0];
    let base_addr = dimm.mapping.as_ptr() as usize;
    let len = dimm.mapping.size();
    let host = std::thread::scope(|s| {
        s.spawn(|| -> Result<([u64; 5], u64), String> {
            let base = base_addr as *mut u8;
            pin_current_thread(&[cpu], "the host loop").map_err(|e| e.to_string())?;
            // Warm: every 4 KiB page read and written once, as the guest does.
            for off in (0..len).step_by(4096) {
                // SAFETY: `off` < len, inside the live mapping owned by `vm`;
                // nothing else runs on it now (the guest has not started).
                unsafe {
                    let p = base.add(off);
                    p.write_volatile(p.read_volatile());
                }
            }
            let mut cycles = [0u64; 5];
            for (mode, c) in cycles.iter_mut().enumerate() {
                let iters = if mode >= 3 { a.iters_4k } else { a.iters };
                // SAFETY: ratio_loop touches only [base, base + (slots+1)*64),
                // which is `len` bytes of the live DIMM mapping; it follows the
                // System V ABI and keeps the callee-saved registers.
                *c = unsafe { ratio_loop(base, slots, iters, mode as u64) };
            }
            let pages = vmm::host::smaps::measure(&[("nvdimm0".into(), base as usize, len)])
                .map_err(|e| e.to_string())?;
            Ok((cycles, pages.first().map_or(0, |p| p.page_size)))
        })
        .join()
        .map_err(|_| "the host loop panicked".to_string())?
    })?;
    let outcome = vm.run().map_err(|e| format!("{}: {e}", b.name))?;
    if outcome.reason != devices::exit::ExitRequest::GuestExit(0x11) {
        return Err(format!(
            "{}: the guest ended with {:?}",
            b.name, outcome.reason
        ));
    }
    let magic: u64 = mem
        .read_obj(GuestAddress(RESULTS))
        .map_err(|e| e.to_string())?;
    if magic != MAGIC {
        return Err(format!("{}: the guest left no results", b.name));
    }
    let mut guest = [0u64; 5];
    for (i, g) in guest.iter_mut().enumerate() {
        *g = mem
            .read_obj(GuestAddress(RESULTS + 8 + 8 * i as u64))
            .map_err(|e| e.to_string())?;
    }
    Ok(Measured {
        backing: b.name.into(),
        host_cycles: host.0,
        guest_cycles: guest,
        host_page_size: host.1,
        guest_kvm_pages: outcome.machine.kvm_pages,
    })
}

/// Root-only helpers that put the machine back as it was.
struct Restore {
    nr_hugepages: Option<String>,
    mounts: Vec<PathBuf>,
}

impl Restore {
    /// Mounts a tmpfs with `huge` (always, never) in $TMPDIR; the mount point.
    fn tmpfs(&mut self, huge: &str, size: u64) -> Option<PathBuf> {
        let dir = std::env::temp_dir().join(format!("pmemvm-ratio-{huge}-{}", std::process::id()));
        let ok = std::fs::create_dir_all(&dir).is_ok()
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("huge={huge},size={}", size + (4 << 20)))
                .arg("none")
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
        if ok {
            self.mounts.push(dir.clone());
            Some(dir)
        } else {
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(n) = self.nr_hugepages.take() {
            let _ = std::fs::write("/proc/sys/vm/nr_hugepages", n);
        }
        for m in self.mounts.drain(..) {
            let _ = Command::new("umount").arg(&m).status();
            let _ = std::fs::remove_dir(&m);
        }
    }
}

fn backings(a: &Args, restore: &mut Restore) -> Vec<Result<Backing, String>> {
    let mut out = Vec::new();
    let temp: NvdimmSpec = format!("{},label-size=0", a.size >> 20 << 20)
        .parse()
        .map_err(|e: vmm::config::ConfigError| e.to_string())
        .unwrap_or_else(|_| NvdimmSpec::temporary(a.size));
    // 4 KiB for sure: a tmpfs with huge=never (ext4's page cache may use
    // large folios, PMD-mapped, on recent kernels).
    out.push(match restore.tmpfs("never", a.size) {
        Some(dir) => Ok(Backing {
            name: "4K: file on tmpfs huge=never",
            spec: NvdimmSpec {
                file: Some(dir.join("pm0.img")),
                ..temp.clone()
            },
        }),
        None => Err("4K tmpfs: mounting a tmpfs needs root".into()),
    });
    let pages =
        vmm::memory::hugepages::huge_len(temp.file_len()) / vmm::memory::hugepages::HUGE_PAGE_SIZE;
    let free = vmm::memory::hugepages::free_huge_pages();
    if free < pages {
        let old = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap_or_default();
        let want = old.trim().parse::<u64>().unwrap_or(0) + (pages - free);
        if std::fs::write("/proc/sys/vm/nr_hugepages", want.to_string()).is_ok() {
            restore.nr_hugepages = Some(old.trim().to_string());
        }
    }
    out.push(if vmm::memory::hugepages::free_huge_pages() >= pages {
        Ok(Backing {
            name: "2M: hugetlb (hugepages,label-size=0)",
            spec: NvdimmSpec {
                hugepages: true,
                ..temp.clone()
            },
        })
    } else {
        Err(format!(
            "2M hugetlb: {pages} free huge pages needed (run as root to reserve them)"
        ))
    });
    out.push(match restore.tmpfs("always", a.size) {
        Some(dir) => Ok(Backing {
            name: "2M: file on tmpfs huge=always",
            spec: NvdimmSpec {
                file: Some(dir.join("pm0.img")),
                ..temp
            },
        }),
        None => Err("2M tmpfs: mounting a tmpfs with huge=always needs root".into()),
    });
    out
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("guest_host_ratio: {e}");
            std::process::exit(2);
        }
    };
    let work = std::env::temp_dir().join(format!("pmemvm-ratio-elf-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&work);
    let elf = match assemble(&work) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("guest_host_ratio: {e}");
            std::process::exit(1);
        }
    };
    let machine = MachineDescription::probe();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpu = vmm::memory::placement::parse_cpu_list(&online)
        .ok()
        .and_then(|l| l.into_iter().max())
        .unwrap_or(0);
    println!(
        "guest-vs-host ratio, ring-3 half: DIMM {} MiB, {} runs, {} iterations (64 B and xorshift), {} (4 KiB); vCPU and host loop pinned to host CPU {cpu}",
        a.size >> 20,
        a.runs,
        a.iters,
        a.iters_4k
    );
    println!(
        "host: {} ({} CPUs), kernel {}, THP {} (shmem {}), KSM {}, SMT {}, cpufreq {}/{}",
        machine.host.cpu_model,
        machine.host.host_cpus,
        machine.host.host_kernel,
        machine.thp_enabled,
        machine.thp_shmem_enabled,
        machine.ksm_run,
        machine.smt,
        machine.cpu_freq_driver,
        machine.cpu_governor
    );
    let mut restore = Restore {
        nr_hugepages: None,
        mounts: Vec::new(),
    };
    let mut all = Vec::new();
    let mut failed = false;
    for b in backings(&a, &mut restore) {
        let b = match b {
            Ok(b) => b,
            Err(why) => {
                println!("\nskipped: {why}");
                continue;
            }
        };
        let mut runs = Vec::new();
        for _ in 0..a.runs {
            match measure(&elf, &b, &a, cpu) {
                Ok(m) => runs.push(m),
                Err(e) => {
                    eprintln!("guest_host_ratio: {e}");
                    failed = true;
                    break;
                }
            }
        }
        let Some(first) = runs.first().cloned() else {
            continue;
        };
        all.extend(runs.iter().cloned());
        // A run whose no-memory mode is off by more than 3% was disturbed
        // (another process on the CPU, a TSC difference): left out when any
        // run was not.
        let quiet: Vec<Measured> = runs
            .iter()
            .filter(|m| {
                (m.host_cycles[0] as f64 / m.guest_cycles[0].max(1) as f64 - 1.0).abs() <= 0.03
            })
            .cloned()
            .collect();
        let total = runs.len();
        let undisturbed = quiet.len();
        let runs = if quiet.is_empty() { runs } else { quiet };
        println!(
            "\n{} — host side: {} pages back the DIMM (smaps); guest side: {}",
            b.name,
            vmm::config::size_text(first.host_page_size),
            first.guest_kvm_pages.map_or_else(
                || "not measured (this KVM reports no page counts)".to_owned(),
                |p| format!(
                    "KVM maps the VM's memory with {} (RAM and DIMM together; KVM's statistics)",
                    p.describe()
                )
            )
        );
        println!(
            "  {undisturbed} of {total} runs undisturbed (xorshift-only ratio within 3% of 1); {}",
            match undisturbed {
                0 => "none was, so the medians are over all runs and mean little",
                n if n == total => "medians over all",
                _ => "medians over those",
            }
        );
        println!(
            "  {:<20} {:>14} {:>14} {:>8} {:>10}",
            "mode", "host cycles", "guest cycles", "ratio", "best/best"
        );
        for (mode, name) in MODES.iter().enumerate() {
            let ratio = median(
                runs.iter()
                    .map(|m| m.host_cycles[mode] as f64 / m.guest_cycles[mode].max(1) as f64)
                    .collect(),
            );
            let h = median(runs.iter().map(|m| m.host_cycles[mode] as f64).collect());
            let g = median(runs.iter().map(|m| m.guest_cycles[mode] as f64).collect());
            // Interference only adds cycles: the fastest run of each side is
            // the least disturbed one.
            let best = |f: fn(&Measured, usize) -> u64| {
                all.iter()
                    .filter(|m| m.backing == b.name)
                    .map(|m| f(m, mode))
                    .min()
                    .unwrap_or(0) as f64
            };
            let best_ratio =
                best(|m, i| m.host_cycles[i]) / best(|m, i| m.guest_cycles[i]).max(1.0);
            println!("  {name:<20} {h:>14.0} {g:>14.0} {ratio:>8.3} {best_ratio:>10.3}");
        }
    }
    println!(
        "\nratio = host cycles / guest cycles for the same iterations (median of the runs kept); \
         best/best = the fastest host run / the fastest guest run of all runs; 1.0 = guest as fast as the host"
    );
    println!("\nfio half: {}", fio_half::run_or_reason(&machine));
    if let Some(path) = &a.json {
        let doc = serde_json::json!({ "machine": machine, "runs": all });
        if let Err(e) = std::fs::write(path, doc.to_string()) {
            eprintln!("guest_host_ratio: cannot write {}: {e}", path.display());
            failed = true;
        }
    }
    drop(restore);
    let _ = std::fs::remove_dir_all(&work);
    if failed {
        std::process::exit(1);
    }
}
