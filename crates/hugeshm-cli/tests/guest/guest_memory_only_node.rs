//! A CXL-like memory-only NUMA node (a QEMU `-numa node` without CPUs, see
//! `hugeshm_testkit::guest::Boot::memory_only_node`): a region bound to it
//! lands there, faulted without pinning (the node has no CPU), and
//! `--numa per-node` gives it a part of its own. Skips only where QEMU or a
//! guest kernel is missing.

use crate::shared::{self, json};
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use std::sync::OnceLock;

const M2: u64 = 2 << 20;

/// The guest run of memory-only-node.sh, booted once for every test of this file.
fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        shared::boot(
            "memory-only-node.sh",
            &[],
            Boot {
                memory_only_node: true,
                ..Boot::default()
            },
        )
    })
    .runs(test)
    .map(|r| &r[0])
}

#[test]
fn guest_has_a_node_without_cpus() {
    let Some(run) = guest_run("guest_has_a_node_without_cpus") else {
        return;
    };
    let hw = run.console.ok("nodes.hardware").unwrap();
    println!("{hw}");
    assert!(hw.contains("available: 3 nodes (0-2)"), "{hw}");
    assert!(hw.lines().any(|l| l.trim() == "node 2 cpus:"), "{hw}");
    let pools = run.console.ok("nodes.pools").unwrap();
    assert_eq!(
        pools.split_whitespace().collect::<Vec<_>>(),
        vec!["8", "8", "8"]
    );
}

#[test]
fn guest_region_bound_to_the_memory_only_node_lands_there() {
    let Some(run) = guest_run("guest_region_bound_to_the_memory_only_node_lands_there") else {
        return;
    };
    let r = json(run, "bind.create");
    assert_eq!(r["placement"], "bind=2", "{r:#}");
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(M2), "{r:#}");
    assert_eq!(r["node_bytes"], serde_json::json!({"2": 16 << 20}), "{r:#}");
    assert!(r.get("prefault_cpus").is_none(), "no CPU to pin to: {r:#}");
    run.console.ok("bind.rm").unwrap();
}

#[test]
fn guest_per_node_gives_the_memory_only_node_a_part() {
    let Some(run) = guest_run("guest_per_node_gives_the_memory_only_node_a_part") else {
        return;
    };
    let r = json(run, "pernode.create");
    let parts = r["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{r:#}");
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(p["name"], format!("cs.node{i}"), "{p:#}");
        assert_eq!(
            p["node_bytes"],
            serde_json::json!({ i.to_string(): 8 << 20 }),
            "{p:#}"
        );
    }
    assert!(parts[2].get("prefault_cpus").is_none(), "{:#}", parts[2]);
    let removed = json(run, "pernode.rm");
    assert_eq!(
        removed["removed"].as_array().unwrap().len(),
        3,
        "{removed:#}"
    );
    let ipcs = run.console.ok("pernode.ipcs").unwrap();
    assert_eq!(ipcs.lines().count(), 1, "nothing left: {ipcs}");
}

#[test]
fn guest_status_shows_the_memory_only_node_as_a_tier() {
    let Some(run) = guest_run("guest_status_shows_the_memory_only_node_as_a_tier") else {
        return;
    };
    let st = json(run, "pernode.status");
    let nodes = st["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{st:#}");
    assert_eq!(nodes[2]["memory_only"], true, "{:#}", nodes[2]);
    assert!(nodes[0].get("memory_only").is_none(), "{:#}", nodes[0]);
    let text = run.console.ok("pernode.status.text").unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("nodes:"))
        .unwrap_or_else(|| panic!("{text}"));
    println!("{line}");
    assert!(line.contains("2 (no CPU,"), "{line}");
    assert!(line.contains("a memory-only tier"), "{line}");
}
