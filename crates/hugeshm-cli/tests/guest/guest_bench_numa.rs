//! `hugeshm bench numa` on a real 2-node kernel (a QEMU guest, see
//! `hugeshm_testkit::guest`): a row per placement and page size, the local
//! region wholly on the CPU node, the remote one wholly on the other node,
//! the interleaved one split, and the pools given back. No speed ratio is
//! asserted: the emulated guest has no real NUMA latency. Skips only where
//! QEMU or a guest kernel is missing.

use crate::shared;
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::sync::OnceLock;

const M16: u64 = 16 << 20;

/// The guest run of bench-numa.sh, booted once for every test of this file.
fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| shared::boot("bench-numa.sh", &[], Boot::default()))
        .runs(test)
        .map(|r| &r[0])
}

fn node_bytes(row: &Value) -> Vec<(String, u64)> {
    row["node_bytes"]
        .as_object()
        .unwrap_or_else(|| panic!("no node_bytes: {row:#}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

#[test]
fn guest_bench_numa_places_and_measures_every_row() {
    let Some(run) = guest_run("guest_bench_numa_places_and_measures_every_row") else {
        return;
    };
    let r = run
        .console
        .json("bench.json")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r["single_node"], false, "{r:#}");
    assert_eq!(r["cpu_node"].as_u64(), Some(0), "{r:#}");
    assert_eq!(r["remote_node"].as_u64(), Some(1), "{r:#}");
    assert_eq!(r["skipped"].as_array().unwrap().len(), 0, "{r:#}");
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{r:#}");
    for ps in [4096u64, 2 << 20] {
        let row = |placement: &str| {
            rows.iter()
                .find(|x| x["page_size_bytes"].as_u64() == Some(ps) && x["placement"] == placement)
                .unwrap_or_else(|| panic!("no {placement} row for {ps}: {r:#}"))
        };
        let local = row("local");
        let remote = row("remote");
        let inter = row("interleave");
        assert_eq!(local["policy"], "bind=0", "{local:#}");
        assert_eq!(remote["policy"], "bind=1", "{remote:#}");
        let on = |row: &Value, node: &str| {
            node_bytes(row)
                .iter()
                .find(|(n, _)| n == node)
                .map(|(_, b)| *b)
                .unwrap_or(0)
        };
        let total = |row: &Value| node_bytes(row).iter().map(|(_, b)| b).sum::<u64>();
        // Everything on the CPU node, everything on the other node.
        assert_eq!(node_bytes(local).len(), 1, "{local:#}");
        assert!(on(local, "0") >= M16 - 4096, "{local:#}");
        assert_eq!(node_bytes(remote).len(), 1, "{remote:#}");
        assert!(on(remote, "1") >= M16 - 4096, "{remote:#}");
        // Interleaved: about half on each (page by page).
        let (i0, i1) = (on(inter, "0"), on(inter, "1"));
        assert!(total(inter) >= M16 - 4096, "{inter:#}");
        assert!(i0.abs_diff(i1) <= ps.max(8192), "{inter:#}");
        for x in [local, remote, inter] {
            for k in [
                "write_gbps_best",
                "write_gbps_median",
                "read_gbps_best",
                "read_gbps_median",
            ] {
                assert!(x[k].as_f64().unwrap() > 0.0, "{k}: {x:#}");
            }
            assert_eq!(x["write_gbps_runs"].as_array().unwrap().len(), 2, "{x:#}");
        }
        let ratio = r["ratios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["page_size_bytes"].as_u64() == Some(ps))
            .unwrap_or_else(|| panic!("no ratio for {ps}: {r:#}"));
        assert!(ratio["remote_vs_local_write"].as_f64().is_some(), "{ratio}");
        assert!(ratio["remote_vs_local_read"].as_f64().is_some(), "{ratio}");
    }
    let table = run.console.ok("bench.table").unwrap();
    println!("{table}");
    assert!(table.contains("remote is"), "{table}");
    // The bench gave the nodes' pages back and left no segment.
    assert_eq!(
        run.console
            .ok("bench.pools")
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "0"]
    );
    let ipcs = run.console.ok("bench.ipcs").unwrap();
    assert_eq!(ipcs.lines().count(), 1, "no segment left: {ipcs}");
}

#[test]
fn guest_lab_numa_compares_remote_with_local() {
    let Some(run) = guest_run("guest_lab_numa_compares_remote_with_local") else {
        return;
    };
    let lab = run
        .console
        .json("lab.json")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lab["memory_nodes"].as_u64(), Some(2), "{lab:#}");
    let r = &lab["reproductions"][0];
    assert_eq!(r["seed"], "002", "{lab:#}");
    assert_eq!(r["error"], Value::Null, "{r:#}");
    // local, remote and interleave for each page size.
    let rows = r["table"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{r:#}");
    let remote = r["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["what"] == "remote write time against local")
        .unwrap_or_else(|| panic!("no remote comparison: {r:#}"));
    // Measured here (no speed is asserted: the emulated guest has no real
    // NUMA latency), with its ratio against the field's 1.20x.
    let ours = remote["ours"].as_f64().expect("ours measured on two nodes");
    assert!(ours > 0.0, "{remote}");
    let ratio = remote["ratio"].as_f64().unwrap();
    assert!((ratio - ours / (1.116 / 0.931)).abs() < 1e-6, "{remote}");
    assert_eq!(
        run.console
            .ok("lab.pools")
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "0"]
    );
}
