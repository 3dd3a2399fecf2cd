//! Function symbols of an ELF64 kernel (`vmlinux` keeps its `.symtab`), for
//! naming a guest RIP in a report: `default_idle+0x14`. A bzImage, a stripped
//! file or anything malformed gives no symbols, never an error: this is a
//! report's garnish. Every offset and size read from the file is checked
//! against the file before use.

use std::path::Path;

/// ELF section type of a symbol table.
const SHT_SYMTAB: u32 = 2;
/// Symbol type of a function.
const STT_FUNC: u8 = 2;
/// Largest file read (a debug vmlinux is a few hundred MiB).
const MAX_FILE: u64 = 1 << 30;

/// Functions sorted by address.
#[derive(Debug, Default)]
pub struct Symbols {
    funcs: Vec<(u64, u64, String)>,
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

impl Symbols {
    /// The function symbols of `path` (none when it is not an ELF64 file with a symbol table).
    pub fn load(path: &Path) -> Self {
        let small = std::fs::metadata(path).is_ok_and(|m| m.len() <= MAX_FILE);
        match small.then(|| std::fs::read(path).ok()).flatten() {
            Some(bytes) => Self::parse(&bytes).unwrap_or_default(),
            None => Self::default(),
        }
    }

    fn parse(b: &[u8]) -> Option<Self> {
        let mut funcs = Vec::new();
        for_each_symbol(b, |info, value, size, name| {
            if info & 0xf == STT_FUNC && value != 0 {
                funcs.push((value, size, String::from_utf8_lossy(name).into_owned()));
            }
        })?;
        funcs.sort_by_key(|f| f.0);
        Some(Self { funcs })
    }

    /// `name+0xOFF` for an address inside a function (or past one of size 0).
    pub fn name(&self, addr: u64) -> Option<String> {
        if !self.funcs.is_empty() && LINUX_MODULES.contains(&addr) {
            // A kernel's vmlinux has no symbols for its loadable modules (only a
            // symbol that says how far it reaches can cover one); say at least
            // that the address is in one.
            return Some(self.function_at(addr, false).unwrap_or_else(|| {
                "in a kernel module, whose symbols the vmlinux does not have".to_owned()
            }));
        }
        self.function_at(addr, true)
    }

    /// The function at `addr`; a symbol without a size reaches to any later
    /// address when `unsized_reaches` (as assembler labels do), else to none.
    fn function_at(&self, addr: u64, unsized_reaches: bool) -> Option<String> {
        let i = self.funcs.partition_point(|f| f.0 <= addr).checked_sub(1)?;
        let (start, size, name) = &self.funcs[i];
        let off = addr - start;
        let within = if *size == 0 {
            unsized_reaches
        } else {
            off < *size
        };
        within.then(|| format!("{name}+{off:#x}"))
    }

    /// Number of function symbols.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }
}

/// Calls `f` with (info, value, size, name) of every symbol of the ELF64
/// file `b`; `None` when it is not one with a symbol table.
fn for_each_symbol(b: &[u8], mut f: impl FnMut(u8, u64, u64, &[u8])) -> Option<()> {
    // ELF64, little endian.
    if b.get(0..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let shoff = usize::try_from(u64_at(b, 0x28)?).ok()?;
    let shentsize = usize::from(u16_at(b, 0x3a)?);
    let shnum = usize::from(u16_at(b, 0x3c)?);
    if shentsize < 0x40 {
        return None;
    }
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(b, h + 4)?,
            usize::try_from(u64_at(b, h + 0x18)?).ok()?,
            usize::try_from(u64_at(b, h + 0x20)?).ok()?,
            u32_at(b, h + 0x28)?,
            usize::try_from(u64_at(b, h + 0x38)?).ok()?,
        ))
    };
    let (_, off, size, link, entsize) =
        (0..shnum).filter_map(section).find(|s| s.0 == SHT_SYMTAB)?;
    let (_, str_off, str_size, _, _) = section(usize::try_from(link).ok()?)?;
    let strtab = b.get(str_off..str_off.checked_add(str_size)?)?;
    let symtab = b.get(off..off.checked_add(size)?)?;
    if entsize < 24 {
        return None;
    }
    for sym in symtab.chunks_exact(entsize) {
        let info = *sym.get(4)?;
        let value = u64_at(sym, 8)?;
        let name_off = usize::try_from(u32_at(sym, 0)?).ok()?;
        let Some(rest) = strtab.get(name_off..) else {
            continue;
        };
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        f(info, value, u64_at(sym, 16)?, &rest[..end]);
    }
    Some(())
}

/// The addresses of the symbols `names` (of any type: functions, objects,
/// assembler labels) in the ELF64 kernel at `path`, in order; `None` for each
/// it lacks (every one, for a bzImage or a stripped file).
pub fn addresses(path: &Path, names: &[&str]) -> Vec<Option<u64>> {
    let mut found = vec![None; names.len()];
    let small = std::fs::metadata(path).is_ok_and(|m| m.len() <= MAX_FILE);
    if let Some(bytes) = small.then(|| std::fs::read(path).ok()).flatten() {
        for_each_symbol(&bytes, |_, value, _, name| {
            if let Some(i) = names.iter().position(|n| n.as_bytes() == name) {
                if value != 0 {
                    found[i] = Some(value);
                }
            }
        });
    }
    found
}

/// The host kernel's module whose code holds `addr` ("kvm_amd at
/// 0x...+0x..."), from `/proc/modules`; `None` when none does, or when the
/// host hides the addresses (they read as 0 without `CAP_SYSLOG`).
pub fn host_module_at(addr: u64) -> Option<String> {
    module_containing(&std::fs::read_to_string("/proc/modules").ok()?, addr)
}

/// [`host_module_at`] for a `/proc/modules` text: each line is `name size
/// refcount deps state address [taints]`.
fn module_containing(modules: &str, addr: u64) -> Option<String> {
    modules.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let name = fields.first()?;
        let size: u64 = fields.get(1)?.parse().ok()?;
        let base = u64::from_str_radix(fields.get(5)?.strip_prefix("0x")?, 16).ok()?;
        (base != 0 && addr >= base && addr - base < size)
            .then(|| format!("{name} at {base:#x}+{size:#x}"))
    })
}

/// x86-64 Linux's module area (`MODULES_VADDR`..`MODULES_END`: after the 1 GiB
/// kernel image mapping, up to the fixmap).
const LINUX_MODULES: std::ops::Range<u64> = 0xffff_ffff_c000_0000..0xffff_ffff_ff00_0000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_names_its_own_functions_and_garbage_has_none() {
        let exe = std::env::current_exe().unwrap();
        let syms = Symbols::load(&exe);
        assert!(syms.len() > 100, "{}", syms.len());
        let (start, _, name) = syms.funcs.iter().find(|f| f.1 > 4).unwrap().clone();
        assert_eq!(syms.name(start + 1), Some(format!("{name}+0x1")));
        assert!(Symbols::parse(b"\x7fELF\x02\x01garbage").is_none());
        assert!(Symbols::parse(&[]).is_none());
        // Truncated copies of a real file never panic.
        let bytes = std::fs::read(&exe).unwrap();
        for cut in [0x40, 0x1000, bytes.len() / 2] {
            let _ = Symbols::parse(&bytes[..cut]);
        }
        assert!(Symbols::load(Path::new("/nonexistent")).is_empty());
    }

    #[test]
    fn a_host_module_is_found_by_its_range_and_hidden_addresses_find_none() {
        let text = "kvm_amd 155648 0 - Live 0xffffffffc0470000\n\
                    kvm 1146880 1 kvm_amd, Live 0xffffffffc0200000 (E)\n\
                    hidden 4096 0 - Live 0x0000000000000000\n\
                    garbage line\n";
        assert_eq!(
            module_containing(text, 0xffff_ffff_c047_d20c).as_deref(),
            Some("kvm_amd at 0xffffffffc0470000+0x26000")
        );
        assert_eq!(
            module_containing(text, 0xffff_ffff_c020_0000).as_deref(),
            Some("kvm at 0xffffffffc0200000+0x118000")
        );
        // One past the end, a guest address, and addresses the host hides.
        assert_eq!(module_containing(text, 0xffff_ffff_c049_6000), None);
        assert_eq!(module_containing(text, 0xffff_ffff_8100_2fad), None);
        assert_eq!(module_containing(text, 0x800), None);
    }

    #[test]
    fn an_address_in_the_module_area_is_said_to_be_in_a_module() {
        let syms = Symbols::load(&std::env::current_exe().unwrap());
        assert!(!syms.is_empty());
        assert_eq!(
            syms.name(0xffff_ffff_c03d_f20c).as_deref(),
            Some("in a kernel module, whose symbols the vmlinux does not have")
        );
        let none = Symbols::load(std::path::Path::new("/nonexistent"));
        assert_eq!(none.name(0xffff_ffff_c03d_f20c), None);
    }
}
