//! The arguments of `pmemvm crash-images` and `pmemvm crash-check` (clap).

use std::path::PathBuf;

use clap::Args;
use vmm::nvdimm::record::images::{Request, Selection};

/// `pmemvm crash-images DIR --out OUT [--at N|--every K|--all] [--torn SEED]`.
#[derive(Debug, Args)]
pub struct CrashImagesArgs {
    /// The directory a run recorded into (`--nvdimm ...,record=DIR`).
    pub dir: PathBuf,
    /// Where the images and images.json go: a new or empty directory.
    #[arg(long, value_name = "OUT")]
    pub out: PathBuf,
    /// Which images.
    #[command(flatten)]
    pub which: ImageSelection,
}

/// Which crash images, for `crash-images` and `crash-check`.
#[derive(Debug, Args)]
pub struct ImageSelection {
    /// Only the image after flush N (0: before the first flush).
    #[arg(long, value_name = "N", group = "which")]
    pub at: Option<u64>,
    /// The images after flushes 0, K, 2K, ... and the last.
    #[arg(long, value_name = "K", group = "which")]
    pub every: Option<u64>,
    /// Every flush's image (the default).
    #[arg(long, group = "which")]
    pub all: bool,
    /// Also a torn variant of each image: a random subset, drawn with SEED,
    /// of the 64-byte lines stored after that flush (the same SEED gives the
    /// same bytes); `,granule=8` tears at the pmem driver's 8-byte stores
    /// instead (16 and 32 are accepted too).
    #[arg(long, value_name = "SEED[,granule=N]")]
    pub torn: Option<vmm::nvdimm::record::torn::TornSpec>,
    /// Use a log that ends without its end record (pmemvm was killed while
    /// recording): its complete flushes only.
    #[arg(long)]
    pub partial: bool,
}

impl ImageSelection {
    /// The request for the log in `dir`, images into `out`.
    pub(crate) fn request(&self, dir: &std::path::Path, out: PathBuf) -> Request {
        let select = match (self.at, self.every) {
            (Some(n), _) => Selection::At(n),
            (_, Some(k)) => Selection::Every(k),
            _ => Selection::All,
        };
        Request {
            dir: dir.to_path_buf(),
            out,
            select,
            torn: self.torn,
            partial: self.partial,
        }
    }
}

/// `pmemvm crash-check DIR [--at N|--every K|--all] [--torn SEED] [RUN OPTIONS] -- CMD`.
#[derive(Debug, Args)]
pub struct CrashCheckArgs {
    /// The directory a run recorded into (`--nvdimm ...,record=DIR`).
    pub dir: PathBuf,
    /// Keep the images (and images.json) in this new or empty directory;
    /// by default they go to a temporary one, removed at the end.
    #[arg(long, value_name = "DIR")]
    pub images: Option<PathBuf>,
    /// Which images (as for crash-images).
    #[command(flatten)]
    pub which: ImageSelection,
    /// Run nothing here: write SHARED/check.sbatch (a Slurm job array, one task
    /// per selected flush, each running this command for its flush on any
    /// node), SHARED/report.sbatch (the table of every image) and
    /// SHARED/submit.sh. DIR and SHARED must be on a file system every node
    /// shares.
    #[arg(long, value_name = "SHARED", conflicts_with = "images")]
    pub slurm: Option<PathBuf>,
    /// What one array task of --slurm runs: the I-th selected flush only, its
    /// result into SHARED/results (written into check.sbatch).
    #[arg(long, value_name = "I", requires = "slurm", hide = true)]
    pub slurm_task: Option<usize>,
    /// What the report job of --slurm runs: the table of SHARED/results.
    #[arg(long, requires = "slurm", conflicts_with = "slurm_task", hide = true)]
    pub slurm_report: bool,
    /// How each image is booted and checked: the options of `pmemvm run`;
    /// the image is the guest's first DIMM (nmem0, /dev/pmem0 on a label-less
    /// DIMM), any --nvdimm given here come after it; --json writes the
    /// summary (every image's status, output and time).
    #[command(flatten)]
    pub run: lab::guest::run::RunRequest,
}
