//! The values every experiment scales from the user's knobs (vCPUs, job count,
//! runtime, queue depth), each with the deviation from the thread it makes, and
//! the deviations every experiment has (kernel and fio).

use super::{
    BenchParams, Deviation, Experiment, ExperimentError, MAX_JOBS, THREAD_JOBS, THREAD_RUNTIME_S,
};

/// The scaled values shared by the experiments: vCPUs, job count, runtime and queue depth.
pub(crate) struct Common {
    pub vcpus: u32,
    pub jobs: u32,
    pub runtime: u32,
    pub iodepth: Option<u32>,
}

/// The guest's vCPUs: `--cpus`, else the thread's job count where the host has that many CPUs,
/// else one per host CPU. A pmemvm default is never smaller than what the host allows.
fn guest_vcpus(e: &Experiment, p: &BenchParams) -> Result<u32, ExperimentError> {
    match p.vcpus {
        Some(0) => Err(e.invalid("vCPUs", 0, "use at least 1")),
        Some(v) => Ok(v),
        None => Ok(p.host.cpus.map_or(THREAD_JOBS, |h| h.clamp(1, THREAD_JOBS))),
    }
}

/// vCPUs, job count, runtime and queue depth from the knobs, with their deviations. The job
/// count deviates from the thread's only for a real limit (the host's CPUs) or the user's
/// choice (`--jobs`, `--cpus`), and the deviation says which; a plan without many-job phases
/// (the verify-only scripts) has no job count or queue depth to deviate.
pub(crate) fn common(
    e: &Experiment,
    p: &BenchParams,
    thread_iodepth: Option<u32>,
    deviations: &mut Vec<Deviation>,
) -> Result<Common, ExperimentError> {
    let many_job_phases = e.kind.many_job_phases();
    // Knobs of phases a plan does not have are refused, not ignored.
    if many_job_phases.is_empty() {
        let why = format!(
            "{} has no many-job phase: its one job is the thread's write-and-verify (one job, \
             iodepth 16)",
            e.name
        );
        if let Some(j) = p.jobs {
            return Err(e.invalid("--jobs", j, why));
        }
        if let Some(d) = p.iodepth {
            return Err(e.invalid("--iodepth", d, why));
        }
    }
    if let (Some(r), false) = (p.runtime_s, e.kind.timed()) {
        return Err(e.invalid(
            "--runtime",
            format!("{r} s"),
            format!(
                "{} has no timed phase: its jobs end when they have written (and verified) \
                 their size",
                e.name
            ),
        ));
    }
    let vcpus = guest_vcpus(e, p)?;
    let jobs = p.jobs.unwrap_or(vcpus.min(THREAD_JOBS));
    if jobs == 0 || jobs > MAX_JOBS {
        return Err(e.invalid("jobs", jobs, format!("use 1 to {MAX_JOBS}")));
    }
    if jobs != THREAD_JOBS && !many_job_phases.is_empty() {
        let why = match (p.jobs, p.vcpus) {
            (Some(_), _) => "set with --jobs".to_owned(),
            (None, Some(v)) => format!(
                "one job per vCPU as on the threads' hosts; the guest has {v} vCPU(s), set with \
                 --cpus"
            ),
            (None, None) => format!(
                "this host has {vcpus} CPU(s): one guest vCPU per host CPU and one job per vCPU, \
                 as on the threads' hosts (48 CPUs; the famfs script passed --numjobs=$(nproc))"
            ),
        };
        deviations.push(Deviation::new(
            format!("jobs ({many_job_phases})"),
            THREAD_JOBS.to_string(),
            jobs.to_string(),
            why,
        ));
    }
    let runtime = p.runtime_s.unwrap_or(THREAD_RUNTIME_S);
    if runtime == 0 {
        return Err(e.invalid("runtime", "0 s", "use at least 1 s"));
    }
    let iodepth = match (p.iodepth, thread_iodepth) {
        (Some(0), _) | (Some(4097..), _) => {
            return Err(e.invalid("iodepth", p.iodepth.unwrap_or(0), "use 1 to 4096"))
        }
        (Some(d), Some(t)) if d != t && !many_job_phases.is_empty() => {
            deviations.push(Deviation::new(
                format!("iodepth ({many_job_phases})"),
                t.to_string(),
                d.to_string(),
                "set with --iodepth",
            ));
            Some(d)
        }
        (Some(d), _) => Some(d),
        (None, t) => t,
    };
    Ok(Common {
        vcpus,
        jobs,
        runtime,
        iodepth,
    })
}

/// The kernel and fio the NOWAIT threads ran (their posted `git log` and fio banner) against
/// the guest image's.
pub(crate) fn software_deviations(deviations: &mut Vec<Deviation>) {
    deviations.push(Deviation::new(
        "kernel",
        "linux-block for-next of May 2023 with the patch",
        "Debian's linux-source-6.1 with pmemvm's port of the patch (the guest image; a side \
         may boot its own)",
        "the thread's tree is not a release; the patch is carried onto Debian 12's kernel \
         (docs/guest-image.md)",
    ));
    deviations.push(Deviation::new(
        "fio",
        "fio-3.34",
        "fio-3.33",
        "Debian 12's fio source package, built static into the guest image",
    ));
}

/// The deviation of a shortened runtime, if it is one.
pub(crate) fn runtime_deviation(c: &Common, phases: &str, deviations: &mut Vec<Deviation>) {
    if c.runtime != THREAD_RUNTIME_S {
        deviations.push(Deviation::new(
            format!("runtime ({phases})"),
            format!("{THREAD_RUNTIME_S} s"),
            format!("{} s", c.runtime),
            "set with --runtime",
        ));
    }
}
