//! Tests of the fio JSON model, parser and summaries (fixtures from real fio).

use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

fn parse(name: &str) -> FioOutput {
    parse_fio_json(&fixture(name)).unwrap()
}

/// Exit status recorded by make-fixtures.sh.
fn exit_status(name: &str) -> i32 {
    let text = String::from_utf8(fixture("exit-status.txt")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (n, rc) = l.split_once(' ')?;
            (n == name).then(|| rc.trim().parse().unwrap())
        })
        .unwrap()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
}

/// fio's iops is io/runtime: check the numbers are consistent with each other.
fn check_direction_consistency(s: &IoStats, bs: u64) {
    if s.total_ios == 0 {
        assert_eq!(s.iops, 0.0);
        return;
    }
    assert_eq!(s.io_bytes, s.total_ios * bs, "io_bytes = total_ios * bs");
    #[allow(clippy::cast_precision_loss)]
    let expect = s.total_ios as f64 * 1000.0 / s.runtime as f64;
    assert!(
        close(s.iops, expect, 0.01),
        "iops {} vs total_ios/runtime {expect}",
        s.iops
    );
    assert_eq!(s.clat_ns.samples, s.total_ios);
    assert!(s.clat_ns.min <= s.clat_ns.max);
    #[allow(clippy::cast_precision_loss)]
    let (min, max) = (s.clat_ns.min as f64, s.clat_ns.max as f64);
    assert!(min <= s.clat_ns.mean && s.clat_ns.mean <= max);
}

#[test]
fn every_fixture_parses() {
    let mut count = 0;
    for entry in std::fs::read_dir(FIXTURES).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.ends_with(".json") || name.ends_with(".out")) {
            continue;
        }
        let out = parse_fio_json(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.fio_version, "fio-3.33", "{name}");
        for job in &out.jobs {
            let bs = job
                .job_options
                .get("bs")
                .or_else(|| out.global_options.get("bs"));
            let bs = match bs.map(String::as_str) {
                None | Some("4k") => 4096,
                Some("2M") => 2 << 20,
                Some(other) => panic!("{name}: unexpected bs {other}"),
            };
            check_direction_consistency(&job.read, bs);
            check_direction_consistency(&job.write, bs);
        }
        count += 1;
    }
    assert!(count >= 13, "expected at least 13 fixtures, found {count}");
}

#[test]
fn uring_randrw_two_jobs_one_group() {
    let out = parse("uring-randrw.json");
    assert_eq!(exit_status("uring-randrw"), 0);
    assert_eq!(out.jobs.len(), 2);
    assert_eq!(out.group_ids(), vec![0]);
    assert_eq!(
        out.global_options.get("ioengine").map(String::as_str),
        Some("io_uring")
    );
    assert_eq!(
        out.global_options.get("iodepth").map(String::as_str),
        Some("16")
    );
    let rr = &out.jobs[0];
    assert_eq!(rr.jobname, "randread");
    assert_eq!(
        rr.job_options.get("rw").map(String::as_str),
        Some("randread")
    );
    assert!(rr.read.iops > 1000.0 && rr.write.total_ios == 0);
    assert_eq!(out.jobs[1].read.total_ios, 0);
    assert!(rr.read.clat_ns.percentile(99.9).is_some());
    assert!(
        rr.read.clat_ns.bins.is_empty(),
        "plain json has no histogram"
    );
    assert!(!out.disk_util.is_empty());

    let s = out.group_summary(0).unwrap();
    assert_eq!(s.jobnames, vec!["randread", "randwrite"]);
    let (r, w) = (s.read.clone().unwrap(), s.write.clone().unwrap());
    assert!(close(s.iops, rr.read.iops + out.jobs[1].write.iops, 1e-12));
    assert_eq!(s.bw_bytes, r.bw_bytes + w.bw_bytes);
    // One job per direction: the direction's percentiles are fio's own.
    assert!(r.clat.percentiles_exact);
    assert_eq!(r.clat.p99_ns, rr.read.clat_ns.percentile(99.0));
    // Both directions combined without histograms: estimate, flagged as such.
    assert!(!s.clat.percentiles_exact);
    assert_eq!(
        s.slat.min_ns,
        rr.read.slat_ns.min.min(out.jobs[1].write.slat_ns.min)
    );
    assert_eq!(s.ctx, rr.ctx + out.jobs[1].ctx);
    assert!(s.ok());
}

#[test]
fn json_plus_bins_reproduce_fio_percentiles() {
    let out = parse("uring-randrw-plus.json");
    for job in &out.jobs {
        let stats = if job.read.total_ios > 0 {
            &job.read
        } else {
            &job.write
        };
        let bins: BTreeMap<u64, u64> = stats.clat_ns.bins.iter().copied().collect();
        assert_eq!(bins.values().sum::<u64>(), stats.clat_ns.samples);
        for pct in [1.0, 50.0, 90.0, 99.0, 99.9, 99.99] {
            assert_eq!(
                percentile_from_bins(&bins, pct),
                stats.clat_ns.percentile(pct),
                "{} p{pct}",
                job.jobname
            );
        }
    }
    // With histograms, the combined read+write percentiles are exact.
    let s = out.group_summary(0).unwrap();
    assert!(s.clat.percentiles_exact);
    let (p_read, p_write) = (
        out.jobs[0].read.clat_ns.percentile(50.0).unwrap(),
        out.jobs[1].write.clat_ns.percentile(50.0).unwrap(),
    );
    let p = s.clat.p50_ns.unwrap();
    assert!(p >= p_read.min(p_write) && p <= p_read.max(p_write));
}

#[test]
fn groups_are_summarised_separately() {
    let out = parse("groups.json");
    assert_eq!(out.group_ids(), vec![0, 1, 2]);
    let sums = out.summaries();
    assert_eq!(sums.len(), 3);
    assert_eq!(sums[0].jobnames, vec!["seqwrite"]);
    assert_eq!(sums[1].jobnames, vec!["randread2", "randread2"]);
    assert!(sums[0].read.is_none() && sums[0].write.is_some());
    assert!(sums[1].write.is_none());

    let g1: Vec<&FioJob> = out.jobs.iter().filter(|j| j.groupid == 1).collect();
    let r = sums[1].read.clone().unwrap();
    assert!(close(r.iops, g1[0].read.iops + g1[1].read.iops, 1e-12));
    assert_eq!(r.io_bytes, g1[0].read.io_bytes + g1[1].read.io_bytes);
    assert_eq!(
        r.slat.min_ns,
        g1[0].read.slat_ns.min.min(g1[1].read.slat_ns.min)
    );
    assert_eq!(
        r.clat.max_ns,
        g1[0].read.clat_ns.max.max(g1[1].read.clat_ns.max)
    );
    assert_eq!(
        r.clat.samples,
        g1[0].read.clat_ns.samples + g1[1].read.clat_ns.samples
    );
    #[allow(clippy::cast_precision_loss)]
    let mean = (g1[0].read.clat_ns.mean * g1[0].read.clat_ns.samples as f64
        + g1[1].read.clat_ns.mean * g1[1].read.clat_ns.samples as f64)
        / r.clat.samples as f64;
    assert!(close(r.clat.mean_ns, mean, 1e-9));
    assert!(r.clat.mean_ns >= r.clat.min_ns as f64);
    assert_eq!(sums[1].ctx, g1[0].ctx + g1[1].ctx);
    let (lo, hi) = (
        g1[0].sys_cpu.min(g1[1].sys_cpu),
        g1[0].sys_cpu.max(g1[1].sys_cpu),
    );
    assert!(sums[1].sys_cpu >= lo - 1e-9 && sums[1].sys_cpu <= hi + 1e-9);

    assert_eq!(out.last_group_summary().unwrap().groupid, 2);
    assert_eq!(out.summary_of_job("randread2").unwrap().groupid, 1);
    assert!(out.summary_of_job("nope").is_none());
}

#[test]
fn libaio_and_psync_mixed_job() {
    let out = parse("libaio-psync.json");
    assert_eq!(out.jobs.len(), 2);
    let mixed = &out.jobs[1];
    assert_eq!(
        mixed.job_options.get("ioengine").map(String::as_str),
        Some("psync")
    );
    assert!(mixed.read.total_ios > 0 && mixed.write.total_ios > 0);
    // rwmixread=70: about 70% of the I/Os are reads.
    #[allow(clippy::cast_precision_loss)]
    let share = mixed.read.total_ios as f64 / (mixed.read.total_ios + mixed.write.total_ios) as f64;
    assert!((0.6..0.8).contains(&share), "read share {share}");
    // psync has no separate submission step: fio reports no slat samples for it.
    assert_eq!(mixed.read.slat_ns.samples, 0);
    assert!(out.jobs[0].read.slat_ns.samples > 0, "libaio has slat");
}

#[test]
fn group_reporting_is_one_entry() {
    let out = parse("group-reporting.json");
    assert_eq!(out.jobs.len(), 1);
    assert_eq!(
        out.jobs[0].job_options.get("numjobs").map(String::as_str),
        Some("4")
    );
    let s = out.group_summary(0).unwrap();
    assert!(close(s.iops, out.jobs[0].read.iops, 1e-12));
    assert!(close(s.sys_cpu, out.jobs[0].sys_cpu, 1e-12));
}

/// CPU time and I/Os per CPU-second from fio's raw fields, for one group_reporting entry
/// of four jobs and for two separate job entries.
#[test]
fn cpu_seconds_and_ios_per_cpu_second() {
    for (name, group) in [("group-reporting.json", 0), ("uring-randrw.json", 0)] {
        let raw: serde_json::Value = serde_json::from_slice(&fixture(name)).unwrap();
        let (mut cpu_ms, mut ios) = (0.0, 0.0);
        for j in raw["jobs"].as_array().unwrap() {
            let pct = j["usr_cpu"].as_f64().unwrap() + j["sys_cpu"].as_f64().unwrap();
            cpu_ms += pct / 100.0 * j["job_runtime"].as_f64().unwrap();
            for dir in ["read", "write", "trim"] {
                ios += j[dir]["total_ios"].as_f64().unwrap();
            }
        }
        let s = parse(name).group_summary(group).unwrap();
        assert!(close(s.cpu_seconds(), cpu_ms / 1000.0, 1e-12), "{name}");
        let per_cpu = s.ios_per_cpu_second().unwrap();
        assert!(close(per_cpu, ios / (cpu_ms / 1000.0), 1e-12), "{name}");
    }
    // group_reporting: fio's job_runtime is already the sum over the four 1 s jobs.
    let gr = parse("group-reporting.json").group_summary(0).unwrap();
    assert!(
        (3900..4200).contains(&gr.job_runtime_ms),
        "{}",
        gr.job_runtime_ms
    );
    let idle = FioSummary::default();
    assert_eq!(idle.ios_per_cpu_second(), None);
}

#[test]
fn total_latency_and_slat_percentiles() {
    let out = parse("slat-percentiles.json");
    let j = &out.jobs[0];
    let s = out.group_summary(0).unwrap();
    assert_eq!(s.lat.min_ns, j.read.lat_ns.min);
    assert!(close(s.lat.mean_ns, j.read.lat_ns.mean, 1e-12));
    // Total latency is submission plus completion latency, sample by sample.
    assert!(close(
        s.lat.mean_ns,
        j.read.slat_ns.mean + j.read.clat_ns.mean,
        1e-6
    ));
    assert_eq!(s.slat.p50_ns, j.read.slat_ns.percentile(50.0));
    assert_eq!(s.slat.p99_9_ns, j.read.slat_ns.percentile(99.9));
    assert!(s.slat.p99_ns.is_some() && s.slat.percentiles_exact);
    // Without slat_percentiles=1 fio prints none, and the summary says so.
    let plain = parse("normal-json.out").group_summary(0).unwrap();
    assert_eq!(plain.slat.p50_ns, None);
    assert!(plain.clat.p50_ns.is_some());
}

#[test]
fn verify_pass_and_failure() {
    let pass = parse("verify-pass.json");
    assert_eq!(exit_status("verify-pass"), 0);
    assert!(pass.errors().is_empty());
    let j = &pass.jobs[0];
    // The verify phase reads back everything that was written.
    assert_eq!(j.read.io_bytes, j.write.io_bytes);
    assert_eq!(j.read.io_bytes, 8 << 20);

    let fail = parse("verify-fail.out");
    assert_eq!(exit_status("verify-fail"), 1);
    // fio printed its error line to stdout before the JSON report.
    assert!(
        fail.preamble
            .iter()
            .any(|l| l.starts_with("fio: pid=") && l.contains("err=84")),
        "{:?}",
        fail.preamble
    );
    assert_eq!(
        fail.errors(),
        vec![JobError {
            jobname: "verify-garbage".into(),
            error: 84
        }]
    );
    let s = fail.group_summary(0).unwrap();
    assert!(!s.ok());
    // fio stops at the first bad block.
    assert_eq!(s.read.unwrap().io_bytes, 4096);
}

/// Cross-checks the JSON against fio's own human-readable report printed in the same run.
#[test]
fn json_matches_fio_normal_text() {
    let raw = String::from_utf8(fixture("normal-json.out")).unwrap();
    let out = parse_fio_json(raw.as_bytes()).unwrap();
    assert!(out
        .preamble
        .iter()
        .any(|l| l.contains("Laying out IO file")));
    let r = &out.jobs[0].read;

    let line = |prefix: &str| {
        raw.lines()
            .map(str::trim_start)
            .find(|l| l.starts_with(prefix))
            .unwrap()
            .to_owned()
    };
    let field = |line: &str, key: &str| -> String {
        let rest = &line[line.find(key).unwrap() + key.len()..];
        rest.trim_start()
            .split([',', ' ', '%'])
            .next()
            .unwrap()
            .to_owned()
    };
    // "read: IOPS=74.8k, BW=..."
    let iops_text = field(&line("read: IOPS="), "IOPS=");
    let iops_text_val: f64 = match iops_text.strip_suffix('k') {
        Some(k) => k.parse::<f64>().unwrap() * 1000.0,
        None => iops_text.parse().unwrap(),
    };
    assert!(
        (r.iops - iops_text_val).abs() <= 50.0 + 0.001 * r.iops,
        "{iops_text} vs {}",
        r.iops
    );
    // "cpu          : usr=3.40%, sys=37.10%, ctx=4691, majf=0, minf=26"
    let cpu = line("cpu");
    let job = &out.jobs[0];
    assert!((field(&cpu, "usr=").parse::<f64>().unwrap() - job.usr_cpu).abs() < 0.006);
    assert!((field(&cpu, "sys=").parse::<f64>().unwrap() - job.sys_cpu).abs() < 0.006);
    assert_eq!(field(&cpu, "ctx=").parse::<u64>().unwrap(), job.ctx);
    // "slat (usec): min=2, max=4024, avg= 4.50, stdev=20.06" (unit varies with magnitude)
    let slat = line("slat (");
    let unit = match &slat[6..10] {
        "nsec" => 1.0,
        "usec" => 1e3,
        "msec" => 1e6,
        other => panic!("unit {other}"),
    };
    let avg: f64 = field(&slat, "avg=").parse().unwrap();
    assert!(
        (avg * unit - r.slat_ns.mean).abs() <= 0.006 * unit,
        "slat avg {avg} vs {}",
        r.slat_ns.mean
    );
    // "issued rwts: total=74920,0,0,0"
    let issued = line("issued rwts:");
    assert_eq!(
        field(&issued, "total=").parse::<u64>().unwrap(),
        r.total_ios
    );
}

#[test]
fn tolerates_nan_unknown_fields_and_trailing_text() {
    let text = b"fio: some warning\n{\n \"fio version\" : \"fio-9.99\", \"new field\" : [1, {\"x\": nan}],\n \"jobs\" : [ { \"jobname\" : \"a-nan-job inf\", \"groupid\" : 3, \"error\" : 0,\n \"read\" : { \"iops\" : -nan, \"io_bytes\" : 4096, \"total_ios\": 1, \"runtime\" : 1,\n \"clat_ns\" : { \"min\" : 5, \"max\" : 7, \"mean\": 6.0, \"stddev\" : inf, \"N\" : 1,\n \"percentile\" : { \"99.000000\" : 7, \"50.000000\" : 6 } } },\n \"usr_cpu\" : 1.5 } ] }\ntrailing normal text {\n";
    let out = parse_fio_json(text).unwrap();
    assert_eq!(out.preamble, vec!["fio: some warning"]);
    assert_eq!(out.jobs[0].jobname, "a-nan-job inf");
    assert_eq!(out.jobs[0].groupid, 3);
    assert_eq!(out.jobs[0].read.iops, 0.0);
    assert_eq!(out.jobs[0].read.clat_ns.stddev, 0.0);
    assert_eq!(
        out.jobs[0].read.clat_ns.percentile,
        vec![(50.0, 6), (99.0, 7)]
    );
    assert_eq!(out.jobs[0].write, IoStats::default());
}

#[test]
fn bad_input_gives_clear_errors() {
    let e =
        parse_fio_json(b"fio: failed to open /dev/pmem0: No such file or directory\n").unwrap_err();
    assert!(matches!(e, FioParseError::NoJsonReport { .. }));
    assert!(e.to_string().contains("/dev/pmem0"), "{e}");
    let e = parse_fio_json(b"{\n \"jobs\" : [ { \"jobname\" : 5 } ] }").unwrap_err();
    assert!(
        matches!(e, FioParseError::MalformedJson { line: 2, .. }),
        "{e:?}"
    );
    let e = parse_fio_json(b"{ \"fio version\" : \"fio-3.33\", \"jobs\" : [] }").unwrap_err();
    assert!(matches!(e, FioParseError::NoJobs));
    let e = parse_fio_json(b"{ \"jobs\" : [ { \"jobname\" : \"x\",").unwrap_err();
    assert!(matches!(e, FioParseError::MalformedJson { .. }));
}
