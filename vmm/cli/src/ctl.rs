//! `pmemvm ctl SOCKET COMMAND`: the command line of the control socket's client
//! ([`vmm::api::client`]). Prints the answer (JSON for `stats` and `version`, a sentence
//! otherwise) and exits 0 when done, 2 when the request was wrong, 1 when pmemvm could not
//! do it.

use std::path::PathBuf;

use clap::Args;
use vmm::api::client::Request;

/// `pmemvm ctl SOCKET COMMAND`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The VM's control socket (its `--api PATH`).
    pub socket: PathBuf,
    /// What to do: the control socket's requests ([`Request`], with its help).
    #[command(subcommand)]
    pub command: Request,
}

/// Runs `pmemvm ctl`; the printed answer on success.
pub fn ctl(args: &CtlArgs) -> Result<String, vmm::api::client::ClientError> {
    vmm::api::client::call(&args.socket, &args.command)
}
