//! NUMA placement of regions, on a real 2-node kernel (a QEMU guest, see
//! `hugeshm_testkit::guest`): `create --numa bind=1` puts every page on
//! node 1 even with two pre-fault threads, `interleave` puts half on each
//! node, and a node that cannot hold the region is a shortfall with the
//! node's own numbers and per-node fix before anything is created, for
//! `--numa` and for the caller's own `numactl --membind`; `try` falls back
//! whole; `weighted-interleave` is refused before Linux 6.9 (Debian 12's
//! guest kernel) and splits by the weights from 6.9 (a newer guest kernel:
//! `HUGESHM_GUEST_KERNEL`). Skips only where QEMU or a guest kernel is
//! missing.

use crate::shared::{self, json};
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::sync::OnceLock;

const M2: u64 = 2 << 20;

/// The guest run of numa-region.sh, booted once for every test of this file.
fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| shared::boot("numa-region.sh", &[], Boot::default()))
        .runs(test)
        .map(|r| &r[0])
}

fn node_bytes(report: &Value) -> Vec<(String, u64)> {
    report["node_bytes"]
        .as_object()
        .unwrap_or_else(|| panic!("no node_bytes: {report:#}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

#[test]
fn guest_bind_puts_every_page_on_the_node() {
    let Some(run) = guest_run("guest_bind_puts_every_page_on_the_node") else {
        return;
    };
    let r = json(run, "bind.create");
    assert_eq!(r["placement"], "bind=1", "{r:#}");
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(M2));
    assert_eq!(node_bytes(&r), vec![("1".to_owned(), 16 << 20)], "{r:#}");
    // Faulted from node 1's CPU (the guest has CPU 0 on node 0 and CPU 1 on
    // node 1), by the two threads asked for.
    assert_eq!(r["prefault_cpus"], serde_json::json!([1]), "{r:#}");
    assert_eq!(r["prefault_threads"], 2, "{r:#}");
    // Without --prefault-threads: one thread per CPU of the node.
    let r = json(run, "bind.default-threads");
    assert_eq!(r["prefault_cpus"], serde_json::json!([1]), "{r:#}");
    assert_eq!(r["prefault_threads"], 1, "{r:#}");
    assert_eq!(node_bytes(&r), vec![("1".to_owned(), 8 << 20)], "{r:#}");
    run.console.ok("bind.default-threads.rm").unwrap();
    run.console.ok("bind.rm").unwrap();
}

#[test]
fn guest_interleave_splits_evenly() {
    let Some(run) = guest_run("guest_interleave_splits_evenly") else {
        return;
    };
    let r = json(run, "interleave.create");
    assert_eq!(r["placement"], "interleave", "{r:#}");
    assert!(r.get("prefault_cpus").is_none(), "not pinned: {r:#}");
    assert_eq!(
        node_bytes(&r),
        vec![("0".to_owned(), 8 << 20), ("1".to_owned(), 8 << 20)],
        "{r:#}"
    );
}

#[test]
fn guest_short_node_is_named_with_its_numbers() {
    let Some(run) = guest_run("guest_short_node_is_named_with_its_numbers") else {
        return;
    };
    for block in ["shortfall.bind", "shortfall.membind"] {
        let b = run
            .console
            .block(block)
            .unwrap_or_else(|| panic!("no {block}"));
        assert_eq!(b.rc, 3, "{block}: rc {} {}", b.rc, b.text);
        let err = run
            .console
            .block(&format!("{block}.stderr"))
            .map(|b| b.text.clone())
            .unwrap_or_default();
        println!("{block}: {err}");
        assert!(
            err.contains("node 1 required 8, available 2"),
            "{block}: {err}"
        );
        assert!(
            err.contains(
                "echo 8 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
            ),
            "{block}: {err}"
        );
    }
    let membind = run
        .console
        .block("shortfall.membind.stderr")
        .map(|b| b.text.clone())
        .unwrap_or_default();
    assert!(
        membind.contains("the caller's memory policy MPOL_BIND 1"),
        "{membind}"
    );
    let r = json(run, "shortfall.try");
    assert_eq!(r["fell_back"], true, "{r:#}");
    assert_eq!(r["page_size_bytes"].as_u64(), Some(4096));
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("node 1 required 8, available 2"),
        "{r:#}"
    );
    run.console.ok("shortfall.rm").unwrap();
    let ipcs = run.console.ok("shortfall.ipcs").unwrap();
    assert_eq!(ipcs.lines().count(), 1, "no segment left: {ipcs}");
}

#[test]
fn guest_per_node_regions_each_on_their_node() {
    let Some(run) = guest_run("guest_per_node_regions_each_on_their_node") else {
        return;
    };
    let r = json(run, "pernode.create");
    assert_eq!(r["placement"], "per-node", "{r:#}");
    let parts = r["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{r:#}");
    for (i, p) in parts.iter().enumerate() {
        let n = i.to_string();
        assert_eq!(p["node"], i, "{p:#}");
        assert_eq!(p["name"], format!("sga.node{i}"), "{p:#}");
        assert_eq!(p["placement"], format!("bind={i}"), "{p:#}");
        assert_eq!(p["verified_page_size_bytes"].as_u64(), Some(M2), "{p:#}");
        assert_eq!(node_bytes(p), vec![(n, 16 << 20)], "{p:#}");
        assert_eq!(p["prefault_cpus"], serde_json::json!([i]), "{p:#}");
    }
    let ipcs = run.console.ok("pernode.ipcs").unwrap();
    assert_eq!(ipcs.lines().count(), 3, "two segments: {ipcs}");
    let attached = json(run, "pernode.attach");
    let names: Vec<&str> = attached["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sga.node0", "sga.node1"], "{attached:#}");
    let removed = json(run, "pernode.rm");
    assert_eq!(
        removed["removed"].as_array().unwrap().len(),
        2,
        "{removed:#}"
    );
    let table = run.console.ok("pernode.table").unwrap();
    println!("{table}");
    assert!(table.contains("sga.node1"), "{table}");
    run.console.ok("pernode.table.rm").unwrap();
}

#[test]
fn guest_per_node_short_node_fails_or_falls_back_whole() {
    let Some(run) = guest_run("guest_per_node_short_node_fails_or_falls_back_whole") else {
        return;
    };
    let b = run.console.block("pernode.short").expect("pernode.short");
    assert_eq!(b.rc, 3, "rc {} {}", b.rc, b.text);
    let err = run
        .console
        .block("pernode.short.stderr")
        .map(|b| b.text.clone())
        .unwrap_or_default();
    println!("{err}");
    assert!(err.contains("--numa per-node"), "{err}");
    assert!(err.contains("node 1 required 8, available 2"), "{err}");
    assert!(
        err.contains(
            "echo 8 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
        ),
        "{err}"
    );
    let r = json(run, "pernode.try");
    for p in r["parts"].as_array().unwrap() {
        assert_eq!(p["fell_back"], true, "{p:#}");
        assert_eq!(p["page_size_bytes"].as_u64(), Some(4096), "{p:#}");
        assert!(
            p["reason"]
                .as_str()
                .unwrap()
                .contains("node 1 required 8, available 2"),
            "{p:#}"
        );
    }
    run.console.ok("pernode.try.rm").unwrap();
}

#[test]
fn guest_per_node_failed_part_takes_the_set_with_it() {
    let Some(run) = guest_run("guest_per_node_failed_part_takes_the_set_with_it") else {
        return;
    };
    run.console.ok("pernode.taken").unwrap();
    let b = run
        .console
        .block("pernode.partial")
        .expect("pernode.partial");
    assert_ne!(b.rc, 0, "sgb.node0 is taken: {}", b.text);
    let ipcs = run.console.ok("pernode.partial.ipcs").unwrap();
    // Only the segment that was there before: node 1's part is gone again.
    assert_eq!(ipcs.lines().count(), 2, "{ipcs}");
    run.console.ok("pernode.partial.rm").unwrap();
    let pools = run.console.ok("pernode.pools").unwrap();
    assert_eq!(
        pools.split_whitespace().collect::<Vec<_>>(),
        vec!["20", "20"],
        "every page free again"
    );
}

/// `--numa weighted-interleave` does what the guest's kernel allows: before
/// Linux 6.9 (which has no `/sys/kernel/mm/mempolicy/weighted_interleave`)
/// a refusal before anything is created; from 6.9 the split its weights (1
/// and 3, set by the scenario) ask for.
#[test]
fn guest_weighted_interleave_needs_a_newer_kernel() {
    let Some(run) = guest_run("guest_weighted_interleave_needs_a_newer_kernel") else {
        return;
    };
    let kernel = run.console.ok("weighted.kernel").unwrap();
    let b = run
        .console
        .block("weighted.create")
        .expect("weighted.create");
    let err = run
        .console
        .block("weighted.create.stderr")
        .map(|b| b.text.clone())
        .unwrap_or_default();
    let ipcs = run.console.ok("weighted.ipcs").unwrap();
    if !kernel_has_weighted_interleave(kernel.trim()) {
        assert_eq!(b.rc, 3, "{kernel}: rc {} {err}", b.rc);
        assert!(err.contains("needs Linux 6.9 or later"), "{err}");
        assert!(err.contains("use --numa interleave"), "{err}");
        assert_eq!(ipcs.lines().count(), 1, "nothing created: {ipcs}");
        assert!(run.console.block("weighted.weights").is_none());
        return;
    }
    let weights = run.console.ok("weighted.weights").unwrap();
    assert_eq!(
        weights.split_whitespace().collect::<Vec<_>>(),
        ["1", "3"],
        "{kernel}"
    );
    assert_eq!(b.rc, 0, "{kernel}: {err}");
    let r = json(run, "weighted.create");
    assert_eq!(r["placement"], "weighted-interleave", "{r:#}");
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(M2));
    // Page i of the segment goes to node 0 when i % 4 == 0, else node 1.
    assert_eq!(
        node_bytes(&r),
        vec![("0".to_owned(), 2 * M2), ("1".to_owned(), 6 * M2)],
        "{kernel}: {r:#}"
    );
    run.console.ok("weighted.rm").unwrap();
}

/// Whether a kernel of this release (`uname -r`: `6.1.0-56-amd64`) has
/// MPOL_WEIGHTED_INTERLEAVE: Linux 6.9 and later.
fn kernel_has_weighted_interleave(release: &str) -> bool {
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .map(|n| {
            n.parse::<u32>()
                .unwrap_or_else(|_| panic!("uname -r: {release}"))
        });
    let (major, minor) = (v.next().unwrap(), v.next().unwrap());
    (major, minor) >= (6, 9)
}

#[test]
fn guest_bound_segment_seen_from_outside_without_a_false_warning() {
    let Some(run) = guest_run("guest_bound_segment_seen_from_outside_without_a_false_warning")
    else {
        return;
    };
    let segs = json(run, "held.segments");
    let seg = segs["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "sysv" && s["size_bytes"].as_u64() == Some(64 << 20))
        .unwrap_or_else(|| panic!("the segment: {segs:#}"));
    assert_eq!(seg["numa_policy"], "bind:1", "{seg:#}");
    assert_eq!(seg["nodes"], serde_json::json!({"1": 64 << 20}), "{seg:#}");
    let codes: Vec<&str> = seg["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(!codes.contains(&"single-node"), "{codes:?}");
    assert!(!codes.contains(&"misplaced"), "{codes:?}");
    run.console.ok("held.rm").unwrap();
}
