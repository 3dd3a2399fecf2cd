//! `--nvdimm` specs written back as the text the parser takes (as `--pmem-legacy`'s are in
//! `legacy_pmem`), so a spec travels as the user would type it — into the nested L1's `pmemvm` command line, a Slurm
//! task — without a second spelling of its keys. `text.parse()` of the written form gives the
//! same spec (for any spec the parser accepted: a path with a `,` cannot be parsed to begin with).

use std::fmt;

use super::NvdimmSpec;
use crate::layout;

impl fmt::Display for NvdimmSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.size_text)?;
        if let Some(file) = &self.file {
            write!(f, ",file={}", file.display())?;
        }
        if self.readonly {
            f.write_str(",readonly")?;
        }
        if self.label_size != layout::NVDIMM_DEFAULT_LABEL_SIZE {
            write!(f, ",label-size={}", self.label_size)?;
        }
        if self.prealloc {
            f.write_str(",prealloc")?;
        }
        if self.hugepages {
            f.write_str(",hugepages")?;
        }
        if let Some(n) = self.node {
            write!(f, ",node={n}")?;
        }
        if !self.badblocks.is_empty() {
            f.write_str(",badblocks=")?;
            for (i, (off, len)) in self.badblocks.iter().enumerate() {
                let sep = if i == 0 { "" } else { ":" };
                write!(f, "{sep}{off}+{len}")?;
            }
        }
        if let Some(dir) = &self.record {
            write!(f, ",record={}", dir.display())?;
        }
        if self.mce {
            f.write_str(",mce=on")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nvdimm_key_reads_back_as_written() {
        for text in [
            "16G",
            "1G,file=/var/tmp/pm0.img",
            "64M,file=pm.img,readonly,label-size=0",
            "32M,label-size=256K,prealloc,node=3",
            "16M,hugepages,label-size=0",
            "1G,badblocks=4096+4096:1048576+512",
            "256M,file=d/pm.img,record=rec",
            "1G,file=pm.img,badblocks=1048576+4096,mce=on",
            "1G,label-size=128K",
        ] {
            let spec: NvdimmSpec = text.parse().unwrap();
            let written = spec.to_string();
            let again: NvdimmSpec = written
                .parse()
                .unwrap_or_else(|e| panic!("{text:?} written as {written:?}: {e}"));
            assert_eq!(again, spec, "{text:?} written as {written:?}");
        }
        // The default label area is left out, as typed without it.
        assert_eq!(
            "1G,label-size=128K"
                .parse::<NvdimmSpec>()
                .unwrap()
                .to_string(),
            "1G"
        );
        assert_eq!(
            "64M,readonly,file=a.img,label-size=0"
                .parse::<NvdimmSpec>()
                .unwrap()
                .to_string(),
            "64M,file=a.img,readonly,label-size=0"
        );
    }
}
