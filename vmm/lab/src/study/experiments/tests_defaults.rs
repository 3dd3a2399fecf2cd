//! The defaults follow the thread where the host allows: vCPUs and jobs from the host's CPUs,
//! guest RAM from the jobs; `--cpus`/`--jobs`/`--memory` override, and the deviations say which.

use super::tests::{deviation, host_with_cpus, plan};
use super::*;

#[test]
fn defaults_follow_the_thread_where_the_host_allows() {
    // A big host: the thread's shape by default, and no jobs deviation.
    let big = plan("pmem-nowait", &host_with_cpus(64));
    assert_eq!((big.vcpus, big.jobs), (48, 48));
    assert!(deviation(&big, "jobs").is_none(), "{:#?}", big.deviations);
    // Exactly the thread's CPU count, and an unknown host, are the same.
    for p in [host_with_cpus(48), BenchParams::default()] {
        let x = plan("pmem-nowait", &p);
        assert_eq!((x.vcpus, x.jobs), (48, 48));
    }
    // A small host: one vCPU and one job per host CPU, the deviation names the host.
    let small = plan("xfs-dax-write", &host_with_cpus(2));
    assert_eq!((small.vcpus, small.jobs), (2, 2));
    let d = deviation(&small, "jobs").unwrap();
    assert_eq!((d.thread.as_str(), d.here.as_str()), ("48", "2"));
    assert!(d.why.starts_with("this host has 2 CPU(s)"), "{}", d.why);
    assert!(!d.why.contains("--cpus"), "{}", d.why);
    // The user's choices stay choices, and the deviation says so.
    let cpus = plan(
        "pmem-nowait",
        &BenchParams {
            vcpus: Some(4),
            ..host_with_cpus(64)
        },
    );
    assert_eq!((cpus.vcpus, cpus.jobs), (4, 4));
    assert!(deviation(&cpus, "jobs")
        .unwrap()
        .why
        .contains("set with --cpus"));
    let jobs = plan(
        "pmem-nowait",
        &BenchParams {
            jobs: Some(8),
            ..host_with_cpus(64)
        },
    );
    assert_eq!((jobs.vcpus, jobs.jobs), (48, 8));
    assert_eq!(deviation(&jobs, "jobs").unwrap().why, "set with --jobs");
    // --jobs 48 on a small host: the user's, no deviation (the thread's count).
    let forced = plan(
        "pmem-nowait",
        &BenchParams {
            jobs: Some(48),
            ..host_with_cpus(2)
        },
    );
    assert_eq!((forced.vcpus, forced.jobs), (2, 48));
    assert!(deviation(&forced, "jobs").is_none());
    // Guest RAM follows the jobs: the experiment's minimum + 8 MiB per job, at least 1 GiB.
    assert_eq!(big.guest_mem_mib, 1024);
    assert_eq!(small.guest_mem_mib, 1536 + 16);
    assert_eq!(
        plan("xfs-dax-write", &host_with_cpus(64)).guest_mem_mib,
        1536 + 384
    );
    let bcache = plan("bcache-nowait", &host_with_cpus(64));
    assert_eq!(bcache.guest_mem_mib, 2 * 1024 + 512 + 384);
    // --memory is taken, raised to the minimum.
    assert_eq!(big.clone().with_memory(Some(4 << 30)).guest_mem_mib, 4096);
    assert_eq!(big.with_memory(Some(256 << 20)).guest_mem_mib, 512);
    let e = find_experiment("pmem-nowait").unwrap();
    let err = e
        .plan(&BenchParams {
            vcpus: Some(0),
            ..BenchParams::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("vCPUs = 0"), "{err}");
}
