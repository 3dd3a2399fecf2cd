//! The one place a command asks for the project's guest image: [`image_for`] says why it is
//! needed, and a missing or incomplete image is one [`ImageUnavailable`] error whose message
//! names what the user gave, what the image was for, and how to get it.

use std::fmt;
use std::path::PathBuf;

use super::{find_image_dir, GuestJobError, ImageDir};

/// What the guest image is needed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageNeed {
    /// No `--kernel`: the image's kernel and initramfs are booted.
    NoKernel,
    /// `--kernel` without `--initrd`: the image's initramfs runs the job.
    JobInitrd {
        /// The user's kernel.
        kernel: PathBuf,
    },
    /// A bench side with its own kernel and no `initrd=`.
    SideInitrd {
        /// The side's label.
        side: String,
        /// The side's kernel.
        kernel: PathBuf,
    },
    /// `--modules` without `--initrd`: the image's init loads the modules.
    ModulesInitrd,
}

impl fmt::Display for ImageNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoKernel => write!(
                f,
                "no --kernel given and the default guest image is not available"
            ),
            Self::JobInitrd { kernel } => write!(
                f,
                "--kernel {} without --initrd: the job runs from the guest image's initramfs, \
                 which is not available",
                kernel.display()
            ),
            Self::SideInitrd { side, kernel } => write!(
                f,
                "side {side} boots {} without initrd=, and the guest image's initramfs (which \
                 runs the job) is not available",
                kernel.display()
            ),
            Self::ModulesInitrd => write!(
                f,
                "--modules without --initrd boots the guest image's initramfs (its /init loads \
                 the modules), which is not available"
            ),
        }
    }
}

/// The guest image was needed and is not there (a usage error: exit status 2).
#[derive(Debug, thiserror::Error)]
#[error("{need} ({source}); give --initrd (and --kernel), or build the image with guest-images/build.sh")]
pub struct ImageUnavailable {
    /// What it was needed for.
    pub need: ImageNeed,
    /// Why it is not there.
    #[source]
    pub source: GuestJobError,
}

/// The built guest image ([`find_image_dir`]), needed for `need`.
pub fn image_for(need: ImageNeed) -> Result<ImageDir, ImageUnavailable> {
    find_image_dir().map_err(|source| ImageUnavailable { need, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_image_says_what_it_was_for_and_how_to_get_it() {
        let e = ImageUnavailable {
            need: ImageNeed::JobInitrd {
                kernel: "bz32".into(),
            },
            source: GuestJobError::ImageNotFound {
                start: "/nowhere".into(),
            },
        };
        let text = e.to_string();
        assert!(text.starts_with("--kernel bz32 without --initrd: the job runs from the guest image's initramfs, which is not available (no built guest image found"), "{text}");
        assert!(
            text.ends_with("build the image with guest-images/build.sh"),
            "{text}"
        );
        for need in [
            ImageNeed::NoKernel,
            ImageNeed::SideInitrd {
                side: "b".into(),
                kernel: "k".into(),
            },
            ImageNeed::ModulesInitrd,
        ] {
            assert!(!need.to_string().is_empty());
        }
    }
}
