//! The guest's `/init` sends a measured phase's per-second logs back beside its JSON: its
//! `run_phases` and `send_file`, taken from `guest-images/rootfs/init` as they are, run under
//! busybox sh (the guest's shell) on the phases of a real plan, with a stand-in `fio` that
//! writes the logs where the job file says (copies of real fio logs); the host decodes the
//! channel with [`parse_channel`].

use std::process::Command;

use super::*;
use crate::study::experiments::{find_experiment, BenchParams};

const INIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../guest-images/rootfs/init"
);
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

/// The shell function `name` of the init, from `name() {` to its closing `}`.
fn function(init: &str, name: &str) -> String {
    let start = init
        .find(&format!("\n{name}() {{"))
        .unwrap_or_else(|| panic!("no function {name} in the init"));
    let body = &init[start + 1..];
    let end = body.find("\n}\n").expect("closing brace") + 3;
    body[..end].to_owned()
}

#[test]
fn the_init_sends_a_measured_phases_logs_beside_its_json() {
    if Command::new("busybox").arg("true").status().is_err() {
        pmemvm_skip::skip!("busybox not installed (apt-get install busybox-static)");
    }
    let init = std::fs::read_to_string(INIT).unwrap();
    let dir = std::env::temp_dir().join(format!("pmemvm-init-logs-{}", std::process::id()));
    let (job, tmp) = (dir.join("job"), dir.join("tmp"));
    std::fs::create_dir_all(&job).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    // pmem-randwrite: the verify (unmeasured, no logs), then the measured fill.
    let plan = find_experiment("pmem-randwrite")
        .unwrap()
        .plan(&BenchParams {
            vcpus: Some(2),
            ..BenchParams::default()
        })
        .unwrap();
    let guest = plan.guest_job();
    let mut phases = String::new();
    for p in &guest.phases {
        std::fs::write(job.join(format!("{}.fio", p.name)), &p.fio_job).unwrap();
        phases.push_str(&p.name);
        phases.push('\n');
    }
    std::fs::write(job.join("phases"), phases).unwrap();
    // The init's own functions, with /job and /tmp moved into this test's directory.
    let functions: String = ["say", "send_file", "run_phases"]
        .iter()
        .map(|f| function(&init, f))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("/job/", "$J/")
        .replace("/tmp/", "$T/");
    let script = format!(
        r#"set -o pipefail
J='{job}' T='{tmp}' FIX='{FIXTURES}'
# fio as the guest runs it: the JSON report, and the logs where the job file names them.
fio() {{
    for a in "$@"; do
        case "$a" in --output=*) out=${{a#--output=}} ;; esac
        jobfile=$a
    done
    echo '{{"fio version" : "fio-3.33", "jobs" : []}}' >"$out"
    prefix=$(sed -n 's/^write_iops_log=//p' "$jobfile")
    [ -n "$prefix" ] || return 0
    prefix="$T${{prefix#/tmp}}"
    cp "$FIX/logs_iops.log" "${{prefix}}_iops.log"
    cp "$FIX/logs_bw.log" "${{prefix}}_bw.log"
}}
{functions}
exec 3>"$T/channel"
run_phases
exit "$status"
"#,
        job = job.display(),
        tmp = tmp.display(),
    );
    let out = Command::new("busybox")
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = parse_channel(&std::fs::read(tmp.join("channel")).unwrap()).unwrap();
    let names: Vec<&str> = report.files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "randwrite.json",
            "randwrite.stderr",
            "randwrite_bw.log",
            "randwrite_iops.log",
            "write-and-verify.json",
            "write-and-verify.stderr",
        ]
    );
    let fixture = |f: &str| std::fs::read(format!("{FIXTURES}/{f}")).unwrap();
    assert_eq!(report.files["randwrite_iops.log"], fixture("logs_iops.log"));
    assert_eq!(report.files["randwrite_bw.log"], fixture("logs_bw.log"));
    std::fs::remove_dir_all(&dir).unwrap();
}
