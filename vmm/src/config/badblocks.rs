//! `--nvdimm ...,badblocks=OFFSET+LEN[:OFFSET+LEN...]`: the bad ranges a DIMM
//! starts with (see `crate::nvdimm::media` for where they are kept).

use devices::nvdimm_media::BAD_BLOCK_SIZE;

use super::{parse_size, size_text, ConfigError};

/// Parses `badblocks=OFFSET+LEN[:OFFSET+LEN...]` for a region of `region` bytes.
pub fn parse_badblocks(text: &str, region: u64) -> Result<Vec<(u64, u64)>, ConfigError> {
    let err = |why: String| ConfigError::BadBlocks {
        value: text.to_string(),
        why,
    };
    let number = |t: &str| -> Result<u64, ConfigError> {
        if t == "0" {
            return Ok(0);
        }
        parse_size(t).map_err(|_| err(format!("'{t}' is not a size")))
    };
    let mut out = Vec::new();
    for item in text.split(':') {
        let Some((o, l)) = item.split_once('+') else {
            return Err(err(format!("'{item}' is not OFFSET+LEN")));
        };
        let (offset, length) = (number(o)?, number(l)?);
        if offset % BAD_BLOCK_SIZE != 0 || length % BAD_BLOCK_SIZE != 0 {
            return Err(err(format!("'{item}' is not a multiple of 512 bytes")));
        }
        if length == 0 {
            return Err(err(format!("'{item}' is empty")));
        }
        if offset.checked_add(length).is_none_or(|e| e > region) {
            return Err(err(format!(
                "'{item}' ends beyond the {}-byte region",
                size_text(region)
            )));
        }
        out.push((offset, length));
    }
    Ok(out)
}
