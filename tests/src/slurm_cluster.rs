//! A real single-node Slurm cluster on this machine, for the tests of `pmemvm bench --slurm`:
//! munged, slurmctld and slurmd (Debian's munge and slurm-wlm packages) with their own key,
//! configuration, state and logs in a temporary directory, on free loopback ports, started by
//! [`SlurmCluster::start`] and stopped on drop. A file lock (`/tmp/pmemvm-slurm.lock`) keeps
//! two test clusters of this machine from running at once.
//!
//! The configuration suits a container run as root: `proctrack/linuxproc` and `task/none`
//! (no cgroup plugin), no accounting, one node `pmemvm-PID` at 127.0.0.1 with two CPUs.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pmemvm_skip::Skip;

/// The daemons this harness starts.
const DAEMONS: [&str; 3] = [
    "/usr/sbin/munged",
    "/usr/sbin/slurmctld",
    "/usr/sbin/slurmd",
];

/// Names the directory of the cluster that holds it, for the next test's clean-up.
const LOCK: &str = "/tmp/pmemvm-slurm.lock";

/// Whether `pid` is the `comm` daemon of the cluster in `dir`: its name, and `dir` in its
/// command line (munged) or its environment's `SLURM_CONF` (slurmctld, slurmd).
fn is_daemon_of(pid: i32, comm: &str, dir: &Path) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let name = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
    if name.trim() != comm {
        return false;
    }
    let needle = dir.display().to_string();
    let mentions = |file: &str| {
        std::fs::read(proc.join(file))
            .map(|b| String::from_utf8_lossy(&b).contains(&needle))
            .unwrap_or(false)
    };
    mentions("cmdline") || mentions("environ")
}

/// SIGTERM to the daemons of the cluster in `dir` still running, by their pid files.
fn stop_daemons(dir: &Path) {
    for (pid_file, comm) in [
        ("slurmd.pid", "slurmd"),
        ("slurmctld.pid", "slurmctld"),
        ("munge/munged.pid", "munged"),
    ] {
        let Some(pid) = std::fs::read_to_string(dir.join(pid_file))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            continue;
        };
        if is_daemon_of(pid, comm, dir) {
            // SAFETY: kill only sends a signal; `pid` was just checked to be this cluster's
            // daemon (its name, and its directory in its command line or environment).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

/// A running test cluster; stopped on drop.
#[derive(Debug)]
pub struct SlurmCluster {
    dir: PathBuf,
    node: String,
    _lock: File,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn check(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl SlurmCluster {
    /// Starts munged, slurmctld and slurmd in `dir` and waits until the node is idle.
    /// Skips when a daemon is not installed (tests/run.sh installs them).
    pub fn start(dir: &Path) -> Result<Self, Skip> {
        for d in DAEMONS {
            if !Path::new(d).is_file() {
                return Err(Skip::new(format!(
                    "{d} is not installed (Debian packages munge, slurmctld, slurmd, slurm-client)"
                )));
            }
        }
        let mut lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(LOCK)
            .expect("open /tmp/pmemvm-slurm.lock");
        // SAFETY: flock only reads the descriptor, which `lock` keeps open for the call.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock /tmp/pmemvm-slurm.lock");
        // A test killed before its drop left its daemons running: stop them (only processes
        // that are that cluster's daemons, by their pid files).
        let mut previous = String::new();
        let _ = std::io::Read::read_to_string(&mut lock, &mut previous);
        let previous = previous.trim_matches(|c: char| c == '\0' || c.is_whitespace());
        if let Some(old) = previous.strip_prefix("dir=") {
            stop_daemons(Path::new(old));
        }
        let _ = lock.set_len(0);
        let _ = std::io::Seek::seek(&mut lock, std::io::SeekFrom::Start(0));
        let _ = std::io::Write::write_all(&mut lock, format!("dir={}\n", dir.display()).as_bytes());
        let node = format!("pmemvm-{}", std::process::id());
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub)).expect("cluster directories");
        }
        let munge = dir.join("munge");
        check(
            Command::new("chmod").arg("700").arg(&munge),
            "chmod munge dir",
        );
        let mut key = [0u8; 1024];
        std::io::Read::read_exact(
            &mut File::open("/dev/urandom").expect("open /dev/urandom"),
            &mut key,
        )
        .expect("read a munge key from /dev/urandom");
        let key_file = munge.join("munge.key");
        std::fs::write(&key_file, key).expect("munge key");
        check(
            Command::new("chmod").arg("400").arg(&key_file),
            "chmod munge key",
        );
        let cluster = Self {
            dir: dir.to_owned(),
            node: node.clone(),
            _lock: lock,
        };
        check(
            Command::new(DAEMONS[0])
                .arg("-f")
                .arg(format!("--socket={}", cluster.munge_socket().display()))
                .arg(format!("--key-file={}", key_file.display()))
                .arg(format!(
                    "--log-file={}",
                    dir.join("log/munged.log").display()
                ))
                .arg(format!("--pid-file={}", munge.join("munged.pid").display()))
                .arg(format!("--seed-file={}", munge.join("seed").display())),
            "munged",
        );
        let d = dir.display();
        let conf = format!(
            "ClusterName=pmemvmtest\n\
             SlurmctldHost=localhost(127.0.0.1)\n\
             SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
             AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n\
             SlurmUser=root\nSlurmdUser=root\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\nSchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             ReturnToService=2\nMpiDefault=none\n\
             NodeName={node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 State=UNKNOWN\n\
             PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
            ctld = free_port(),
            slurmd = free_port(),
            sock = cluster.munge_socket().display(),
        );
        std::fs::write(cluster.conf(), conf).expect("slurm.conf");
        check(cluster.command(DAEMONS[1]).arg("-c"), "slurmctld");
        check(cluster.command(DAEMONS[2]).args(["-N", &node]), "slurmd");
        let start = Instant::now();
        loop {
            let out = cluster
                .command("sinfo")
                .args(["-h", "-o", "%t"])
                .output()
                .expect("sinfo");
            let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if state == "idle" {
                return Ok(cluster);
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the test cluster's node is '{state}' after 60 s; {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn munge_socket(&self) -> PathBuf {
        self.dir.join("munge/munge.socket")
    }

    /// The node's name (`pmemvm-PID`).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Its slurm.conf.
    pub fn conf(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// A Slurm command (sbatch, squeue, scontrol, ...) or script aimed at this cluster.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.conf());
        c
    }

    /// `JobState` of a job (of an array: of its first task not yet ended, else the last).
    pub fn job_state(&self, job: &str) -> String {
        let out = self
            .command("scontrol")
            .args(["show", "job", "-o", job])
            .output()
            .expect("scontrol show job");
        let text = String::from_utf8_lossy(&out.stdout);
        let states: Vec<&str> = text
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("JobState="))
            .collect();
        states
            .iter()
            .find(|s| matches!(**s, "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"))
            .or(states.last())
            .map_or_else(|| "UNKNOWN".to_owned(), |s| (*s).to_owned())
    }

    /// Waits until `job` has ended; its final state.
    pub fn wait(&self, job: &str, deadline: Duration) -> String {
        let start = Instant::now();
        loop {
            let state = self.job_state(job);
            if !matches!(
                state.as_str(),
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"
            ) {
                return state;
            }
            assert!(
                start.elapsed() < deadline,
                "job {job} still {state} after {deadline:?}; {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// The daemons' log tails, for assertion messages.
    pub fn logs(&self) -> String {
        ["slurmctld", "slurmd", "munged"]
            .iter()
            .map(|n| {
                let text = std::fs::read_to_string(self.dir.join(format!("log/{n}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {n}.log ---\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = self.command("scontrol").arg("shutdown").output();
        let _ = Command::new(DAEMONS[0])
            .arg("-s")
            .arg(format!("--socket={}", self.munge_socket().display()))
            .output();
        // Daemons that did not stop (e.g. slurmd when slurmctld was gone).
        std::thread::sleep(Duration::from_millis(500));
        stop_daemons(&self.dir);
    }
}
