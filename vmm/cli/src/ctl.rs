//! `pmemvm ctl SOCKET COMMAND`: the command line of the control socket's client
//! ([`vmm::api::client`]). Prints the answer (JSON for `stats` and `version`, a sentence
//! otherwise) and exits 0 when done, 2 when the request was wrong, 1 when pmemvm could not
//! do it.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use vmm::api::client::{HealthRequest, MediaRequest, NvdimmRequest, Request};

/// `pmemvm ctl SOCKET COMMAND`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The VM's control socket (its `--api PATH`).
    pub socket: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The control socket's commands.
#[derive(Debug, Clone, Subcommand)]
pub enum CtlCommand {
    /// pmemvm's and the protocol's versions.
    Version,
    /// pmemvm's counters (VM exits, NVDIMM flushes, `_DSM` calls), as JSON.
    Stats,
    /// Stop the vCPUs.
    Pause,
    /// Let the vCPUs run again.
    Resume,
    /// Write the guest's RAM and vCPU registers to FILE (a new file), an
    /// ELF core for `crash vmlinux FILE` and `drgn -c FILE -s vmlinux`.
    Dump {
        /// The new file (a relative path is taken from here).
        file: PathBuf,
        /// The NVDIMMs' ranges too (they are in their backing files anyway;
        /// with this the dump is one file, and as large as RAM and DIMMs).
        #[arg(long)]
        nvdimms: bool,
    },
    /// A DIMM's media errors while the guest runs: inject (the guest is
    /// notified and scrubs), clear, list.
    Media {
        /// What to do.
        #[command(subcommand)]
        action: MediaCommand,
    },
    /// A DIMM's health while the guest runs: set (the DIMM's device is
    /// notified, so `ndctl monitor` sees it), get.
    Health {
        /// What to do.
        #[command(subcommand)]
        action: HealthCommand,
    },
    /// Hot-add an NVDIMM into an empty slot (the VM was started with
    /// --nvdimm-slots N); removal is refused.
    Nvdimm {
        /// What to do.
        #[command(subcommand)]
        action: NvdimmCommand,
    },
}

/// `pmemvm ctl SOCKET nvdimm ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum NvdimmCommand {
    /// A new DIMM as --nvdimm takes it: SIZE[,file=PATH][,label-size=SIZE][,prealloc]
    /// [,hugepages][,badblocks=...] (a relative file= path is the VM's, from where
    /// pmemvm started). It joins guest NUMA node 0; the guest is notified (0x80)
    /// and its nfit driver adds the region.
    Add {
        /// The DIMM.
        spec: String,
    },
    /// Refused: persistent memory is not taken from a running guest.
    Remove {
        /// The DIMM: its place among the machine's DIMMs, from 0.
        dimm: u32,
    },
}

/// `pmemvm ctl SOCKET health ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum HealthCommand {
    /// Changes DIMM's SMART values (saved in its backing file) and notifies
    /// its ACPI device (0x81).
    Set {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
        /// health=ok|non-critical|critical|fatal, temperature=C, spares=%,
        /// alarm=none|spares+mtemp+ctemp (one or more).
        #[arg(required = true)]
        settings: Vec<String>,
    },
    /// DIMM's SMART values now, as JSON.
    Get {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
    },
}

/// `pmemvm ctl SOCKET media ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum MediaCommand {
    /// RANGE joins DIMM's error list (saved in its backing file) and the
    /// guest is notified (0x81 on the NVDIMM root device): Linux scrubs and
    /// adds it to the namespace's badblocks.
    Inject {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
        /// OFFSET+LEN[:OFFSET+LEN...] in bytes from the region's start,
        /// multiples of 512 (K, M, G suffixes), e.g. 1M+4K.
        range: String,
    },
    /// RANGE leaves DIMM's error list (the guest's badblocks stay until it
    /// rewrites the range, as on hardware).
    Clear {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
        /// OFFSET+LEN[:OFFSET+LEN...], as for inject.
        range: String,
    },
    /// The error list of DIMM (of every DIMM without one), as JSON.
    List {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: Option<u32>,
    },
}

impl From<&CtlCommand> for Request {
    fn from(c: &CtlCommand) -> Self {
        match c.clone() {
            CtlCommand::Version => Self::Version,
            CtlCommand::Stats => Self::Stats,
            CtlCommand::Pause => Self::Pause,
            CtlCommand::Resume => Self::Resume,
            CtlCommand::Dump { file, nvdimms } => Self::Dump { file, nvdimms },
            CtlCommand::Media { action } => Self::Media(match action {
                MediaCommand::Inject { dimm, range } => MediaRequest::Inject { dimm, range },
                MediaCommand::Clear { dimm, range } => MediaRequest::Clear { dimm, range },
                MediaCommand::List { dimm } => MediaRequest::List { dimm },
            }),
            CtlCommand::Health { action } => Self::Health(match action {
                HealthCommand::Set { dimm, settings } => HealthRequest::Set { dimm, settings },
                HealthCommand::Get { dimm } => HealthRequest::Get { dimm },
            }),
            CtlCommand::Nvdimm { action } => Self::Nvdimm(match action {
                NvdimmCommand::Add { spec } => NvdimmRequest::Add { spec },
                NvdimmCommand::Remove { dimm } => NvdimmRequest::Remove { dimm },
            }),
        }
    }
}

/// Runs `pmemvm ctl`; the printed answer on success.
pub fn ctl(args: &CtlArgs) -> Result<String, vmm::api::client::ClientError> {
    vmm::api::client::call(&args.socket, &Request::from(&args.command))
}
