//! hugeshm on a real multi-node kernel with persistent memory: a QEMU guest
//! (TCG, 2 NUMA nodes of 1 GiB, one CPU each, a 256 MiB NVDIMM on node 1;
//! `hugeshm_testkit::guest`, `scripts/guest/`) boots this build's `hugeshm`
//! and runs `tests/guest-scenarios/basic.sh`; the tests check what it
//! printed. One boot serves every test here (the first test to ask boots
//! it, the others wait). Skips (passes with a `SKIP` line) only where
//! `qemu-system-x86_64` or a guest kernel is missing; root is not needed.
//!
//! Alone: `cargo test -p hugeshm --test guest guest:: -- --nocapture` (prints the
//! timings; `HUGESHM_GUEST_KEEP=1` keeps the console log and initramfs).

use crate::shared;
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::sync::OnceLock;

const M2: u64 = 2 << 20;

/// The guest run of basic.sh, booted once for all the tests of this file;
/// None (after a skip) when this host cannot run it.
fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        let boot = Boot {
            nvdimm: true,
            ..Boot::default()
        };
        let scenario = shared::boot("basic.sh", &[], boot);
        shared::print_marks(&scenario, &["pools", "sysv", "nvdimm"]);
        scenario
    })
    .runs(test)
    .map(|r| &r[0])
}

/// A block's JSON; the command documents (status, segments, rm) of schema 1.
fn json(run: &GuestRun, block: &str) -> Value {
    if block.ends_with("status") || block.ends_with("segments") || block.ends_with(".rm") {
        shared::json_v1(run, block)
    } else {
        shared::json(run, block)
    }
}

/// The pool row of 2 MiB pages for `node` (None: the host-wide row).
fn pool_2m(status: &Value, node: Option<u64>) -> &Value {
    status["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["page_size_bytes"].as_u64() == Some(M2) && p["node"].as_u64() == node)
        .unwrap_or_else(|| panic!("no 2 MiB pool row for node {node:?}: {status:#}"))
}

#[test]
fn guest_status_shows_two_nodes_and_the_per_node_pools_written() {
    let Some(run) = guest_run("guest_status_shows_two_nodes_and_the_per_node_pools_written") else {
        return;
    };
    let written: Vec<u64> = run
        .console
        .ok("pools.written")
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(
        written,
        [10, 20],
        "the kernel's per-node pools after the writes"
    );

    let status = json(run, "pools.status");
    let nodes = status["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 2, "{:#}", status["nodes"]);
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["node"].as_u64(), Some(i as u64));
        assert_eq!(n["cpus"], serde_json::json!([i]), "CPUs of node {i}");
        let mem = n["mem_total_bytes"].as_u64().unwrap();
        // 1 GiB per node, less what the kernel keeps for itself.
        assert!(
            (768 << 20..=1 << 30).contains(&mem),
            "node {i} memory {mem}"
        );
    }
    for (node, pages) in [(Some(0), 10), (Some(1), 20), (None, 30)] {
        let p = pool_2m(&status, node);
        assert_eq!(p["total"].as_u64(), Some(pages), "node {node:?}: {p:#}");
        assert_eq!(p["free"].as_u64(), Some(pages), "node {node:?}: {p:#}");
        assert_eq!(p["total_bytes"].as_u64(), Some(pages * M2), "node {node:?}");
    }
}

#[test]
fn guest_segments_reports_a_sysv_segment_per_node() {
    let Some(run) = guest_run("guest_segments_reports_a_sysv_segment_per_node") else {
        return;
    };
    let create = json(run, "sysv.create");
    assert_eq!(create["page_size_bytes"].as_u64(), Some(M2), "{create:#}");
    assert_eq!(create["verified_page_size_bytes"].as_u64(), Some(M2));
    assert_eq!(create["fell_back"], false);
    let shmid = create["shmid"].as_u64().expect("shmid");
    let pid = create["pid"].as_u64().expect("pid");

    let segs = json(run, "sysv.segments");
    let seg = segs["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .find(|s| s["kind"] == "sysv" && s["id"].as_u64() == Some(shmid))
        .unwrap_or_else(|| panic!("no sysv segment {shmid}: {segs:#}"));
    assert_eq!(seg["size_bytes"].as_u64(), Some(8 << 20), "{seg:#}");
    assert_eq!(seg["page_size_bytes"].as_u64(), Some(M2), "{seg:#}");
    assert_eq!(seg["resident_bytes"].as_u64(), Some(8 << 20), "{seg:#}");
    assert_eq!(seg["attached_pids"], serde_json::json!([pid]), "{seg:#}");
    let nodes = seg["nodes"].as_object().expect("nodes map");
    assert!(!nodes.is_empty(), "{seg:#}");
    for (node, bytes) in nodes {
        assert!(
            node == "0" || node == "1",
            "node {node} on a 2-node guest: {seg:#}"
        );
        assert_eq!(
            bytes.as_u64().unwrap() % M2,
            0,
            "whole 2 MiB pages: {seg:#}"
        );
    }
    let sum: u64 = nodes.values().map(|b| b.as_u64().unwrap()).sum();
    assert_eq!(sum, 8 << 20, "bytes per node sum to the size: {seg:#}");
    println!("sysv segment {shmid}: bytes per node {}", seg["nodes"]);

    // Released and removed: nothing left.
    let holder = run.console.ok("sysv.holder").unwrap();
    assert!(holder.starts_with("rc=0"), "{holder}");
    let rm = json(run, "sysv.rm");
    assert_eq!(rm["removed"].as_array().map(|a| a.len()), Some(1), "{rm:#}");
    let ipcs = run.console.ok("sysv.ipcs").unwrap();
    assert_eq!(ipcs.lines().count(), 1, "segments left:\n{ipcs}");
}

#[test]
fn guest_nvdimm_comes_up_as_an_fsdax_namespace_mounted_with_dax() {
    let Some(run) = guest_run("guest_nvdimm_comes_up_as_an_fsdax_namespace_mounted_with_dax")
    else {
        return;
    };
    let c = &run.console;
    c.ok("nvdimm.labels").unwrap();
    let ns = json(run, "nvdimm.namespace");
    assert_eq!(ns["mode"], "fsdax", "{ns:#}");
    assert_eq!(ns["blockdev"], "pmem0", "{ns:#}");
    assert_eq!(ns["align"].as_u64(), Some(M2), "{ns:#}");
    let size = ns["size"].as_u64().unwrap();
    assert!(
        (200 << 20..256 << 20).contains(&size),
        "namespace size {size}"
    );
    c.ok("nvdimm.mkfs").unwrap();
    c.ok("nvdimm.mount").unwrap();
    let mounts = c.ok("nvdimm.mounts").unwrap();
    let pmem = mounts
        .lines()
        .find(|l| l.starts_with("/dev/pmem0 /mnt/pmem "))
        .unwrap_or_else(|| panic!("/dev/pmem0 not mounted:\n{mounts}"));
    let fields: Vec<&str> = pmem.split_whitespace().collect();
    assert_eq!(fields[2], "ext4", "{pmem}");
    assert!(
        fields[3]
            .split(',')
            .any(|o| o == "dax" || o == "dax=always"),
        "not mounted with dax: {pmem}"
    );
    let status = json(run, "nvdimm.status");
    assert_eq!(status["hugetlb_supported"], true);
    assert_eq!(status["nodes"].as_array().map(|n| n.len()), Some(2));
}

#[test]
fn guest_scenario_ended_cleanly() {
    let Some(run) = guest_run("guest_scenario_ended_cleanly") else {
        return;
    };
    assert_eq!(run.exit_code, Some(0), "QEMU: {}", run.qemu_output);
    // No WARN, BUG or Oops splat from the kernel during the scenarios.
    let warnings = run.console.ok("dmesg-warnings").unwrap();
    assert!(
        !warnings.contains("cut here") && !warnings.contains("Oops"),
        "kernel warnings in the guest:\n{warnings}"
    );
}
