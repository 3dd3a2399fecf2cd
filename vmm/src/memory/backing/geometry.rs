//! What an existing backing file of the wrong length is: another pmemvm
//! geometry (named from its identity block), pmemvm 0.1's layout (with the
//! command that converts it), or just the wrong size.

use std::fs::File;
use std::path::Path;

use super::{FileCause, FileKind};
use crate::config::NvdimmSpec;
use crate::nvdimm::identity::{self, geometry_text, Block};

/// The error for an existing file of length `actual` ≠ `spec.file_len()`:
/// another pmemvm geometry (its identity block says which), pmemvm 0.1's
/// layout (the file is SIZE bytes, or its old region — length minus labels,
/// rounded down to 2 MiB — is SIZE), or just the wrong size.
/// The error for an existing file of `actual` bytes where `wanted` were needed.
pub(super) fn wrong_size(
    spec: &NvdimmSpec,
    kind: FileKind,
    path: &Path,
    actual: u64,
    wanted: u64,
) -> FileCause {
    let tail = actual
        .checked_sub(crate::layout::NVDIMM_IDENTITY_SIZE)
        .and_then(|off| File::open(path).ok().map(|f| (f, off)))
        .and_then(|(f, off)| identity::read_at(&f, off).ok());
    if let Some(Block::Valid(id)) = tail {
        return FileCause::OtherGeometry {
            path: path.into(),
            recorded: format!("{} {}", kind.option(), geometry_text(&id)),
        };
    }
    const OLD_ALIGN: u64 = 2 << 20;
    let old_region = actual
        .checked_sub(spec.label_size)
        .map(|r| r & !(OLD_ALIGN - 1));
    let old = actual == spec.size || (spec.label_size > 0 && old_region == Some(spec.size));
    if old && kind == FileKind::Nvdimm {
        return FileCause::OldLayout {
            path: path.into(),
            actual,
            label: spec.label_size,
            wanted: spec.file_len(),
            wanted_text: spec.size_text.clone(),
        };
    }
    FileCause::WrongSize {
        path: path.into(),
        actual,
        wanted,
        wanted_text: format!("{} {}", kind.option(), spec.size_text),
    }
}
