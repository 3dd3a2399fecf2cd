//! Where the guest runs on the host: `--pin CPULIST` (vCPU *i* on the
//! *i*-th listed host CPU, the VMM's other threads on the remaining CPUs)
//! and `--host-node N` (guest RAM and every DIMM mapping bound to host
//! NUMA node N with a strict `mbind(MPOL_BIND)`). Both default to off:
//! vCPUs float and memory follows the kernel's default policy.
//!
//! Everything the user typed is checked against the host before anything
//! is created ([`Placement::check`]).

use std::path::Path;

/// `mbind` flags (linux/mempolicy.h; libc has no constants for them).
const MPOL_MF_STRICT: libc::c_uint = 1;
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;

/// Errors in `--pin`/`--host-node` and in applying them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    /// A CPU list that does not parse.
    #[error("--pin '{value}' is not a CPU list: {why}; use host CPU numbers and ranges such as 0,2 or 2-5")]
    CpuList {
        /// As typed.
        value: String,
        /// What is wrong.
        why: String,
    },
    /// More or fewer CPUs than vCPUs.
    #[error("--pin {value} names {given} host CPU{} but the guest has --cpus {cpus}; name exactly one host CPU per vCPU", if *given == 1 { "" } else { "s" })]
    PinCount {
        /// As typed.
        value: String,
        /// CPUs named.
        given: usize,
        /// vCPUs.
        cpus: u8,
    },
    /// A CPU named twice.
    #[error("--pin {value} names host CPU {cpu} twice; give each vCPU a CPU of its own")]
    PinTwice {
        /// As typed.
        value: String,
        /// The CPU.
        cpu: u32,
    },
    /// A CPU that is not online.
    #[error("--pin names host CPU {cpu}, which is not online here; online CPUs: {online}")]
    OfflineCpu {
        /// The CPU.
        cpu: u32,
        /// /sys/devices/system/cpu/online.
        online: String,
    },
    /// A node that does not exist or has no memory.
    #[error(
        "--host-node {node} is not a host NUMA node with memory here; nodes with memory: {nodes}"
    )]
    NoSuchNode {
        /// Asked for.
        node: u32,
        /// /sys/devices/system/node/has_memory.
        nodes: String,
    },
    /// mbind failed.
    #[error("binding {what} to host NUMA node {node} failed: {errno}")]
    Bind {
        /// "guest RAM", "NVDIMM /x.img".
        what: String,
        /// Node.
        node: u32,
        /// strerror text.
        errno: String,
    },
    /// sched_setaffinity failed.
    #[error("pinning {what} to host CPUs {cpus} failed: {errno}")]
    Affinity {
        /// "vCPU 0".
        what: String,
        /// The CPUs.
        cpus: String,
        /// strerror text.
        errno: String,
    },
}

/// Parses a Linux CPU or node list ("0-3,8,10-11") into sorted-as-given numbers.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("it is empty".into());
    }
    let mut out = Vec::new();
    for part in t.split(',') {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{s}' is not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("the range {part} runs backwards"));
                }
                if b - a > 4096 {
                    return Err(format!("the range {part} is too long"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

/// Host placement of one VM.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Placement {
    /// Host CPU of each vCPU, in vCPU order (empty: vCPUs float).
    pub pin: Vec<u32>,
    /// `--pin` as typed, for messages.
    pub pin_text: String,
    /// Host NUMA node for guest RAM and DIMM mappings.
    pub host_node: Option<u32>,
}

fn sys(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Placement {
    /// Parses `--pin` (None: not given) and `--host-node`.
    pub fn parse(pin: Option<&str>, host_node: Option<u32>) -> Result<Self, PlacementError> {
        let (pin, pin_text) = match pin {
            Some(p) => (
                parse_cpu_list(p).map_err(|why| PlacementError::CpuList {
                    value: p.to_string(),
                    why,
                })?,
                p.to_string(),
            ),
            None => (Vec::new(), String::new()),
        };
        Ok(Self {
            pin,
            pin_text,
            host_node,
        })
    }

    /// Checks the placement against `cpus` vCPUs and this host's online CPUs
    /// and memory nodes, touching nothing.
    pub fn check(&self, cpus: u8) -> Result<(), PlacementError> {
        self.check_against(
            cpus,
            &sys("/sys/devices/system/cpu/online"),
            &Self::memory_nodes_text(),
        )
    }

    fn memory_nodes_text() -> String {
        if Path::new("/sys/devices/system/node").exists() {
            sys("/sys/devices/system/node/has_memory")
        } else {
            // A kernel without CONFIG_NUMA has one node, 0.
            "0".into()
        }
    }

    /// [`Self::check`] with the host's lists given (as sysfs prints them).
    pub fn check_against(&self, cpus: u8, online: &str, nodes: &str) -> Result<(), PlacementError> {
        if !self.pin.is_empty() {
            if self.pin.len() != usize::from(cpus) {
                return Err(PlacementError::PinCount {
                    value: self.pin_text.clone(),
                    given: self.pin.len(),
                    cpus,
                });
            }
            let online_list = parse_cpu_list(online).unwrap_or_default();
            for (i, cpu) in self.pin.iter().enumerate() {
                if self.pin[..i].contains(cpu) {
                    return Err(PlacementError::PinTwice {
                        value: self.pin_text.clone(),
                        cpu: *cpu,
                    });
                }
                if !online_list.contains(cpu) {
                    return Err(PlacementError::OfflineCpu {
                        cpu: *cpu,
                        online: online.to_string(),
                    });
                }
            }
        }
        if let Some(node) = self.host_node {
            if !parse_cpu_list(nodes).unwrap_or_default().contains(&node) {
                return Err(PlacementError::NoSuchNode {
                    node,
                    nodes: nodes.to_string(),
                });
            }
        }
        Ok(())
    }

    /// The online host CPUs no vCPU is pinned to (where the VMM's other
    /// threads go); empty when nothing is pinned or every CPU is taken.
    pub fn other_cpus(&self) -> Vec<u32> {
        if self.pin.is_empty() {
            return Vec::new();
        }
        parse_cpu_list(&sys("/sys/devices/system/cpu/online"))
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !self.pin.contains(c))
            .collect()
    }
}

/// While alive, the calling thread (and the threads it starts) run on the
/// CPUs no vCPU is pinned to; the thread's previous affinity comes back on drop.
#[derive(Debug)]
pub struct OtherThreads {
    saved: Option<libc::cpu_set_t>,
}

impl OtherThreads {
    /// Moves the calling thread off the pinned CPUs (no-op without `--pin`,
    /// or when the vCPUs take every CPU).
    pub fn enter(placement: &Placement) -> Result<Self, PlacementError> {
        let others = placement.other_cpus();
        if others.is_empty() {
            return Ok(Self { saved: None });
        }
        // SAFETY: a zeroed cpu_set_t is a valid out-parameter.
        let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; `saved` has the size given.
        let rc = unsafe {
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut saved)
        };
        pin_current_thread(&others, "pmemvm's own threads")?;
        Ok(Self {
            saved: (rc == 0).then_some(saved),
        })
    }
}

impl Drop for OtherThreads {
    fn drop(&mut self) {
        if let Some(set) = self.saved.take() {
            // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        }
    }
}

fn errno_text() -> String {
    std::io::Error::last_os_error().to_string()
}

/// A node mask with only `node` set, as `mbind` and `set_mempolicy` take
/// it, and its `maxnode` argument (one more than its bits: the kernel reads
/// `maxnode − 1`).
fn node_mask(node: u32, what: &str) -> Result<(Vec<libc::c_ulong>, libc::c_ulong), PlacementError> {
    let bits = libc::c_ulong::BITS;
    let words = usize::try_from(node / bits)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    if words > 1024 / usize::try_from(bits).unwrap_or(64) {
        return Err(PlacementError::Bind {
            what: what.into(),
            node,
            errno: "node number out of range".into(),
        });
    }
    let mut mask = vec![0 as libc::c_ulong; words];
    mask[words - 1] |= 1 << (node % bits);
    let maxnode = libc::c_ulong::try_from(words).unwrap_or(1) * libc::c_ulong::from(bits) + 1;
    Ok((mask, maxnode))
}

/// The error of a failed bind system call (`rc` other than 0).
fn bind_result(rc: libc::c_long, node: u32, what: &str) -> Result<(), PlacementError> {
    if rc != 0 {
        return Err(PlacementError::Bind {
            what: what.into(),
            node,
            errno: errno_text(),
        });
    }
    Ok(())
}

/// Binds `len` bytes at address `addr` (a live mapping of this process) to
/// host NUMA node `node`, strictly: pages already there are moved, new ones
/// come only from that node. The kernel changes the range's policy only; no
/// memory is read or written, so the address is taken as a number.
pub fn bind_memory(addr: usize, len: usize, node: u32, what: &str) -> Result<(), PlacementError> {
    let (mask, maxnode) = node_mask(node, what)?;
    // SAFETY: mbind only changes the memory policy of this process's own
    // pages in [addr, addr+len), a mapping the caller keeps alive; `mask`
    // holds `maxnode - 1` bits and outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            libc::MPOL_BIND,
            mask.as_ptr(),
            maxnode,
            MPOL_MF_STRICT | MPOL_MF_MOVE,
        )
    };
    bind_result(rc, node, what)
}

/// Binds the calling thread's own memory policy to host node `node`
/// (`set_mempolicy(MPOL_BIND)`). `mbind` on a mapping governs anonymous,
/// shmem and hugetlb pages only: the page-cache pages of a file-backed DIMM
/// are allocated under the policy of the thread that faults them — for a
/// guest, its vCPU threads (KVM faults the pages in their context) — so they
/// get this one too.
pub fn bind_current_thread(node: u32, what: &str) -> Result<(), PlacementError> {
    let (mask, maxnode) = node_mask(node, what)?;
    // SAFETY: set_mempolicy changes only the calling thread's policy; `mask`
    // holds `maxnode - 1` bits and outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            libc::MPOL_BIND,
            mask.as_ptr(),
            maxnode,
        )
    };
    bind_result(rc, node, what)
}

/// The calling thread's memory policy as numa_maps spells policies
/// (`default`, `bind:0`, `preferred:1`, `interleave:0-1`, ...).
pub fn current_thread_policy() -> String {
    let bits = libc::c_ulong::BITS;
    let mut mode: libc::c_int = 0;
    let mut mask = [0 as libc::c_ulong; 1024 / libc::c_ulong::BITS as usize];
    let maxnode = libc::c_ulong::try_from(mask.len()).unwrap_or(1) * libc::c_ulong::from(bits);
    // SAFETY: get_mempolicy writes one int to `mode` and at most `maxnode`
    // bits to `mask`, both owned by this frame; addr 0 with flags 0 asks for
    // the thread's own policy.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            maxnode,
            0usize,
            0usize,
        )
    };
    if rc != 0 {
        return format!("unknown ({})", errno_text());
    }
    let word_bits = usize::try_from(bits).unwrap_or(64);
    let nodes: Vec<String> = (0..mask.len() * word_bits)
        .filter(|&n| mask[n / word_bits] & (1 << (n % word_bits)) != 0)
        .map(|n| n.to_string())
        .collect();
    let name = match mode {
        libc::MPOL_DEFAULT => return "default".into(),
        libc::MPOL_PREFERRED => "preferred",
        libc::MPOL_BIND => "bind",
        libc::MPOL_INTERLEAVE => "interleave",
        libc::MPOL_LOCAL => return "local".into(),
        other => return format!("mode {other}"),
    };
    format!("{name}:{}", nodes.join(","))
}

/// Restricts the calling thread to `cpus` (a no-op for an empty list).
pub fn pin_current_thread(cpus: &[u32], what: &str) -> Result<(), PlacementError> {
    if cpus.is_empty() {
        return Ok(());
    }
    let text = cpus
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    // SAFETY: a zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        let Ok(c) = usize::try_from(c) else { continue };
        if c >= libc::CPU_SETSIZE as usize {
            return Err(PlacementError::Affinity {
                what: what.into(),
                cpus: text,
                errno: "CPU number beyond CPU_SETSIZE".into(),
            });
        }
        // SAFETY: `c` is below CPU_SETSIZE (checked above), so the bit is inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size given.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(PlacementError::Affinity {
            what: what.into(),
            cpus: text,
            errno: errno_text(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8"), Ok(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("1,0"), Ok(vec![1, 0]));
        for bad in ["", "a", "3-1", "1,,2", "-1", "0-99999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn checks_name_the_value_and_what_is_accepted() {
        let p = Placement::parse(Some("0,1,2"), None).unwrap();
        let e = p.check_against(2, "0-1", "0").unwrap_err();
        assert!(
            e.to_string()
                .contains("names 3 host CPUs but the guest has --cpus 2"),
            "{e}"
        );
        let p = Placement::parse(Some("0,5"), None).unwrap();
        let e = p.check_against(2, "0-1", "0").unwrap_err();
        assert_eq!(
            e,
            PlacementError::OfflineCpu {
                cpu: 5,
                online: "0-1".into()
            }
        );
        let p = Placement::parse(Some("1,1"), None).unwrap();
        assert!(matches!(
            p.check_against(2, "0-1", "0"),
            Err(PlacementError::PinTwice { cpu: 1, .. })
        ));
        let p = Placement::parse(None, Some(3)).unwrap();
        let e = p.check_against(1, "0-1", "0").unwrap_err();
        assert!(e.to_string().contains("--host-node 3 is not"), "{e}");
        let p = Placement::parse(Some("1,0"), Some(0)).unwrap();
        assert_eq!(p.check_against(2, "0-1", "0"), Ok(()));
        assert!(matches!(
            Placement::parse(Some("x"), None),
            Err(PlacementError::CpuList { .. })
        ));
    }

    #[test]
    fn binding_and_pinning_reach_the_kernel() {
        let _lock = crate::memory_test_lock();
        let len = 2 << 20;
        let region = vm_memory::mmap::MmapRegion::<()>::new(len).expect("an anonymous mapping");
        let p = region.as_ptr();
        bind_memory(p as usize, len, 0, "test memory").unwrap();
        let maps = std::fs::read_to_string("/proc/self/numa_maps").unwrap();
        let line = maps
            .lines()
            .find(|l| l.starts_with(&format!("{:x} ", p as usize)))
            .unwrap_or_default();
        assert!(line.contains("bind:0"), "{line}");
        drop(region);
        std::thread::spawn(|| {
            pin_current_thread(&[0], "test thread").unwrap();
            let s = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let l = s
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap();
            assert_eq!(l.split_whitespace().nth(1), Some("0"));
        })
        .join()
        .unwrap();
    }
}
