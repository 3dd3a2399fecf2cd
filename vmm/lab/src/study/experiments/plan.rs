//! An experiment's plan: what each side's boot runs, phase by phase, with the complete fio job
//! texts, and every way the plan differs from the upstream thread's script.
//!
//! `pmemvm bench EXP --plan` prints [`ExperimentPlan::render_text`] (or the JSON of the plan
//! with `--json`) without booting anything.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::guest::guest_job::{GuestJob, GuestPhase};
pub use crate::study::report::Deviation;

/// What a phase is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseRole {
    /// Checks data integrity (a verify job): a fio error makes the run fail; no figures.
    Check,
    /// Prepares the device (a fill): a fio error makes the run fail; no figures.
    Prepare,
    /// A measurement: its figures are one run of the report (`repetition` from 1).
    Measured {
        /// The thread's repetition this phase is (randread 1, 2, 3).
        repetition: u32,
    },
}

impl PhaseRole {
    /// One word for tables.
    pub fn name(self) -> &'static str {
        match self {
            PhaseRole::Check => "check",
            PhaseRole::Prepare => "prepare",
            PhaseRole::Measured { .. } => "measured",
        }
    }
}

/// One fio invocation of a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Phase {
    /// Unique in the plan; the guest's file and frame names (`/job/<name>.fio`, `<name>.json`).
    pub name: String,
    /// The fio job (reporting group) whose figures the phase yields.
    pub job: &'static str,
    /// What it is for.
    pub role: PhaseRole,
    /// The job file's template in the source tree.
    pub template: &'static str,
    /// Extra fio command-line options (options that have no job-file form).
    pub args: Option<String>,
    /// The complete job file.
    pub job_file: String,
}

impl Phase {
    /// The fio command line the guest runs.
    pub fn command(&self) -> String {
        let args = self
            .args
            .as_deref()
            .map(|a| format!(" {a}"))
            .unwrap_or_default();
        format!(
            "fio --output-format=json --output=/tmp/{0}.json{args} /job/{0}.fio",
            self.name
        )
    }
}

/// One side of an A/B comparison (or the only side): a label, the kernel command line
/// additions that select it, and optionally its own kernel and initrd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    /// `off`, `on`, `default`, or the name given with `--side`.
    pub label: String,
    /// Kernel command line additions of this side (e.g. `nd_pmem.nowait=0`).
    pub cmdline: Option<String>,
    /// The side's kernel; `None`: the guest image's (or `--kernel`).
    pub kernel: Option<PathBuf>,
    /// The side's initrd; `None`: the guest image's initramfs (or `--initrd`).
    pub initrd: Option<PathBuf>,
    /// The side's kernel modules (`modules=DIR`); `None`: `--modules`, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<PathBuf>,
    /// Which of the thread's sides this one repeats (`as=off|on`), when declared; the
    /// experiment's own `off`/`on` are the thread's by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_side: Option<crate::study::report::ThreadSide>,
}

impl Side {
    /// A side that differs from the others by command line only.
    pub fn cmdline(label: &str, cmdline: Option<String>) -> Self {
        Self {
            label: label.to_owned(),
            cmdline,
            kernel: None,
            initrd: None,
            modules: None,
            thread_side: None,
        }
    }
}

/// The setup script a boot runs before its phases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setup {
    /// The template in the source tree.
    pub template: &'static str,
    /// The complete script (`/job/setup.sh`).
    pub script: String,
}

/// Everything needed to run an experiment: per side, one boot per `--runs` repetition, each
/// running `setup` and then `phases` in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExperimentPlan {
    /// Experiment name.
    pub experiment: &'static str,
    /// What the experiment reproduces, citing the thread by subject and date.
    pub thread: &'static str,
    /// The values substituted into the job files and the setup script.
    pub vars: BTreeMap<&'static str, String>,
    /// Run before the phases, if the experiment has a setup.
    pub setup: Option<Setup>,
    /// The fio invocations of one boot, in order.
    pub phases: Vec<Phase>,
    /// Sides in order; they alternate per repetition.
    pub sides: Vec<Side>,
    /// Kernel parameters every boot needs (besides the side's).
    pub extra_cmdline: Vec<String>,
    /// NVDIMM size, if the experiment has one (label-less).
    pub nvdimm_bytes: Option<u64>,
    /// Guest vCPUs of every boot.
    pub vcpus: u32,
    /// fio jobs of the many-job phases.
    pub jobs: u32,
    /// Those phases, as the plan names them ("" when the plan has none: verify-only).
    pub many_job_phases: &'static str,
    /// Guest memory the experiment needs at least (null_blk devices live in guest RAM), MiB.
    pub min_guest_mem_mib: u64,
    /// Guest memory of every boot, MiB: `--memory` (raised to the minimum), else
    /// [`ExperimentPlan::default_guest_mem_mib`].
    pub guest_mem_mib: u64,
    /// Every difference from the thread's script.
    pub deviations: Vec<Deviation>,
}

/// Guest RAM per fio job of the default: fio 3.33 measured 1 MiB (PSS) per job process with
/// io_uring at queue depth 2, the rest is room for the kernel's per-CPU memory of the vCPU the
/// job runs on.
pub const GUEST_MEM_PER_JOB_MIB: u64 = 8;
/// The smallest default guest RAM, MiB.
pub const GUEST_MEM_FLOOR_MIB: u64 = 1024;

impl super::Common {
    /// The plan of experiment `e` with these values, `phases` and `deviations`: no
    /// setup, sides, extra kernel parameters or NVDIMM, 512 MiB of guest RAM at least
    /// (each experiment sets what it has beyond that).
    pub(crate) fn plan(
        &self,
        e: &super::Experiment,
        vars: BTreeMap<&'static str, String>,
        phases: Vec<Phase>,
        deviations: Vec<Deviation>,
    ) -> ExperimentPlan {
        ExperimentPlan {
            experiment: e.name,
            thread: e.upstream_source,
            vars,
            setup: None,
            phases,
            sides: Vec::new(),
            extra_cmdline: Vec::new(),
            nvdimm_bytes: None,
            vcpus: self.vcpus,
            jobs: self.jobs,
            many_job_phases: e.kind.many_job_phases(),
            min_guest_mem_mib: 512,
            guest_mem_mib: 0,
            deviations,
        }
    }
}

impl ExperimentPlan {
    /// The default guest RAM, MiB: the experiment's minimum plus [`GUEST_MEM_PER_JOB_MIB`] per
    /// job of the many-job phases, at least [`GUEST_MEM_FLOOR_MIB`].
    pub fn default_guest_mem_mib(&self) -> u64 {
        (self.min_guest_mem_mib + GUEST_MEM_PER_JOB_MIB * u64::from(self.jobs))
            .max(GUEST_MEM_FLOOR_MIB)
    }

    /// Sets the guest RAM: `--memory` raised to the experiment's minimum, else the default.
    pub fn with_memory(mut self, memory_bytes: Option<u64>) -> Self {
        self.guest_mem_mib = memory_bytes.map_or_else(
            || self.default_guest_mem_mib(),
            |m| (m >> 20).max(self.min_guest_mem_mib),
        );
        self
    }

    /// The guest job of one boot (files for `/job`).
    pub fn guest_job(&self) -> GuestJob {
        GuestJob {
            setup: self.setup.as_ref().map(|s| s.script.clone()),
            phases: self
                .phases
                .iter()
                .map(|p| GuestPhase {
                    name: p.name.clone(),
                    fio_job: p.job_file.clone(),
                    args: p.args.clone(),
                })
                .collect(),
            ..GuestJob::default()
        }
    }

    /// The kernel command line additions of one side: the experiment's extras plus the side's.
    pub fn cmdline_for(&self, side: &Side) -> String {
        let mut parts = self.extra_cmdline.clone();
        parts.extend(side.cmdline.clone());
        parts.join(" ")
    }

    /// The measured phases (each boot yields one run per measured phase).
    pub fn measured(&self) -> impl Iterator<Item = &Phase> {
        self.phases
            .iter()
            .filter(|p| matches!(p.role, PhaseRole::Measured { .. }))
    }

    /// Replaces the sides (`--side`); the experiment's own parameter is not added to them.
    pub fn with_sides(mut self, sides: Vec<Side>) -> Self {
        self.sides = sides;
        self
    }

    /// The files each boot's job runs, as the guest gets them in `/job`: the setup script,
    /// then every phase's fio job file.
    pub fn job_files(&self) -> Vec<crate::study::report::JobFile> {
        let setup = self.setup.iter().map(|s| crate::study::report::JobFile {
            name: "setup.sh".to_owned(),
            text: s.script.clone(),
        });
        let jobs = self.phases.iter().map(|p| crate::study::report::JobFile {
            name: format!("{}.fio", p.name),
            text: p.job_file.clone(),
        });
        setup.chain(jobs).collect()
    }

    /// The plan for a human: sides, each boot's setup and phases with the complete job texts,
    /// and the deviations from the thread.
    pub fn render_text(&self, runs: u32) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}: {}", self.experiment, self.thread);
        let _ = writeln!(
            s,
            "\nSides ({runs} boot(s) each, alternating: {}):",
            self.sides
                .iter()
                .map(|x| x.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for side in &self.sides {
            let cmdline = self.cmdline_for(side);
            let _ = writeln!(
                s,
                "  {}{}: kernel {}, initrd {}, command line + {}",
                side.label,
                side.thread_side
                    .map(|t| format!(" (as the thread's {})", t.name()))
                    .unwrap_or_default(),
                side.kernel
                    .as_ref()
                    .map_or("of the guest image".to_owned(), |k| k.display().to_string()),
                side.initrd
                    .as_ref()
                    .map_or("of the guest image".to_owned(), |k| k.display().to_string()),
                if cmdline.is_empty() {
                    "nothing"
                } else {
                    &cmdline
                }
            );
        }
        let jobs = if self.many_job_phases.is_empty() {
            String::new()
        } else {
            format!("; {} fio job(s) in {}", self.jobs, self.many_job_phases)
        };
        let _ = writeln!(
            s,
            "Guest: {} vCPU(s), {} MiB RAM (at least {} MiB), NVDIMM {}{jobs}",
            self.vcpus,
            self.guest_mem_mib,
            self.min_guest_mem_mib,
            self.nvdimm_bytes.map_or("none".to_owned(), |b| format!(
                "{} (label-less)",
                super::human(b)
            )),
        );
        let _ = writeln!(s, "\nEach boot, in order:");
        let mut step = 1;
        if let Some(setup) = &self.setup {
            let _ = writeln!(
                s,
                "\n{step}. setup: sh -e /job/setup.sh  (from {})",
                setup.template
            );
            indent(&mut s, &setup.script);
            step += 1;
        }
        for p in &self.phases {
            let role = match p.role {
                PhaseRole::Measured { repetition } => format!("measured, repetition {repetition}"),
                PhaseRole::Check => {
                    "check: fio's verify error is a result, reported per boot (--fail-on-check \
                     makes it exit 1); any other fio error fails the run"
                        .to_owned()
                }
                PhaseRole::Prepare => "prepare: a fio error fails the run".to_owned(),
            };
            let _ = writeln!(
                s,
                "\n{step}. {} ({role}; job {}, from {}):\n   {}",
                p.name,
                p.job,
                p.template,
                p.command()
            );
            indent(&mut s, &p.job_file);
            step += 1;
        }
        let _ = writeln!(
            s,
            "\nDeviations from the thread ({}):",
            self.deviations.len()
        );
        if self.deviations.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for d in &self.deviations {
            let _ = writeln!(
                s,
                "  - {}: thread {}, here {}: {}",
                d.what, d.thread, d.here, d.why
            );
        }
        s
    }
}

fn indent(s: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(s, "   | {line}");
    }
}
