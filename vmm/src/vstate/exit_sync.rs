//! The exit fdatasync of the writable backing files: on a helper thread,
//! within a deadline for all of them, naming the first failure or the file
//! whose sync did not finish — on the orderly end of a run and when a panic
//! unwinds through it ([`SyncOnUnwind`]).

use std::fs::File;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the exit fdatasync of all backing files may take.
pub const SYNC_DEADLINE: Duration = Duration::from_secs(30);

/// Syncs the backing files when a panic unwinds through `Vm::run` (the
/// orderly path disarms it and syncs in `finish`). Declared before the
/// `VcpuSet`, so it runs after the vCPUs were stopped.
pub(crate) struct SyncOnUnwind(pub(crate) Option<Vec<(String, Arc<File>)>>);

impl Drop for SyncOnUnwind {
    fn drop(&mut self) {
        if let Some(files) = self.0.take() {
            if let Some(e) = sync_all(files, SYNC_DEADLINE) {
                eprintln!("pmemvm: {e}");
            }
        }
    }
}

/// fdatasyncs `files` on a helper thread; the first failure, or the file
/// whose sync did not finish within `deadline`, as a sentence.
pub fn sync_all(files: Vec<(String, Arc<File>)>, deadline: Duration) -> Option<String> {
    let jobs = files
        .into_iter()
        .map(|(name, f)| (name, move || f.sync_data()))
        .collect();
    run_syncs(jobs, deadline)
}

/// Runs `jobs` in order on one helper thread, waiting at most `deadline`
/// for all of them.
fn run_syncs<F>(jobs: Vec<(String, F)>, deadline: Duration) -> Option<String>
where
    F: FnOnce() -> std::io::Result<()> + Send + 'static,
{
    let names: Vec<String> = jobs.iter().map(|(n, _)| n.clone()).collect();
    // (index, None) when a sync starts, (index, Some(result)) when it ends.
    let (tx, rx) = channel::<(usize, Option<std::io::Result<()>>)>();
    let spawned = std::thread::Builder::new()
        .name("fdatasync".into())
        .spawn(move || {
            for (i, (_, job)) in jobs.into_iter().enumerate() {
                let _ = tx.send((i, None));
                let _ = tx.send((i, Some(job())));
            }
        });
    let helper = match spawned {
        Ok(h) => h,
        Err(e) => return Some(format!("the exit fdatasync could not start: {e}")),
    };
    let end = Instant::now() + deadline;
    let mut first_error = None;
    let mut current = None;
    let mut done = 0;
    while done < names.len() {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok((i, None)) => current = Some(i),
            Ok((i, Some(result))) => {
                done += 1;
                current = None;
                if let Err(e) = result {
                    first_error.get_or_insert(format!(
                        "fdatasync of backing file {} failed at exit: {e}",
                        names[i]
                    ));
                }
            }
            // The helper is left to finish (or hang) on its own.
            Err(_) => {
                let which = current.map_or("(none)", |i| names[i].as_str());
                return first_error.or(Some(format!(
                    "fdatasync of backing file {which} did not finish within {} s at exit",
                    deadline.as_secs_f64()
                )));
            }
        }
    }
    // Every job reported: the helper is returning, reap it.
    let _ = helper.join();
    first_error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_reports_failures_and_files_that_do_not_finish() {
        let p = std::env::temp_dir().join(format!("pmemvm-sync-{}", std::process::id()));
        let f = Arc::new(File::create(&p).unwrap());
        std::fs::remove_file(&p).unwrap();
        assert_eq!(
            sync_all(vec![("ok".into(), f.clone())], SYNC_DEADLINE),
            None
        );
        let failing = || Err(std::io::Error::from_raw_os_error(libc::EIO));
        let e = run_syncs(vec![("a.img".to_string(), failing)], SYNC_DEADLINE);
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("a.img failed at exit")),
            "{e:?}"
        );
        let start = Instant::now();
        let stuck = || {
            std::thread::sleep(Duration::from_secs(20));
            Ok(())
        };
        let e = run_syncs(
            vec![("stuck.img".to_string(), stuck)],
            Duration::from_millis(200),
        );
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("stuck.img did not finish within 0.2 s")),
            "{e:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
