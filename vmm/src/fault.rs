//! Fault injection for the tests of pmemvm's own failure paths (a vCPU
//! thread that cannot start, panics, or does not stop; the event loop
//! panicking). Debug builds read `PMEMVM_TEST_FAULT` (comma-separated:
//! `vcpu-spawn=N`, `vcpu-panic`, `vcpu-ignores-stop`, `loop-panic`,
//! `flush-stall=SECS`, `channel-irq-lost-once=N`, `channel-irq-lost=N`);
//! release builds never inject anything.

use devices::serial::LostInterrupts;

/// Faults to inject into one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Starting the thread of this vCPU fails.
    pub vcpu_spawn_fails: Option<usize>,
    /// A vCPU thread panics when the guest writes the guest-exit port.
    pub vcpu_panics: bool,
    /// vCPU threads never return once asked to stop.
    pub vcpu_ignores_stop: bool,
    /// The event loop (main thread) panics at the first exit request.
    pub loop_panics: bool,
    /// A flush-hint write keeps its vCPU thread in pmemvm this many seconds
    /// before the flush (a host call that hangs, as on a stalled disk).
    pub flush_stall_secs: Option<u64>,
    /// The channel's UART (ttyS1) drops interrupts as if the host lost their
    /// edge: `channel-irq-lost-once=N` the N-th, `channel-irq-lost=N` all from the N-th
    /// (counted: the times the guest starts sending anew after its first byte).
    pub channel_interrupts_lost: Option<LostInterrupts>,
}

impl Faults {
    /// The faults `PMEMVM_TEST_FAULT` asks for (debug builds only).
    pub fn from_env() -> Self {
        if !cfg!(debug_assertions) {
            return Self::default();
        }
        std::env::var("PMEMVM_TEST_FAULT")
            .map(|v| Self::parse(&v))
            .unwrap_or_default()
    }

    fn parse(spec: &str) -> Self {
        let mut f = Self::default();
        for item in spec.split(',').map(str::trim) {
            match item.split_once('=') {
                Some(("vcpu-spawn", n)) => f.vcpu_spawn_fails = n.parse().ok(),
                Some(("flush-stall", n)) => f.flush_stall_secs = n.parse().ok(),
                Some(("channel-irq-lost-once", n)) => {
                    f.channel_interrupts_lost = n.parse().ok().map(LostInterrupts::Once);
                }
                Some(("channel-irq-lost", n)) => {
                    f.channel_interrupts_lost = n.parse().ok().map(LostInterrupts::From);
                }
                _ if item == "vcpu-panic" => f.vcpu_panics = true,
                _ if item == "vcpu-ignores-stop" => f.vcpu_ignores_stop = true,
                _ if item == "loop-panic" => f.loop_panics = true,
                _ if item.is_empty() => {}
                _ => log::warn!("PMEMVM_TEST_FAULT: unknown fault {item:?} ignored"),
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_fault_list() {
        assert_eq!(
            Faults::parse("vcpu-spawn=1, vcpu-panic"),
            Faults {
                vcpu_spawn_fails: Some(1),
                vcpu_panics: true,
                vcpu_ignores_stop: false,
                loop_panics: false,
                flush_stall_secs: None,
                channel_interrupts_lost: None,
            }
        );
        assert_eq!(
            Faults::parse("channel-irq-lost-once=40").channel_interrupts_lost,
            Some(LostInterrupts::Once(40))
        );
        assert_eq!(
            Faults::parse("channel-irq-lost=7").channel_interrupts_lost,
            Some(LostInterrupts::From(7))
        );
        assert_eq!(Faults::parse("flush-stall=8").flush_stall_secs, Some(8));
        assert_eq!(Faults::parse(""), Faults::default());
        assert!(Faults::parse("vcpu-ignores-stop").vcpu_ignores_stop);
        assert!(Faults::parse("loop-panic").loop_panics);
    }
}
