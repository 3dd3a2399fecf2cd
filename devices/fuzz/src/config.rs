// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: `vmm::config::parse_size` and `NvdimmSpec::from_str` on
//! arbitrary text.
//!
//! Checked: nothing panics; an accepted size is above zero and reads back
//! the same from its decimal form; a refused size's message quotes the text;
//! an accepted `--nvdimm` spec has a 2 MiB-multiple size, a label area that
//! is 0 or a 4 KiB multiple of at least 128 KiB and smaller than the DIMM,
//! and a non-empty 2 MiB-multiple persistent-memory range that fits before
//! the labels.

use vmm::config::{parse_size, NvdimmSpec};

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match parse_size(&text) {
        Ok(n) => {
            assert!(n > 0, "size {text:?} accepted as zero");
            assert_eq!(parse_size(&n.to_string()), Ok(n), "{text:?}");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("'{text}'")),
                "{msg} does not quote {text:?}"
            );
        }
    }
    match text.parse::<NvdimmSpec>() {
        Ok(s) => {
            const TWO_MIB: u64 = 2 << 20;
            assert_eq!(s.size % TWO_MIB, 0, "{text:?}");
            assert!(s.label_size < s.size, "{text:?}");
            assert!(
                s.label_size == 0 || (s.label_size % 4096 == 0 && s.label_size >= 128 << 10),
                "{text:?}: label size {}",
                s.label_size
            );
            let spa = s.spa_size();
            assert!(spa > 0 && spa % TWO_MIB == 0, "{text:?}: range {spa}");
            assert!(
                spa <= s.label_offset() && s.label_offset() <= s.size,
                "{text:?}"
            );
            assert!(s.file.as_ref().is_none_or(|f| !f.as_os_str().is_empty()));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
