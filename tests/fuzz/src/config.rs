// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: `vmm::config::parse_size` and `NvdimmSpec::from_str` on
//! arbitrary text.
//!
//! Checked: nothing panics; an accepted size is above zero and reads back
//! the same from its decimal form; a refused size's message quotes the text;
//! an accepted `--nvdimm` spec has a 16 MiB-multiple region size that is
//! exactly the guest's range, a label area that is 0 or a 4 KiB multiple of
//! at least 128 KiB below 4 GiB, the label area right after the region and
//! the identity page after that, a NUMA node of at most 255, and it is
//! written back (`Display`) as text that parses to the same spec.

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
            const SIXTEEN_MIB: u64 = 16 << 20;
            assert!(s.size > 0 && s.size % SIXTEEN_MIB == 0, "{text:?}");
            assert!(
                s.label_size == 0
                    || (s.label_size % 4096 == 0
                        && s.label_size >= 128 << 10
                        && s.label_size <= u64::from(u32::MAX)),
                "{text:?}: label size {}",
                s.label_size
            );
            assert_eq!(s.spa_size(), s.size, "{text:?}");
            assert_eq!(s.label_offset(), s.size, "{text:?}");
            assert_eq!(s.file_len(), s.size + s.label_size + 4096, "{text:?}");
            assert!(s.node.is_none_or(|n| n <= 255), "{text:?}");
            assert!(s.file.as_ref().is_none_or(|f| !f.as_os_str().is_empty()));
            let written = s.to_string();
            assert_eq!(
                written.parse::<NvdimmSpec>().ok().as_ref(),
                Some(&s),
                "{text:?} written as {written:?}"
            );
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
