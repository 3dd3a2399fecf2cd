use super::*;

#[test]
fn every_listed_nvdimm_key_parses_and_prints_back() {
    for (key, value) in NVDIMM_KEYS {
        let text = match value.is_empty() {
            true => format!("16M,{key}"),
            false => format!("16M,{key}={value}"),
        };
        let spec: NvdimmSpec = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(spec.to_string().contains(key), "{text} printed as {spec}");
    }
    assert!("16M,no-such-key".parse::<NvdimmSpec>().is_err());
}

#[test]
fn sizes() {
    assert_eq!(parse_size("4096"), Ok(4096));
    assert_eq!(parse_size("1K"), Ok(1024));
    assert_eq!(parse_size("512M"), Ok(512 << 20));
    assert_eq!(parse_size("16g"), Ok(16 << 30));
    assert_eq!(parse_size("2T"), Ok(2 << 40));
    assert_eq!(parse_size("2GiB"), Ok(2 << 30));
    assert_eq!(parse_size("2GB"), Ok(2 << 30));
    for bad in [
        "",
        "G",
        "0",
        "0G",
        "12X",
        "1.5G",
        "-1G",
        "99999999999999999999",
        "16777216T",
        " ",
        "1GG",
        "1 G",
    ] {
        let e = parse_size(bad).unwrap_err();
        assert!(e.to_string().contains(&format!("'{bad}'")), "{e}");
    }
}

#[test]
fn nvdimm_specs() {
    let s: NvdimmSpec = "1G".parse().unwrap();
    assert_eq!(s.size, 1 << 30);
    assert_eq!(s.label_size, 128 << 10);
    assert_eq!(s.node, None);
    let s: NvdimmSpec = "64M,file=/tmp/x,readonly,label-size=0,prealloc,node=3"
        .parse()
        .unwrap();
    assert_eq!(s.file, Some(PathBuf::from("/tmp/x")));
    assert!(s.readonly && s.prealloc);
    assert_eq!(s.label_size, 0);
    assert_eq!(s.node, Some(3));
    let s: NvdimmSpec = "16M,label-size=256K,node=0".parse().unwrap();
    assert_eq!((s.label_size, s.node), (256 << 10, Some(0)));
    let s: NvdimmSpec = "128G,label-size=4194300K".parse().unwrap();
    assert_eq!(s.label_size, (4 << 30) - 4096);
    for bad in [
        "1M",
        "3M",
        "0",
        "1G,file=",
        "1G,bogus",
        "1G,readonly,readonly",
        "1G,label-size=5K",
        "1G,label-size=4K",
        "1G,label-size=8G",
        "1G,label-size=4G",
        "1G,file",
        "1G,readonly=yes",
        "1G,node",
        "1G,node=",
        "1G,node=256",
        "1G,node=-1",
        "1G,node= 1",
        "1G,node=1,node=2",
    ] {
        assert!(bad.parse::<NvdimmSpec>().is_err(), "{bad}");
    }
}

#[test]
fn geometry_is_region_then_labels_then_identity() {
    // --nvdimm 1G: the guest's region is exactly 1 GiB (a multiple of the
    // 16 MiB region align), labels at 1 GiB, identity page after them.
    let s: NvdimmSpec = "1G".parse().unwrap();
    assert_eq!(s.spa_size(), 1 << 30);
    assert_eq!(s.spa_size() % (16 << 20), 0);
    assert_eq!(s.label_offset(), 1 << 30);
    assert_eq!(s.identity_offset(), (1 << 30) + (128 << 10));
    assert_eq!(s.file_len(), (1 << 30) + (128 << 10) + 4096);
    let s: NvdimmSpec = "48M,label-size=0".parse().unwrap();
    assert_eq!(
        (s.spa_size(), s.label_offset(), s.file_len()),
        (48 << 20, 48 << 20, (48 << 20) + 4096)
    );
    let s: NvdimmSpec = "128G,label-size=1M".parse().unwrap();
    assert_eq!(s.file_len(), (128 << 30) + (1 << 20) + 4096);
}

#[test]
fn bad_sizes_name_the_value_and_the_nearest_valid_sizes() {
    let msg = |t: &str| t.parse::<NvdimmSpec>().unwrap_err().to_string();
    let m = msg("1000M");
    assert!(m.contains("'1000M'"), "{m}");
    assert!(m.contains("nearest valid sizes are 992M and 1008M"), "{m}");
    let m = msg("1022M");
    assert!(m.contains("1008M and 1G"), "{m}");
    let m = msg("258M,file=pm0.img");
    assert!(m.contains("'258M'") && m.contains("256M and 272M"), "{m}");
    let m = msg("4M");
    assert!(
        m.contains("'4M'") && m.contains("smallest valid size is 16M"),
        "{m}"
    );
    let m = msg("1073741825");
    assert!(m.contains("1G and 1040M"), "{m}");
    let m = msg("1G,node=300");
    assert!(m.contains("node=300") && m.contains("0 to 255"), "{m}");
    assert_eq!(size_text(1 << 30), "1G");
    assert_eq!(size_text(1008 << 20), "1008M");
    assert_eq!(size_text(3 << 40), "3T");
    assert_eq!(size_text(4097), "4097");
}

fn specs(list: &[&str]) -> Vec<NvdimmSpec> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn numa_nodes() {
    // Default: DIMM i in node i + 1 (node 0 holds the CPUs and RAM).
    assert_eq!(
        resolve_nodes(&specs(&["1G", "1G", "1G"])),
        Ok(vec![1, 2, 3])
    );
    assert_eq!(resolve_nodes(&[]), Ok(vec![]));
    // Explicit nodes are kept; the others take the lowest free numbers.
    assert_eq!(resolve_nodes(&specs(&["1G", "1G,node=1"])), Ok(vec![2, 1]));
    assert_eq!(
        resolve_nodes(&specs(&["1G,node=0", "1G,node=0"])),
        Ok(vec![0, 0])
    );
    assert_eq!(
        resolve_nodes(&specs(&["1G,node=1", "1G,node=1", "1G"])),
        Ok(vec![1, 1, 2])
    );
    // Gaps are refused with the numbers that would work.
    let e = resolve_nodes(&specs(&["1G,node=3"])).unwrap_err();
    assert_eq!(
        e,
        ConfigError::NodeGap {
            used: 3,
            missing: 1,
            max_ok: 1
        }
    );
    assert!(e.to_string().contains("node=3"), "{e}");
    assert!(e.to_string().contains("from 0 to 1"), "{e}");
    assert_eq!(resolve_nodes(&specs(&["1G,node=0", "1G"])), Ok(vec![0, 1]));
    let e = resolve_nodes(&specs(&["1G", "1G,node=3"])).unwrap_err();
    assert!(matches!(e, ConfigError::NodeGap { missing: 2, .. }), "{e}");
    let many: Vec<NvdimmSpec> = (0..256).map(|_| NvdimmSpec::temporary(16 << 20)).collect();
    assert_eq!(resolve_nodes(&many), Err(ConfigError::TooManyNodes));
    assert_eq!(resolve_nodes(&many[..255]).map(|n| n[254]), Ok(255));
}

#[test]
fn mce_is_on_or_off_and_refused_where_it_cannot_work() {
    let s: NvdimmSpec = "1G,file=a.img,mce=on".parse().unwrap();
    assert!(s.mce);
    assert!(!"1G,mce=off".parse::<NvdimmSpec>().unwrap().mce);
    assert!(!"1G".parse::<NvdimmSpec>().unwrap().mce);
    for (text, want) in [
        ("1G,mce=yes", "--nvdimm mce=yes is not valid; use mce=on"),
        ("1G,mce", "--nvdimm option 'mce' is not known"),
        (
            "1G,mce=on,record=r",
            "mce=on cannot be combined with record=",
        ),
        (
            "1G,mce=on,hugepages,label-size=0",
            "cannot be combined with hugepages",
        ),
        ("1G,mce=on,mce=off", "'mce' is given more than once"),
    ] {
        let e = text.parse::<NvdimmSpec>().unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
}
