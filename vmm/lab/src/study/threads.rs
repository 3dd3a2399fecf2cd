//! The upstream mail threads `pmemvm bench` reproduces: who posted what, when, under which
//! Message-ID, and every per-run figure they posted, as they posted it.
//!
//! The figures are copied from the archived posts (the project keeps copies of the threads with
//! its design notes) in the units fio printed them — `IOPS=3968k`, `slat (nsec): min=431`,
//! `BW=15.1GiB/s` — with a [`Unit`] saying how to read each number; [`Series::values`] converts
//! them to the report's units. Nothing here is a summary: a range or a mean is always computed
//! from these runs by the report.

use serde::Serialize;

use crate::study::report::{Metric, UpstreamFigure, UpstreamSource};

/// One post to a public mailing list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Post {
    /// Short label used in reports (`V1`, `V2`, `bcache`, `famfs`).
    pub label: &'static str,
    /// The Subject header.
    pub subject: &'static str,
    /// The From header's name.
    pub author: &'static str,
    /// The Date header as sent; `None` where the archived copy has no mail headers.
    pub date: Option<&'static str>,
    /// The Message-ID header without angle brackets; `None` where the archived copy has none.
    pub message_id: Option<&'static str>,
    /// The mailing list.
    pub list: &'static str,
    /// Where in the post the figures are, and anything the archived copy lacks.
    pub note: &'static str,
}

impl Post {
    /// The report's owned copy, with how upstream ran.
    pub fn to_source(&self, how: &str) -> UpstreamSource {
        UpstreamSource {
            label: self.label.to_owned(),
            subject: self.subject.to_owned(),
            author: self.author.to_owned(),
            date: self.date.map(str::to_owned),
            message_id: self.message_id.map(str::to_owned),
            list: self.list.to_owned(),
            note: self.note.to_owned(),
            how: how.to_owned(),
        }
    }
}

/// How a posted number is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Unit {
    /// As is (counts, percentages, MiB/s).
    One,
    /// fio's `k` suffix on a count (`IOPS=3968k`).
    Kilo,
    /// fio's `M` suffix on a count (`IOPS=10.6M`).
    Mega,
    /// Nanoseconds (`slat (nsec): min=431`).
    Nsec,
    /// fio's `k` suffix in a nanosecond line (`max=50423k`): microseconds.
    KiloNsec,
    /// Microseconds (`slat (usec): min=2`).
    Usec,
    /// GiB/s (`BW=15.1GiB/s`).
    GibS,
}

impl Unit {
    /// Factor from the posted number to the report's unit of `metric` (µs for latencies, MiB/s
    /// for bandwidth, plain numbers otherwise).
    fn factor(self) -> f64 {
        match self {
            Unit::One | Unit::KiloNsec | Unit::Usec => 1.0,
            Unit::Kilo => 1e3,
            Unit::Mega => 1e6,
            Unit::Nsec => 1e-3,
            Unit::GibS => 1024.0,
        }
    }
}

/// One metric's per-run figures of one post.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Series {
    /// The metric.
    pub metric: Metric,
    /// Unit and per-run numbers with the feature off (or the only side).
    pub off: (Unit, &'static [f64]),
    /// Unit and per-run numbers with the feature on (empty for one-sided experiments).
    pub on: (Unit, &'static [f64]),
}

impl Series {
    /// Per-run values in the report's units: (off, on).
    pub fn values(&self) -> (Vec<f64>, Vec<f64>) {
        let conv = |(unit, v): (Unit, &[f64])| v.iter().map(|x| x * unit.factor()).collect();
        (conv(self.off), conv(self.on))
    }
}

/// A post's figures for one experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Posted {
    /// The post.
    pub post: &'static Post,
    /// How upstream ran (device, fio job, runs per side).
    pub how: &'static str,
    /// The figures.
    pub series: &'static [Series],
}

impl Posted {
    /// The report's figures.
    pub fn figures(&self) -> Vec<UpstreamFigure> {
        self.series
            .iter()
            .map(|s| {
                let (off, on) = s.values();
                UpstreamFigure {
                    metric: s.metric,
                    source: self.post.label.to_owned(),
                    off,
                    on,
                }
            })
            .collect()
    }
}

/// The pmem patch with a module parameter (V1): cover letter with the test script's output.
pub static PMEM_V1: Post = Post {
    label: "V1",
    subject: "[PATCH 0/1] pmem: allow user to set QUEUE_FLAG_NOWAIT",
    author: "Chaitanya Kulkarni",
    date: Some("Fri, 12 May 2023 03:43:01 -0700"),
    message_id: Some("20230512104302.8527-1-kch@nvidia.com"),
    list: "nvdimm@lists.linux.dev",
    note: "cover letter: `grep IOPS|slat|cpu pmem-*fio | column -t` over 3 randread runs per side \
           (nd_pmem loaded without and with nowait=1), and the full output of the test script \
           (write-and-verify job, 48-job randwrite fill) before them",
};

/// The pmem patch without the parameter (V2).
pub static PMEM_V2: Post = Post {
    label: "V2",
    subject: "[PATCH V2 1/1] pmem: set QUEUE_FLAG_NOWAIT",
    author: "Chaitanya Kulkarni",
    date: None,
    message_id: None,
    list: "nvdimm@lists.linux.dev",
    note:
        "patch mail: `grep IOPS|cpu|slat pmem*fio | column -t` over 3 randread runs per side; the \
           archived copy has no mail headers (no Date or Message-ID); V1's review thread announces \
           it on 13 May 2023 (\"sending out v2 without mod param\")",
};

/// The bcache patch.
pub static BCACHE: Post = Post {
    label: "bcache",
    subject: "[PATCH 0/1] bcache: allow user to set QUEUE_FLAG_NOWAIT",
    author: "Chaitanya Kulkarni",
    date: Some("Fri, 12 May 2023 02:54:19 -0700"),
    message_id: Some("20230512095420.12578-1-kch@nvidia.com"),
    list: "linux-bcache@vger.kernel.org",
    note: "cover letter: `grep IOPS|slat|cpu bc-*fio | column -t` over 3 randread runs per side, \
           and the test script's output: the write-and-verify job failed with err=84 (bad header) \
           with bch_nowait off and passed with it on",
};

/// The famfs RFC thread: XFS with DAX on pmem.
pub static FAMFS: Post = Post {
    label: "famfs",
    subject: "Re: [RFC PATCH 00/20] Introduce the famfs shared-memory file system",
    author: "John Groves",
    date: Some("Mon, 26 Feb 2024 20:05:58 -0600"),
    message_id: Some("mw4yhbmza4idassgbqeiti4ue7jq377ezxfrqrcbsbzsrmfiln@kn7qmqljvswl"),
    list: "linux-fsdevel@vger.kernel.org, nvdimm@lists.linux.dev and others (Cc)",
    note: "reply with luis/fio-xfsdax.sh: mkfs.xfs -d agcount=1024 -m reflink=0 on a 128 GiB \
           /dev/pmem0, mount -o dax, one fio run (\"I ran it several times with similar results\")",
};

const RANDREAD_3_RUNS: &str = "fio io_uring 4k randread after a full randwrite fill of the \
                               device, 3 runs per side";

/// pmem-nowait: V1's and V2's randread runs.
pub static PMEM_NOWAIT: [Posted; 2] = [
    Posted {
        post: &PMEM_V1,
        how: RANDREAD_3_RUNS,
        series: &[
            Series {
                metric: Metric::Iops,
                off: (Unit::Kilo, &[3968.0, 4084.0, 3995.0]),
                on: (Unit::Kilo, &[5909.0, 5997.0, 6006.0]),
            },
            Series {
                metric: Metric::BwMibS,
                off: (Unit::GibS, &[15.1, 15.6, 15.2]),
                on: (Unit::GibS, &[22.5, 22.9, 22.9]),
            },
            Series {
                metric: Metric::UsrCpu,
                off: (Unit::One, &[6.38, 6.19, 6.17]),
                on: (Unit::One, &[10.56, 9.92, 9.85]),
            },
            Series {
                metric: Metric::SysCpu,
                off: (Unit::One, &[31.37, 31.45, 31.22]),
                on: (Unit::One, &[87.82, 88.36, 89.04]),
            },
            Series {
                metric: Metric::Ctx,
                off: (Unit::One, &[220_427_659.0, 229_825_635.0, 221_896_158.0]),
                on: (Unit::One, &[24730.0, 23427.0, 23237.0]),
            },
            Series {
                metric: Metric::SlatMinUs,
                off: (Unit::Nsec, &[431.0, 420.0, 430.0]),
                on: (Unit::Nsec, &[1232.0, 1303.0, 1123.0]),
            },
            Series {
                metric: Metric::SlatAvgUs,
                off: (Unit::Nsec, &[9424.06, 9193.94, 9244.24]),
                on: (Unit::Nsec, &[7518.60, 7423.37, 7409.08]),
            },
            Series {
                metric: Metric::SlatMaxUs,
                off: (Unit::KiloNsec, &[50423.0, 35992.0, 40737.0]),
                on: (Unit::KiloNsec, &[40098.0, 52107.0, 40193.0]),
            },
        ],
    },
    Posted {
        post: &PMEM_V2,
        how: RANDREAD_3_RUNS,
        series: &[
            Series {
                metric: Metric::Iops,
                off: (Unit::Kilo, &[3683.0, 3819.0, 3999.0]),
                on: (Unit::Kilo, &[5837.0, 5936.0, 5945.0]),
            },
            Series {
                metric: Metric::BwMibS,
                off: (Unit::GibS, &[14.0, 14.6, 15.3]),
                on: (Unit::GibS, &[22.3, 22.6, 22.7]),
            },
            Series {
                metric: Metric::UsrCpu,
                off: (Unit::One, &[7.09, 6.89, 6.86]),
                on: (Unit::One, &[10.58, 10.50, 10.67]),
            },
            Series {
                metric: Metric::SysCpu,
                off: (Unit::One, &[29.65, 30.56, 30.94]),
                on: (Unit::One, &[88.44, 87.75, 88.60]),
            },
            Series {
                metric: Metric::Ctx,
                off: (Unit::One, &[198_742_065.0, 205_817_652.0, 222_627_094.0]),
                on: (Unit::One, &[27181.0, 25746.0, 28261.0]),
            },
            Series {
                metric: Metric::SlatMinUs,
                off: (Unit::Nsec, &[432.0, 441.0, 430.0]),
                on: (Unit::Nsec, &[1393.0, 1222.0, 1493.0]),
            },
            Series {
                metric: Metric::SlatAvgUs,
                off: (Unit::Nsec, &[9324.69, 9132.45, 9132.63]),
                on: (Unit::Nsec, &[7615.31, 7493.77, 7486.36]),
            },
            Series {
                metric: Metric::SlatMaxUs,
                off: (Unit::KiloNsec, &[50847.0, 52557.0, 36113.0]),
                on: (Unit::KiloNsec, &[68090.0, 44137.0, 40100.0]),
            },
        ],
    },
];

/// pmem-randwrite: the 48-job randwrite fill of V1's test script, one run per side.
pub static PMEM_RANDWRITE: [Posted; 1] = [Posted {
    post: &PMEM_V1,
    how: "fio io_uring 4k randwrite, 48 jobs, iodepth 2, 896 MiB of /dev/pmem0 per job, one run \
          per side (the fill before the randread runs)",
    series: &[
        Series {
            metric: Metric::Iops,
            off: (Unit::Kilo, &[2400.0]),
            on: (Unit::Mega, &[10.6]),
        },
        Series {
            metric: Metric::BwMibS,
            off: (Unit::One, &[9374.0]),
            on: (Unit::GibS, &[40.3]),
        },
        Series {
            metric: Metric::UsrCpu,
            off: (Unit::One, &[6.89]),
            on: (Unit::One, &[15.39]),
        },
        Series {
            metric: Metric::SysCpu,
            off: (Unit::One, &[29.96]),
            on: (Unit::One, &[83.72]),
        },
        Series {
            metric: Metric::Ctx,
            off: (Unit::One, &[6_989_842.0]),
            on: (Unit::One, &[1002.0]),
        },
        Series {
            metric: Metric::SlatMinUs,
            off: (Unit::Nsec, &[411.0]),
            on: (Unit::Nsec, &[1162.0]),
        },
        Series {
            metric: Metric::SlatAvgUs,
            off: (Unit::Nsec, &[6856.45]),
            on: (Unit::Nsec, &[3946.17]),
        },
        Series {
            metric: Metric::ClatMinUs,
            off: (Unit::Nsec, &[70.0]),
            on: (Unit::Nsec, &[70.0]),
        },
        Series {
            metric: Metric::ClatAvgUs,
            off: (Unit::Nsec, &[28576.27]),
            on: (Unit::Nsec, &[4608.73]),
        },
        Series {
            metric: Metric::ClatP50Us,
            off: (Unit::Nsec, &[25984.0]),
            on: (Unit::Nsec, &[4080.0]),
        },
        Series {
            metric: Metric::ClatP99Us,
            off: (Unit::Nsec, &[102_912.0]),
            on: (Unit::Nsec, &[14016.0]),
        },
        Series {
            metric: Metric::ClatP99_9Us,
            off: (Unit::Nsec, &[199_680.0]),
            on: (Unit::Nsec, &[42752.0]),
        },
        Series {
            metric: Metric::LatMinUs,
            off: (Unit::Nsec, &[1583.0]),
            on: (Unit::Nsec, &[1282.0]),
        },
        Series {
            metric: Metric::LatAvgUs,
            off: (Unit::Nsec, &[35432.72]),
            on: (Unit::Nsec, &[8554.90]),
        },
    ],
}];

/// pmem-verify: V1's write-and-verify job passed on both sides; no figures to compare.
pub static PMEM_VERIFY: [Posted; 1] = [Posted {
    post: &PMEM_V1,
    how: "fio write-and-verify job (randwrite, verify, iodepth 16, 896 MiB) before the randread \
          runs: err=0 with nowait off and on (pass/fail only)",
    series: &[],
}];

/// bcache-verify: the bcache test script's write-and-verify job, which failed with bch_nowait
/// off; no figures to compare.
pub static BCACHE_VERIFY: [Posted; 1] = [Posted {
    post: &BCACHE,
    how: "fio write-and-verify job (randwrite 4k, iodepth 16, verify, --size=1G) on /dev/bcache0 \
          before the randwrite and randread runs: \"verify: bad header numberio 63917, wanted \
          64003\", err=84 with bch_nowait off; err=0 with it on (pass/fail only)",
    series: &[],
}];

/// bcache-nowait: the bcache cover letter's randread runs.
pub static BCACHE_NOWAIT: [Posted; 1] = [Posted {
    post: &BCACHE,
    how: "backing and cache device on memory-backed null_blk of 1 GiB each (modprobe null_blk \
          queue_mode=2 nr_devices=2 memory_backed=1 gb=1), fio io_uring 4k randread after a \
          randwrite fill of /dev/bcache0, 3 runs per side",
    series: &[
        Series {
            metric: Metric::Iops,
            off: (Unit::Kilo, &[482.0, 484.0, 483.0]),
            on: (Unit::Kilo, &[544.0, 547.0, 546.0]),
        },
        Series {
            metric: Metric::BwMibS,
            off: (Unit::One, &[1885.0, 1889.0, 1886.0]),
            on: (Unit::One, &[2125.0, 2137.0, 2132.0]),
        },
        Series {
            metric: Metric::UsrCpu,
            off: (Unit::One, &[2.77, 2.75, 2.81]),
            on: (Unit::One, &[1.08, 1.10, 1.10]),
        },
        Series {
            metric: Metric::SysCpu,
            off: (Unit::One, &[6.57, 6.59, 6.57]),
            on: (Unit::One, &[78.39, 79.76, 79.88]),
        },
        Series {
            metric: Metric::Ctx,
            off: (Unit::One, &[22_015_526.0, 22_003_700.0, 21_938_309.0]),
            on: (Unit::One, &[2_744_092.0, 2_537_466.0, 2_528_092.0]),
        },
        Series {
            metric: Metric::SlatMinUs,
            off: (Unit::Nsec, &[430.0, 431.0, 431.0]),
            on: (Unit::Usec, &[2.0, 3.0, 3.0]),
        },
        Series {
            metric: Metric::SlatAvgUs,
            off: (Unit::Nsec, &[2797.52, 2805.33, 2814.57]),
            on: (Unit::Usec, &[87.48, 86.98, 87.17]),
        },
        Series {
            metric: Metric::SlatMaxUs,
            off: (Unit::KiloNsec, &[5488.5, 8252.4, 6846.6]),
            on: (Unit::Usec, &[39086.0, 39519.0, 38880.0]),
        },
    ],
}];

/// xfs-dax-write: the famfs thread's XFS-on-pmem run.
pub static XFS_DAX_WRITE: [Posted; 1] = [Posted {
    post: &FAMFS,
    how: "fio -name=ten-256m-per-thread --nrfiles=10 -bs=2M --group_reporting=1 \
          --alloc-size=1048576 --filesize=256MiB --readwrite=write --fallocate=none --numjobs=48 \
          --create_on_open=0 --ioengine=io_uring --direct=1 on XFS -o dax, one run",
    series: &[
        Series {
            metric: Metric::Iops,
            off: (Unit::One, &[6578.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::BwMibS,
            off: (Unit::GibS, &[12.8]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::UsrCpu,
            off: (Unit::One, &[10.18]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::SysCpu,
            off: (Unit::One, &[0.79]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::Ctx,
            off: (Unit::One, &[67227.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::SlatMinUs,
            off: (Unit::Usec, &[18.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::SlatAvgUs,
            off: (Unit::Usec, &[1230.85]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::SlatMaxUs,
            off: (Unit::Usec, &[60593.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::ClatMinUs,
            off: (Unit::Usec, &[2.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::ClatAvgUs,
            off: (Unit::Usec, &[5133.25]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::ClatP50Us,
            off: (Unit::Usec, &[3785.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::ClatP99Us,
            off: (Unit::Usec, &[21890.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::ClatP99_9Us,
            off: (Unit::Usec, &[45351.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::LatMinUs,
            off: (Unit::Usec, &[294.0]),
            on: (Unit::One, &[]),
        },
        Series {
            metric: Metric::LatAvgUs,
            off: (Unit::Usec, &[6364.09]),
            on: (Unit::One, &[]),
        },
    ],
}];

#[cfg(test)]
mod tests {
    use super::*;

    fn series(posted: &[Posted], label: &str, metric: Metric) -> (Vec<f64>, Vec<f64>) {
        let p = posted.iter().find(|p| p.post.label == label).unwrap();
        p.series
            .iter()
            .find(|s| s.metric == metric)
            .unwrap()
            .values()
    }

    #[test]
    fn units_convert_to_the_report_units() {
        let (off, on) = series(&PMEM_NOWAIT, "V1", Metric::Iops);
        assert_eq!(off, vec![3_968_000.0, 4_084_000.0, 3_995_000.0]);
        assert_eq!(on, vec![5_909_000.0, 5_997_000.0, 6_006_000.0]);
        let (off, on) = series(&PMEM_NOWAIT, "V2", Metric::Iops);
        assert_eq!(off, vec![3_683_000.0, 3_819_000.0, 3_999_000.0]);
        assert_eq!(on, vec![5_837_000.0, 5_936_000.0, 5_945_000.0]);
        // nsec and usec lines of one bcache metric end up in the same unit.
        let (off, on) = series(&BCACHE_NOWAIT, "bcache", Metric::SlatAvgUs);
        assert!((off[0] - 2.79752).abs() < 1e-12 && (on[0] - 87.48).abs() < 1e-12);
        let (off, _) = series(&BCACHE_NOWAIT, "bcache", Metric::SlatMaxUs);
        assert!((off[0] - 5488.5).abs() < 1e-9);
        let (bw, none) = series(&XFS_DAX_WRITE, "famfs", Metric::BwMibS);
        assert_eq!((bw, none), (vec![12.8 * 1024.0], vec![]));
        let (off, on) = series(&PMEM_RANDWRITE, "V1", Metric::Iops);
        assert_eq!((off, on), (vec![2.4e6], vec![10.6e6]));
    }

    #[test]
    fn every_series_has_runs_and_both_sides_match() {
        for posted in PMEM_NOWAIT
            .iter()
            .chain(&PMEM_RANDWRITE)
            .chain(&BCACHE_NOWAIT)
            .chain(&XFS_DAX_WRITE)
        {
            for s in posted.series {
                let (off, on) = s.values();
                assert!(!off.is_empty(), "{} {:?}", posted.post.label, s.metric);
                assert!(
                    on.is_empty() || on.len() == off.len(),
                    "{} {:?}",
                    posted.post.label,
                    s.metric
                );
                assert!(off.iter().chain(&on).all(|v| v.is_finite() && *v > 0.0));
            }
        }
    }

    #[test]
    fn citations_are_complete_where_the_archive_has_headers() {
        for post in [&PMEM_V1, &BCACHE, &FAMFS] {
            let id = post.message_id.unwrap();
            assert!(id.contains('@') && !id.contains('<'), "{id}");
            assert!(post.date.unwrap().contains("20"), "{}", post.label);
        }
        assert_eq!(PMEM_V2.date, None);
        assert!(PMEM_V2.note.contains("no mail headers"));
    }
}
