//! Unit tests of `record::images`.

use super::super::log::tests::write_log;
use super::*;

fn tmp(name: &str) -> PathBuf {
    crate::fresh_test_dir(&format!("img-{name}"))
}

fn req(dir: &Path, out: &Path, select: Selection, torn: Option<u64>) -> Request {
    Request {
        dir: dir.to_path_buf(),
        out: out.to_path_buf(),
        select,
        torn: torn.map(|seed| TornSpec {
            seed,
            granule: super::super::log::LINE,
        }),
        partial: false,
    }
}

#[test]
fn a_torn_variant_at_8_bytes_tears_inside_a_cache_line_and_says_its_granule() {
    let d = tmp("granule");
    write_log(&d, &[(vec![1], 0x11), (vec![1], 0x22)], true);
    let out = d.join("out");
    let mut r = req(&d, &out, Selection::At(1), Some(5));
    r.torn = Some(TornSpec {
        seed: 5,
        granule: 8,
    });
    let m = write(&r).unwrap();
    let t = m.images[0].torn.clone().unwrap();
    assert_eq!(t.granule, 8);
    assert_eq!(
        t.lines_after,
        (PAGE / 8) as u64,
        "every 8 bytes of the page changed"
    );
    assert!(t.lines_applied.iter().all(|o| o % 8 == 0));
    let img = std::fs::read(out.join(&t.file)).unwrap();
    let page = &img[PAGE..2 * PAGE];
    for o in &t.lines_applied {
        let at = usize::try_from(*o).unwrap();
        assert_eq!(&img[at..at + 8], &[0x22; 8]);
    }
    let mixed = page
        .chunks(64)
        .filter(|line| line.contains(&0x11) && line.contains(&0x22))
        .count();
    assert!(mixed > 0, "no 64-byte line holds both states");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(MANIFEST)).unwrap()).unwrap();
    assert_eq!(json["images"][0]["torn"]["granule"], 8);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_image_after_flush_n_holds_epochs_one_to_n() {
    let d = tmp("at");
    write_log(&d, &[(vec![1, 2], 0x11), (vec![2], 0x22)], true);
    let out = d.join("out");
    let m = write(&req(&d, &out, Selection::All, None)).unwrap();
    assert_eq!(
        m.images.iter().map(|i| i.flush).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let page = |n: u64, p: usize| {
        let img = std::fs::read(out.join(format!("flush-{n:06}.img"))).unwrap();
        img[p * PAGE]
    };
    assert_eq!((page(0, 1), page(0, 2)), (0, 0));
    assert_eq!((page(1, 1), page(1, 2)), (0x11, 0x11));
    assert_eq!((page(2, 1), page(2, 2)), (0x11, 0x22));
    assert!(!out.join(".work.img").exists());
    let again: Manifest =
        serde_json::from_slice(&std::fs::read(out.join(MANIFEST)).unwrap()).unwrap();
    assert_eq!(again, m);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn each_image_is_handed_over_before_the_next_is_made_and_a_refusal_undoes_the_run() {
    let d = tmp("each");
    write_log(
        &d,
        &[(vec![1], 0x11), (vec![2], 0x22), (vec![3], 0x33)],
        true,
    );
    let out = d.join("out");
    let listing = |dir: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".work.img")
            .collect();
        v.sort();
        v
    };
    let mut seen = Vec::new();
    let m = write_each(&req(&d, &out, Selection::All, Some(1)), |info, region| {
        assert_eq!(region, 16 * PAGE as u64);
        // Only this flush's image and its torn variant: the caller
        // removed the earlier ones, and the next is not made yet.
        let torn = info.torn.as_ref().map(|t| t.file.clone()).unwrap();
        assert_eq!(listing(&out), [torn.clone(), info.file.clone()]);
        let img = std::fs::read(out.join(&info.file)).unwrap();
        seen.push((info.flush, img[3 * PAGE]));
        std::fs::remove_file(out.join(&info.file)).unwrap();
        std::fs::remove_file(out.join(torn)).unwrap();
        Ok::<(), ImageError>(())
    })
    .unwrap();
    assert_eq!(seen, [(0, 0), (1, 0), (2, 0), (3, 0x33)]);
    assert_eq!(m.images.len(), 4);
    assert_eq!(listing(&out), [MANIFEST]);
    // A caller's error ends the run and takes back what it wrote.
    let again = d.join("again");
    let e = write_each(
        &req(&d, &again, Selection::All, None),
        |info, _| match info.flush {
            2 => Err(ImageError::EveryZero),
            _ => Ok(()),
        },
    )
    .unwrap_err();
    assert!(matches!(e, ImageError::EveryZero), "{e}");
    assert!(!again.exists(), "the directory it made is gone");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn torn_variants_hold_a_seeded_subset_of_the_next_lines() {
    let d = tmp("torn");
    write_log(&d, &[(vec![1], 0x11), (vec![1, 5], 0x22)], true);
    let (a, b) = (d.join("a"), d.join("b"));
    let ma = write(&req(&d, &a, Selection::At(1), Some(7))).unwrap();
    let mb = write(&req(&d, &b, Selection::At(1), Some(7))).unwrap();
    assert_eq!(ma, mb);
    let t = ma.images[0].torn.clone().unwrap();
    assert_eq!(
        t.lines_after,
        2 * 64,
        "two pages of new lines after flush 1"
    );
    assert!(!t.lines_applied.is_empty() && t.lines_applied.len() < 128);
    let ta = std::fs::read(a.join(&t.file)).unwrap();
    assert_eq!(ta, std::fs::read(b.join(&t.file)).unwrap());
    for l in 0..128u64 {
        let at = if l < 64 {
            PAGE as u64 + l * 64
        } else {
            5 * PAGE as u64 + (l - 64) * 64
        };
        let want = if t.lines_applied.contains(&at) {
            0x22
        } else if at < 2 * PAGE as u64 {
            0x11
        } else {
            0
        };
        assert_eq!(ta[usize::try_from(at).unwrap()], want, "line at {at}");
    }
    let c = d.join("c");
    let mc = write(&req(&d, &c, Selection::At(1), Some(8))).unwrap();
    assert_ne!(
        mc.images[0].torn.as_ref().unwrap().lines_applied,
        t.lines_applied
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_requests_name_the_value_and_leave_out_alone() {
    let d = tmp("bad");
    write_log(&d, &[(vec![1], 1)], true);
    let out = d.join("out");
    let e = write(&req(&d, &out, Selection::At(2), None))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--at 2 is past the last flush") && e.contains("from 0 to 1"),
        "{e}"
    );
    assert!(!out.exists());
    let e = write(&req(&d, &out, Selection::Every(0), None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--every 0"), "{e}");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("mine"), b"keep").unwrap();
    let e = write(&req(&d, &out, Selection::All, None))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not empty"), "{e}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    let m = write(&req(&d, &d.join("every"), Selection::Every(5), None)).unwrap();
    assert_eq!(m.images.iter().map(|i| i.flush).collect::<Vec<_>>(), [0, 1]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_plan_names_the_flushes_write_makes_and_writes_nothing() {
    let d = tmp("plan");
    let epochs: Vec<(Vec<u64>, u8)> = (1..=7u8).map(|i| (vec![1], i)).collect();
    write_log(&d, &epochs, true);
    let out = d.join("out");
    for select in [
        Selection::All,
        Selection::At(4),
        Selection::Every(3),
        Selection::Every(10),
    ] {
        let planned = plan(&req(&d, &out, select, Some(1))).unwrap();
        assert!(!out.exists(), "plan wrote {}", out.display());
        let m = write(&req(&d, &out, select, None)).unwrap();
        let made: Vec<u64> = m.images.iter().map(|i| i.flush).collect();
        assert_eq!(planned, made, "{select:?}");
        std::fs::remove_dir_all(&out).unwrap();
    }
    assert_eq!(
        plan(&req(&d, &out, Selection::Every(3), None)).unwrap(),
        [0, 3, 6, 7]
    );
    let e = plan(&req(&d, &out, Selection::At(8), None)).unwrap_err();
    assert!(e.to_string().contains("--at 8 is past"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
