//! Where the nested engine's files are in the L1: the user's DIMM, legacy
//! pmem and disk files through a 9p mount of their own directories (or in
//! the run's share when pmemvm made them), `record=` directories through
//! their parents, each existing backing file locked on the host while the
//! L1 runs; and the `--nvdimm` options pmemvm in the L1 is given for them.

use std::fs;
use std::path::{Path, PathBuf};

#[cfg(test)]
use vmm::config::LegacyPmemSpec;
use vmm::config::{CxlPmemSpec, DiskSpec, MachineSpec, NvdimmSpec};

use super::l1::Mount;
use super::NestedError;

/// Where a `record=` directory is in L1: its parent (which must exist)
/// shared like a backing file's directory, the directory by its name there.
pub(crate) fn place_record_dir(dir: &Path, mounts: &mut Vec<Mount>) -> Result<String, NestedError> {
    let bad = |why: String| NestedError::BackingFile {
        file: dir.to_path_buf(),
        why,
    };
    vmm::nvdimm::record::check_dir(dir).map_err(|e| bad(e.to_string()))?;
    let name = dir
        .file_name()
        .ok_or_else(|| bad("it names no directory".into()))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let host_dir = parent
        .canonicalize()
        .map_err(|e| bad(format!("its parent cannot be shared into the L1 VM ({e})")))?;
    Ok(format!("{}/{name}", mount_of(host_dir, mounts).l1_dir))
}

/// The host-side locks of the user's backing files, held while the L1 runs.
#[derive(Debug)]
pub(crate) struct HostLocks(#[allow(dead_code)] Vec<fs::File>);

/// Takes pmemvm's lock (`flock`, exclusive; shared for `readonly`) on an
/// existing backing file on the host: pmemvm's own lock is taken in the L1,
/// where QEMU's 9p server does not pass it on, so this one keeps a pmemvm on
/// the host (or another nested one) off the file for the run. A file that
/// does not exist yet is created by pmemvm in the L1 and not locked here.
pub(crate) fn lock_on_host(file: &Path, readonly: bool) -> Result<Option<fs::File>, NestedError> {
    let Ok(f) = fs::File::open(file) else {
        return Ok(None);
    };
    if !vmm::memory::backing::try_lock(&f, readonly).unwrap_or(false) {
        return Err(NestedError::BackingFile {
            file: file.to_path_buf(),
            why: "it is in use by another pmemvm (it holds the file's lock)".into(),
        });
    }
    Ok(Some(f))
}

/// What placing a machine's files in L1 takes: the share, the 9p mounts of
/// host directories (one per directory) and the host locks of the files.
struct Placer<'a> {
    share: &'a Path,
    mounts: Vec<Mount>,
    locks: Vec<fs::File>,
}

impl Placer<'_> {
    /// Where one backing file is in L1 ([`place_file`]).
    fn file(
        &mut self,
        file: Option<&PathBuf>,
        temp_name: String,
        readonly: bool,
    ) -> Result<String, NestedError> {
        place_file(
            self.share,
            file,
            temp_name,
            readonly,
            &mut self.mounts,
            &mut self.locks,
        )
    }
}

/// Where one backing file is in L1: a file in the share by its relative
/// path, another file through a 9p mount of its directory at `/host/dimmN`
/// (one mount per directory, in `mounts`; locked on the host, see
/// [`lock_on_host`]), a temporary one (`None`) as `temp_name` in the share
/// (removed with it).
pub(crate) fn place_file(
    share: &Path,
    file: Option<&PathBuf>,
    temp_name: String,
    readonly: bool,
    mounts: &mut Vec<Mount>,
    locks: &mut Vec<fs::File>,
) -> Result<String, NestedError> {
    let Some(file) = file else {
        return Ok(temp_name);
    };
    if file.starts_with(share) {
        return Ok(file
            .strip_prefix(share)
            .map(|p| p.display().to_string())
            .unwrap_or_default());
    }
    let bad = |why: &str| NestedError::BackingFile {
        file: file.clone(),
        why: why.to_string(),
    };
    let name = file
        .file_name()
        .ok_or_else(|| bad("it names no file"))?
        .to_string_lossy()
        .into_owned();
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    locks.extend(lock_on_host(file, readonly)?);
    let dir = parent.canonicalize().map_err(|e| {
        bad(&format!(
            "its directory cannot be shared into the L1 VM ({e})"
        ))
    })?;
    Ok(format!("{}/{name}", mount_of(dir, mounts).l1_dir))
}

/// The 9p mount of host directory `host_dir` in L1 (`/host/dimmN`): the one
/// already in `mounts`, or a new one added there.
pub(crate) fn mount_of(host_dir: PathBuf, mounts: &mut Vec<Mount>) -> Mount {
    if let Some(m) = mounts.iter().find(|m| m.host_dir == host_dir) {
        return m.clone();
    }
    let n = mounts.len();
    let m = Mount {
        tag: format!("dimm{n}"),
        host_dir,
        l1_dir: format!("/host/dimm{n}"),
    };
    mounts.push(m.clone());
    m
}

/// The machine as `pmemvm boot` in L1 sees it: `machine` with each backing
/// file where L1 sees it ([`place_file`]: temporary DIMMs are `pmemN.img`,
/// temporary legacy ranges `legacyN.img` in the share; disks are always
/// files), `record=` directories through their parents, and the mounts and
/// host locks that takes. The L1 receives it serialized (`boot --machine`).
pub(crate) fn place_machine(
    share: &Path,
    machine: &MachineSpec,
) -> Result<(MachineSpec, Vec<Mount>, HostLocks), NestedError> {
    let mut placer = Placer {
        share,
        mounts: Vec::new(),
        locks: Vec::new(),
    };
    let mut l1 = MachineSpec {
        nvdimms: Vec::new(),
        disks: Vec::new(),
        legacy_pmem: Vec::new(),
        cxl_pmem: Vec::new(),
        ..machine.clone()
    };
    for (i, spec) in machine.nvdimms.iter().enumerate() {
        if spec.hugepages {
            return Err(NestedError::Unsupported("--nvdimm SIZE,hugepages"));
        }
        let path = placer.file(spec.file.as_ref(), format!("pmem{i}.img"), spec.readonly)?;
        let record = match &spec.record {
            Some(dir) => Some(place_record_dir(dir, &mut placer.mounts)?),
            None => None,
        };
        l1.nvdimms.push(NvdimmSpec {
            file: Some(PathBuf::from(path)),
            record: record.map(PathBuf::from),
            ..spec.clone()
        });
    }
    for (i, spec) in machine.legacy_pmem.iter().enumerate() {
        let path = placer.file(spec.file.as_ref(), format!("legacy{i}.img"), spec.readonly)?;
        l1.legacy_pmem.push(spec.with_file(path.into()));
    }
    for (i, spec) in machine.cxl_pmem.iter().enumerate() {
        let path = placer.file(spec.file.as_ref(), format!("cxl{i}.img"), false)?;
        l1.cxl_pmem.push(CxlPmemSpec {
            file: Some(PathBuf::from(path)),
            ..spec.clone()
        });
    }
    for (i, disk) in machine.disks.iter().enumerate() {
        let path = placer.file(Some(&disk.path), format!("disk{i}.img"), disk.readonly)?;
        l1.disks.push(DiskSpec {
            path: PathBuf::from(path),
            readonly: disk.readonly,
        });
    }
    Ok((l1, placer.mounts, HostLocks(placer.locks)))
}

/// The file in the share the L1's `pmemvm boot --machine` reads.
pub(crate) const MACHINE_FILE: &str = "machine.json";

/// Writes `machine` (as the L1 sees it) into the share for `boot --machine`.
pub(crate) fn write_machine(share: &Path, machine: &MachineSpec) -> Result<(), NestedError> {
    let json = serde_json::to_vec_pretty(machine).map_err(|e| NestedError::Io {
        what: "serialise the machine for the L1".into(),
        source: std::io::Error::other(e),
    })?;
    fs::write(share.join(MACHINE_FILE), json).map_err(super::io_err("write the machine file"))
}

/// A file of the share by its path relative to the share.
pub(crate) fn in_share(share: &Path, path: &Path) -> Result<String, NestedError> {
    path.strip_prefix(share)
        .map(|p| p.display().to_string())
        .map_err(|_| NestedError::BackingFile {
            file: path.to_path_buf(),
            why: "it is not in the run's scratch directory (pmemvm bug)".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::exit_status::Classified;

    fn machine(
        nvdimms: Vec<NvdimmSpec>,
        legacy_pmem: Vec<LegacyPmemSpec>,
        disks: Vec<DiskSpec>,
    ) -> MachineSpec {
        MachineSpec {
            nvdimms,
            legacy_pmem,
            disks,
            ..MachineSpec::default()
        }
    }

    /// The devices' words of the machine as the L1 sees it (after `--cpus N
    /// --memory M`), each spec spelled by its `Display`.
    fn words(l1: &MachineSpec) -> Vec<String> {
        l1.to_args()[4..].to_vec()
    }

    #[test]
    fn dimms_are_placed_in_the_share_or_through_their_directory() {
        let share = std::env::temp_dir().join(format!("pmemvm-place-{}", std::process::id()));
        fs::create_dir_all(&share).expect("share");
        let user: NvdimmSpec = format!(
            "64M,label-size=0,file={}/sub-user.img",
            std::env::temp_dir().display()
        )
        .parse()
        .expect("spec");
        let in_share: NvdimmSpec = format!("16M,readonly,file={}/t.img", share.display())
            .parse()
            .expect("spec");
        let temp: NvdimmSpec = "32M,node=1".parse().expect("spec");
        let disk: DiskSpec = format!("{}/root.ext4,readonly", share.display())
            .parse()
            .expect("disk");
        let outside: DiskSpec = format!("{}/sub-disk.img", std::env::temp_dir().display())
            .parse()
            .expect("disk");
        let (l1, mounts, _) = place_machine(
            &share,
            &machine(vec![user, in_share, temp], vec![], vec![disk, outside]),
        )
        .expect("placed");
        let args = words(&l1);
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].tag, "dimm0");
        // Each spec as the user typed it, the L1's path in place of the host's.
        assert_eq!(args[1], "64M,file=/host/dimm0/sub-user.img,label-size=0");
        assert_eq!(args[3], "16M,file=t.img,readonly");
        assert_eq!(args[5], "32M,file=pmem2.img,node=1");
        assert_eq!(
            args[6..],
            [
                "--disk",
                "root.ext4,readonly",
                "--disk",
                "/host/dimm0/sub-disk.img"
            ]
        );
        // An existing file another pmemvm holds is refused before the L1 boots.
        let held = share.join("held.img");
        fs::write(&held, b"x").expect("file");
        let holder = lock_on_host(&held, false).expect("lock").expect("exists");
        let spec: NvdimmSpec = format!("16M,file={}", held.display())
            .parse()
            .expect("spec");
        let err = place_machine(Path::new("/no-share"), &machine(vec![spec], vec![], vec![]))
            .expect_err("locked");
        assert!(
            err.to_string().contains("in use by another pmemvm"),
            "{err}"
        );
        drop(holder);
        let missing: NvdimmSpec = "16M,file=/no/such/dir/x.img".parse().expect("spec");
        let err = place_machine(&share, &machine(vec![missing], vec![], vec![]))
            .expect_err("no directory");
        assert!(err.is_usage());
        assert!(err.to_string().contains("/no/such/dir/x.img"), "{err}");
        fs::remove_dir_all(&share).expect("cleanup");
    }

    #[test]
    fn legacy_ranges_follow_the_dimms_and_share_their_mounts() {
        let share =
            std::env::temp_dir().join(format!("pmemvm-place-legacy-{}", std::process::id()));
        fs::create_dir_all(&share).expect("share");
        let tmp = std::env::temp_dir();
        let dimm: NvdimmSpec = format!("64M,label-size=0,file={}/d.img", tmp.display())
            .parse()
            .expect("spec");
        let user: LegacyPmemSpec = format!("256M,file={}/e820.img", tmp.display())
            .parse()
            .expect("spec");
        let ro: LegacyPmemSpec = format!("16M,file={}/r.img,readonly", share.display())
            .parse()
            .expect("spec");
        let temp: LegacyPmemSpec = "1G".parse().expect("spec");
        let (l1, mounts, _) =
            place_machine(&share, &machine(vec![dimm], vec![user, ro, temp], vec![]))
                .expect("placed");
        let args = words(&l1);
        assert_eq!(mounts.len(), 1, "the DIMM's directory is mounted once");
        assert_eq!(
            args[2..],
            [
                "--pmem-legacy",
                "256M,file=/host/dimm0/e820.img",
                "--pmem-legacy",
                "16M,file=r.img,readonly",
                "--pmem-legacy",
                "1G,file=legacy2.img",
            ]
        );
        // Each spelling is what `pmemvm boot` in L1 parses back.
        for a in args[2..].iter().skip(1).step_by(2) {
            assert_eq!(a.parse::<LegacyPmemSpec>().expect("parses").to_string(), *a);
        }
        fs::remove_dir_all(&share).expect("cleanup");
    }
}
