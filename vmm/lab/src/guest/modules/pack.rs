//! Packing a module tree: modules.dep, the load order, decompression, depmod.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{ModuleTree, ModulesError, LOAD_LIST, ON_DEMAND, WANTED};

/// One line of modules.dep: a module and what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleDep {
    /// Path relative to the release directory, as written (e.g. `kernel/drivers/nvdimm/nd_pmem.ko.xz`).
    pub path: String,
    /// Its dependencies' paths, as written (the last one loads first).
    pub deps: Vec<String>,
}

impl ModuleDep {
    /// The module's name (`nd_pmem`), `-` spelled `_` as the kernel does.
    pub fn name(&self) -> String {
        module_name(&self.path)
    }
}

/// `kernel/drivers/acpi/nfit/nfit.ko.xz` → `nfit`.
fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.split_once(".ko").map_or(base, |(s, _)| s);
    stem.replace('-', "_")
}

/// The path without its compression suffix (`.ko.xz` → `.ko`).
fn plain_path(path: &str) -> String {
    match path.rfind(".ko") {
        Some(i) => format!("{}.ko", &path[..i]),
        None => path.to_owned(),
    }
}

/// True when `path` (from modules.dep) stays inside the release directory:
/// relative, with no `..` or root component.
fn inside_tree(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Parses modules.dep (`path: dep dep ...` lines; blank and malformed lines skipped).
pub fn parse_modules_dep(text: &str) -> Vec<ModuleDep> {
    text.lines()
        .filter_map(|line| {
            let (path, deps) = line.split_once(':')?;
            let path = path.trim();
            (!path.is_empty()).then(|| ModuleDep {
                path: path.to_owned(),
                deps: deps.split_whitespace().map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// The modules to load, dependencies first: each module of `wanted` present in
/// `deps` (in modules.dep's order), after what it depends on (a module's
/// dependency list is loaded from its end, as modprobe does). Indexes into `deps`.
pub fn load_order(deps: &[ModuleDep], wanted: &[&str]) -> Vec<usize> {
    let wanted: BTreeSet<String> = wanted.iter().map(|w| w.replace('-', "_")).collect();
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    fn visit(
        i: usize,
        deps: &[ModuleDep],
        seen: &mut BTreeSet<usize>,
        order: &mut Vec<usize>,
        depth: usize,
    ) {
        // A dependency cycle (a broken modules.dep) ends here rather than recursing forever.
        if depth > deps.len() || !seen.insert(i) {
            return;
        }
        for d in deps[i].deps.iter().rev() {
            if let Some(j) = deps.iter().position(|m| &m.path == d) {
                visit(j, deps, seen, order, depth + 1);
            }
        }
        order.push(i);
    }
    for (i, m) in deps.iter().enumerate() {
        if wanted.contains(&m.name()) {
            visit(i, deps, &mut seen, &mut order, 0);
        }
    }
    order
}

/// A module file's contents, decompressed (.ko, .ko.gz, .ko.xz, .ko.zst).
fn read_module(path: &Path) -> Result<Vec<u8>, ModulesError> {
    let err = |reason: String| ModulesError::Read {
        path: path.to_owned(),
        reason,
    };
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some(("xz", "xz-utils"))
    } else if name.ends_with(".zst") {
        Some(("zstd", "zstd"))
    } else {
        None
    };
    let bytes = if let Some((tool, package)) = tool {
        let out = Command::new(tool)
            .arg("-dc")
            .arg(path)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                err(format!(
                    "{tool} cannot be started ({e}); install the {package} package"
                ))
            })?;
        if !out.status.success() {
            return Err(err(format!(
                "{tool} -dc failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        out.stdout
    } else if name.ends_with(".gz") {
        let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(f)
            .read_to_end(&mut out)
            .map_err(|e| err(format!("not a gzip file: {e}")))?;
        out
    } else {
        std::fs::read(path).map_err(|e| err(e.to_string()))?
    };
    if !bytes.starts_with(b"\x7fELF") {
        return Err(err("it is not a kernel module (no ELF header)".into()));
    }
    Ok(bytes)
}

/// Scratch directory removed on drop.
struct Stage(PathBuf);

impl Stage {
    fn new() -> Result<Self, ModulesError> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "pmemvm-modules-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).map_err(|e| ModulesError::Host {
            what: format!("creating {}", p.display()),
            reason: e.to_string(),
        })?;
        Ok(Self(p))
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The host's depmod, if any (kmod; often outside a user's PATH in /sbin).
fn depmod() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("depmod"))
        .find(|p| p.is_file())
}

/// Every regular file under `dir`, with its path relative to `dir`.
fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let t = e.file_type()?;
        if t.is_dir() {
            walk(&e.path(), &r, out)?;
        } else if t.is_file() {
            out.push((r, e.path()));
        }
    }
    Ok(())
}

/// Runs the host's depmod over the staged tree; says why not where it cannot.
fn index(base: &Path, release: &str) {
    let Some(tool) = depmod() else {
        log::warn!(
            "--modules: no depmod on this host (package kmod): the guest gets modules.dep but \
             not the indexes kmod users (ndctl, daxctl) read"
        );
        return;
    };
    match Command::new(&tool)
        .arg("-b")
        .arg(base)
        .arg(release)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            if !base
                .join("lib/modules")
                .join(release)
                .join("modules.dep.bin")
                .is_file()
            {
                log::info!(
                    "--modules: {} wrote no modules.dep.bin (busybox's?): kmod users in the \
                     guest will not find the modules",
                    tool.display()
                );
            }
        }
        Ok(out) => log::warn!(
            "--modules: {} failed: {}",
            tool.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => log::warn!("--modules: cannot run {}: {e}", tool.display()),
    }
}

pub(super) fn pack(tree: &ModuleTree) -> Result<Vec<(String, Vec<u8>, u32)>, ModulesError> {
    let dep_file = tree.dir.join("modules.dep");
    let text = std::fs::read_to_string(&dep_file).map_err(|e| ModulesError::Read {
        path: dep_file.clone(),
        reason: e.to_string(),
    })?;
    let deps = parse_modules_dep(&text);
    let wanted_and_on_demand: Vec<&str> = WANTED.iter().chain(ON_DEMAND).copied().collect();
    let order = load_order(&deps, &wanted_and_on_demand);
    // The init loads WANTED and what they need; ON_DEMAND modules wait for modprobe.
    let loaded: BTreeSet<usize> = load_order(&deps, WANTED).into_iter().collect();
    let host = |what: String| {
        move |e: std::io::Error| ModulesError::Host {
            what,
            reason: e.to_string(),
        }
    };
    let stage = Stage::new()?;
    let rel_dir = stage.0.join("lib/modules").join(&tree.release);
    std::fs::create_dir_all(&rel_dir).map_err(host(format!("creating {}", rel_dir.display())))?;
    let packed: BTreeSet<&str> = order.iter().map(|&i| deps[i].path.as_str()).collect();
    let mut dep_text = String::new();
    let mut load = String::new();
    // Every path read, written or put in the initrd comes from modules.dep.
    if let Some(&i) = order.iter().find(|&&i| !inside_tree(&deps[i].path)) {
        return Err(ModulesError::OutsideTree {
            file: dep_file,
            dir: tree.dir.clone(),
            path: deps[i].path.clone(),
        });
    }
    for &i in &order {
        let m = &deps[i];
        let plain = plain_path(&m.path);
        let target = rel_dir.join(&plain);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(host(format!("creating {}", parent.display())))?;
        }
        let bytes = read_module(&tree.dir.join(&m.path))?;
        std::fs::write(&target, bytes).map_err(host(format!("writing {}", target.display())))?;
        let needed: Vec<String> = m
            .deps
            .iter()
            .filter(|d| packed.contains(d.as_str()))
            .map(|d| plain_path(d))
            .collect();
        dep_text.push_str(&format!("{plain}: {}\n", needed.join(" ")));
        if loaded.contains(&i) {
            load.push_str(&format!("{plain}\n"));
        }
    }
    // What is built in, so kmod users in the guest (daxctl, ndctl) know it.
    for f in [
        "modules.builtin",
        "modules.builtin.modinfo",
        "modules.order",
    ] {
        let src = tree.dir.join(f);
        if src.is_file() {
            std::fs::copy(&src, rel_dir.join(f))
                .map_err(host(format!("copying {}", src.display())))?;
        }
    }
    // depmod writes the binary indexes libkmod reads (modules.dep.bin, modules.builtin.bin,
    // ...); without them (no depmod, or busybox's) the guest's init still loads the modules.
    index(&stage.0, &tree.release);
    std::fs::write(rel_dir.join("modules.dep"), &dep_text)
        .map_err(host("writing modules.dep".into()))?;
    std::fs::write(rel_dir.join(LOAD_LIST), &load).map_err(host(format!("writing {LOAD_LIST}")))?;
    let mut files = Vec::new();
    walk(&stage.0, "", &mut files).map_err(host(format!("reading {}", stage.0.display())))?;
    files
        .into_iter()
        .map(|(rel, path)| {
            std::fs::read(&path)
                .map(|b| (rel, b, 0o644))
                .map_err(host(format!("reading {}", path.display())))
        })
        .collect()
}
