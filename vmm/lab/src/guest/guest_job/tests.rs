//! Tests of the guest job archive, the image lookup and the result channel.

use super::*;

/// Minimal newc reader used to check the writer: (name, mode, nlink, data).
fn read_newc(mut bytes: &[u8]) -> Vec<(String, u32, u32, Vec<u8>)> {
    let mut entries = Vec::new();
    let mut offset = 0usize;
    loop {
        assert_eq!(&bytes[..6], b"070701", "magic at offset {offset}");
        let field = |i: usize| {
            let s = std::str::from_utf8(&bytes[6 + i * 8..6 + (i + 1) * 8]).unwrap();
            u32::from_str_radix(s, 16).unwrap()
        };
        let (mode, nlink, size, namesize) =
            (field(1), field(4), field(6) as usize, field(11) as usize);
        let name_end = 110 + namesize;
        assert_eq!(bytes[name_end - 1], 0, "name is NUL-terminated");
        let name = String::from_utf8(bytes[110..name_end - 1].to_vec()).unwrap();
        let data_start = name_end.div_ceil(4) * 4;
        let data = bytes[data_start..data_start + size].to_vec();
        let next = (data_start + size).div_ceil(4) * 4;
        offset += next;
        bytes = &bytes[next..];
        if name == "TRAILER!!!" {
            assert!(bytes.is_empty(), "nothing after the trailer");
            return entries;
        }
        entries.push((name, mode, nlink, data));
    }
}

#[test]
fn archive_has_dirs_files_trailer_and_padding() {
    let archive = job_archive(&[
        ("job/job.fio", b"[j]\nrw=read\n", 0o644),
        ("job/setup.sh", b"true\n", 0o755),
    ])
    .unwrap();
    assert_eq!(archive.len() % 4, 0);
    let entries = read_newc(&archive);
    let names: Vec<_> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, ["job", "job/job.fio", "job/setup.sh"]);
    assert_eq!(entries[0].1, 0o040_755);
    assert_eq!(entries[0].2, 2);
    assert_eq!(entries[1].1, 0o100_644);
    assert_eq!(entries[1].3, b"[j]\nrw=read\n");
    assert_eq!(entries[2].1, 0o100_755);
    assert_eq!(entries[2].3, b"true\n");
}

#[test]
fn phases_are_listed_and_delivered_without_job_fio() {
    let job = GuestJob {
        setup: Some("true\n".into()),
        phases: vec![
            GuestPhase {
                name: "write-and-verify".into(),
                fio_job: "[a]\n".into(),
                args: None,
            },
            GuestPhase {
                name: "randread-1".into(),
                fio_job: "[b]\n".into(),
                args: Some("--alloc-size=1048576".into()),
            },
        ],
        ..GuestJob::default()
    };
    let entries = read_newc(&job.archive().unwrap());
    let names: Vec<_> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "job",
            "job/setup.sh",
            "job/write-and-verify.fio",
            "job/randread-1.fio",
            "job/randread-1.args",
            "job/phases",
            "job/job.fio"
        ]
    );
    assert_eq!(entries[6].3, PHASES_FALLBACK_JOB.as_bytes());
    assert_eq!(entries[5].3, b"write-and-verify\nrandread-1\n");
    assert_eq!(entries[4].3, b"--alloc-size=1048576");
    for bad in ["", "../x", "a b", ".hidden", "a/b"] {
        let job = GuestJob {
            phases: vec![GuestPhase {
                name: bad.into(),
                ..GuestPhase::default()
            }],
            ..GuestJob::default()
        };
        assert!(job.archive().is_err(), "{bad:?} accepted");
    }
}

#[test]
fn archive_extracts_with_gnu_cpio() {
    use std::os::unix::fs::PermissionsExt;
    let job = GuestJob {
        fio_job: "[verify]\nrw=write\n".into(),
        setup: Some("echo hi\n".into()),
        args: Some("--minimal".into()),
        ..GuestJob::default()
    };
    let dir = std::env::temp_dir().join(format!("pmemvm-cpio-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let archive_path = dir.join("job.cpio");
    std::fs::write(&archive_path, job.archive().unwrap()).unwrap();
    let output = match std::process::Command::new("cpio")
        .args(["-idv", "--no-absolute-filenames", "-F"])
        .arg(&archive_path)
        .current_dir(&dir)
        .output()
    {
        Ok(output) => output,
        Err(err) => pmemvm_skip::skip!("cannot run cpio (apt-get install cpio): {err}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cpio failed: {stderr}");
    assert!(stderr.contains("job/job.fio"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("job/job.fio")).unwrap(),
        job.fio_job
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("job/args")).unwrap(),
        "--minimal"
    );
    let setup = std::fs::metadata(dir.join("job/setup.sh")).unwrap();
    assert_eq!(setup.permissions().mode() & 0o777, 0o755);
    assert!(std::fs::metadata(dir.join("job")).unwrap().is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn archive_header_is_byte_exact() {
    let archive = job_archive(&[("a", b"xyz", 0o644)]).unwrap();
    let expected_header = "070701\
        00000001000081a4000000000000000000000001\
        00000000000000030000000000000000\
        000000000000000000000002\
        00000000";
    assert_eq!(&archive[..110], expected_header.as_bytes());
    // "a\0" then padding to 112, data "xyz" + 1 byte of padding.
    assert_eq!(&archive[110..116], b"a\0xyz\0");
    assert_eq!(archive[116..122], *b"070701");
}

#[test]
fn archive_shares_parent_directories_and_keeps_nested_ones() {
    let archive = job_archive(&[("job/a", b"", 0o644), ("job/sub/b", b"1", 0o600)]).unwrap();
    let names: Vec<_> = read_newc(&archive).into_iter().map(|e| e.0).collect();
    assert_eq!(names, ["job", "job/a", "job/sub", "job/sub/b"]);
}

#[test]
fn archive_rejects_bad_paths() {
    for path in ["", "/job/x", "job/../x", "job//x", "./x", "job/"] {
        assert!(
            matches!(
                job_archive(&[(path, b"", 0o644)]),
                Err(GuestJobError::InvalidArchivePath { .. })
            ),
            "{path:?} accepted"
        );
    }
    assert!(matches!(
        job_archive(&[("a", b"", 0o644), ("a", b"", 0o644)]),
        Err(GuestJobError::DuplicateArchivePath { .. })
    ));
}

#[test]
fn guest_job_archive_contains_optional_files() {
    let job = GuestJob {
        fio_job: "[x]\n".into(),
        setup: Some("mkfs.xfs /dev/pmem0\n".into()),
        args: None,
        ..GuestJob::default()
    };
    let names: Vec<_> = read_newc(&job.archive().unwrap())
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, ["job", "job/job.fio", "job/setup.sh"]);
}

#[test]
fn initrd_append_aligns_to_four_bytes() {
    let joined = append_to_initrd(b"12345", b"070701");
    assert_eq!(joined, b"12345\x00\x00\x00070701");
    assert_eq!(append_to_initrd(b"1234", b"x"), b"1234x");
}

#[test]
fn channel_with_noise_frames_and_status() {
    let stream = b"\x00garbage\r\nPMEMVM-BEGIN fio.json 10\n{\"a\":\"b\"}\n\nPMEMVM-END fio.json\n\
        noise PMEMVM-BEGIN empty 0\n\nPMEMVM-END empty\nPMEMVM-STATUS 3\ntrailing";
    let report = parse_channel(stream).unwrap();
    assert_eq!(report.status, Some(3));
    assert_eq!(report.files["fio.json"], b"{\"a\":\"b\"}\n");
    assert_eq!(report.files["empty"], b"");
    assert_eq!(report.files.len(), 2);
}

#[test]
fn channel_data_may_contain_markers() {
    let data = b"PMEMVM-STATUS 9\nPMEMVM-END x\n";
    let mut stream = format!("PMEMVM-BEGIN x {}\n", data.len()).into_bytes();
    stream.extend_from_slice(data);
    stream.extend_from_slice(b"\nPMEMVM-END x\nPMEMVM-STATUS 0\n");
    let report = parse_channel(&stream).unwrap();
    assert_eq!(report.files["x"], data);
    assert_eq!(report.status, Some(0));
}

#[test]
fn channel_accepts_crlf_line_ends() {
    let report =
        parse_channel(b"PMEMVM-BEGIN a 1\r\nz\r\nPMEMVM-END a\r\nPMEMVM-STATUS 0\r\n").unwrap();
    assert_eq!(report.files["a"], b"z");
    assert_eq!(report.status, Some(0));
}

#[test]
fn channel_without_frames_is_empty() {
    assert_eq!(parse_channel(b"").unwrap(), GuestReport::default());
    assert_eq!(
        parse_channel(b"boot noise only\n").unwrap(),
        GuestReport::default()
    );
}

#[test]
fn channel_truncated_frames_name_the_file() {
    let err = parse_channel(b"PMEMVM-BEGIN fio.json 100\n{\"partial\"").unwrap_err();
    assert_eq!(
        err,
        GuestChannelError::TruncatedFrame {
            name: "fio.json".into(),
            expected: 100,
            got: 10
        }
    );
    assert!(err.to_string().contains("fio.json"));
    let err = parse_channel(b"PMEMVM-BEGIN fio.json 2\n{}\nPMEMVM-EN").unwrap_err();
    assert_eq!(
        err,
        GuestChannelError::MissingFrameEnd {
            name: "fio.json".into()
        }
    );
    let err = parse_channel(b"PMEMVM-BEGIN fio.json 2\n{}").unwrap_err();
    assert_eq!(
        err,
        GuestChannelError::MissingFrameEnd {
            name: "fio.json".into()
        }
    );
    let err = parse_channel(b"PMEMVM-BEGIN fio.json 2\n{}\nPMEMVM-END other\n").unwrap_err();
    assert_eq!(
        err,
        GuestChannelError::MissingFrameEnd {
            name: "fio.json".into()
        }
    );
    // Size larger than announced: the end line is not where it should be.
    let err = parse_channel(b"PMEMVM-BEGIN a 1\nxy\nPMEMVM-END a\n").unwrap_err();
    assert_eq!(err, GuestChannelError::MissingFrameEnd { name: "a".into() });
}

#[test]
fn channel_bad_headers_and_status() {
    for stream in [
        &b"PMEMVM-BEGIN fio.json"[..],
        b"PMEMVM-BEGIN fio.json x\n",
        b"PMEMVM-BEGIN a 1 2\n",
        b"PMEMVM-BEGIN  1\n",
    ] {
        assert!(
            matches!(
                parse_channel(stream),
                Err(GuestChannelError::BadFrameHeader { .. })
            ),
            "{:?}",
            String::from_utf8_lossy(stream)
        );
    }
    for stream in [
        &b"PMEMVM-STATUS 1"[..],
        b"PMEMVM-STATUS 256\n",
        b"PMEMVM-STATUS -1\n",
        b"PMEMVM-STATUS \n",
    ] {
        assert!(
            matches!(
                parse_channel(stream),
                Err(GuestChannelError::BadStatus { .. })
            ),
            "{:?}",
            String::from_utf8_lossy(stream)
        );
    }
    assert_eq!(
        parse_channel(b"PMEMVM-STATUS 1\nPMEMVM-STATUS 2\n"),
        Err(GuestChannelError::DuplicateStatus)
    );
    assert_eq!(
        parse_channel(b"PMEMVM-BEGIN a 0\n\nPMEMVM-END a\nPMEMVM-BEGIN a 0\n\nPMEMVM-END a\n"),
        Err(GuestChannelError::DuplicateFrame { name: "a".into() })
    );
}

#[test]
fn image_dir_lookup() {
    let root = std::env::temp_dir().join(format!("pmemvm-guest-job-test-{}", std::process::id()));
    let out = root.join(IMAGE_OUT_SUBDIR);
    std::fs::create_dir_all(&out).unwrap();
    let deep = root.join("target/debug/deps");
    std::fs::create_dir_all(&deep).unwrap();
    let err = find_image_above(&deep).unwrap_err();
    assert!(matches!(err, GuestJobError::ImageNotFound { .. }), "{err}");
    std::fs::write(out.join("manifest.json"), "{}").unwrap();
    let err = find_image_above(&deep).unwrap_err();
    assert!(
        matches!(err, GuestJobError::ImageIncomplete { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("guest-images/build.sh"));
    for f in ["vmlinux", "bzImage", "initramfs.cpio.gz"] {
        std::fs::write(out.join(f), "x").unwrap();
    }
    let image = find_image_above(&deep).unwrap();
    assert_eq!(image.dir, out);
    assert_eq!(image.bz_image, out.join("bzImage"));
    assert_eq!(image.initramfs, out.join("initramfs.cpio.gz"));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn image_not_found_message_names_the_build_command() {
    let err = GuestJobError::ImageNotFound {
        start: PathBuf::from("/nowhere"),
    };
    assert!(err.to_string().contains("guest-images/build.sh"));
}

#[test]
fn a_missing_pmem_device_is_named_with_the_two_ways_on() {
    let m = missing_devices_message("/dev/pmem0 /dev/pmem1 ");
    assert!(
        m.starts_with("the fio job names /dev/pmem0, /dev/pmem1, which the guest does not have"),
        "{m}"
    );
    assert!(m.contains("--setup 'ndctl create-namespace'"), "{m}");
    assert!(m.contains("label-size=0"), "{m}");
    let other = missing_devices_message("/dev/nvme0n1");
    assert!(!other.contains("ndctl"), "{other}");
}
