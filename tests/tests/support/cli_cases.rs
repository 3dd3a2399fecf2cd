//! The table of malformed invocations of tests/tests/cli_bad_input.rs: each
//! with the words its one error line must contain, and whether it needs a
//! usable /dev/kvm to get that far.

use std::time::Duration;

pub(crate) const DEADLINE: Duration = Duration::from_secs(20);

/// What an invocation needs beyond the pmemvm binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Refused while parsing arguments or before KVM is opened.
    Nothing,
    /// Refused after /dev/kvm was opened (kernel, files, layout checks).
    Kvm,
    /// Needs a file made read-only in a way root cannot bypass.
    ReadOnlyFile,
}

/// One malformed invocation. In `args`, `{D}` is the scratch directory and
/// `{K}` a valid tiny guest kernel; `names` must appear in stderr.
pub(crate) struct Case {
    pub(crate) args: &'static [&'static str],
    pub(crate) names: &'static str,
    pub(crate) needs: Needs,
}

pub(crate) const fn case(args: &'static [&'static str], names: &'static str) -> Case {
    Case {
        args,
        names,
        needs: Needs::Nothing,
    }
}

pub(crate) const fn kvm(args: &'static [&'static str], names: &'static str) -> Case {
    Case {
        args,
        names,
        needs: Needs::Kvm,
    }
}

pub(crate) const KERNEL: &str = "--kernel";

/// The table. Sizes and suffixes, overflowing numbers, empty strings,
/// nvdimm options, label sizes, files of every wrong kind, kernels, initrds,
/// `run` and `acpi` inputs and outputs.
pub(crate) fn cases() -> Vec<Case> {
    vec![
        // --memory
        case(&["boot", KERNEL, "{K}", "--memory", "0"], "'0'"),
        case(&["boot", KERNEL, "{K}", "--memory", ""], "''"),
        case(&["boot", KERNEL, "{K}", "--memory", "12X"], "'12X'"),
        case(&["boot", KERNEL, "{K}", "--memory", "1.5G"], "'1.5G'"),
        case(&["boot", KERNEL, "{K}", "--memory", "1P"], "'1P'"),
        case(&["boot", KERNEL, "{K}", "--memory", "1GG"], "'1GG'"),
        case(&["boot", KERNEL, "{K}", "--memory=-1G"], "'-1G'"),
        case(
            &["boot", KERNEL, "{K}", "--memory", "99999999999999999999"],
            "'99999999999999999999'",
        ),
        case(
            &["boot", KERNEL, "{K}", "--memory", "16777216T"],
            "'16777216T'",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--memory", "17"],
            "--memory 17 bytes",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--memory", "2T"],
            "--memory 2199023255552 bytes",
        ),
        // --cpus
        case(&["boot", KERNEL, "{K}", "--cpus", "0"], "'0'"),
        case(&["boot", KERNEL, "{K}", "--cpus", "255"], "'255'"),
        case(
            &["boot", KERNEL, "{K}", "--cpus", "99999999999"],
            "'99999999999'",
        ),
        case(&["boot", KERNEL, "{K}", "--cpus", "two"], "'two'"),
        // --nvdimm-slots: a count the NFIT can hold; not on QEMU's engine
        case(
            &["boot", KERNEL, "{K}", "--nvdimm-slots", "300"],
            "--nvdimm-slots '300' is more NVDIMMs than a machine can hold; use 0 to 256",
        ),
        case(
            &["acpi", "--nvdimm-slots", "many", "--out", "{D}/t"],
            "--nvdimm-slots 'many' is not a whole number",
        ),
        case(
            &["run", "--engine", "qemu", "--nvdimm", "64M", "--nvdimm-slots", "2", "--", "true"],
            "--nvdimm-slots 2 gives pmemvm's machine empty slots",
        ),
        // mce=: on or off, not with record=, not on QEMU's engine
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "64M,mce=yes"],
            "--nvdimm mce=yes is not valid; use mce=on",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "64M,mce=on,record={D}/rec"],
            "--nvdimm mce=on cannot be combined with record=",
        ),
        case(
            &["run", "--engine", "qemu", "--nvdimm", "64M,mce=on", "--", "true"],
            "--nvdimm 64M,mce=on asks for machine checks on poisoned loads, which QEMU's NVDIMM has no way to raise",
        ),
        case(&["boot", KERNEL, "{K}", "--cpus", ""], "''"),
        // --nvdimm sizes and options
        case(&["boot", KERNEL, "{K}", "--nvdimm", ""], "''"),
        case(&["boot", KERNEL, "{K}", "--nvdimm", "1M"], "'1M'"),
        case(&["boot", KERNEL, "{K}", "--nvdimm", "3M"], "'3M'"),
        case(&["boot", KERNEL, "{K}", "--nvdimm", "0"], "'0'"),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", ",file={D}/x.img"],
            "''",
        ),
        case(&["boot", KERNEL, "{K}", "--nvdimm", "16M,bogus"], "'bogus'"),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,readonly=yes"],
            "'readonly=yes'",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,readonly,readonly"],
            "'readonly'",
        ),
        case(&["boot", KERNEL, "{K}", "--nvdimm", "16M,file="], "file="),
        case(&["boot", KERNEL, "{K}", "--nvdimm", "16M,file"], "'file'"),
        case(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--nvdimm",
                "16M,file={D}/a.img,file={D}/b.img",
            ],
            "'file'",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/bb.img,badblocks=1M+1000"],
            "badblocks=1M+1000",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,badblocks=16M+512"],
            "badblocks=16M+512",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,badblocks=4096"],
            "badblocks=4096",
        ),
        // record=: the directory, the DIMM, the engine; crash-images' inputs.
        case(&["boot", KERNEL, "{K}", "--nvdimm", "16M,record="], "record= needs a directory"),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/ro.img,readonly,record={D}/r"],
            "record= needs a writable DIMM",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/new.img,record={D}/recfull"],
            "recfull is not empty",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/new.img,record={D}/notelf"],
            "notelf is not a directory",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/new.img,record={D}/no/such"],
            "its parent",
        ),
        case(
            &["run", "--engine", "qemu", "--nvdimm", "16M,record={D}/r", "--fio", "{D}/job.fio"],
            "QEMU's NVDIMM has no flush hints",
        ),
        case(&["crash-images", "{D}/adir", "--out", "{D}/o"], "is not a pmemvm flush log"),
        case(&["crash-images", "{D}/recfull", "--out", "{D}/o"], "is not a pmemvm flush log"),
        case(&["crash-images", "{D}/adir", "--out", "{D}/o", "--every", "0"], "--every 0"),
        case(
            &["crash-images", "{D}/adir", "--out", "{D}/o", "--at", "1", "--every", "2"],
            "cannot be used with",
        ),
        case(&["nvdimm", "badblocks", "{D}/missing.img"], "missing.img does not exist"),
        case(&["nvdimm", "badblocks", "{D}"], "is not a pmemvm NVDIMM backing file"),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,label-size=5K"],
            "label-size=5K",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,label-size=64K"],
            "label-size=64K",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,label-size=8G"],
            "label-size=8G",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,label-size="],
            "label-size=",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,label-size=-1"],
            "label-size=-1",
        ),
        case(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--nvdimm",
                "16M,label-size=99999999999999999999",
            ],
            "label-size=99999999999999999999",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "2M,label-size=128K"],
            "size '2M' is not a multiple of 16 MiB",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "1000M"],
            "'1000M' is not a multiple of 16 MiB (the guest's persistent-memory region is exactly SIZE, and Linux aligns regions to 16 MiB); the nearest valid sizes are 992M and 1008M",
        ),
        case(
            &["boot", KERNEL, "{K}", "--nvdimm", "1G,node=300"],
            "node=300 is not valid; use a guest NUMA node number from 0 to 255",
        ),
        case(
            &["acpi", "--out", "{D}/o", "--nvdimm", "16M,node=2"],
            "node=2 leaves guest NUMA node 1 without CPUs or NVDIMMs",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/old.img"],
            "old.img is 16777216 bytes, the layout of pmemvm 0.1",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "100000T"],
            "NVDIMMs do not fit",
        ),
        kvm(&["boot", KERNEL, "{K}", "--nvdimm=16M*300"], "300 NVDIMMs"),
        // --nvdimm files
        kvm(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--nvdimm",
                "16M,file={D}/dup.img",
                "--nvdimm",
                "16M,file={D}/./dup.img",
            ],
            "dup.img is given more than once",
        ),
        kvm(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--nvdimm",
                "16M,file={D}/link.img",
                "--nvdimm",
                "16M,file={D}/sized.img",
            ],
            "sized.img is given more than once",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/adir"],
            "adir is a directory",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file=/dev/null"],
            "/dev/null is not a regular file",
        ),
        kvm(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--nvdimm",
                "16M,file={D}/missing/x.img",
            ],
            "missing/x.img cannot be created",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/small.img"],
            "small.img is 4096 bytes",
        ),
        kvm(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--nvdimm",
                "16M,file={D}/nofile.img,readonly",
            ],
            "nofile.img does not exist",
        ),
        Case {
            args: &["boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/ro.img"],
            names: "ro.img is not writable",
            needs: Needs::ReadOnlyFile,
        },
        kvm(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--nvdimm",
                "16M,file={D}/new.img",
                "--nvdimm",
                "16M,file={D}/adir",
            ],
            "adir is a directory",
        ),
        // kernels and initrds
        kvm(&["boot", KERNEL, "{D}/nokernel"], "nokernel"),
        kvm(
            &["boot", KERNEL, "{D}/adir"],
            "kernel {D}/adir is a directory",
        ),
        kvm(&["boot", KERNEL, "{D}/notelf"], "notelf is neither"),
        kvm(&["boot", KERNEL, "{D}/empty"], "empty"),
        kvm(&["boot", KERNEL, "{D}/badelf"], "badelf cannot be loaded"),
        kvm(
            &["boot", KERNEL, "{D}/highelf", "--memory", "16M"],
            "too small for kernel {D}/highelf",
        ),
        kvm(
            &["boot", KERNEL, "{D}/cutelf"],
            "kernel {D}/cutelf is truncated",
        ),
        kvm(
            &["boot", KERNEL, "{D}/bz32"],
            "without a 64-bit entry point",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--initrd", "{D}/noinitrd"],
            "noinitrd",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--initrd", "{D}/adir"],
            "initrd {D}/adir is a directory",
        ),
        kvm(
            &[
                "boot",
                KERNEL,
                "{K}",
                "--memory",
                "16M",
                "--initrd",
                "{D}/big.initrd",
            ],
            "too small for initrd {D}/big.initrd",
        ),
        case(&["boot", KERNEL, ""], "--kernel"),
        kvm(
            &["boot", KERNEL, "{K}", "--cmdline", "{LONG}"],
            "5000 bytes",
        ),
        // console and channel files
        kvm(
            &["boot", KERNEL, "{K}", "--console-log", "{D}/adir"],
            "console file {D}/adir",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--channel", "{D}/missing/ch"],
            "channel file {D}/missing/ch",
        ),
        // unknown things
        case(&["bogus"], "'bogus'"),
        case(&["boot", KERNEL, "{K}", "--bogus"], "'--bogus'"),
        // run
        case(&["run"], "--fio"),
        kvm(&["run", "--fio", "{D}/nojob.fio"], "nojob.fio"),
        kvm(&["run", "--fio", "{D}/adir"], "fio job file {D}/adir"),
        kvm(
            &["run", "--fio", "{D}/job.fio", "--json", "{D}/adir"],
            "{D}/adir",
        ),
        kvm(
            &[
                "run",
                "--fio",
                "{D}/job.fio",
                "--json",
                "{D}/missing/out.json",
            ],
            "missing/out.json",
        ),
        kvm(
            &[
                "run",
                "--fio",
                "{D}/job.fio",
                "--json",
                "{D}/out.json",
                KERNEL,
                "{D}/nokernel",
            ],
            "nokernel",
        ),
        kvm(
            &["run", "--fio", "{D}/job.fio", "--setup", "@{D}/nosetup"],
            "nosetup",
        ),
        case(&["run", "--fio", "{D}/job.fio", "--timeout", "0"], "'0'"),
        case(
            &["run", "--fio", "{D}/job.fio", "--engine", "bogus"],
            "'bogus'",
        ),
        case(&["run", "--fio", "{D}/job.fio", "--cpus", "0"], "'0'"),
        // acpi
        case(&["acpi"], "--out"),
        case(&["acpi", "--out", "{D}/o", "--cpus", "0"], "'0'"),
        case(&["acpi", "--out", "{D}/o", "--memory", "12X"], "'12X'"),
        case(&["acpi", "--out", "{D}/notelf"], "{D}/notelf"),
        case(&["acpi", "--out", "/dev/null"], "/dev/null"),
        case(
            &["acpi", "--out", "/proc/pmemvm-nowhere"],
            "/proc/pmemvm-nowhere",
        ),
        case(
            &["acpi", "--out", "{D}/o", "--nvdimm", "100000T"],
            "NVDIMMs do not fit",
        ),
        // run -- CMD with --put/--get: all refused before the guest boots
        case(&["run", "--"], "`--` must be followed by the command"),
        case(&["run", "--put", "{D}/missing", "--", "true"], "--put {D}/missing"),
        case(&["run", "--put", "{D}/empty:..", "--", "true"], "\"..\""),
        case(&["run", "--get", "x", "--", "true"], "--get needs --out"),
        case(&["run", "--get", "../x", "--out", "{D}/o", "--", "true"], "\"../x\""),
        case(&["run", "--get", "/", "--out", "{D}/o", "--", "true"], "\"/\""),
        case(
            &["run", "--get", "x", "--out", "{D}/adir/a/b", "--", "true"],
            "{D}/adir/a/b",
        ),
        case(
            &["run", "--get", "x", "--out", "{D}/empty", "--", "true"],
            "not a directory",
        ),
        case(
            &["run", "--get", "/a/r", "--get", "/b/r", "--out", "{D}/o", "--", "true"],
            "--get /a/r and --get /b/r",
        ),
        case(
            &["run", "--get", "out.json", "--out", "{D}", "--", "true"],
            "does not overwrite",
        ),
        case(
            &["run", "--transfer-size", "16M", "--put", "{D}/big.initrd", "--", "true"],
            "raise --transfer-size",
        ),
        case(&["run", "--transfer-size", "10M", "--", "true"], "'10M'"),
        case(&["run", "--fio", "{D}/job.fio", "--", "true"], "not both"),
        case(&["run", "--packages", "python3", "--", "true"], "--packages needs --rootfs debian"),
        case(
            &["run", "--rootfs", "debian", "--packages", "py thon", "--", "true"],
            "'py thon'",
        ),
        case(&["run", "--rootfs", "{D}/small.img", "--", "true"], "not an ext2/3/4 image"),
        case(&["run", "--rootfs", "{D}/missing.ext4", "--", "true"], "{D}/missing.ext4"),
        case(
            &["run", "--fio", "{D}/job.fio", "--put", "{D}/empty"],
            "--put and --get work with a command",
        ),
        // --modules: what `make modules_install` wrote, of the kernel's release ({D}/bzmod is
        // 6.1.99-test; mods/, nodep/ and othermods/ are made by populate()).
        case(
            &["boot", KERNEL, "{D}/bzmod", "--modules", "{D}/nomods"],
            "--modules {D}/nomods is not a directory",
        ),
        case(
            &["boot", KERNEL, "{D}/bzmod", "--modules", "{D}/nodep"],
            "--modules {D}/nodep has no modules.dep",
        ),
        case(
            &["boot", KERNEL, "{D}/notelf", "--modules", "{D}/mods"],
            "cannot read the release of kernel {D}/notelf",
        ),
        case(
            &[
                "run", KERNEL, "{D}/bzmod", "--initrd", "{D}/empty", "--modules", "{D}/othermods",
                "--fio", "{D}/job.fio",
            ],
            "--modules {D}/othermods holds modules of release 6.1.0-other, but kernel {D}/bzmod is release 6.1.99-test",
        ),
        case(
            &[
                "run", KERNEL, "{D}/bzmod", "--initrd", "{D}/empty", "--modules",
                "{D}/mods/lib/modules/6.1.99-test/kernel", "--fio", "{D}/job.fio",
            ],
            "has no modules.dep",
        ),
        case(
            &[
                "bench", "pmem-nowait", "--side", "a:kernel={D}/bzmod,modules={D}/othermods",
                "--side", "b:kernel={D}/bzmod", "--out", "{D}/bench-out",
            ],
            "holds modules of release 6.1.0-other, but kernel {D}/bzmod is release 6.1.99-test",
        ),
        case(
            &[
                "bench", "pmem-nowait", "--modules", "{D}/nodep", "--side",
                "a:kernel={D}/bzmod", "--side", "b:kernel={D}/bzmod", "--out", "{D}/bench-out",
            ],
            "--modules {D}/nodep has no modules.dep",
        ),
        case(
            &[
                "bench", "pmem-nowait", "--side", "a:kernel={D}/bzmod,modules={D}/notelf",
                "--side", "b:kernel={D}/bzmod",
            ],
            "--side a: modules {D}/notelf is not a directory",
        ),
        // --gdb: addresses (refused while parsing) and an existing path (before the VM)
        case(
            &["boot", KERNEL, "{K}", "--gdb", "1234"],
            "--gdb '1234' is not an address: use HOST:PORT",
        ),
        case(
            &["boot", KERNEL, "{K}", "--gdb", "127.0.0.1:99999"],
            "--gdb '127.0.0.1:99999' is not an address",
        ),
        case(&["boot", KERNEL, "{K}", "--gdb-wait"], "--gdb <ADDR>"),
        case(
            &["boot", KERNEL, "{K}", "--gdb", "{D}/notelf"],
            "--gdb {D}/notelf: the path exists; pmemvm creates the socket and does not replace a file it did not create",
        ),
        case(
            &["boot", "--engine", "nested", KERNEL, "{K}", "--gdb", "{D}/notelf"],
            "--gdb {D}/notelf: the path exists",
        ),
        // --gdb beyond loopback: refused first, whatever the engine (no socket made)
        case(
            &["boot", KERNEL, "{K}", "--gdb", "0.0.0.0:1234", "--api", "{D}/api.sock"],
            "--gdb 0.0.0.0:1234 is not a loopback address, and whoever reaches the debugger controls the guest",
        ),
        case(
            &["boot", "--engine", "nested", KERNEL, "{K}", "--gdb", "[::]:1234"],
            "--gdb [::]:1234 is not a loopback address",
        ),
        case(
            &["run", "--engine", "qemu", "--gdb", "192.0.2.7:1234", "--", "true"],
            "--gdb 192.0.2.7:1234 is not a loopback address",
        ),
        case(&["boot", KERNEL, "{K}", "--gdb-any-address"], "--gdb <ADDR>"),
        // --api and --dump-on-panic: existing paths (before the VM), engines without them,
        // and ctl on what is no control socket
        case(
            &["boot", KERNEL, "{K}", "--api", "{D}/notelf"],
            "--api {D}/notelf: the path exists; pmemvm creates the socket itself and replaces nothing",
        ),
        case(
            &["boot", KERNEL, "{K}", "--api", "{D}/nodir/api.sock"],
            "--api {D}/nodir/api.sock: cannot listen there",
        ),
        case(
            &["boot", KERNEL, "{K}", "--dump-on-panic", "{D}/notelf"],
            "dump file {D}/notelf exists; pmemvm does not overwrite files",
        ),
        case(
            &["boot", KERNEL, "{K}", "--dump-on-panic", "{D}/nodir/x.core"],
            "dump file {D}/nodir/x.core: its directory does not exist",
        ),
        case(
            &["run", "--engine", "pmemvm", KERNEL, "{K}", "--dump-on-panic", "{D}/notelf", "--", "true"],
            "dump file {D}/notelf exists",
        ),
        case(
            &["boot", "--engine", "nested", KERNEL, "{K}", "--dump-on-panic", "{D}/x.core"],
            "--dump-on-panic is not available with --engine nested",
        ),
        case(
            &["boot", "--engine", "nested", KERNEL, "{K}", "--api", "{D}/notelf"],
            "--api {D}/notelf: the path exists",
        ),
        case(
            &["bench", "pmem-nowait", "--engine", "qemu", "--api", "{D}/api.sock", "--out", "{D}/b1"],
            "--api and --dump-on-panic apply to --engine pmemvm and nested, and this run's engine is qemu",
        ),
        case(
            &["bench", "pmem-nowait", "--engine", "pmemvm", "--api", "{D}/notelf", "--out", "{D}/b2"],
            "--api {D}/notelf: the path exists",
        ),
        case(
            &["bench", "pmem-verify", "--cxl-pmem", "300M", "--out", "{D}/c1"],
            "--cxl-pmem size '300M' is not a multiple of 256 MiB",
        ),
        case(
            &["bench", "pmem-verify", "--cxl-pmem", "1G,file={D}/c.img", "--out", "{D}/c2"],
            "--cxl-pmem '1G,file={D}/c.img': bench takes a size only",
        ),
        case(
            &["bench", "pmem-verify", "--cxl-pmem", "1G", "--nvdimm", "1G", "--out", "{D}/c3"],
            "--nvdimm",
        ),
        case(
            &["bench", "bcache-nowait", "--cxl-pmem", "--out", "{D}/c4"],
            "--cxl-pmem: bcache-nowait has no persistent memory to put on a CXL device",
        ),
        case(
            &["run", "--engine", "qemu", "--api", "{D}/api.sock", "--", "true"],
            "--api and --dump-on-panic apply to --engine pmemvm and nested, and this run's engine is qemu",
        ),
        case(
            &["ctl", "{D}/notelf", "stats"],
            "{D}/notelf is not a control socket",
        ),
        case(&["ctl", "{D}/notelf", "dmup", "x"], "unrecognized subcommand 'dmup'"),
        // --pmem-legacy: sizes and options (refused while parsing)
        case(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "100M"],
            "--pmem-legacy size '100M' is not a multiple of 16 MiB",
        ),
        case(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "1000M"],
            "the nearest valid sizes are 992M and 1008M",
        ),
        case(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "4M"],
            "the smallest valid size is 16M",
        ),
        case(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "0"],
            "--pmem-legacy size '0' is zero",
        ),
        case(
            &["run", "--pmem-legacy", "12X", "--", "true"],
            "--pmem-legacy size '12X' is not valid",
        ),
        case(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "256M,label-size=0"],
            "--pmem-legacy option 'label-size=0' is not known",
        ),
        case(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "256M,readonly,readonly"],
            "--pmem-legacy option 'readonly' is given more than once",
        ),
        case(
            &[
                "boot", KERNEL, "{K}", "--pmem-legacy",
                "256M,file={D}/l1.img,file={D}/l2.img",
            ],
            "--pmem-legacy option 'file' is given more than once",
        ),
        case(
            &["run", "--pmem-legacy", "256M,file=", "--", "true"],
            "--pmem-legacy file= needs a path",
        ),
        // --pmem-legacy on QEMU: refused before anything boots
        case(
            &["run", "--engine", "qemu", "--pmem-legacy", "256M,file={D}/q.img", "--", "true"],
            "--pmem-legacy 256M,file={D}/q.img cannot run on --engine qemu: QEMU can only carve",
        ),
        // --pmem-legacy files and layout (refused after /dev/kvm is opened, before any file changes)
        kvm(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "16M,file={D}/small.img"],
            "--pmem-legacy backing file {D}/small.img is 4096 bytes, smaller than the 16777216 bytes",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "16M,file={D}/e820-32m.img"],
            "--pmem-legacy backing file {D}/e820-32m.img is 33554432 bytes, larger than",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "16M,file={D}/absent.img,readonly"],
            "--pmem-legacy backing file {D}/absent.img does not exist; a readonly range",
        ),
        kvm(
            &[
                "boot", KERNEL, "{K}", "--pmem-legacy", "16M,file={D}/twice.img",
                "--pmem-legacy", "16M,file={D}/./twice.img",
            ],
            "--pmem-legacy backing file {D}/./twice.img is given more than once",
        ),
        kvm(
            &[
                "boot", KERNEL, "{K}", "--nvdimm", "16M,file={D}/shared.img",
                "--pmem-legacy", "16M,file={D}/shared.img",
            ],
            "is given more than once (for another range or an --nvdimm)",
        ),
        kvm(
            &["boot", KERNEL, "{K}", "--pmem-legacy", "4096T,file={D}/huge.img"],
            "--pmem-legacy 4096T would end at",
        ),
        kvm(
            &[
                "boot", KERNEL, "{K}", "--pmem-legacy", "16M,file={D}/ok.img",
                "--pmem-legacy", "16M,file={D}/no/such/dir/x.img",
            ],
            "--pmem-legacy backing file {D}/no/such/dir/x.img cannot be created",
        ),
        // suite ndctl
        case(
            &["suite", "ndctl", "--src", "{D}/no-ndctl-here"],
            "--src {D}/no-ndctl-here: not an ndctl source tree (no meson.build and test/meson.build there); get one with `git clone --branch v81",
        ),
        case(
            &["suite", "ndctl", "--src", "{D}", "--plan", "libndctl"],
            "libndctl is not one of ndctl's tests this command runs; it runs: clear.sh,",
        ),
        case(
            &["suite", "ndctl", "--src", "{D}", "--plan", "dm.sh", "dm.sh"],
            "dm.sh is named twice",
        ),
        case(&["suite", "ndctl", "--src", "{D}", "--cpus", "0"], "--cpus '0'"),
        case(&["suite", "ndctl", "--src", "{D}", "--engine", "bochs"], "'bochs'"),
        case(&["suite", "ndctl", "--src", "{D}", "--timeout", "0"], "--timeout '0'"),
        case(
            &["suite", "ndctl", "--src", "{D}", "--nfit-test", "--plan"],
            "--nfit-test needs --kernel PATH and --modules DIR",
        ),
        case(
            &["suite", "ndctl", "--src", "{D}", "--kernel", "{D}/no-such-bzImage", "--plan"],
            "--kernel {D}/no-such-bzImage: No such file or directory",
        ),
        case(
            &["suite", "ndctl", "--src", "{D}", "--modules", "{D}"],
            "--modules and --kernel-tree go with --nfit-test",
        ),
        case(
            &[
                "suite", "ndctl", "--src", "{D}", "--nfit-test", "--kernel", "{D}/bzImage",
                "--modules", "{D}", "--plan", "pmem-ns",
            ],
            "pmem-ns is not one of ndctl's nfit_test tests this command runs with --nfit-test; it runs: libndctl,",
        ),
    ]
}
