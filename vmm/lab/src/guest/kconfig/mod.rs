//! The kernel configuration pmemvm's guests need: `pmemvm kconfig` prints it
//! as a fragment to merge into a kernel tree (`scripts/kconfig/merge_config.sh`),
//! and `pmemvm kconfig --check KERNEL|.config` names every option a kernel
//! lacks, with what breaks without it.
//!
//! A kernel's own configuration is read from a `.config` file, or from the
//! kernel image when it was built with `CONFIG_IKCONFIG` (the gzip'd config
//! between the `IKCFG_ST` and `IKCFG_ED` markers, as the kernel's
//! `scripts/extract-ikconfig` finds it): directly in an ELF `vmlinux`, and in a
//! bzImage after decompressing its payload (gzip in process; xz, zstd, lz4,
//! bzip2, lzma and lzo with the Debian tools of those names).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

pub mod cxl;
pub mod debugging;
mod requirements;

pub use requirements::{Requirement, MODULE_NEEDS, REQUIREMENTS};

/// Errors of reading a kernel's configuration.
#[derive(Debug, thiserror::Error)]
pub enum KconfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A kernel without an embedded configuration.
    #[error("{path} has no embedded configuration (it was built without CONFIG_IKCONFIG); pass the kernel tree's .config instead: pmemvm kconfig --check path/to/.config")]
    NoEmbeddedConfig {
        /// The kernel.
        path: PathBuf,
    },
    /// The embedded configuration or the payload could not be decompressed.
    #[error("cannot decompress {what} of {path}: {why}")]
    Decompress {
        /// The kernel.
        path: PathBuf,
        /// The part (payload, embedded config).
        what: &'static str,
        /// What went wrong.
        why: String,
    },
}

impl vmm::exit_status::Classified for KconfigError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        Usage
    }
}

/// A kernel configuration: option → value (`y`, `m`, a number, a string).
/// Options that are "not set" are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kconfig {
    values: BTreeMap<String, String>,
    /// Options the configuration names as `# CONFIG_X is not set`: the
    /// kernel has them, unset.
    unset: BTreeSet<String>,
}

impl Kconfig {
    /// Parses `.config` text: `CONFIG_X=value` lines; comments ignored.
    pub fn parse(text: &str) -> Self {
        let values = text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("CONFIG_"))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        let unset = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("# ")?.strip_suffix(" is not set"))
            .filter(|o| o.starts_with("CONFIG_"))
            .map(str::to_string)
            .collect();
        Self { values, unset }
    }

    /// True when the kernel has `option` at all: set, or named as not set.
    pub fn has_option(&self, option: &str) -> bool {
        self.values.contains_key(option) || self.unset.contains(option)
    }

    /// The value of `option`, if it is set.
    pub fn get(&self, option: &str) -> Option<&str> {
        self.values.get(option).map(String::as_str)
    }

    /// Number of options set.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// One requirement a configuration does not meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The requirement.
    pub requirement: Requirement,
    /// `None`: not set; `Some(v)`: set to something other than `y` (or `m`
    /// where the requirement cannot be a module).
    pub value: Option<String>,
}

/// The result of a check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Check {
    /// Requirements not met.
    pub missing: Vec<Missing>,
    /// Requirements met by a module (`=m`) that `--modules` packs: they work
    /// when the guest is booted with `--modules DIR`.
    pub modules: Vec<Requirement>,
}

/// Checks `config` against [`REQUIREMENTS`].
pub fn check(config: &Kconfig) -> Check {
    let mut out = Check::default();
    for r in REQUIREMENTS.iter().flat_map(|(_, reqs)| reqs.iter()) {
        match config.get(r.option) {
            Some("y") => {}
            Some("m") if r.module.is_some() => out.modules.push(*r),
            other => out.missing.push(Missing {
                requirement: *r,
                value: other.map(str::to_string),
            }),
        }
    }
    for (when, r) in MODULE_NEEDS {
        if config.get(when) == Some("m") && config.get(r.option) != Some("y") {
            out.missing.push(Missing {
                requirement: *r,
                value: config.get(r.option).map(str::to_string),
            });
        }
    }
    out
}

/// The fragment `pmemvm kconfig` prints.
pub fn fragment() -> String {
    let mut s = String::from(
        "# pmemvm guest kernel options: merge into a kernel tree's .config, e.g.\n\
         #   pmemvm kconfig > pmemvm.config\n\
         #   scripts/kconfig/merge_config.sh -m .config pmemvm.config && make olddefconfig\n\
         # then check the result: pmemvm kconfig --check .config\n",
    );
    for (group, reqs) in REQUIREMENTS {
        s.push_str(&format!("\n# --- {group}\n"));
        for r in *reqs {
            s.push_str(&format!("# without it: {}\n", r.breaks));
            if let Some(m) = r.module {
                s.push_str(&format!(
                    "# may be =m ({m}.ko): then boot with --modules DIR (modules_install's output)\n"
                ));
            }
            s.push_str(&format!("{}=y\n", r.option));
        }
    }
    s.push_str(&cxl::fragment());
    s.push_str("\n# --- with NVDIMM drivers as modules (harmless when they are built in)\n");
    for (when, r) in MODULE_NEEDS {
        s.push_str(&format!(
            "# without it, when {when}=m: {}\n{}=y\n",
            r.breaks, r.option
        ));
    }
    s
}

/// The configuration of a kernel image or a `.config` file.
pub fn read(path: &Path) -> Result<Kconfig, KconfigError> {
    Ok(Kconfig::parse(&read_text(path)?))
}

/// The configuration text of a kernel image (what `scripts/extract-ikconfig`
/// prints) or of a `.config` file.
pub fn read_text(path: &Path) -> Result<String, KconfigError> {
    let bytes = std::fs::read(path).map_err(|source| KconfigError::Read {
        path: path.into(),
        source,
    })?;
    if looks_like_config_text(&bytes) {
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    embedded_config(path, &bytes)
}

fn looks_like_config_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    std::str::from_utf8(head).is_ok_and(|t| {
        t.lines()
            .any(|l| l.starts_with("CONFIG_") || l.starts_with("# CONFIG_"))
    })
}

const IKCFG_START: &[u8] = b"IKCFG_ST";
const IKCFG_END: &[u8] = b"IKCFG_ED";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The config text embedded in an uncompressed kernel image.
fn ikconfig_in(image: &[u8]) -> Option<Vec<u8>> {
    let start = find(image, IKCFG_START)? + IKCFG_START.len();
    let end = start + find(&image[start..], IKCFG_END)?;
    Some(image[start..end].to_vec())
}

fn gunzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data).read_to_end(&mut out)?;
    Ok(out)
}

/// The embedded configuration of an ELF vmlinux or a bzImage.
fn embedded_config(path: &Path, bytes: &[u8]) -> Result<String, KconfigError> {
    let decompress_err = |what, why: String| KconfigError::Decompress {
        path: path.into(),
        what,
        why,
    };
    let gz = match ikconfig_in(bytes) {
        Some(gz) => gz,
        None => {
            let payload = bzimage_payload(bytes)
                .ok_or_else(|| KconfigError::NoEmbeddedConfig { path: path.into() })?;
            let vmlinux = decompress_payload(payload)
                .map_err(|why| decompress_err("the bzImage payload", why))?;
            ikconfig_in(&vmlinux)
                .ok_or_else(|| KconfigError::NoEmbeddedConfig { path: path.into() })?
        }
    };
    let text =
        gunzip(&gz).map_err(|e| decompress_err("the embedded configuration", e.to_string()))?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The compressed kernel inside a bzImage (boot protocol 2.08+:
/// `payload_offset`/`payload_length` from the start of the protected-mode code).
fn bzimage_payload(image: &[u8]) -> Option<&[u8]> {
    if image.get(0x202..0x206)? != b"HdrS" {
        return None;
    }
    let u32_at = |o: usize| -> Option<usize> {
        let b: [u8; 4] = image.get(o..o + 4)?.try_into().ok()?;
        usize::try_from(u32::from_le_bytes(b)).ok()
    };
    let setup_sects = match *image.get(0x1f1)? {
        0 => 4,
        n => usize::from(n),
    };
    let start = (setup_sects + 1) * 512 + u32_at(0x248)?;
    let len = u32_at(0x24c)?;
    image.get(start..start.checked_add(len)?)
}

/// Decompresses a kernel payload by its magic: gzip in process, the other
/// formats with their Debian tools.
fn decompress_payload(payload: &[u8]) -> Result<Vec<u8>, String> {
    const TOOLS: &[(&[u8], &str, &str)] = &[
        (b"\xfd7zXZ\x00", "xz", "xz-utils"),
        (b"\x28\xb5\x2f\xfd", "zstd", "zstd"),
        (b"\x02\x21\x4c\x18", "lz4", "lz4"),
        (b"BZh", "bzip2", "bzip2"),
        (b"\x5d\x00\x00", "lzma", "xz-utils"),
        (b"\x89LZO", "lzop", "lzop"),
    ];
    if payload.starts_with(b"\x1f\x8b") {
        // The payload is followed by the decompressed size: read what gzip gives.
        let mut out = Vec::new();
        let mut d = flate2::read::GzDecoder::new(payload);
        return match d.read_to_end(&mut out) {
            Ok(_) => Ok(out),
            Err(_) if !out.is_empty() => Ok(out),
            Err(e) => Err(e.to_string()),
        };
    }
    let Some((_, tool, package)) = TOOLS
        .iter()
        .find(|(magic, _, _)| payload.starts_with(magic))
    else {
        return Err("its compression format is not one the kernel uses".into());
    };
    run_decompressor(tool, payload)
        .map_err(|e| format!("{tool} -dc failed ({e}); is the Debian package {package} installed?"))
}

fn run_decompressor(tool: &str, input: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut child = std::process::Command::new(tool)
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let data = input.to_vec();
    // Feed from a thread: the tool's output pipe would fill up otherwise.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output()?;
    let _ = feeder.join();
    // Trailing bytes after the stream (the appended size) make some tools
    // complain; the decompressed kernel is what matters.
    if out.stdout.is_empty() {
        return Err(std::io::Error::other(format!("exit status {}", out.status)));
    }
    Ok(out.stdout)
}

/// The report of `pmemvm kconfig --check`: one line per missing option.
pub fn render_check(path: &Path, config: &Kconfig, result: &Check) -> String {
    let mut s = String::new();
    if result.missing.is_empty() {
        s.push_str(&format!(
            "{}: all {} options pmemvm's guests need are set ({} options read)\n",
            path.display(),
            REQUIREMENTS.iter().map(|(_, r)| r.len()).sum::<usize>(),
            config.len()
        ));
    } else {
        s.push_str(&format!(
            "{}: {} option(s) pmemvm's guests need are missing:\n",
            path.display(),
            result.missing.len()
        ));
        for m in &result.missing {
            let state = match m.value.as_deref() {
                None => "not set".to_string(),
                Some("m") => "a module, which it cannot be: the guest needs it before its init \
                              loads modules; build it in (=y)"
                    .to_string(),
                Some(v) => format!("set to {v}"),
            };
            s.push_str(&format!(
                "  {} ({state}): {}\n",
                m.requirement.option, m.requirement.breaks
            ));
        }
    }
    for r in &result.modules {
        s.push_str(&format!(
            "  {} is a module (=m, {}.ko): boot with --modules DIR (what `make modules_install INSTALL_MOD_PATH=DIR` wrote) so the guest loads it\n",
            r.option,
            r.module.unwrap_or("?")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_config() -> String {
        REQUIREMENTS
            .iter()
            .flat_map(|(_, r)| r.iter())
            .map(|r| format!("{}=y\n", r.option))
            .collect()
    }

    #[test]
    fn a_config_with_everything_passes_and_one_without_names_each_option() {
        let all = Kconfig::parse(&full_config());
        assert!(check(&all).missing.is_empty());
        let stripped = full_config()
            .replace("CONFIG_ACPI_NFIT=y\n", "# CONFIG_ACPI_NFIT is not set\n")
            .replace("CONFIG_IO_URING=y\n", "")
            .replace("CONFIG_BCACHE=y\n", "CONFIG_BCACHE=m\n");
        let result = check(&Kconfig::parse(&stripped));
        let names: Vec<&str> = result
            .missing
            .iter()
            .map(|m| m.requirement.option)
            .collect();
        assert_eq!(names, vec!["CONFIG_ACPI_NFIT", "CONFIG_IO_URING"]);
        assert_eq!(result.modules.len(), 1);
        let text = render_check(Path::new(".config"), &Kconfig::parse(&stripped), &result);
        assert!(
            text.contains("CONFIG_ACPI_NFIT (not set): the NFIT is ignored"),
            "{text}"
        );
        assert!(
            text.contains("CONFIG_BCACHE is a module (=m, bcache.ko): boot with --modules DIR"),
            "{text}"
        );
        // An option the guest needs before its init runs cannot be a module.
        let serial = full_config().replace("CONFIG_SERIAL_8250=y\n", "CONFIG_SERIAL_8250=m\n");
        let result = check(&Kconfig::parse(&serial));
        assert_eq!(result.missing.len(), 1);
        assert_eq!(result.missing[0].value.as_deref(), Some("m"));
        let text = render_check(Path::new(".config"), &Kconfig::parse(&serial), &result);
        assert!(
            text.contains("CONFIG_SERIAL_8250 (a module, which it cannot be"),
            "{text}"
        );
    }

    #[test]
    fn a_modular_nd_btt_needs_debugfs() {
        let modular = format!("{}CONFIG_ND_BTT=m\n", full_config());
        let result = check(&Kconfig::parse(&modular));
        let names: Vec<&str> = result
            .missing
            .iter()
            .map(|m| m.requirement.option)
            .collect();
        assert_eq!(names, ["CONFIG_DEBUG_FS"]);
        assert!(
            check(&Kconfig::parse(&format!("{modular}CONFIG_DEBUG_FS=y\n")))
                .missing
                .is_empty()
        );
        // Built in, the failing init goes unnoticed: not required.
        assert!(check(&Kconfig::parse(&full_config())).missing.is_empty());
    }

    #[test]
    fn every_module_a_requirement_names_is_one_modules_packs() {
        for r in REQUIREMENTS.iter().flat_map(|(_, r)| r.iter()) {
            if let Some(m) = r.module {
                assert!(
                    crate::guest::modules::WANTED.contains(&m),
                    "{}: {m}",
                    r.option
                );
            }
        }
    }

    #[test]
    fn values_other_than_y_or_m_are_missing_with_their_value() {
        let c = Kconfig::parse("CONFIG_SMP=n\nCONFIG_NR_CPUS=64\nCONFIG_CMDLINE=\"a b\"\n");
        assert_eq!(c.get("CONFIG_CMDLINE"), Some("a b"));
        let m = check(&c);
        let smp = m
            .missing
            .iter()
            .find(|m| m.requirement.option == "CONFIG_SMP")
            .unwrap();
        assert_eq!(smp.value.as_deref(), Some("n"));
    }

    #[test]
    fn the_fragment_lists_every_requirement_once_and_parses_back() {
        let f = fragment();
        let parsed = Kconfig::parse(&f);
        let total: usize = REQUIREMENTS.iter().map(|(_, r)| r.len()).sum::<usize>()
            + MODULE_NEEDS.len()
            + cxl::CXL_NEEDS.len();
        assert_eq!(
            parsed.len(),
            total,
            "duplicate or missing options in the fragment"
        );
        assert!(check(&parsed).missing.is_empty());
        assert!(cxl::notes(&parsed).is_empty());
    }

    #[test]
    fn embedded_config_is_found_between_the_markers() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"CONFIG_SMP=y\n").unwrap();
        let gz = gz.finish().unwrap();
        let mut image = b"\x7fELF....junk".to_vec();
        image.extend_from_slice(IKCFG_START);
        image.extend_from_slice(&gz);
        image.extend_from_slice(IKCFG_END);
        image.extend_from_slice(b"more");
        let text = embedded_config(Path::new("k"), &image).unwrap();
        assert_eq!(text, "CONFIG_SMP=y\n");
        let e = embedded_config(Path::new("k"), b"\x7fELF no config here").unwrap_err();
        assert!(e.to_string().contains("CONFIG_IKCONFIG"), "{e}");
    }

    #[test]
    fn bzimage_payload_bounds_are_checked() {
        let mut image = vec![0u8; 0x1000];
        image[0x202..0x206].copy_from_slice(b"HdrS");
        image[0x1f1] = 1;
        image[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        image[0x24c..0x250].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(bzimage_payload(&image).map(<[u8]>::len), Some(8));
        image[0x24c..0x250].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(bzimage_payload(&image).is_none());
        assert!(bzimage_payload(b"short").is_none());
    }
}
