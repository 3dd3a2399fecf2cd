// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: the control socket's request parser
//! (`vmm::api::protocol::parse`) and the search of guest memory for the
//! guest kernel's VMCOREINFO note (`vmm::debug::dump::vmcoreinfo::find`), on
//! arbitrary bytes — the one from whoever reaches the socket, the other
//! from a hostile guest's RAM.
//!
//! Checked: nothing panics; a refused request's message is one short line;
//! an accepted `dump` names an absolute path, a `media` range is bounded,
//! a `health set` value lies in its range; a note that is found lies
//! inside the memory searched, starts with `OSRELEASE=` and is at most a
//! page long.

use vmm::api::protocol::{parse, Command, HealthAction};
use vmm::debug::dump::elf::Ram;
use vmm::debug::dump::vmcoreinfo::find;

struct Bytes<'a>(&'a [u8]);

impl Ram for Bytes<'_> {
    fn ranges(&self) -> Vec<(u64, u64)> {
        vec![(0x1000, self.0.len() as u64)]
    }
    fn read(&self, gpa: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let at = usize::try_from(gpa - 0x1000).map_err(std::io::Error::other)?;
        let src = self
            .0
            .get(at..at + buf.len())
            .ok_or_else(|| std::io::Error::other("outside"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    match parse(data) {
        Ok(r) => match r.command {
            Command::Dump { file, .. } => assert!(file.is_absolute(), "{file:?}"),
            Command::Media { range, .. } => {
                assert!(range.is_none_or(|r| r.len() <= 4096));
            }
            Command::Health {
                action: HealthAction::Set(c),
                ..
            } => {
                assert!(c.spares.is_none_or(|p| p <= 100));
                assert!(c.temperature.is_none_or(|t| (-100..=200).contains(&t)));
            }
            _ => {}
        },
        Err(e) => {
            let m = e.to_string();
            assert!(!m.contains('\n') && m.len() < 400, "{m:?}");
        }
    }
    if let Some(f) = find(&Bytes(data)).expect("reading the input as RAM") {
        assert!(f.desc.starts_with(b"OSRELEASE="));
        assert!(f.desc.len() <= 4096);
        assert!(f.gpa >= 0x1000 && f.gpa + 24 + f.desc.len() as u64 <= 0x1000 + data.len() as u64);
    }
}
