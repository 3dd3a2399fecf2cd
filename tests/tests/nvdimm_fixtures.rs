//! What the real tools printed in a real guest, checked against the NVDIMM
//! geometry pmemvm promises (`vmm::config`, `vmm::layout`).
//!
//! The files in `tests/fixtures/nvdimm/` come from one run of
//! `nested_nvdimm_defaults` (pmemvm nested under QEMU TCG, the project's
//! guest image: Linux 6.1.192, ndctl/daxctl 76.1 of Debian 12); the test
//! keeps every guest output in `target/nested-nvdimm-defaults/`, and these
//! were copied from there unchanged. Two `--nvdimm 1G` DIMMs (a.img, b.img)
//! and one `--nvdimm 64M` (c.img, traced with strace).
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use std::path::PathBuf;

use pmemvm_tests::label_trace::label_writes_synced;
use vmm::config::{resolve_nodes, NvdimmSpec};
use vmm::layout;

const MIB: u64 = 1 << 20;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/nvdimm")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn spec(s: &str) -> NvdimmSpec {
    s.parse().unwrap()
}

/// Usable size of an fsdax/devdax namespace with `map=dev` over `raw`
/// bytes (Linux `nd_pfn_init`): an 8 KiB info block and 64 bytes of
/// `struct page` per 4 KiB page, rounded up to the 2 MiB namespace align.
fn pfn_usable(raw: u64) -> u64 {
    let npfns = (raw - 8192) / 4096;
    let reserve = (8192 + 64 * npfns).div_ceil(2 * MIB) * 2 * MIB;
    raw - reserve
}

#[test]
fn fresh_dimms_are_empty_labelled_regions_of_exactly_size() {
    let region = spec("1G").spa_size();
    let list = json("ndctl-list-DRN-fresh-1G-1G.json");
    let regions = list["regions"].as_array().unwrap();
    assert_eq!(regions.len(), 2);
    for r in regions {
        assert_eq!(r["size"], region, "{r:#}");
        assert_eq!(r["align"], layout::NVDIMM_REGION_ALIGN, "{r:#}");
        assert_eq!(r["size"].as_u64().unwrap() % layout::NVDIMM_REGION_ALIGN, 0);
        assert_eq!(
            r["available_size"], region,
            "initialised labels, no namespace: the whole region is free"
        );
        assert_eq!(r["persistence_domain"], "memory_controller");
        assert!(
            r["namespaces"].as_array().is_none_or(Vec::is_empty),
            "{r:#}"
        );
    }
    // DIMM ids: pmemvm's vendor 0x504d, location 0x01, date 0x2601, then the
    // serial from each file's identity page (big-endian, never order-based).
    let dimms = list["dimms"].as_array().unwrap();
    assert_eq!(dimms.len(), 2);
    for d in dimms {
        let id = d["id"].as_str().unwrap();
        assert!(id.starts_with("4d50-01-0126-"), "{id}");
        assert!(
            !id.ends_with("00004d50") && !id.ends_with("01004d50"),
            "{id}"
        );
    }
}

#[test]
fn namespace_sizes_match_the_geometry() {
    let region = spec("1G").spa_size();
    for (f, mode) in [
        ("ndctl-create-01-create.json", "fsdax"),
        ("ndctl-create-02-e-devdax.json", "devdax"),
        ("ndctl-create-03-e-fsdax.json", "fsdax"),
        ("ndctl-create-05-devdax.json", "devdax"),
        ("ndctl-create-07-sector.json", "sector"),
        ("ndctl-create-09-raw.json", "raw"),
    ] {
        let v = json(f);
        assert_eq!(v["mode"], mode, "{f}");
        let size = v["size"].as_u64().unwrap();
        match mode {
            "raw" => assert_eq!(size, region, "{f}"),
            // BTT: a map and log per arena, under 1 % of the region.
            "sector" => assert!(size < region && size > region - region / 100, "{f}"),
            _ => assert_eq!(size, pfn_usable(region), "{f}"),
        }
    }
    // The no-argument create on two fresh DIMMs took the first region ndctl
    // met with free capacity (ndctl walks regions in sysfs order: region1
    // here) and made the default: fsdax, map=dev, all of it.
    let c = json("ndctl-create-01-create.json");
    assert!(
        c["dev"].as_str().is_some_and(|d| d.ends_with(".0")),
        "{c:#}"
    );
    assert_eq!(c["map"], "dev");
    let list = json("ndctl-list-DRN-fsdax-1G-1G.json");
    for r in list["regions"].as_array().unwrap() {
        assert_eq!(r["size"], region);
        let ns = &r["namespaces"][0];
        assert_eq!(ns["mode"], "fsdax", "{r:#}");
        assert_eq!(ns["size"], pfn_usable(region), "{r:#}");
        assert_eq!(r["available_size"], 0);
    }
}

#[test]
fn system_ram_onlines_the_devdax_into_the_dimm_node() {
    let region = spec("1G").spa_size();
    // DIMM 0 of the run that did system-ram is in node 1 by default.
    let node = resolve_nodes(&[spec("1G"), spec("1G")]).unwrap()[0];
    let devdax = json("daxctl-list-devdax-1G.json");
    assert_eq!(devdax[0]["mode"], "devdax");
    assert_eq!(devdax[0]["size"], pfn_usable(region));
    assert_eq!(devdax[0]["target_node"], node);
    let ram = json("daxctl-list-system-ram-1G.json");
    let d = &ram[0];
    assert_eq!(d["mode"], "system-ram");
    assert_eq!(d["target_node"], node);
    assert_eq!(d["online_memblocks"], d["total_memblocks"]);
    // kmem onlines the whole 128 MiB memory blocks inside the dax range.
    let blocks = d["online_memblocks"].as_u64().unwrap();
    let block = 128 * MIB;
    let start = region - pfn_usable(region); // offset of the data in the region
    let first = start.div_ceil(block);
    assert_eq!(blocks, region / block - first, "{d:#}");
    // The node has no CPUs and exactly that memory.
    let nodes = fixture("nodes-after-system-ram.txt");
    let line = nodes
        .lines()
        .find(|l| l.starts_with(&format!("node{node} ")))
        .unwrap();
    assert!(line.contains("cpus=[]"), "{line}");
    assert!(
        line.ends_with(&format!("{} kB", blocks * block / 1024)),
        "{line}"
    );
    assert!(
        nodes.lines().any(|l| l.starts_with("node0 cpus=[0]")),
        "{nodes}"
    );
}

#[test]
fn dax_mounts_set_statx_attr_dax() {
    for f in ["xfs_io-statx-r-ext4-dax.txt", "xfs_io-statx-r-xfs-dax.txt"] {
        let t = fixture(f);
        let attrs = t
            .lines()
            .find_map(|l| l.strip_prefix("stat.attributes = 0x"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap();
        assert_ne!(attrs & 0x20_0000, 0, "{f}: STATX_ATTR_DAX");
    }
}

#[test]
fn every_label_write_is_synced_before_the_next_call() {
    let s = spec("64M,file=c.img");
    let area = s.label_offset()..s.label_offset() + s.label_size;
    let log = fixture("strace-label-writes-64M.log");
    let (writes, unsynced) = label_writes_synced(&log, area);
    assert!(writes >= 10, "{writes} label writes in\n{log}");
    assert!(unsynced.is_empty(), "{unsynced:?}");
    // The identity page was written (and synced) when pmemvm created c.img.
    assert!(
        log.contains(&format!(", 4096, {}) = 4096", s.identity_offset())),
        "{log}"
    );
    // The log ends with pmemvm killed, after the last sync.
    assert!(
        log.trim_end().ends_with("+++ killed by SIGKILL +++"),
        "{log}"
    );
}
