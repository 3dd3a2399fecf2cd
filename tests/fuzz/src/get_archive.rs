// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: `lab::guest::transfer::archive::plan_get_archive`, the decoder of the
//! tar archive a guest writes onto the `--get` transfer DIMM.
//!
//! The first input byte picks the `--get` paths, the rest is the archive.
//! Checked: nothing panics; every planned path is relative, made of plain
//! components only, and starts with the last name of one of the `--get`
//! paths (so nothing lands outside `--out` or outside what was asked for);
//! every planned file's data lies inside the archive.

use std::path::Component;

use lab::guest::transfer::archive::{plan_get_archive, PlannedKind};
use lab::guest::transfer::GetSpec;

const GETS: &[&[&str]] = &[
    &["/results"],
    &["out.txt"],
    &["/data", "results"],
    &["/a/b/c", "/x"],
];

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let Some((&pick, archive)) = data.split_first() else {
        return;
    };
    let gets: Vec<GetSpec> = GETS[usize::from(pick) % GETS.len()]
        .iter()
        .filter_map(|g| g.parse().ok())
        .collect();
    let Ok(plan) = plan_get_archive(archive, &gets) else {
        return;
    };
    for entry in &plan.entries {
        assert!(
            entry
                .rel
                .components()
                .all(|c| matches!(c, Component::Normal(_))),
            "planned path {:?} has a non-plain component",
            entry.rel
        );
        let first = entry.rel.components().next();
        assert!(
            gets.iter()
                .any(|g| first == Some(Component::Normal(std::ffi::OsStr::new(g.out_name())))),
            "planned path {:?} is not below any --get name",
            entry.rel
        );
        if let PlannedKind::File { offset, len, .. } = entry.kind {
            assert!(
                offset
                    .checked_add(len)
                    .is_some_and(|end| end <= archive.len()),
                "file {:?} at {offset}+{len} runs past the {}-byte archive",
                entry.rel,
                archive.len()
            );
        }
    }
}
