//! Unit tests of the vCPU threads (`vcpu.rs`).

use super::*;

#[test]
fn stop_joins_threads_that_return_and_names_those_that_do_not() {
    let mut set = VcpuSet::new().unwrap();
    for i in 0..2 {
        let stop = set.stop_flag();
        set.spawn(i, move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    }
    // vCPU 2 never looks at the flag (as one stuck in the kernel).
    set.spawn(2, || std::thread::sleep(Duration::from_secs(30)))
        .unwrap();
    let start = Instant::now();
    assert_eq!(set.stop_and_join(Duration::from_millis(300)), Err(vec![2]));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(set.is_empty());
}

#[test]
fn a_kick_interrupts_a_blocking_call() {
    // The kick handler has no SA_RESTART: a blocked read returns EINTR,
    // as KVM_RUN does.
    let mut set = VcpuSet::new().unwrap();
    let stop = set.stop_flag();
    let (r, _w) = std::os::unix::net::UnixStream::pair().unwrap();
    set.spawn(0, move || {
        use std::io::Read;
        let mut b = [0u8; 1];
        while !stop.load(Ordering::SeqCst) {
            let _ = (&r).read(&mut b);
        }
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(set.stop_and_join(Duration::from_secs(5)), Ok(()));
}
