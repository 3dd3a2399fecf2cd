//! `pmemvm crash-images`: the DIMM file after power loss at each recorded
//! flush (`--nvdimm ...,record=DIR`; docs/crash-consistency.md).

use std::path::PathBuf;

use clap::Args;
use vmm::record::images::{self, ImageError, Request, Selection};

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
    /// same bytes).
    #[arg(long, value_name = "SEED")]
    pub torn: Option<u64>,
    /// Use a log that ends without its end record (pmemvm was killed while
    /// recording): its complete flushes only.
    #[arg(long)]
    pub partial: bool,
}

impl ImageSelection {
    /// The request for the log in `dir`, images into `out`.
    fn request(&self, dir: &std::path::Path, out: PathBuf) -> Request {
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

/// Bad input (exit status 2) or a failure while writing (1).
pub fn is_usage(e: &ImageError) -> bool {
    !matches!(e, ImageError::Io { .. })
}

/// Writes the images and prints what was written.
pub fn crash_images(a: &CrashImagesArgs) -> Result<String, ImageError> {
    let m = images::write(&a.which.request(&a.dir, a.out.clone()))?;
    let torn = m.images.iter().filter(|i| i.torn.is_some()).count();
    let first = m.images.first().map_or(0, |i| i.flush);
    let last = m.images.last().map_or(0, |i| i.flush);
    Ok(format!(
        "{} crash image{} of {} (after flush {first}{}; the log recorded flushes 1 to {}{}){} in {}; what each holds: {}",
        m.images.len(),
        if m.images.len() == 1 { "" } else { "s" },
        m.dimm,
        if first == last { String::new() } else { format!(" to {last}") },
        m.last_flush,
        if m.complete { "" } else { ", cut short" },
        if torn > 0 { format!(", {torn} torn variant{}", if torn == 1 { "" } else { "s" }) } else { String::new() },
        a.out.display(),
        a.out.join(images::MANIFEST).display()
    ))
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
    /// How each image is booted and checked: the options of `pmemvm run`;
    /// the image is the guest's first DIMM (nmem0, /dev/pmem0 on a label-less
    /// DIMM), any --nvdimm given here come after it; --json writes the
    /// summary (every image's status, output and time).
    #[command(flatten)]
    pub run: crate::cli::RunArgs,
}

/// A temporary images directory, removed on drop.
struct TempImages(Option<PathBuf>);

impl Drop for TempImages {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Runs the check; the exit status is 0 when every image passed, 1 when one failed.
pub fn crash_check(a: &CrashCheckArgs) -> Result<u8, crate::commands::CommandError> {
    let template = crate::commands::run_spec(&a.run)?;
    // Refusals of the engine, before any image is written.
    lab::run::engine_for(&template)?;
    let (out, _temp) = match &a.images {
        Some(d) => (d.clone(), TempImages(None)),
        None => {
            let d = std::env::temp_dir().join(format!("pmemvm-crash-check-{}", std::process::id()));
            (d.clone(), TempImages(Some(d)))
        }
    };
    let req = a.which.request(&a.dir, out);
    let report =
        lab::crash_check::check(&template, &req, &a.run.command, lab::run::run_job, |c| {
            eprintln!(
                "pmemvm: crash-check: the image after {}: status {}{} in {:.1} s",
                c.name(),
                c.status,
                c.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default(),
                c.seconds
            );
        })?;
    if let Some(path) = &a.run.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        std::fs::write(path, text).map_err(|source| crate::commands::CommandError::Output {
            path: path.clone(),
            source,
        })?;
    }
    print!("{}", report.table());
    Ok(match report.first_failure() {
        None => 0,
        Some(_) => 1,
    })
}
