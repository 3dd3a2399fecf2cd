//! `pmemvm-vm --launch-fd N`: runs the one VM that `pmemvm boot` checked and
//! handed over (`vmm::launch`), in a program that holds the VMM core only.
//! Not a user command: it takes nothing but the descriptor `pmemvm` passed.

use std::process::ExitCode;

#[path = "process_start.rs"]
mod process_start;

use vmm::exit_status::{self, Classified};
use vmm::launch::{self, LaunchError, LAUNCH_FD_OPTION};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fd = match args.as_slice() {
        [option, n] if option == LAUNCH_FD_OPTION => n.parse::<i32>().ok(),
        _ => None,
    };
    let Some(fd) = fd else {
        eprintln!(
            "pmemvm-vm: arguments {args:?} are not accepted; it is started by `pmemvm boot` with {LAUNCH_FD_OPTION} N only"
        );
        return ExitCode::from(exit_status::USAGE);
    };
    match launch::read_launch(fd).and_then(|l| run(&l)) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            exit_status::print_error(&e);
            ExitCode::from(e.kind().exit_status())
        }
    }
}

fn run(l: &launch::Launch) -> Result<u8, LaunchError> {
    match l.started_ns {
        Some(ns) => vmm::stats::mark_process_start_at(ns),
        None => vmm::stats::mark_process_start(),
    }
    process_start::calm_sigquit();
    process_start::init_logging(&l.log_filter);
    launch::run(l)
}
