//! Reports made by hand, for the ratios' and the printers' unit tests
//! (the CLI's tests have them through the `samples` feature).

use super::sample::PeerMethod;
use super::{Baseline, PeerRow, Report, Row};
use crate::common::Skipped;
use hugeshm_region::Backend;
use std::collections::BTreeMap;

/// 2 MiB.
pub const M2: u64 = 2 << 20;
/// The reports' region size.
pub const MIB256: u64 = 256 << 20;

/// A row as measure_size makes it, before the ratios.
pub fn row(size: u64, ps: u64, threads: usize, ready_gbps: f64, gbps: f64) -> Row {
    let bytes = size as f64 / 1e9;
    Row {
        size_bytes: size,
        page_size_bytes: ps,
        backend: if ps == 4096 {
            Backend::Posix
        } else {
            Backend::Anon
        },
        threads,
        cold_seconds: (threads == 2).then_some(0.25),
        seconds: bytes / gbps,
        gbps,
        ready_seconds: bytes / ready_gbps,
        ready_gbps,
        method: "populate_write".into(),
        vs_4k: None,
        vs_one_thread: None,
        vs_memset: None,
        vs_clear_4k: None,
        vs_peers: BTreeMap::new(),
        vs_best_peer: None,
        samples: Vec::new(),
    }
}

fn peer(ps: u64, method: PeerMethod, threads: usize, gbps: f64) -> PeerRow {
    PeerRow {
        size_bytes: MIB256,
        page_size_bytes: ps,
        method,
        used_by: method.used_by(),
        threads,
        seconds: MIB256 as f64 / 1e9 / gbps,
        gbps,
    }
}

/// A memset baseline of 256 MiB.
pub fn baseline(threads: usize, gbps: f64, clear_4k_gbps: f64) -> Baseline {
    Baseline {
        size_bytes: MIB256,
        threads,
        gbps,
        clear_4k_gbps,
    }
}

/// 256 MiB on 4 KiB and 2 MiB pages, 1 and 2 threads, with the peers'
/// methods and the baselines, ratios added; 1 GiB pages skipped.
pub fn report() -> Report {
    let rows = vec![
        row(MIB256, 4096, 1, 1.0, 2.0),
        row(MIB256, 4096, 2, 1.5, 3.0),
        row(MIB256, M2, 1, 4.0, 8.0),
        row(MIB256, M2, 2, 6.0, 12.0),
    ];
    let memset = vec![baseline(1, 10.0, 16.0), baseline(2, 20.0, 0.0)];
    let mut peers = Vec::new();
    for ps in [4096, M2] {
        peers.push(peer(ps, PeerMethod::MapPopulate, 1, 8.0));
        peers.push(peer(ps, PeerMethod::FirstTouch, 1, 5.0));
        peers.push(peer(ps, PeerMethod::TouchLoop, 1, 2.0));
        peers.push(peer(ps, PeerMethod::TouchLoop, 2, 3.0));
    }
    let mut r = Report {
        size_bytes: MIB256,
        sizes: vec![MIB256],
        runs: 1,
        memset,
        results: rows,
        peers,
        skipped: vec![Skipped {
            page_size_bytes: 1 << 30,
            reason: "256 MiB region: the kernel granted 0 of 1 1 GiB pages".into(),
            fix: Some("reserve them at boot".into()),
        }],
        growth: Vec::new(),
    };
    r.derive(1);
    r
}
