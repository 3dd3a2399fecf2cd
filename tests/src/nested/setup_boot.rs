//! Boots of the guest image under pmemvm whose work is a setup script: the image's
//! initramfs with a job appended (a fio job that touches no device, the script as
//! `/job/setup.sh`), several `pmemvm boot`s in one L1, and what each boot's script wrote to
//! `$PMEMVM_OUT` read back from its channel.

use std::fs;
use std::path::Path;

use lab::guest::guest_job::{
    append_to_initrd, parse_channel, GuestJob, GuestReport, SETUP_LOG_FRAME,
};

use super::{guest_image, NestedError, NestedVm, RunOutput};

/// A fio job that touches no device: the work is the setup script's.
const NULL_FIO_JOB: &str = "[null]\nioengine=null\nsize=1M\nbs=4k\nrw=write\n";

/// Adds the image's `kernel` (`vmlinux` or `bzImage`, under that name) and its initramfs
/// with `setup` as `/job/setup.sh` (as `initrd.img`) to the files of `vm`'s runs.
pub fn with_setup_image(vm: NestedVm, kernel: &str, setup: &str) -> Result<NestedVm, NestedError> {
    let kernel_path = guest_image(kernel).map_err(NestedError::Unavailable)?;
    let initrd = guest_image("initramfs.cpio.gz").map_err(NestedError::Unavailable)?;
    // The image is there: failing to read it is a failure, not a skip.
    let base = fs::read(&initrd)
        .unwrap_or_else(|e| panic!("read the guest initramfs {}: {e}", initrd.display()));
    let job = GuestJob {
        fio_job: NULL_FIO_JOB.into(),
        setup: Some(setup.into()),
        args: None,
        ..GuestJob::default()
    }
    .archive()
    .expect("job archive of a fixed job");
    Ok(vm
        .file(kernel, kernel_path)
        .bytes("initrd.img", append_to_initrd(&base, &job)))
}

/// A shell line that boots the image (see [`with_setup_image`]) as boot `name`, with the
/// console in `console-NAME.txt`, the channel in `channel-NAME.bin` and `NAME-status=S`
/// on stdout. `machine` holds the other options (`--cpus`, `--memory`, `--nvdimm`, ...);
/// `append` goes on the kernel command line.
pub fn boot_line(name: &str, machine: &str, append: &str) -> String {
    let words: Vec<String> = boot_argv(name, machine, append)
        .iter()
        .map(|w| lab::guest::nested::share::shell_quote(w))
        .collect();
    format!("{}; echo {name}-status=$?", words.join(" "))
}

/// The boot of [`boot_line`] as an argument vector, for a run of its own: a `pmemvm`
/// command, so the harness reads its stderr for a breakdown of the emulated platform and runs
/// it again only on that evidence (`nested::breakdown`); a boot that meets the deadline is
/// the result.
pub fn boot_argv(name: &str, machine: &str, append: &str) -> Vec<String> {
    let mut argv: Vec<String> = [
        "pmemvm",
        "boot",
        "--kernel",
        "vmlinux",
        "--initrd",
        "initrd.img",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(machine.split_whitespace().map(str::to_owned));
    argv.push("--cmdline".into());
    argv.push(format!("console=ttyS0 reboot=acpi panic=-1 quiet {append}"));
    argv.push("--console-log".into());
    argv.push(format!("console-{name}.txt"));
    argv.push("--channel".into());
    argv.push(format!("channel-{name}.bin"));
    argv
}

/// What one boot of [`boot_line`] sent back.
#[derive(Debug)]
pub struct SetupBoot {
    /// The files the setup script wrote to `$PMEMVM_OUT`, and the job's status.
    pub report: GuestReport,
    /// The run, the setup script's output and the console, for assertion messages.
    pub ctx: String,
}

impl SetupBoot {
    /// Reads boot `name` of `out`; panics (the test fails) unless pmemvm ended with 0 and the
    /// guest's job with 0.
    pub fn read(out: &RunOutput, name: &str) -> SetupBoot {
        let bytes = fs::read(out.path(&format!("channel-{name}.bin"))).unwrap_or_default();
        let console = read_text(&out.path(&format!("console-{name}.txt")));
        let report = parse_channel(&bytes)
            .unwrap_or_else(|e| panic!("bad channel of boot {name}: {e}\n{}", out.dump()));
        let setup = report
            .files
            .get(SETUP_LOG_FRAME)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let ctx = format!(
            "boot {name}\n{}\nsetup output:\n{setup}\nconsole:\n{console}",
            out.dump()
        );
        // A boot of its own ([`boot_argv`]) is the run's status; in a script, its line.
        let ok = out.status == 0
            && (out.stdout.contains(&format!("{name}-status=0"))
                || !out.stdout.contains(&format!("{name}-status=")));
        assert!(ok, "{ctx}");
        assert_eq!(report.status, Some(0), "{ctx}");
        SetupBoot { report, ctx }
    }

    /// The trimmed text of a file the script wrote ("" when it wrote none).
    pub fn text(&self, name: &str) -> String {
        self.report
            .files
            .get(name)
            .map(|b| String::from_utf8_lossy(b).trim().to_string())
            .unwrap_or_default()
    }

    /// A file holding one number.
    pub fn count(&self, name: &str) -> u64 {
        let t = self.text(name);
        t.parse()
            .unwrap_or_else(|_| panic!("{name}: not a count: {t:?}\n{}", self.ctx))
    }
}

fn read_text(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}
