//! `hugeshm collapse` in the QEMU guest (scenario
//! `tests/guest-scenarios/collapse.sh`): on Debian's 6.1 kernel, the first
//! with `MADV_COLLAPSE`, a SysV segment on 4 KiB pages whose pages are all
//! on node 1 (its holder bound there), mapped by the holder and two forked
//! children, moves onto 2 MiB pages and stays on node 1; with
//! `shmem_enabled = deny` the collapse is refused (exit 2) with the reason
//! and the fix. Skips only where QEMU or a guest kernel is missing.

use crate::shared::{self, json_v1};
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const M: u64 = 1 << 20;

fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        let testproc = hugeshm_testkit::testproc_built().expect("hugeshm-testproc");
        shared::boot("collapse.sh", &[&testproc], Boot::default())
    })
    .runs(test)
    .map(|r| &r[0])
}

/// The pages per node (`N0=`, `N1=`) of numa_maps lines.
fn nodes(numa_maps: &str) -> BTreeMap<String, u64> {
    let mut n = BTreeMap::new();
    for word in numa_maps.split_whitespace() {
        if let Some((node, pages)) = word.split_once('=') {
            if node.len() > 1 && node.starts_with('N') && node[1..].parse::<u32>().is_ok() {
                *n.entry(node.to_owned()).or_default() += pages.parse::<u64>().unwrap();
            }
        }
    }
    n
}

#[test]
fn guest_collapse_on_6_1_keeps_the_pages_on_their_node() {
    let Some(run) = guest_run("guest_collapse_on_6_1_keeps_the_pages_on_their_node") else {
        return;
    };
    let kernel = run.console.ok("collapse.kernel").unwrap();
    assert!(kernel.starts_with("6."), "{kernel}");
    // Every page of the segment on node 1 before.
    let before = nodes(run.console.ok("collapse.before").unwrap());
    assert_eq!(
        before,
        [("N1".to_owned(), 32 * M / 4096)].into(),
        "{before:?}"
    );
    let v = json_v1(run, "collapse.json");
    // The plan knows where the memory is; the copies run on that node's
    // CPUs, one thread each.
    assert_eq!(
        v["plan"]["node_bytes"],
        serde_json::json!([[1, 32 * M]]),
        "{v:#}"
    );
    let cpus = v["plan"]["cpus"].as_array().unwrap().len();
    assert!(cpus > 0, "{v:#}");
    let r = &v["result"];
    assert_eq!(r["threads"].as_u64(), Some(cpus as u64), "{v:#}");
    assert_eq!(r["blocks"].as_u64(), Some(16), "{v:#}");
    assert_eq!(r["collapsed"].as_u64(), Some(16), "{v:#}");
    assert!(r["stopped"].is_null(), "{v:#}");
    assert_eq!(
        r["before"].as_array().unwrap().len(),
        3,
        "holder and 2 children: {v:#}"
    );
    // After: on node 1 still, and the holder maps it as 2 MiB pages.
    let after = run.console.ok("collapse.after").unwrap();
    assert_eq!(nodes(after), before, "{after}");
    assert!(
        after.contains(&format!("ShmemPmdMapped:    {} kB", 32 * 1024)),
        "{after}"
    );
    // The doctor sees it on 2 MiB transparent huge pages.
    let segs = json_v1(run, "collapse.segments");
    let seg = segs["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "sysv" && s["size_bytes"].as_u64() == Some(32 * M))
        .unwrap_or_else(|| panic!("{segs:#}"));
    assert_eq!(seg["thp_bytes"].as_u64(), Some(32 * M), "{seg:#}");
    assert_eq!(seg["findings"][0]["code"], "thp-shmem", "{seg:#}");
    // The holder removed its segment when it ended.
    let ipcs = run.console.ok("collapse.ipcs").unwrap();
    assert_eq!(ipcs.lines().count(), 1, "{ipcs}");
}

#[test]
fn guest_collapse_under_deny_is_refused_with_the_fix() {
    let Some(run) = guest_run("guest_collapse_under_deny_is_refused_with_the_fix") else {
        return;
    };
    let deny = run
        .console
        .block("collapse.deny")
        .expect("block collapse.deny");
    assert_eq!(deny.rc, 2, "{}", deny.text);
    let v: serde_json::Value = serde_json::from_str(&deny.text).unwrap();
    assert_eq!(v["plan"]["refusal"]["refusal"], "shmem-deny", "{v:#}");
    assert!(v["result"].is_null(), "{v:#}");
    let err = &run
        .console
        .block("collapse.deny.stderr")
        .expect("its stderr")
        .text;
    assert!(err.contains("deny") && err.contains("fix:"), "{err}");
}
