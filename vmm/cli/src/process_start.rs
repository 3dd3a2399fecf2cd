//! What both programs, `pmemvm` and `pmemvm-vm`, do as they start: SIGQUIT
//! made harmless until a VM runs (it asks a running VM where its vCPUs are),
//! and the log at a level, with millisecond timestamps.

/// Makes SIGQUIT harmless before any VM runs; a failure is a warning.
pub fn calm_sigquit() {
    if let Err(e) = vmm::signals::calm_describe_signal() {
        eprintln!("pmemvm: warning: SIGQUIT could not be made harmless before the VM starts: {e}");
    }
}

/// Logs at `filter` (`warn`, `info`, ...) unless `RUST_LOG` says otherwise.
pub fn init_logging(filter: &str) {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter))
        .format_timestamp_millis()
        .init();
}
