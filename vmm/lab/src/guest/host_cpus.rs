//! This host's CPU count as pmemvm's defaults see it: the bench's vCPUs and
//! jobs, and the nested engine's L1 vCPUs. `$PMEMVM_HOST_CPUS` stands in for
//! it (plans for a host of another shape, tests); else the CPUs this process
//! may run on. The one place both ask.

/// Environment variable that stands in for this host's CPU count.
pub const HOST_CPUS_ENV: &str = "PMEMVM_HOST_CPUS";

/// `$PMEMVM_HOST_CPUS` is not a CPU count.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{HOST_CPUS_ENV}={value:?} is not a CPU count; set it to a whole number from 1 (the CPUs pmemvm's defaults assume this host has) or unset it")]
pub struct HostCpusError {
    /// The variable's value.
    pub value: String,
}

/// This host's CPUs: `$PMEMVM_HOST_CPUS` when set, else the CPUs this process
/// may run on (`None` when they cannot be read).
pub fn host_cpus() -> Result<Option<u32>, HostCpusError> {
    match std::env::var(HOST_CPUS_ENV) {
        Ok(value) => match value.trim().parse::<u32>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(HostCpusError { value }),
        },
        Err(std::env::VarError::NotUnicode(v)) => Err(HostCpusError {
            value: v.to_string_lossy().into_owned(),
        }),
        Err(std::env::VarError::NotPresent) => Ok(std::thread::available_parallelism()
            .ok()
            .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))),
    }
}
