//! Power loss at every flush under pmemvm (nested tier): `record=` while a
//! program appends records with fsync on ext4 `-o dax` and XFS `-o dax`,
//! then `pmemvm crash-check` boots a fresh guest on crash images of the
//! recording and runs the file system's repair tool and the program's own
//! check; and a deliberately broken program is caught by a torn variant.
//!
//! One L1 (QEMU 10; 2 vCPUs for the broken program's recording, else 1),
//! in it with pmemvm and the guest image:
//! 1. per file system: a first run makes an fsdax namespace on a labelled
//!    DIMM, the file system and a zeroed file of 101 blocks; a second run,
//!    recorded, mounts it with `-o dax` and writes record i
//!    (block i, 4 KiB of `recNNNNN` text) with an fsync, then the commit
//!    marker i (8 digits at offset 0) with an fsync, for i = 1..100;
//!    `crash-check` checks every image on a hardware KVM — one `--at N` per
//!    flush, each result kept where an L1 restarted after a breakdown finds
//!    it — and four under nested TCG unless asked for every one (`--every
//!    K`, K a third of the flushes: flushes 0, K, 2K and the last; see
//!    [`Images`]); each checked image mounts (the journal or log
//!    recovers), `e2fsck -fn` / `xfs_repair -n` report it clean, and every
//!    record up to the durable commit marker is whole — the records the
//!    program had seen flushed (it writes marker i only after record i's
//!    fsync returned). The test then wants the markers never to go back
//!    from one flush to a later one, and all 100 at the last flush.
//!    The recorded runs have two vCPUs and a concurrent writer: a loop of
//!    64 KiB rewrites of another file with fsync while the records go in,
//!    so each epoch is taken with another vCPU storing. The L1 has one CPU
//!    (the guest's two vCPUs interleave on it): in a two-CPU L1 a strict run
//!    met an RCU stall of the guest (vCPU 1 in `native_apic_msr_write`,
//!    interrupts off: the TCG platform's interrupt delivery of
//!    docs/nested-platform.md, "Guest faults in a two-vCPU L1"); the
//!    recorder's stop with vCPUs truly in parallel is `record_instant`'s and
//!    `nested_record_instant`'s.
//! 2. the broken program on a label-less DIMM's raw `/dev/pmem0`, recorded
//!    with 2 vCPUs (the recorder's path with another vCPU running): record
//!    i and marker i with one fsync for both, i = 1..6. Each flush is then
//!    one record's epoch (data block and marker, nothing orders them); with
//!    seed `BROKEN_SEED` the torn variant of the image after flush 0 holds
//!    the marker of record 1 without all of its data (the manifest says
//!    so), and `crash-check` exits 1 naming that image.

use std::fs;
use std::time::Duration;

use pmemvm_tests::nested::{guest_image, Mode, NestedVm};
use pmemvm_tests::pmemvm::workspace_root;
use pmemvm_tests::require;

/// Records the good program writes.
const RECORDS: u32 = 100;
/// A seed whose torn image after flush 0 applies the broken program's
/// commit line and not all of record 1's lines (checked from the manifest).
const BROKEN_SEED: u64 = 3;

/// Guest: the namespace, the file system, the file (`sh -c SETUP fs`).
const SETUP: &str = r#"set -e
ndctl create-namespace -m fsdax -M mem > /dev/null
i=0; while [ ! -e /dev/pmem0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
case $1 in
  ext4) mkfs.ext4 -q -F -b 4096 /dev/pmem0 ;;
  xfs) mkfs.xfs -q -f -m reflink=0 /dev/pmem0 ;;
esac
mkdir -p /mnt
mount -o dax /dev/pmem0 /mnt
dd if=/dev/zero of=/mnt/f bs=4096 count=101 conv=fsync 2> /dev/null
umount /mnt
echo setup-done
"#;

/// Guest: the program (`sh -c PROGRAM DEV MOUNT? good|broken N`).
const PROGRAM: &str = r#"set -e
i=0; while [ ! -e /dev/pmem0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
dev=$1; mode=$2; n=$3
if [ "$dev" = /dev/pmem0 ] && [ "$4" = mount ]; then
  mkdir -p /mnt; mount -o dax /dev/pmem0 /mnt
  grep -q ' /mnt .*dax' /proc/mounts || { echo "not mounted with dax"; exit 3; }
  f=/mnt/f
  # A concurrent writer (the other vCPU's work while the records go in):
  # 64 KiB rewrites of another file, each with an fsync, until the records end.
  ( j=0; while [ ! -e /tmp/stop ]; do
      yes "w$j" | head -c 65536 | dd of=/mnt/g bs=4096 seek=$(( j % 8 * 16 )) conv=notrunc,fsync 2> /dev/null
      j=$((j+1)); done; echo "writer-rounds $j" ) &
  writer=$!
else
  f=$dev
fi
i=1
while [ $i -le $n ]; do
  rec=$(printf 'rec%05d' $i)
  if [ $mode = good ]; then
    yes "$rec" | head -c 4096 | dd of=$f bs=4096 seek=$i count=1 conv=notrunc,fsync 2> /dev/null
  else
    yes "$rec" | head -c 4096 | dd of=$f bs=4096 seek=$i count=1 conv=notrunc 2> /dev/null
  fi
  printf '%08d' $i | dd of=$f bs=8 count=1 conv=notrunc,fsync 2> /dev/null
  i=$((i+1))
done
if [ "$f" = /mnt/f ]; then touch /tmp/stop; wait $writer; umount /mnt; fi
echo "program-done $n"
"#;

/// Guest: the check of one crash image (`sh -c CHECK ext4|xfs|raw`).
const CHECK: &str = r#"
fs=$1
i=0; while [ ! -e /dev/pmem0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
if [ $fs = raw ]; then
  f=/dev/pmem0
else
  mkdir -p /mnt
  mount -o dax /dev/pmem0 /mnt || { dmesg | tail -4; echo "mount failed"; exit 1; }
  umount /mnt
  if [ $fs = ext4 ]; then
    e2fsck -fn /dev/pmem0 > /tmp/repair.txt 2>&1 || { tail -5 /tmp/repair.txt; echo "e2fsck -fn: not clean"; exit 1; }
  else
    xfs_repair -n /dev/pmem0 > /tmp/repair.txt 2>&1 || { tail -5 /tmp/repair.txt; echo "xfs_repair -n: not clean"; exit 1; }
  fi
  mount -o dax,ro /dev/pmem0 /mnt || { dmesg | tail -4; echo "read-only mount failed"; exit 1; }
  f=/mnt/f
fi
c=$(dd if=$f bs=8 count=1 2> /dev/null | tr -d '\000' | sed 's/^0*//')
c=${c:-0}
# Records 1..c as the program wrote them, against the file's blocks 1..c:
# one pass; on a difference, the first record that differs is named.
expect() { awk -v a=$1 -v b=$2 'BEGIN { for (i = a; i <= b; i++) { r = sprintf("rec%05d\n", i); s = ""; while (length(s) < 4096) s = s r; printf "%s", substr(s, 1, 4096) } }'; }
if [ $c -gt 0 ] && [ "$(expect 1 $c | md5sum)" != "$(dd if=$f bs=4096 skip=1 count=$c 2> /dev/null | md5sum)" ]; then
  i=1
  while [ $i -le $c ]; do
    [ "$(expect $i $i | md5sum)" = "$(dd if=$f bs=4096 skip=$i count=1 2> /dev/null | md5sum)" ] || break
    i=$((i+1))
  done
  echo "commit marker $c but record $i is not all there"
  exit 1
fi
[ $fs = raw ] || umount /mnt
echo "records $c"
"#;

/// In L1 first (cwd = the share, `$S`): where the work goes — DIMM files,
/// logs and images on a tmpfs of the L1 (holes kept, no 9p round trips), in
/// the share on the user's host in direct mode — and `tried NAME CMD…`,
/// which runs CMD (output to `$O/NAME.out` and `.err`, status to
/// `$O/steps.txt`) and, after a platform breakdown (`breakdown`: a guest
/// triple fault at a RIP inside the L1's modules; docs/nested-platform.md,
/// "The evidence the harness accepts"), runs `$before` and CMD again, up to
/// `$TRIES` runs in all; any other end is CMD's result. `$O` is where the
/// test reads the results: the share, or `$P` with every image.
const L1_PREAMBLE: &str = r#"
S=$(pwd)
O=${P:-$S}
if [ "$WORK" = tmpfs ]; then
  mkdir -p /w && { grep -q ' /w ' /proc/mounts || mount -t tmpfs -o size=2500M tmpfs /w; } && W=/w || exit 1
else
  W=$O/work; mkdir -p $W || exit 1
fi
mkdir -p $W/tmp && export TMPDIR=$W/tmp && cd $W || exit 1
RUN="--kernel $S/vmlinux --initrd $S/initramfs.cpio.gz --memory 512M --timeout 420"
CMDLINE='console=ttyS0 reboot=acpi panic=-1 quiet'
tried() {
  name=$1; shift; try=1
  while :; do
    eval "$before"
    "$@" > $O/$name.out 2> $O/$name.err; st=$?
    if [ $try -lt $TRIES ] && breakdown $O/$name.err > /dev/null; then
      echo "$(breakdown $O/$name.err)" >> $S/once-more.txt; try=$((try+1)); continue
    fi
    echo "$name $st" >> $O/steps.txt; break
  done
}
"#;

/// In L1, a sample of the images: per file system the setup, the recorded
/// program and one `crash-check --every K` (flushes 0, K, 2K, the last).
const L1_SAMPLE: &str = r#"
for fs in $FILE_SYSTEMS; do
  case $fs in ext4) size=64M ;; xfs) size=384M ;; esac
  before="rm -f $fs-setup.img"
  tried $fs-setup pmemvm run $RUN --cmdline "$CMDLINE" --nvdimm "$size,file=$fs-setup.img" \
    -- sh -c "$SETUP" setup $fs
  # The recorded run: two vCPUs, the records and a concurrent writer.
  before="rm -rf $fs-rec; cp $fs-setup.img $fs.img"
  tried $fs-program pmemvm run $RUN --cmdline "$CMDLINE" --cpus 2 \
    --nvdimm "$size,file=$fs.img,record=$fs-rec" -- sh -c "$PROGRAM" program /dev/pmem0 good $RECORDS mount
  last=$(pmemvm crash-images $fs-rec --out $fs-probe --at 0 | sed -n 's/.*recorded flushes 1 to \([0-9]*\).*/\1/p')
  rm -rf $fs-probe
  echo "$fs-flushes ${last:-0}" >> $O/steps.txt
  before="rm -rf $fs-images"
  tried $fs-check pmemvm crash-check $fs-rec --every $(( (${last:-3} + 2) / 3 )) --images $fs-images \
    --json $O/$fs-check.json $RUN --cmdline "$CMDLINE" -- sh -c "$CHECK" check $fs
done
"#;

/// In L1, every image: the same setup and recorded program, then one
/// `crash-check --at N` per flush. The recording and each flush's result are
/// kept in `$P`, a host directory the L1 mounts at the same path, so an L1
/// restarted after a breakdown of the emulated platform goes on from the
/// first flush without a result instead of booting hundreds of images
/// again, and a check whose boot broke down (`tried`) reruns that flush only.
const L1_ALL: &str = r#"
for fs in $FILE_SYSTEMS; do
  case $fs in ext4) size=64M ;; xfs) size=384M ;; esac
  if [ ! -e $P/$fs-rec.kept ]; then
    before="rm -f $fs-setup.img"
    tried $fs-setup pmemvm run $RUN --cmdline "$CMDLINE" --nvdimm "$size,file=$fs-setup.img" \
      -- sh -c "$SETUP" setup $fs
    before="rm -rf $fs-rec; cp $fs-setup.img $fs.img"
    tried $fs-program pmemvm run $RUN --cmdline "$CMDLINE" --cpus 2 \
      --nvdimm "$size,file=$fs.img,record=$fs-rec" -- sh -c "$PROGRAM" program /dev/pmem0 good $RECORDS mount
    [ "$(tail -n1 $P/steps.txt)" = "$fs-program 0" ] || continue
    if [ "$WORK" = tmpfs ]; then
      rm -rf $P/$fs-rec && cp -r $fs-rec $P/$fs-rec || exit 1
    fi
    touch $P/$fs-rec.kept
  elif [ "$WORK" = tmpfs ] && [ ! -d $fs-rec ]; then
    cp -r $P/$fs-rec $fs-rec || exit 1
  fi
  last=$(pmemvm crash-images $fs-rec --out $fs-probe --at 0 | sed -n 's/.*recorded flushes 1 to \([0-9]*\).*/\1/p')
  rm -rf $fs-probe
  grep -q "^$fs-flushes " $P/steps.txt || echo "$fs-flushes ${last:-0}" >> $P/steps.txt
  mkdir -p $P/$fs-checks
  n=0
  while [ $n -le ${last:-0} ]; do
    if [ ! -e $P/$fs-checks/$n.json ]; then
      before="rm -f $P/$fs-checks/$n.part"
      tried $fs-check-$n pmemvm crash-check $fs-rec --at $n --json $P/$fs-checks/$n.part \
        $RUN --cmdline "$CMDLINE" -- sh -c "$CHECK" check $fs
      [ -e $P/$fs-checks/$n.part ] && mv $P/$fs-checks/$n.part $P/$fs-checks/$n.json
    fi
    n=$((n+1))
  done
done
"#;

/// In L1, the broken program on a raw, label-less DIMM, 2 vCPUs, and the
/// torn image after its flush 0.
const L1_BROKEN: &str = r#"
before="rm -rf raw-rec; rm -f raw.img; truncate -s $((64 * 1048576 + 4096)) raw.img"
tried raw-program pmemvm run $RUN --cmdline "$CMDLINE" --cpus 2 \
  --nvdimm "64M,file=raw.img,label-size=0,record=raw-rec" -- sh -c "$PROGRAM" program /dev/pmem0 broken 6
before="rm -rf raw-images"
tried raw-check pmemvm crash-check raw-rec --at 0 --torn $BROKEN_SEED --images raw-images --json $O/raw-check.json \
  $RUN --cmdline "$CMDLINE" -- sh -c "$CHECK" check raw
mkdir -p $O/raw-images
cp raw-images/images.json $O/raw-images/
"#;

/// Which crash images the test checks: every one where a guest boots in well
/// under a second (a hardware KVM: direct mode), four per file system under
/// nested TCG, where one boot and check takes tens of seconds and the two
/// recordings make hundreds of flushes each (`PMEMVM_TEST_CRASH_IMAGES=all`
/// or `sample` chooses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Images {
    All,
    Sample,
}

impl Images {
    fn for_mode(mode: Mode) -> Self {
        match std::env::var("PMEMVM_TEST_CRASH_IMAGES").as_deref() {
            Ok("all") => Self::All,
            Ok("sample") => Self::Sample,
            Ok(other) => panic!("PMEMVM_TEST_CRASH_IMAGES={other}: all or sample"),
            Err(_) if mode == Mode::Direct => Self::All,
            Err(_) => Self::Sample,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Sample => "sample",
        }
    }

    /// The harness's deadline: every image of two recordings nested would
    /// take hours.
    fn deadline(self) -> Duration {
        match self {
            Self::All => Duration::from_secs(6 * 3600),
            Self::Sample => Duration::from_secs(3000),
        }
    }
}

/// The landing tier's check of the recorder and `crash-check` under pmemvm
/// nested: ext4's recording, a sample of its images (four under nested TCG,
/// every one on a hardware KVM), no broken program.
#[test]
fn an_ext4_recording_is_crash_checked_image_by_image() {
    check_recordings("ext4", false);
}

#[test]
#[ignore = "full: two file systems' 100-record recordings and a 2-vCPU L1, about 3 min of TCG (every image, PMEMVM_TEST_CRASH_IMAGES=all: about 100 min per file system)"]
// test-slots: 2
fn every_checked_image_recovers_with_the_flushed_records_and_a_broken_program_is_caught_torn() {
    // PMEMVM_TEST_CRASH_FS narrows the file systems (e.g. "xfs", or "" for
    // the broken program alone) and PMEMVM_TEST_CRASH_BROKEN=no leaves the
    // broken program out, while working on one part — or to run every
    // image of each file system in its own one-vCPU L1, side by side.
    let file_systems =
        std::env::var("PMEMVM_TEST_CRASH_FS").unwrap_or_else(|_| "ext4 xfs".to_string());
    let broken = match std::env::var("PMEMVM_TEST_CRASH_BROKEN").as_deref() {
        Err(_) | Ok("yes") => true,
        Ok("no") => false,
        Ok(other) => panic!("PMEMVM_TEST_CRASH_BROKEN={other}: yes or no"),
    };
    check_recordings(&file_systems, broken);
}

/// Records and crash-checks each of `file_systems` (space-separated) and,
/// when `broken`, the broken program; see the module's description.
fn check_recordings(file_systems: &str, broken: bool) {
    let qemu = require!(pmemvm_tests::nested::find_qemu_10());
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm)).with_qemu(qemu);
    let kernel = require!(guest_image("vmlinux"));
    let initrd = require!(guest_image("initramfs.cpio.gz"));
    let images = Images::for_mode(vm.mode());
    let direct = vm.mode() == Mode::Direct;
    let mut script = L1_PREAMBLE.to_string();
    script.push_str(match images {
        Images::All => L1_ALL,
        Images::Sample => L1_SAMPLE,
    });
    if broken {
        script.push_str(L1_BROKEN);
    }
    // With every image, the results are kept in a host directory (one per
    // choice of file systems, emptied first) that outlives an L1 restart.
    let kept = (images == Images::All).then(|| {
        let tag = file_systems
            .split_whitespace()
            .collect::<Vec<_>>()
            .join("-");
        let dir = workspace_root().join(format!("target/nested-crash-consistency/all-{tag}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("the kept results' directory");
        dir
    });
    let mut vm = vm
        // The broken program's recording has two vCPUs.
        .l1_cpus(if broken { 2 } else { 1 })
        .l1_memory_mib(3072)
        .deadline(images.deadline())
        .env("WORK", if direct { "share" } else { "tmpfs" })
        .file("vmlinux", kernel)
        .file("initramfs.cpio.gz", initrd)
        .env("SETUP", SETUP)
        .env("PROGRAM", PROGRAM)
        .env("CHECK", CHECK)
        .env("RECORDS", &RECORDS.to_string())
        .env("FILE_SYSTEMS", file_systems)
        .env("BROKEN_SEED", &BROKEN_SEED.to_string());
    if let Some(dir) = &kept {
        vm = vm.mount_same_path(dir).env("P", &dir.display().to_string());
    }
    let out = vm
        .run(&[
            "sh",
            "-c",
            &pmemvm_tests::nested::l1_script_with_retries(&script),
        ])
        .expect("the L1 script");
    pmemvm_tests::nested::note_l1_restarts("nested_crash_consistency", &out);
    let results = kept.clone().unwrap_or_else(|| out.path(""));
    let read = |f: &str| fs::read_to_string(results.join(f)).unwrap_or_default();
    let steps = read("steps.txt");
    let ctx = |what: &str| {
        format!(
            "{}\n--- steps (last 40) ---\n{}\n--- {what} ---\n{}",
            out.dump(),
            tail(&steps, 40),
            read(what)
        )
    };
    for fs_name in file_systems.split_whitespace() {
        for step in ["setup", "program"] {
            let line = format!("{fs_name}-{step} 0");
            assert!(
                steps.lines().any(|l| l == line),
                "{line}\n{}",
                ctx(&format!("{fs_name}-{step}.out"))
            );
        }
        let flushes: u64 = steps
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{fs_name}-flushes ")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(
            flushes >= u64::from(RECORDS),
            "{fs_name}: {flushes} flushes for {RECORDS} fsyncs\n{}",
            ctx(&format!("{fs_name}-program.err"))
        );
        // The other vCPU's writer ran through the recording.
        let program = read(&format!("{fs_name}-program.out"));
        let rounds: u64 = program
            .lines()
            .find_map(|l| l.strip_prefix("writer-rounds "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        assert!(
            rounds >= 1 && program.contains("program-done"),
            "{fs_name}: the concurrent writer's rounds: {rounds}\n{}",
            ctx(&format!("{fs_name}-program.err"))
        );
        let checks = match images {
            Images::Sample => {
                let line = format!("{fs_name}-check 0");
                assert!(
                    steps.lines().any(|l| l == line),
                    "{line}\n{}",
                    ctx(&format!("{fs_name}-check.out"))
                );
                report_checks(&read(&format!("{fs_name}-check.json"))).unwrap_or_else(|e| {
                    panic!(
                        "{fs_name}-check.json: {e}\n{}",
                        ctx(&format!("{fs_name}-check.err"))
                    )
                })
            }
            // One report per flush, each of one image.
            Images::All => (0..=flushes)
                .flat_map(|n| {
                    report_checks(&read(&format!("{fs_name}-checks/{n}.json"))).unwrap_or_else(
                        |e| {
                            panic!(
                                "{fs_name}: the check of flush {n}: {e}\n{}",
                                ctx(&format!("{fs_name}-check-{n}.err"))
                            )
                        },
                    )
                })
                .collect(),
        };
        assert!(
            checks.len() >= 4,
            "{fs_name}: {} images checked",
            checks.len()
        );
        // The durable marker never goes back, and all records are there at the end.
        // (Plain images only: a torn variant of a file system's own metadata
        // writes is a state its mount may refuse, docs/crash-consistency.md.)
        let mut last = 0u64;
        let mut plain = 0;
        let mut flushes_seen = Vec::new();
        for c in &checks {
            assert_eq!(c["status"], 0, "{fs_name}: {c}");
            let stdout = c["stdout"].as_str().unwrap_or_default();
            let n: u64 = stdout
                .lines()
                .find_map(|l| l.strip_prefix("records "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("{fs_name}: no records line: {c}"));
            if c["torn"] == false {
                assert!(n >= last, "{fs_name}: marker {n} after {last}: {c}");
                last = n;
                plain += 1;
                flushes_seen.push(c["flush"].as_u64().unwrap_or(u64::MAX));
            }
        }
        match images {
            // The image before the first flush (0) and after each of
            // flushes 1..=`flushes`, none left out, in order.
            Images::All => assert_eq!(
                flushes_seen,
                (0..=flushes).collect::<Vec<_>>(),
                "{fs_name}: every image of {flushes} flushes"
            ),
            Images::Sample => assert!(plain >= 4, "{fs_name}: {plain} images"),
        }
        assert_eq!(
            last,
            u64::from(RECORDS),
            "{fs_name}: the last image's marker"
        );
        let seconds: f64 = checks.iter().filter_map(|c| c["seconds"].as_f64()).sum();
        println!(
            "{fs_name}: {flushes} flushes; {} images checked clean ({}) in {seconds:.0} s of guest boots",
            checks.len(),
            images.word()
        );
    }
    if !broken {
        return;
    }
    // The broken program: the torn image after flush 0 has the marker of
    // record 1 (line at offset 0) without all of record 1's lines.
    // pmemvm's stderr says why a run ended otherwise (a time-out's
    // per-vCPU report, a platform breakdown).
    assert!(
        steps.lines().any(|l| l == "raw-program 0"),
        "{}\n--- raw-program.out ---\n{}",
        ctx("raw-program.err"),
        read("raw-program.out")
    );
    let manifest: serde_json::Value = serde_json::from_str(&read("raw-images/images.json"))
        .unwrap_or_else(|e| panic!("raw manifest: {e}\n{}", ctx("raw-check.err")));
    let torn = &manifest["images"][0]["torn"];
    let applied: Vec<u64> = torn["lines_applied"]
        .as_array()
        .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
        .unwrap_or_default();
    assert_eq!(
        torn["lines_after"], 65,
        "record 1 (64 lines) and its marker: {torn}"
    );
    assert!(
        applied.contains(&0) && applied.len() < 65,
        "seed {BROKEN_SEED} no longer tears the marker from its record at flush 0 (pick another seed): {torn}"
    );
    assert!(
        steps.lines().any(|l| l == "raw-check 1"),
        "{}",
        ctx("raw-check.out")
    );
    let table = read("raw-check.out");
    assert!(
        table.contains("the first: the image after flush 0 (torn)")
            && table.contains("commit marker 1 but record 1 is not all there"),
        "{}",
        ctx("raw-check.out")
    );
}

/// The image checks of one `crash-check --json` report.
fn report_checks(text: &str) -> Result<Vec<serde_json::Value>, serde_json::Error> {
    let report: serde_json::Value = serde_json::from_str(text)?;
    Ok(report["checks"].as_array().cloned().unwrap_or_default())
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
