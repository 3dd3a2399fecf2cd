//! Golden tests of the plans against the threads' scripts, and real fio on the rendered jobs.

use super::*;
use crate::study::report::Metric;

/// A host that gives the threads' parameters: 64 CPUs, enough disk.
pub(super) fn thread_host() -> BenchParams {
    host_with_cpus(64)
}

/// A host with 2 CPUs.
pub(super) fn small() -> BenchParams {
    host_with_cpus(2)
}

/// A host with `cpus` CPUs and enough disk, every knob at its default.
pub(super) fn host_with_cpus(cpus: u32) -> BenchParams {
    BenchParams {
        host: HostLimits {
            cpus: Some(cpus),
            ..HostLimits::default()
        },
        ..BenchParams::default()
    }
}

pub(super) fn plan(name: &str, p: &BenchParams) -> ExperimentPlan {
    find_experiment(name).unwrap().plan(p).unwrap()
}

fn phase_names(p: &ExperimentPlan) -> Vec<(&str, &str, &'static str)> {
    p.phases
        .iter()
        .map(|x| (x.name.as_str(), x.job, x.role.name()))
        .collect()
}

/// The lines fio reads (comments dropped), as `key=value`.
fn job_lines(p: &Phase) -> Vec<&str> {
    p.job_file
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .collect()
}

fn has(p: &Phase, lines: &[&str]) {
    let got = job_lines(p);
    for l in lines {
        assert!(
            got.contains(l),
            "{}: {l:?} missing in\n{}",
            p.name,
            p.job_file
        );
    }
}

pub(super) fn deviation<'a>(p: &'a ExperimentPlan, what: &str) -> Option<&'a Deviation> {
    p.deviations.iter().find(|d| d.what.starts_with(what))
}

#[test]
fn unknown_experiment_lists_names() {
    let msg = find_experiment("pmem-nowiat").unwrap_err().to_string();
    assert!(msg.contains("\"pmem-nowiat\""), "{msg}");
    for e in &EXPERIMENTS {
        assert!(msg.contains(e.name), "{msg}");
        assert_eq!(find_experiment(e.name).unwrap().name, e.name);
    }
    assert!(msg.contains("bcache-verify"));
}

/// pmem V1's test-pmem.sh, at the thread's host: verify, randwrite, 3 x randread, in one load.
#[test]
fn pmem_nowait_is_the_v1_script() {
    let p = plan("pmem-nowait", &thread_host());
    assert_eq!(
        phase_names(&p),
        [
            ("write-and-verify", "write-and-verify", "check"),
            ("randwrite", "RANDWRITE", "prepare"),
            ("randread-1", "randread", "measured"),
            ("randread-2", "randread", "measured"),
            ("randread-3", "randread", "measured"),
        ]
    );
    let size = (896u64 << 20).to_string();
    let size = format!("size={size}");
    has(
        &p.phases[0],
        &[
            "[write-and-verify]",
            "rw=randwrite",
            "bs=4k",
            "ioengine=io_uring",
            "iodepth=16",
            "verify=crc32c",
            "direct=1",
            &size,
            "filename=/dev/pmem0",
        ],
    );
    has(
        &p.phases[1],
        &[
            "[RANDWRITE]",
            "rw=randwrite",
            "bs=4k",
            "ioengine=io_uring",
            "iodepth=2",
            "numjobs=48",
            "group_reporting=1",
            "runtime=60",
            &size,
            "filename=/dev/pmem0",
        ],
    );
    // Size-bound, capped at 60 s: not time-based (the pmem fill ended after 4.6 s).
    assert!(!job_lines(&p.phases[1]).contains(&"time_based=1"));
    for r in &p.phases[2..] {
        has(
            r,
            &[
                "rw=randread",
                "bs=4k",
                "ioengine=io_uring",
                "numjobs=48",
                "time_based=1",
                "runtime=60",
                &size,
                "filename=/dev/pmem0",
            ],
        );
    }
    assert_eq!(p.nvdimm_bytes, Some(1 << 30));
    assert_eq!(
        p.sides
            .iter()
            .map(|s| (s.label.as_str(), p.cmdline_for(s)))
            .collect::<Vec<_>>(),
        [
            ("off", "nd_pmem.nowait=0".into()),
            ("on", "nd_pmem.nowait=1".to_string())
        ]
    );
    // Nothing scaled at the thread's host: only what is not shown or cannot be the same.
    assert!(deviation(&p, "jobs").is_none(), "{:#?}", p.deviations);
    assert!(deviation(&p, "--size").is_none());
    assert!(deviation(&p, "runtime").is_none());
    for what in [
        "module load",
        "device",
        "write-and-verify: norandommap",
        "direct",
        "iodepth (randread)",
        "fio options (randread-1, randread-2, randread-3)",
        "kernel",
        "fio",
        "device state between sides",
    ] {
        assert!(deviation(&p, what).is_some(), "{what}: {:#?}", p.deviations);
    }
    assert_eq!(p.deviations.len(), 9, "{:#?}", p.deviations);
    // The measured phases' jobs end with the logs and percentiles, the others do not.
    for r in &p.phases[2..] {
        has(
            r,
            &[
                &format!("write_iops_log=/tmp/{}", r.name),
                &format!("write_bw_log=/tmp/{}", r.name),
                "log_avg_msec=1000",
                "per_job_logs=0",
                "slat_percentiles=1",
                "clat_percentiles=1",
                "lat_percentiles=1",
            ],
        );
        assert!(r.job_file.contains(OBSERVE_COMMENT), "{}", r.job_file);
    }
    for r in &p.phases[..2] {
        assert!(!r.job_file.contains("_log="), "{}", r.job_file);
    }
    let d = deviation(&p, "fio options").unwrap();
    assert_eq!(d.thread, "not in the thread's job");
    assert!(
        d.why.contains("do not change the I/O fio issues"),
        "{}",
        d.why
    );
    assert!(p.guest_job().fio_job.is_empty());
    assert_eq!(p.guest_job().phases.len(), 5);
}

#[test]
fn pmem_scales_explicitly_and_says_so() {
    let p = plan(
        "pmem-nowait",
        &BenchParams {
            nvdimm_bytes: Some(64 << 20),
            runtime_s: Some(2),
            ..small()
        },
    );
    has(&p.phases[1], &["numjobs=2", "size=67108864", "runtime=2"]);
    has(
        &p.phases[4],
        &["numjobs=2", "size=67108864", "runtime=2", "time_based=1"],
    );
    has(&p.phases[0], &["size=67108864", "iodepth=16"]);
    let jobs = deviation(&p, "jobs").unwrap();
    assert_eq!((jobs.thread.as_str(), jobs.here.as_str()), ("48", "2"));
    // The host's limit, named as such (not a pmemvm default).
    assert!(
        jobs.why.starts_with("this host has 2 CPU(s)"),
        "{}",
        jobs.why
    );
    assert_eq!(p.vcpus, 2);
    let size = deviation(&p, "--size").unwrap();
    assert_eq!(
        (size.thread.as_str(), size.here.as_str()),
        ("896M", "64 MiB")
    );
    assert!(size.why.contains("64 MiB NVDIMM"), "{}", size.why);
    assert_eq!(deviation(&p, "runtime").unwrap().here, "2 s");
    let rw = plan("pmem-randwrite", &small());
    assert_eq!(
        phase_names(&rw),
        [
            ("write-and-verify", "write-and-verify", "check"),
            ("randwrite", "RANDWRITE", "measured")
        ]
    );
    let v = plan("pmem-verify", &small());
    assert_eq!(
        phase_names(&v),
        [("write-and-verify", "write-and-verify", "measured")]
    );
    // A verify-only plan has no many-job phase: no jobs or iodepth entry, and the knobs of
    // phases a plan does not have are refused, naming why.
    assert!(deviation(&v, "jobs").is_none(), "{:#?}", v.deviations);
    for (name, knobs, what) in [
        (
            "bcache-verify",
            BenchParams {
                jobs: Some(4),
                ..small()
            },
            "--jobs",
        ),
        (
            "pmem-verify",
            BenchParams {
                iodepth: Some(8),
                ..small()
            },
            "--iodepth",
        ),
        (
            "pmem-verify",
            BenchParams {
                runtime_s: Some(5),
                ..small()
            },
            "--runtime",
        ),
        (
            "xfs-dax-write",
            BenchParams {
                runtime_s: Some(5),
                ..small()
            },
            "--runtime",
        ),
    ] {
        let e = find_experiment(name)
            .unwrap()
            .plan(&knobs)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&format!("{name}: {what} = ")), "{e}");
        assert!(e.contains("has no"), "{e}");
    }
    let t = v.render_text(1);
    assert!(!t.contains("fio job(s) in"), "{t}");
    // pmem-randwrite's only many-job phase is the fill.
    assert!(
        deviation(&rw, "jobs (RANDWRITE)").is_some(),
        "{:#?}",
        rw.deviations
    );
    assert!(plan("pmem-nowait", &small())
        .render_text(1)
        .contains("; 2 fio job(s) in RANDWRITE, randread\n"));
}

/// The bcache thread's test-bcache.sh at its own sizes.
#[test]
fn bcache_nowait_is_the_thread_script() {
    let p = plan("bcache-nowait", &thread_host());
    assert_eq!(
        p.extra_cmdline,
        ["null_blk.queue_mode=2 null_blk.nr_devices=2 null_blk.memory_backed=1 null_blk.gb=1"]
    );
    let setup = &p.setup.as_ref().unwrap().script;
    for l in [
        "\nNULLB_CONFIGFS='0'\n",
        "\nBUCKET_KB='512'\n",
        "make-bcache -B /dev/nullb0 -C /dev/nullb1\n",
        "echo /dev/nullb0 >/sys/fs/bcache/register\n",
    ] {
        assert!(setup.contains(l), "{l:?} missing in\n{setup}");
    }
    assert!(
        !setup.contains("sequential_cutoff"),
        "the thread left the cutoff as it is"
    );
    assert_eq!(phase_names(&p).len(), 5);
    has(
        &p.phases[0],
        &[
            "iodepth=16",
            "size=1073741824",
            "filename=/dev/bcache0",
            "verify=crc32c",
        ],
    );
    has(
        &p.phases[1],
        &["numjobs=48", "iodepth=2", "runtime=60", "size=1073741824"],
    );
    has(
        &p.phases[2],
        &[
            "numjobs=48",
            "time_based=1",
            "runtime=60",
            "filename=/dev/bcache0",
        ],
    );
    assert_eq!(p.min_guest_mem_mib, 2 * 1024 + 512);
    assert!(deviation(&p, "null_blk").is_none() && deviation(&p, "bcache bucket").is_none());
    assert_eq!(
        p.cmdline_for(&p.sides[0]).split(' ').next_back(),
        Some("bcache.bch_nowait=0")
    );

    let v = plan("bcache-verify", &small());
    assert_eq!(
        phase_names(&v),
        [("write-and-verify", "write-and-verify", "measured")]
    );
    let x = find_experiment("bcache-verify")
        .unwrap()
        .expectation
        .unwrap();
    assert!(x.fails_off && !x.fails_on);

    // Below 1 GiB: configfs, a smaller bucket for the thread's 2048 buckets, both listed.
    let s = plan(
        "bcache-verify",
        &BenchParams {
            vcpus: Some(1),
            size_bytes: Some(64 << 20),
            ..BenchParams::default()
        },
    );
    assert_eq!(s.extra_cmdline, ["null_blk.nr_devices=0"]);
    let setup = &s.setup.as_ref().unwrap().script;
    assert!(setup.contains("\nNULLB_CONFIGFS='1'\n") && setup.contains("\nNULLB_MB='64'\n"));
    assert!(setup.contains("\nBUCKET_KB='32'\n"), "{setup}");
    assert_eq!(bcache::bucket_kb(64 << 20), 32);
    assert_eq!(bcache::bucket_kb(1 << 30), 512);
    assert!(deviation(&s, "null_blk setup").is_some());
    assert!(deviation(&s, "bcache bucket")
        .unwrap()
        .here
        .contains("2048 buckets"));
    assert_eq!(s.min_guest_mem_mib, 2 * 64 + 512);

    // A host with little memory or disk: the defaults shrink to what fits, and say why.
    let lean = BenchParams {
        vcpus: Some(1),
        host: HostLimits {
            cpus: None,
            disk_free_bytes: Some(200 << 20),
            guest_mem_bytes: Some(1536 << 20),
        },
        ..BenchParams::default()
    };
    let b = plan("bcache-nowait", &lean);
    // 1536 MiB less 512 MiB and 8 MiB for the one job, halved.
    assert_eq!(b.vars["NULLB_MB"], "508");
    let d = deviation(&b, "null_blk size").unwrap();
    assert_eq!(d.here, "508 MiB");
    // The default guest RAM then fits what the host has: two devices, 512 MiB and the job's.
    assert_eq!(b.guest_mem_mib, 2 * 508 + 512 + 8);
    assert!(d.why.contains("1536 MiB of RAM"), "{}", d.why);
    let m = plan("pmem-nowait", &lean);
    // Three quarters of the free disk, rounded down to the 16 MiB region align.
    assert_eq!(m.nvdimm_bytes, Some(144 << 20));
    assert!(deviation(&m, "--size").unwrap().why.contains("free disk"));
}

/// The famfs thread's fio-xfsdax.sh at its own size.
#[test]
fn xfs_dax_write_is_the_famfs_command_line() {
    let p = plan("xfs-dax-write", &thread_host());
    assert_eq!(p.nvdimm_bytes, Some(128 << 30));
    let setup = &p.setup.as_ref().unwrap().script;
    assert!(setup.contains("\nAGCOUNT='1024'\n"));
    assert!(setup.contains("mkfs.xfs -d agcount=\"$AGCOUNT\" -m reflink=0 -f /dev/pmem0"));
    assert!(setup.contains("mount -o dax /dev/pmem0 /mnt/xfs"));
    assert_eq!(p.phases.len(), 1);
    let ph = &p.phases[0];
    assert_eq!(ph.args.as_deref(), Some("--alloc-size=1048576"));
    has(
        ph,
        &[
            "[ten-256m-per-thread]",
            "nrfiles=10",
            "bs=2M",
            "group_reporting=1",
            "filesize=268435456",
            "readwrite=write",
            "fallocate=none",
            "numjobs=48",
            "create_on_open=0",
            "ioengine=io_uring",
            "direct=1",
            "iodepth=1",
            "directory=/mnt/xfs",
        ],
    );
    assert_eq!(
        p.deviations
            .iter()
            .map(|d| d.what.as_str())
            .collect::<Vec<_>>(),
        ["namespace", "fio options (ten-256m-per-thread)"],
        "{:#?}",
        p.deviations
    );
    assert!(ph
        .command()
        .contains("--alloc-size=1048576 /job/ten-256m-per-thread.fio"));
    // Room for fio's 1 GiB --alloc-size pool.
    assert_eq!(p.min_guest_mem_mib, 1536);

    // A small host: jobs per vCPU, files and AGs scaled to the NVDIMM, the disk bounds the default.
    let s = plan(
        "xfs-dax-write",
        &BenchParams {
            vcpus: Some(2),
            host: HostLimits {
                cpus: None,
                disk_free_bytes: Some(8 << 30),
                guest_mem_bytes: None,
            },
            ..BenchParams::default()
        },
    );
    assert_eq!(s.nvdimm_bytes, Some(6 << 30));
    let fs = (6u64 << 30) - (6u64 << 30) / 64;
    let budget = fs - fs / 32 - (64 << 20);
    let filesize = (budget / 20 / (2 << 20) * (2 << 20)).min(256 << 20);
    has(
        &s.phases[0],
        &["numjobs=2", &format!("filesize={filesize}")],
    );
    assert!(s
        .setup
        .as_ref()
        .unwrap()
        .script
        .contains("\nAGCOUNT='48'\n"));
    for what in ["jobs", "pmem size", "mkfs.xfs -d agcount"] {
        assert!(deviation(&s, what).is_some(), "{what}");
    }
}

#[test]
fn bad_parameters_are_explained() {
    let e = find_experiment("xfs-dax-write").unwrap();
    let err = e
        .plan(&BenchParams {
            vcpus: Some(2),
            nvdimm_bytes: Some(256 << 20),
            ..BenchParams::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("at least 512 MiB"), "{err}");
    let err = e
        .plan(&BenchParams {
            vcpus: Some(2),
            jobs: Some(200),
            nvdimm_bytes: Some(1 << 30),
            ..BenchParams::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("use at most 44 jobs"), "{err}");
    let pmem = find_experiment("pmem-nowait").unwrap();
    for (p, text) in [
        (
            BenchParams {
                vcpus: Some(2),
                jobs: Some(0),
                ..BenchParams::default()
            },
            "jobs = 0",
        ),
        (
            BenchParams {
                vcpus: Some(2),
                iodepth: Some(0),
                ..BenchParams::default()
            },
            "iodepth = 0",
        ),
        (
            BenchParams {
                vcpus: Some(2),
                runtime_s: Some(0),
                ..BenchParams::default()
            },
            "runtime = 0 s",
        ),
        (
            BenchParams {
                vcpus: Some(2),
                nvdimm_bytes: Some(64 << 20),
                size_bytes: Some(128 << 20),
                ..BenchParams::default()
            },
            "size = 128 MiB is not accepted; use a multiple of 4 KiB up to the 64 MiB NVDIMM",
        ),
    ] {
        let err = pmem.plan(&p).unwrap_err().to_string();
        assert!(err.contains(text), "{err}");
    }
    let err = find_experiment("bcache-nowait")
        .unwrap()
        .plan(&BenchParams {
            vcpus: Some(1),
            size_bytes: Some(32 << 20),
            ..BenchParams::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("from 64 MiB to 64 GiB"), "{err}");
}

#[test]
fn plan_text_shows_phases_job_texts_and_deviations() {
    let p = plan("pmem-nowait", &small());
    let t = p.render_text(1);
    for want in [
        "pmem-nowait: \"[PATCH] pmem: allow user to set QUEUE_FLAG_NOWAIT\"",
        "off: kernel of the guest image, initrd of the guest image, command line + nd_pmem.nowait=0",
        "1. write-and-verify (check: fio's verify error is a result, reported per boot \
         (--fail-on-check makes it exit 1); any other fio error fails the run; job write-and-verify",
        "fio --output-format=json --output=/tmp/randread-3.json /job/randread-3.fio",
        "   | [RANDWRITE]",
        "   | numjobs=2",
        "Deviations from the thread (10):",
        "  - jobs (RANDWRITE, randread): thread 48, here 2:",
    ] {
        assert!(t.contains(want), "{want:?} missing in\n{t}");
    }
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["phases"][2]["role"]["measured"]["repetition"], 1);
    assert_eq!(json["phases"][0]["role"], "check");
    assert!(json["deviations"].as_array().unwrap().len() == 10);
}

#[test]
fn upstream_figures_are_the_posted_runs_with_their_posts() {
    let up = find_experiment("pmem-nowait").unwrap().upstream_figures();
    let labels: Vec<&str> = up.sources.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["V1", "V2"]);
    let iops = up.of(Metric::Iops);
    assert_eq!(iops[0].off, [3_968_000.0, 4_084_000.0, 3_995_000.0]);
    let v = find_experiment("bcache-verify").unwrap().upstream_figures();
    assert!(v.figures.is_empty() && v.sources[0].label == "bcache");
    for e in &EXPERIMENTS {
        for text in [e.upstream_source, e.description] {
            assert!(!text.to_lowercase().contains("issue"), "{}", e.name);
        }
    }
}
