//! Which engine runs a guest, and what each one supports and needs: the
//! options it cannot honour, the packages it runs on, the host memory it
//! takes beside the guest's. Preflight, the run, the bench and the command
//! ask here; nothing here asks them.

use serde::{Deserialize, Serialize};
use vmm::config::MachineSpec;
use vmm::host::HostKvm;

use super::RunControl;

/// Which VMM runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// pmemvm itself.
    Pmemvm,
    /// qemu-system-x86_64 with its own NVDIMM.
    Qemu,
    /// pmemvm where this host's KVM can run Linux, QEMU otherwise.
    Auto,
    /// pmemvm itself inside a QEMU TCG L1 with emulated SVM (hosts without
    /// hardware virtualization; slow, functional only).
    Nested,
}

/// The Debian package that provides `qemu-system-x86_64`.
pub const QEMU_PACKAGE: &str = "qemu-system-x86";

/// An engine this host cannot give.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unavailable {
    /// /dev/kvm is missing or not usable by this user.
    #[error("--engine pmemvm needs /dev/kvm, which cannot be opened ({why}); load kvm-intel or kvm-amd and check its permissions, or use --engine qemu")]
    NoKvm {
        /// The open error.
        why: String,
    },
    /// The host's KVM cannot run Linux (PVM, no vmx/svm).
    #[error("--engine pmemvm cannot run the guest image here: {0}; use --engine qemu (or auto), or --engine nested for pmemvm itself inside a QEMU L1 (slow, functional only)")]
    HostCannotRunLinux(String),
    /// `pmemvm boot` of a Linux kernel on a KVM that cannot run it.
    #[error("pmemvm boot cannot boot a Linux kernel on this host: {why}; boot it nested under QEMU TCG here instead (slow, figures functional only): {command}")]
    BootNeedsNested {
        /// Why this KVM cannot ([`HostKvm::explanation`]).
        why: String,
        /// The user's command with `--engine nested`.
        command: String,
    },
    /// QEMU is needed and not installed.
    #[error("--engine {engine} needs qemu-system-x86_64, which is not on PATH; run through ./pmemvm (it installs it) or apt-get install qemu-system-x86")]
    NoQemu {
        /// The engine as the user wrote it.
        engine: &'static str,
    },
}

/// An option of the machine or the run that an engine cannot honour; each
/// one sentence naming it and the way on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    /// `--pin`, `--host-node` or huge pages with the QEMU engine.
    #[error("{0} applies to --engine pmemvm only (QEMU places its guest itself); drop it or use --engine pmemvm")]
    PmemvmOnly(&'static str),
    /// `--api`/`--dump-on-panic` with the QEMU engine.
    #[error("--api and --dump-on-panic apply to --engine pmemvm and nested, and this run's engine is {0}: QEMU has its own (QMP's dump-guest-memory, -device pvpanic)")]
    ControlPmemvmOnly(&'static str),
    /// `record=` with the QEMU engine.
    #[error("--nvdimm ...,record={0} needs pmemvm's NVDIMM (--engine pmemvm or nested): QEMU's NVDIMM has no flush hints, so a guest on it makes no flush pmemvm could record")]
    RecordOnQemu(String),
    /// `--pmem-legacy` with the QEMU engine.
    #[error("--pmem-legacy {0} cannot run on --engine qemu: QEMU can only carve legacy persistent memory out of guest RAM with memmap=, which does not persist; use --engine pmemvm or --engine nested")]
    LegacyPmemOnQemu(String),
    /// `mce=on` with the QEMU engine.
    #[error("--nvdimm {0} asks for machine checks on poisoned loads, which QEMU's NVDIMM has no way to raise (it has no error injection for NVDIMMs); use --engine pmemvm or nested")]
    MceOnQemu(String),
    /// Empty NVDIMM slots with the QEMU engine.
    #[error("--nvdimm-slots {0} gives pmemvm's machine empty slots to hot-add NVDIMMs into through --api, which the QEMU engine does not have; use --engine pmemvm or nested")]
    SlotsOnQemu(usize),
    /// Host placement, huge pages or a panic dump with the nested engine.
    #[error("{0} is not available with --engine nested (pmemvm runs inside the L1 VM there); drop it or use --engine pmemvm on a host with hardware virtualization")]
    NotNested(&'static str),
}

/// The first of `--pin`, `--host-node`, huge RAM pages and huge DIMM pages
/// that `machine` asks for: what places the guest on this host, which only
/// pmemvm on this host's KVM does.
fn host_placement_option(machine: &MachineSpec) -> Option<&'static str> {
    if !machine.placement.pin.is_empty() {
        Some("--pin")
    } else if machine.placement.host_node.is_some() {
        Some("--host-node")
    } else if machine.ram_pages != vmm::memory::hugepages::RamPages::Default {
        Some("--memory SIZE,hugepages/thp")
    } else if machine.nvdimms.iter().any(|n| n.hugepages) {
        Some("--nvdimm SIZE,hugepages")
    } else {
        None
    }
}

impl Engine {
    /// The engine to use on this host: `Auto` resolved; `Pmemvm` refused
    /// up front on a KVM that cannot run an unmodified kernel.
    pub fn resolve(self, host: &HostKvm) -> Result<Engine, Unavailable> {
        match self {
            Engine::Auto if host.cannot_run_linux() => Ok(Engine::Qemu),
            Engine::Auto => Ok(Engine::Pmemvm),
            Engine::Pmemvm if host.cannot_run_linux() => Err(Unavailable::HostCannotRunLinux(
                host.explanation().unwrap_or_default(),
            )),
            other => Ok(other),
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Pmemvm => "pmemvm",
            Engine::Qemu => "qemu",
            Engine::Auto => "auto",
            Engine::Nested => "nested",
        }
    }

    /// The Debian packages this (resolved) engine runs on. The nested
    /// engine's L1 also needs the tools of its preparation
    /// (`nested::prepare::missing_tool_packages`), which preflight adds.
    pub fn packages(self) -> &'static [&'static str] {
        match self {
            Engine::Qemu | Engine::Nested => &[QEMU_PACKAGE],
            Engine::Pmemvm | Engine::Auto => &[],
        }
    }

    /// Host memory a guest of `guest_bytes` takes on this engine: with
    /// `nested`, the L1 around it too ([`crate::guest::nested::prepare::L1_OVERHEAD_MIB`]).
    pub fn memory_on_host(self, guest_bytes: u64) -> u64 {
        match self {
            Engine::Nested => {
                guest_bytes.saturating_add(crate::guest::nested::prepare::L1_OVERHEAD_MIB << 20)
            }
            _ => guest_bytes,
        }
    }

    /// The first option of `machine` and `control` this (resolved) engine
    /// cannot honour, checked before anything is installed, built or booted.
    pub fn refusal(self, machine: &MachineSpec, control: &RunControl) -> Option<Refusal> {
        match self {
            Engine::Qemu => {
                if !control.is_empty() {
                    return Some(Refusal::ControlPmemvmOnly("qemu"));
                }
                if let Some(option) = host_placement_option(machine) {
                    return Some(Refusal::PmemvmOnly(option));
                }
                if let Some(l) = machine.legacy_pmem.first() {
                    return Some(Refusal::LegacyPmemOnQemu(l.to_string()));
                }
                if machine.nvdimm_slots > machine.nvdimms.len() {
                    return Some(Refusal::SlotsOnQemu(machine.nvdimm_slots));
                }
                if let Some(n) = machine.nvdimms.iter().find(|n| n.mce) {
                    return Some(Refusal::MceOnQemu(n.to_string()));
                }
                machine
                    .nvdimms
                    .iter()
                    .find_map(|n| n.record.as_deref())
                    .map(|dir| Refusal::RecordOnQemu(dir.display().to_string()))
            }
            Engine::Nested => host_placement_option(machine)
                .or(control.dump_on_panic.as_ref().map(|_| "--dump-on-panic"))
                .map(Refusal::NotNested),
            Engine::Pmemvm | Engine::Auto => None,
        }
    }
}

/// The command line `args` (argv, the program first) as `pmemvm` with
/// `--engine nested` in place of any `--engine` it had, right after the
/// subcommand (`preflight COMMAND` is taken as COMMAND); words the shell would
/// split or expand are single-quoted.
pub fn with_engine_nested(args: impl IntoIterator<Item = String>) -> String {
    let mut words: Vec<String> = vec!["pmemvm".into()];
    let mut rest = args.into_iter().skip(1).peekable();
    let mut inserted = false;
    while let Some(word) = rest.next() {
        if word == "--engine" {
            rest.next();
            continue;
        }
        if word.starts_with("--engine=") {
            continue;
        }
        let is_subcommand = !inserted && !word.starts_with('-');
        if is_subcommand && word == "preflight" {
            // ./pmemvm asks `pmemvm preflight COMMAND` first: the way on is the command.
            continue;
        }
        words.push(shell_word(&word));
        if is_subcommand {
            words.extend(["--engine".into(), "nested".into()]);
            inserted = true;
        }
    }
    if !inserted {
        words.extend(["--engine".into(), "nested".into()]);
    }
    words.join(" ")
}

fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=.,:/+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(extra: &str) -> MachineSpec {
        let mut m = MachineSpec::default();
        match extra {
            "pin" => {
                m.placement = vmm::memory::placement::Placement::parse(Some("0"), None).unwrap();
            }
            "thp" => m.ram_pages = vmm::memory::hugepages::RamPages::Thp,
            "legacy" => m.legacy_pmem = vec!["16M".parse().unwrap()],
            "record" => m.nvdimms = vec!["16M,record=/tmp/rec".parse().unwrap()],
            "huge-dimm" => m.nvdimms = vec!["16M,hugepages".parse().unwrap()],
            "slots" => m.nvdimm_slots = 2,
            "mce" => m.nvdimms = vec!["16M,mce=on".parse().unwrap()],
            "cxl" => m.cxl_pmem = vec!["256M".parse().unwrap()],
            _ => {}
        }
        m
    }

    fn n_mce() -> Option<Refusal> {
        Engine::Nested.refusal(&machine("mce"), &RunControl::default())
    }

    #[test]
    fn each_engine_says_what_it_cannot_honour() {
        let none = RunControl::default();
        let api = RunControl {
            api: Some("/tmp/api.sock".into()),
            dump_on_panic: None,
        };
        let dump = RunControl {
            api: None,
            dump_on_panic: Some("/tmp/core".into()),
        };
        for extra in [
            "",
            "pin",
            "thp",
            "legacy",
            "record",
            "huge-dimm",
            "slots",
            "mce",
            "cxl",
        ] {
            assert_eq!(
                Engine::Pmemvm.refusal(&machine(extra), &dump),
                None,
                "{extra}"
            );
        }
        let q = |extra: &str, c: &RunControl| Engine::Qemu.refusal(&machine(extra), c);
        assert_eq!(q("", &none), None);
        assert_eq!(q("", &api), Some(Refusal::ControlPmemvmOnly("qemu")));
        assert_eq!(q("pin", &none), Some(Refusal::PmemvmOnly("--pin")));
        assert_eq!(
            q("thp", &none),
            Some(Refusal::PmemvmOnly("--memory SIZE,hugepages/thp"))
        );
        assert_eq!(
            q("huge-dimm", &none),
            Some(Refusal::PmemvmOnly("--nvdimm SIZE,hugepages"))
        );
        assert!(matches!(
            q("legacy", &none),
            Some(Refusal::LegacyPmemOnQemu(s)) if s.starts_with("16M")
        ));
        assert_eq!(
            q("record", &none),
            Some(Refusal::RecordOnQemu("/tmp/rec".into()))
        );
        assert_eq!(q("slots", &none), Some(Refusal::SlotsOnQemu(2)));
        assert_eq!(q("cxl", &none), None, "QEMU's own CXL devices");
        assert_eq!(
            q("mce", &none),
            Some(Refusal::MceOnQemu("16M,mce=on".into()))
        );
        assert_eq!(
            n_mce(),
            None,
            "the nested engine passes mce=on to its pmemvm"
        );
        assert_eq!(Engine::Nested.refusal(&machine("slots"), &api), None);
        let n = |extra: &str, c: &RunControl| Engine::Nested.refusal(&machine(extra), c);
        assert_eq!(n("", &api), None, "the nested engine serves --api");
        assert_eq!(n("legacy", &none), None);
        assert_eq!(n("record", &none), None);
        assert_eq!(n("pin", &none), Some(Refusal::NotNested("--pin")));
        assert_eq!(n("", &dump), Some(Refusal::NotNested("--dump-on-panic")));
        let text = n("huge-dimm", &none).unwrap().to_string();
        assert!(
            text.starts_with("--nvdimm SIZE,hugepages is not available with --engine nested"),
            "{text}"
        );
    }

    #[test]
    fn each_engine_says_what_it_needs() {
        assert!(Engine::Pmemvm.packages().is_empty());
        assert_eq!(Engine::Qemu.packages(), [QEMU_PACKAGE]);
        assert_eq!(Engine::Nested.packages(), [QEMU_PACKAGE]);
        assert_eq!(Engine::Qemu.memory_on_host(1 << 30), 1 << 30);
        assert_eq!(
            Engine::Nested.memory_on_host(1 << 30),
            (1 << 30) + (crate::guest::nested::prepare::L1_OVERHEAD_MIB << 20)
        );
    }

    #[test]
    fn the_way_on_is_the_users_command_with_engine_nested() {
        let argv = |a: &str| a.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            with_engine_nested(argv("target/release/pmemvm boot --nvdimm 128G")),
            "pmemvm boot --engine nested --nvdimm 128G"
        );
        assert_eq!(
            with_engine_nested(argv(
                "pmemvm -v run --engine pmemvm --nvdimm 1G -- uname -a"
            )),
            "pmemvm -v run --engine nested --nvdimm 1G -- uname -a"
        );
        assert_eq!(
            with_engine_nested(argv("target/release/pmemvm preflight boot --nvdimm 128G")),
            "pmemvm boot --engine nested --nvdimm 128G"
        );
        assert_eq!(
            with_engine_nested(
                argv("pmemvm boot --engine=pmemvm --append")
                    .into_iter()
                    .chain(["nd_pmem.nowait=1 quiet".to_string()])
            ),
            "pmemvm boot --engine nested --append 'nd_pmem.nowait=1 quiet'"
        );
    }
}
