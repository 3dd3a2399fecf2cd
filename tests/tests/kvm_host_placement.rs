//! Tier 4 (this host's KVM, tiny guests): huge pages, vCPU pinning and host
//! NUMA binding as /proc shows them for a running pmemvm, the machine
//! description in `run --json`, and bad placement input refused with one
//! sentence and status 2. The test mounts its own tmpfs (huge=always) and
//! hugetlbfs and reserves a few hugetlb pages, restoring the old count after.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pmemvm_tests::mounts::{HugePages, Mounted};
use pmemvm_tests::pmemvm::{pmemvm_bin, run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const DEADLINE: Duration = Duration::from_secs(60);

/// The tests here change machine-wide hugetlb reservations: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The last online host CPU (vCPU 0 is pinned there, the VMM's threads elsewhere).
fn last_online_cpu() -> u32 {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    vmm::memory::placement::parse_cpu_list(&online)
        .unwrap()
        .into_iter()
        .max()
        .unwrap()
}

/// smaps fields (kB) of the mapping whose line names `needle`.
fn smaps_of(smaps: &str, needle: &str) -> Vec<(String, u64)> {
    let mut lines = smaps.lines().skip_while(|l| !l.contains(needle));
    let _head = lines.next();
    lines
        .take_while(|l| !l.contains(" rw") && !l.contains(" r-"))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let k = f.next()?.trim_end_matches(':').to_string();
            Some((k, f.next()?.parse().ok()?))
        })
        .collect()
}

fn field(fields: &[(String, u64)], name: &str) -> u64 {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map_or(0, |(_, v)| *v)
}

#[test]
fn huge_pages_pinning_and_node_binding_are_what_proc_shows() {
    let hold = require!(kvm_available().and_then(|()| guest("nvdimmhold")));
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("placement");
    let huge = require!(Mounted::new(
        &dir.join("huge"),
        "tmpfs",
        "huge=always,size=64M"
    ));
    let hugetlbfs = require!(Mounted::new(
        &dir.join("hugetlbfs"),
        "hugetlbfs",
        "pagesize=2M"
    ));
    // 16M RAM (8 pages), a hugetlb temporary DIMM and a hugetlbfs file of
    // 16M + 4K each (9 pages each).
    let _pages = require!(HugePages::reserve(26));
    let plain = dir.join("plain.img");
    let cpu = last_online_cpu();
    let args: Vec<String> = [
        "-v",
        "boot",
        "--kernel",
        &hold.display().to_string(),
        "--memory",
        "16M,hugepages",
        "--pin",
        &cpu.to_string(),
        "--host-node",
        "0",
        "--nvdimm",
        &format!("16M,file={}/pm0.img,label-size=0", huge.0.display()),
        "--nvdimm",
        &format!("16M,file={},label-size=0", plain.display()),
        "--nvdimm",
        "16M,hugepages,label-size=0",
        "--nvdimm",
        &format!("16M,file={}/pm3.img,label-size=0", hugetlbfs.0.display()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let stderr_path = dir.join("stderr");
    let mut child = Command::new(pmemvm_bin())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("touched") {
                let _ = tx.send(());
            }
        }
    });
    let touched = rx.recv_timeout(DEADLINE).is_ok();
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let smaps = std::fs::read_to_string(proc_dir.join("smaps")).unwrap_or_default();
    let numa_maps = std::fs::read_to_string(proc_dir.join("numa_maps")).unwrap_or_default();
    let mut threads = Vec::new();
    for t in std::fs::read_dir(proc_dir.join("task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        threads.push((comm.trim().to_string(), allowed));
    }
    // SAFETY: kill on our own child, which has not been waited for yet.
    unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGTERM) };
    let start = Instant::now();
    while child.try_wait().ok().flatten().is_none() && start.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(touched, "the guest never printed 'touched':\n{stderr}");

    // Huge tmpfs: PMD-mapped shmem; ext4: 4 KiB pages; hugetlb memfd: hugetlb pages.
    let tmpfs = smaps_of(&smaps, "pm0.img");
    assert!(
        field(&tmpfs, "ShmemPmdMapped") >= 4096,
        "{tmpfs:?}\n{smaps}"
    );
    let ext4 = smaps_of(&smaps, "plain.img");
    assert_eq!(field(&ext4, "KernelPageSize"), 4, "{ext4:?}");
    assert_eq!(field(&ext4, "FilePmdMapped"), 0, "{ext4:?}");
    assert!(field(&ext4, "Rss") >= 4096, "{ext4:?}");
    let hugetlb = smaps_of(&smaps, "memfd:pmemvm-nvdimm");
    assert_eq!(field(&hugetlb, "KernelPageSize"), 2048, "{hugetlb:?}");
    assert!(
        field(&hugetlb, "Shared_Hugetlb") + field(&hugetlb, "Private_Hugetlb") >= 4096,
        "{hugetlb:?}"
    );
    let file = smaps_of(&smaps, "pm3.img");
    assert_eq!(field(&file, "KernelPageSize"), 2048, "{file:?}");
    assert!(
        field(&file, "Shared_Hugetlb") + field(&file, "Private_Hugetlb") >= 4096,
        "{file:?}"
    );
    // The VMM's own measurement says the same.
    for (dimm, pages) in [
        ("nvdimm0", "2M"),
        ("nvdimm1", "4K"),
        ("nvdimm2", "2M"),
        ("nvdimm3", "2M"),
    ] {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&format!("memory: {dimm} "))
                    && l.contains(&format!("backed by {pages} pages"))),
            "{dimm} not reported as {pages}:\n{stderr}"
        );
    }
    assert!(
        stderr.contains("memory: ram backed by 2M pages"),
        "{stderr}"
    );
    // --host-node 0: every DIMM mapping is bound.
    for name in ["pm0.img", "plain.img", "memfd:pmemvm-nvdimm", "pm3.img"] {
        let line = numa_maps.lines().find(|l| l.contains(name)).unwrap_or("");
        assert!(line.contains("bind:0"), "{name}: {line:?}\n{numa_maps}");
    }
    // --pin: vCPU 0 on the CPU given, pmemvm's own threads elsewhere
    // (kernel workers KVM attaches to the process, kvm-*, are not pmemvm's).
    let vcpu = threads.iter().find(|(c, _)| c == "vcpu0");
    assert_eq!(
        vcpu.map(|(_, a)| a.as_str()),
        Some(cpu.to_string().as_str()),
        "{threads:?}"
    );
    for (comm, allowed) in threads
        .iter()
        .filter(|(c, _)| !c.starts_with("vcpu") && !c.starts_with("kvm"))
    {
        let cpus = vmm::memory::placement::parse_cpu_list(allowed).unwrap_or_default();
        assert!(
            !cpus.contains(&cpu) || cpus == [cpu],
            "thread {comm} may run on the vCPU's CPU {cpu}: {allowed}"
        );
    }
}

#[test]
fn run_record_states_the_machine_and_measured_page_sizes() {
    let hold = require!(kvm_available().and_then(|()| guest("nvdimmhold")));
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("placement-record");
    let huge = require!(Mounted::new(
        &dir.join("huge"),
        "tmpfs",
        "huge=always,size=64M"
    ));
    let job = dir.join("job.fio");
    std::fs::write(&job, "[x]\nioengine=null\nsize=1M\n").unwrap();
    let json = dir.join("r.json");
    let cpu = last_online_cpu().to_string();
    let dimm0 = format!("16M,file={}/pm0.img,label-size=0", huge.0.display());
    let dimm1 = format!("16M,file={},label-size=0", dir.join("plain.img").display());
    let (hold, job_s, json_s) = (
        hold.display().to_string(),
        job.display().to_string(),
        json.display().to_string(),
    );
    // The guest must have touched both DIMMs before the watchdog ends it: 2 s on a host,
    // more inside a loaded nested L1 (under TCG; one CI run saw the second DIMM untouched,
    // resident 0, after 2 s there).
    let timeout = if lab::guest::engine::in_nested_l1() {
        "15"
    } else {
        "2"
    };
    let args = [
        "run",
        "--engine",
        "pmemvm",
        "--kernel",
        &hold,
        "--fio",
        &job_s,
        "--timeout",
        timeout,
        "--json",
        &json_s,
        "--pin",
        &cpu,
        "--host-node",
        "0",
        "--memory",
        "64M,thp",
        "--nvdimm",
        &dimm0,
        "--nvdimm",
        &dimm1,
    ];
    let out = run(&args, DEADLINE);
    // The guest halts after touching its DIMMs, so the watchdog ends it (status 124).
    assert_eq!(out.status, Some(124), "{}", out.dump());
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{e}\n{}", out.dump()));
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let m = &r["machine"];
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let model = m["cpu_model"].as_str().unwrap();
    assert!(
        cpuinfo
            .lines()
            .any(|l| l.starts_with("model name") && l.ends_with(model)),
        "{model}"
    );
    let sys = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    let selected = |p: &str| {
        sys(p)
            .map(|s| vmm::host::machine::selected(&s))
            .unwrap_or_else(|_| "unsupported".into())
    };
    assert_eq!(
        m["thp_enabled"],
        selected("/sys/kernel/mm/transparent_hugepage/enabled")
    );
    assert_eq!(
        m["thp_shmem_enabled"],
        selected("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
    );
    assert_eq!(
        m["ksm_run"],
        sys("/sys/kernel/mm/ksm/run").unwrap_or_else(|_| "unsupported".into())
    );
    assert_eq!(
        m["cpu_governor"],
        sys("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
            .unwrap_or_else(|_| "none".into())
    );
    assert_eq!(
        m["smt"],
        sys("/sys/devices/system/cpu/smt/control").unwrap_or_else(|_| "notimplemented".into())
    );
    let vulns = std::fs::read_dir("/sys/devices/system/cpu/vulnerabilities").unwrap();
    let mitigations = m["mitigations"].as_object().unwrap();
    for v in vulns.flatten() {
        let name = v.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(v.path()).unwrap();
        assert_eq!(mitigations[&name], text.trim(), "{name}");
    }
    assert_eq!(
        m["vcpu_pinning"],
        serde_json::json!([cpu.parse::<u32>().unwrap()])
    );
    assert_eq!(m["host_node"], 0);
    assert_eq!(
        m["dimm_page_size"],
        serde_json::json!([2 << 20, 4096]),
        "{m}"
    );
    // KVM's own count of how it maps the VM is in the record (its values are checked with
    // a ring-3 guest below: this guest touches the DIMMs from ring 0, which PVM emulates
    // without mapping the pages for the guest).
    assert!(m["kvm_pages"]["pages_4k"].is_u64(), "{m}");
    // THP for RAM: 2 MiB where the kernel allows madvise'd THP.
    let thp = m["thp_enabled"].as_str().unwrap();
    let expect_ram = if thp == "never" { 4096 } else { 2 << 20 };
    assert_eq!(m["ram_page_size"], expect_ram, "{m}");
    // --host-node places file-backed DIMMs too: their page cache is allocated under the
    // faulting vCPU thread's policy (mbind governs only anonymous, shmem and hugetlb
    // pages), which is bound to the node; numa_maps says where the touched pages are.
    // This host has one node, so "on node 0" cannot fail by placement here; the policy
    // is the part a one-node host can check.
    assert_eq!(m["vcpu_memory_policy"], "bind:0", "{m}");
    let plain = m["page_measurements"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["what"] == "nvdimm1"))
        .unwrap_or_else(|| panic!("no nvdimm1 measurement: {m}"));
    let resident = plain["resident"].as_u64().unwrap_or(0);
    assert!(
        resident > 0,
        "the guest touched the file-backed DIMM: {plain}"
    );
    let nodes = plain["node_bytes"].as_array().expect("node_bytes");
    if std::path::Path::new("/proc/self/numa_maps").exists() {
        let on = |n: u64| {
            nodes
                .iter()
                .filter(|e| e[0] == n)
                .map(|e| e[1].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        assert!(
            on(0) > 0,
            "numa_maps shows the DIMM's pages on node 0: {plain}"
        );
        let elsewhere: u64 = nodes
            .iter()
            .filter(|e| e[0] != 0)
            .map(|e| e[1].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(elsewhere, 0, "no page on another node: {plain}");
    }
}

#[test]
fn bad_placement_and_huge_page_input_is_one_sentence_and_status_2() {
    let halt = require!(kvm_available().and_then(|()| guest("halt")));
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("placement-bad");
    let hugetlbfs = require!(Mounted::new(
        &dir.join("hugetlbfs"),
        "hugetlbfs",
        "pagesize=2M"
    ));
    let file = dir.join("never.img");
    let dimm = format!("16M,file={}", file.display());
    let offline = (last_online_cpu() + 1).to_string();
    let free = vmm::memory::hugepages::free_huge_pages();
    let too_much = format!("{}M,hugepages", (free + 1) * 2 + 16);
    // A labelled DIMM on hugetlbfs larger than the free huge pages (its labels are fine now).
    let on_hugetlbfs = format!(
        "{}M,file={}/pm.img",
        (free * 2 / 16 + 1) * 16,
        hugetlbfs.0.display()
    );
    let halt = halt.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--cpus", "1", "--pin", "0,1"],
            "names 2 host CPUs but the guest has --cpus 1",
        ),
        (
            vec!["--cpus", "2", "--pin", "0"],
            "names 1 host CPU but the guest has --cpus 2",
        ),
        (vec!["--pin", &offline], "which is not online here"),
        (
            vec!["--host-node", "99"],
            "--host-node 99 is not a host NUMA node",
        ),
        (
            vec!["--memory", &too_much],
            "free 2 MiB huge pages but this host has",
        ),
        (
            vec!["--nvdimm", &on_hugetlbfs],
            "free 2 MiB huge pages but this host has",
        ),
        (vec!["--pin", "3-1"], "runs backwards"),
    ];
    for (extra, says) in cases {
        for cmd in [
            &["boot", "--kernel", halt.as_str()][..],
            &["preflight", "boot", "--kernel", halt.as_str()][..],
        ] {
            let mut args: Vec<&str> = cmd.to_vec();
            args.extend_from_slice(&extra);
            args.extend_from_slice(&["--nvdimm", &dimm]);
            let out = run(&args, DEADLINE);
            assert_eq!(out.status, Some(2), "{args:?}\n{}", out.dump());
            assert!(out.stderr.contains(says), "{args:?}\n{}", out.dump());
            let sentence = out.stderr.lines().find(|l| l.contains(says)).unwrap_or("");
            assert!(
                !sentence.is_empty()
                    && out.stderr.lines().filter(|l| l.contains("error")).count() == 1,
                "{}",
                out.dump()
            );
            assert!(!file.exists(), "{args:?} created {}", file.display());
        }
    }
    assert!(
        std::fs::read_dir(&hugetlbfs.0).unwrap().next().is_none(),
        "a refused DIMM left a file on hugetlbfs"
    );
}

#[test]
fn labelled_dimms_on_hugetlbfs_get_labels_through_a_mapping_and_keep_them() {
    let halt = require!(kvm_available().and_then(|()| guest("halt")));
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("placement-hugetlbfs-labels");
    let hugetlbfs = require!(Mounted::new(
        &dir.join("hugetlbfs"),
        "hugetlbfs",
        "pagesize=2M"
    ));
    // Each DIMM: 16M + 128K labels + 4K identity, rounded up to 9 huge pages.
    let _pages = require!(HugePages::reserve(18));
    let job = dir.join("job.fio");
    std::fs::write(&job, "[x]\nioengine=null\nsize=1M\n").unwrap();
    let file = hugetlbfs.0.join("pm0.img");
    let (halt, job) = (halt.display().to_string(), job.display().to_string());
    let dimm = format!("16M,file={}", file.display());
    let boot = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--engine",
            "pmemvm",
            "--kernel",
            &halt,
            "--fio",
            &job,
            "--timeout",
            "2",
            "--nvdimm",
            &dimm,
        ];
        args.extend_from_slice(extra);
        let out = run(&args, DEADLINE);
        // The guest halts, the watchdog ends it: the DIMMs were set up.
        assert_eq!(out.status, Some(124), "{args:?}\n{}", out.dump());
    };
    // A labelled hugetlbfs file and a labelled hugetlb temporary DIMM (both refused before:
    // their label writes used write(2), which hugetlbfs does not have).
    boot(&["--nvdimm", "16M,hugepages"]);
    let len = std::fs::metadata(&file).unwrap().len();
    assert_eq!(
        len,
        18 << 20,
        "16M + labels + identity, in whole huge pages"
    );
    // pread works on hugetlbfs: the empty label index pmemvm wrote through the mapping.
    let f = std::fs::File::open(&file).unwrap();
    let mut labels = vec![0u8; 128 << 10];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut labels, 16 << 20).unwrap();
    let sig = b"NAMESPACE_INDEX\0";
    assert_eq!(
        labels.windows(sig.len()).filter(|w| *w == sig).count(),
        2,
        "two index blocks in the label area"
    );
    // The identity page too: a second start takes the file as pmemvm's, labels kept.
    boot(&[]);
    let mut again = vec![0u8; 128 << 10];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut again, 16 << 20).unwrap();
    assert_eq!(again, labels, "a second start left the labels as they were");
}

#[test]
fn ring3_ratio_guest_runs_its_loop_in_ring_3_and_reports_every_mode() {
    use vm_memory::{Bytes, GuestAddress};
    let elf = require!(kvm_available().and_then(|()| guest("ring3ratio")));
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let config = vmm::config::VmConfig {
        kernel: elf,
        initrd: None,
        initrd_append: Vec::new(),
        cmdline: String::new(),
        machine: vmm::config::MachineSpec {
            cpus: 1,
            memory: 16 << 20,
            ram_pages: Default::default(),
            placement: Default::default(),
            nvdimms: vec!["16M,label-size=0".parse().unwrap()],
            disks: Vec::new(),
            legacy_pmem: Vec::new(),
            nvdimm_slots: 0,
            cxl_pmem: Vec::new(),
        },
        console: vmm::config::ConsoleMode::Null,
        channel: None,
    };
    let size: u64 = 16 << 20;
    // Three guests, each mode's fewest cycles compared: a host busy beside the
    // test (two TCG queues here) preempts a mode now and then, which only
    // ever adds cycles; a mode that truly costs less still shows it.
    let mut cycles = [u64::MAX; 5];
    let mut outcome = None;
    for _ in 0..3 {
        let vm = vmm::vstate::vm::Vm::build(&config).unwrap();
        let mem = vm.memory().clone();
        for (i, v) in [size, size / 64 - 1, 20_000, 2_000].into_iter().enumerate() {
            mem.write_obj(v, GuestAddress(0x20_0000 + 8 * i as u64))
                .unwrap();
        }
        let run = vm.run().unwrap();
        assert_eq!(
            run.reason,
            devices::exit::ExitRequest::GuestExit(0x11),
            "{run:?}"
        );
        let word = |i: u64| -> u64 { mem.read_obj(GuestAddress(0x20_0100 + 8 * i)).unwrap() };
        assert_eq!(word(0).to_le_bytes(), *b"R3RATIO1", "no results");
        assert_eq!(word(6), 3, "the loop did not run at CPL 3");
        for (mode, c) in cycles.iter_mut().enumerate() {
            let this = word(mode as u64 + 1);
            assert!(this > 0, "mode {mode}: no cycles");
            *c = (*c).min(this);
        }
        outcome = Some(run);
    }
    let outcome = outcome.expect("three runs");
    // Random reads over 16 MiB cost more than the xorshift alone.
    assert!(cycles[1] > cycles[0], "{cycles:?}");
    // The guest side's page size is KVM's: the loop (run natively at CPL 3 on every kind of
    // KVM) touched every page of the DIMM, so KVM mapped at least its 16 MiB.
    let kvm = outcome
        .machine
        .kvm_pages
        .unwrap_or_else(|| panic!("no KVM page counts: {:?}", outcome.machine));
    let mapped = (kvm.pages_4k << 12) + (kvm.pages_2m << 21) + (kvm.pages_1g << 30);
    assert!(
        mapped >= size,
        "KVM mapped {} for a 16 MiB DIMM the guest touched",
        kvm.describe()
    );
}
