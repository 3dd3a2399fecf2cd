use super::*;
use vmm::exit_status::Classified;

fn job(argv: &[&str]) -> CommandJob {
    CommandJob {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        puts: Vec::new(),
        gets: Vec::new(),
        out: None,
        area: 64 << 20,
        rootfs: None,
    }
}

#[test]
fn put_and_get_paths_default_to_the_job_directory() {
    let p: PutSpec = "./t".parse().expect("put");
    assert_eq!((p.host, p.guest.as_str()), (PathBuf::from("./t"), "/job/t"));
    let p: PutSpec = "/tmp/x/:/data/x".parse().expect("put");
    assert_eq!(p.guest, "/data/x");
    let g: GetSpec = "results/".parse().expect("get");
    assert_eq!(
        (g.guest.as_str(), g.out_name()),
        ("/job/results", "results")
    );
    for bad in ["a:..", "a:/", "a:/x/../y", "a:"] {
        assert!(bad.parse::<PutSpec>().is_err(), "{bad}");
    }
    for bad in ["/", "..", "a/../b", ""] {
        let e = bad.parse::<GetSpec>().expect_err(bad);
        assert!(e.to_string().contains("--get"), "{e}");
    }
}

#[test]
fn a_put_cannot_cover_what_the_guest_needs() {
    for bad in [
        "d:/job",
        "d:/bin",
        "d:/usr",
        "d:/etc",
        "d:/put",
        "d:/put/0",
        "d:/proc/x",
        "d:/dev",
        "d:/sys",
    ] {
        let e = bad.parse::<PutSpec>().expect_err(bad);
        assert!(e.is_usage(), "{e}");
        let e = e.to_string();
        let guest = bad.trim_start_matches("d:");
        assert!(
            e.starts_with(&format!(
                "--put {bad:?}: its guest path {guest} would cover"
            )),
            "{e}"
        );
    }
    // Beside or below them is fine: a file onto /etc/x, a tree into /job or /usr/local.
    for good in [
        "d:/etc/fio.conf",
        "d:/job/t",
        "d:/usr/local/t",
        "d:/data",
        "d:/devices",
        "job",
    ] {
        good.parse::<PutSpec>().expect(good);
    }
}

#[test]
fn the_command_script_quotes_every_word() {
    let j = job(&["sh", "-c", "echo 'it''s' $HOME; exit 3"]);
    assert_eq!(
        j.script(),
        "exec 'sh' '-c' 'echo '\\''it'\\'''\\''s'\\'' $HOME; exit 3'\n"
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(job(&["printf", "%s|", "a b", "it's", "$x"]).script())
        .output()
        .expect("sh");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|it's|$x|");
}

#[test]
fn validation_names_the_bad_input_and_changes_nothing() {
    assert!(matches!(job(&[]).validate(), Err(TransferError::NoCommand)));
    let mut j = job(&["true"]);
    j.puts = vec!["/nonexistent/pmemvm-put:/x".parse().expect("put")];
    let e = j.validate().expect_err("missing source");
    assert!(
        e.to_string()
            .starts_with("--put /nonexistent/pmemvm-put: cannot read it"),
        "{e}"
    );
    let d = std::env::temp_dir().join(format!("pmemvm-transfer-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(d.join("big"), vec![1u8; 20 << 20]).expect("write");
    let mut j = job(&["true"]);
    j.area = 16 << 20;
    j.puts = vec![format!("{}:/x", d.display()).parse().expect("put")];
    let e = j.validate().expect_err("too large");
    assert!(e.to_string().contains("--transfer-size 32M"), "{e}");
    let mut j = job(&["true"]);
    j.gets = vec!["/a/r".parse().expect("get"), "/b/r".parse().expect("get")];
    j.out = Some(d.clone());
    assert!(matches!(
        j.validate(),
        Err(TransferError::GetNameClash { .. })
    ));
    j.gets = vec!["/a/big".parse().expect("get")];
    let e = j.validate().expect_err("exists");
    assert!(e.to_string().contains("does not overwrite"), "{e}");
    j.out = None;
    assert!(matches!(j.validate(), Err(TransferError::GetWithoutOut)));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_put_tree_round_trips_through_the_archive() {
    let d = std::env::temp_dir().join(format!("pmemvm-put-test-{}", std::process::id()));
    std::fs::create_dir_all(d.join("t/sub")).expect("mkdir");
    std::fs::write(d.join("t/sub/f"), b"data").expect("write");
    let mut j = job(&["true"]);
    j.puts = vec![format!("{}", d.join("t").display()).parse().expect("put")];
    j.gets = vec!["t".parse().expect("get")];
    j.out = Some(d.join("out"));
    j.validate().expect("valid");
    let prepared = prepare(&j, &d, 1).expect("prepare");
    let desc = String::from_utf8_lossy(&prepared.files[1].1).into_owned();
    let sum = prepared.put_sum.clone().expect("sum");
    let words: Vec<Vec<&str>> = desc.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(words.len(), 4, "{desc}");
    assert_eq!((words[0][0], words[0][1]), ("put", "1"));
    assert!(words[0][2].starts_with(".pmemvm-put-"), "{desc}");
    assert_eq!(
        words[0][3..],
        [sum.len.to_string().as_str(), sum.sha256.as_str()]
    );
    assert_eq!(words[1], ["putpath", "0", "dir", "/job/t"]);
    let put_head = std::fs::read(d.join("put.img")).expect("put.img");
    assert!(put_head.starts_with(words[0][2].as_bytes()));
    assert_eq!(
        (words[2][0], words[2][1], words[2][3]),
        ("get", "2", "67108864")
    );
    assert!(words[2][2].starts_with("pmemvm-get-"), "{desc}");
    assert_eq!(words[3], ["getpath", "/job/t"]);
    let get_head = std::fs::read(d.join("get.img")).expect("get.img");
    assert!(get_head.starts_with(words[2][2].as_bytes()));
    assert_eq!(prepared.disks.len(), 2);
    assert!(prepared.disks[0].readonly && !prepared.disks[1].readonly);
    assert_eq!(prepared.disks[1].path, d.join("get.img"));
    assert_eq!(
        std::fs::metadata(d.join("get.img")).expect("get.img").len(),
        64 << 20,
        "the get disk is exactly --transfer-size"
    );
    // Pretend the guest sent the tree straight back as its get archive.
    let sum = archive::write_tar(&j.puts, "job/t/marker", &d.join("get.img")).expect("get archive");
    let mut report = GuestReport::default();
    report.files.insert(
        GET_MANIFEST_FRAME.into(),
        format!("{} {}\n", sum.len, sum.sha256).into_bytes(),
    );
    report
        .files
        .insert(STDOUT_FRAME.into(), b"hello\n".to_vec());
    let mut outcome = CommandOutcome::default();
    collect(&j, &prepared, &report, "", &mut outcome).expect("collect");
    assert_eq!(std::fs::read(d.join("out/t/sub/f")).expect("got"), b"data");
    assert_eq!(
        (outcome.stdout.as_str(), outcome.partial),
        ("hello\n", false)
    );
    // A damaged archive is refused.
    report.files.insert(
        GET_MANIFEST_FRAME.into(),
        format!("{} {}\n", sum.len, "0".repeat(64)).into_bytes(),
    );
    let e = collect(&j, &prepared, &report, "", &mut outcome).expect_err("checksum");
    assert!(matches!(e, TransferError::GetChecksum { .. }), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_timed_out_run_keeps_the_stdout_the_console_showed() {
    let j = job(&["sh", "-c", "echo a; sleep 100"]);
    let prepared = prepare(&j, &std::env::temp_dir(), 0).expect("prepare");
    let console = format!("boot noise\r\n{STDOUT_CONSOLE_MARK}\r\nstep 1\r\nstep 2\r\n");
    let mut outcome = CommandOutcome::default();
    collect(
        &j,
        &prepared,
        &GuestReport::default(),
        &console,
        &mut outcome,
    )
    .expect("collect");
    assert!(outcome.partial);
    assert_eq!(outcome.stdout, "step 1\nstep 2\n");
}

#[test]
fn a_bad_archive_from_the_guest_is_the_guests_fault_not_the_users() {
    let e = TransferError::BadGetArchive("truncated".into());
    assert_eq!(e.kind(), vmm::exit_status::ErrorKind::Guest);
    assert_eq!(e.kind().exit_status(), vmm::exit_status::RUNTIME_ERROR);
}
