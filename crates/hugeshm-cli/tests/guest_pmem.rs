//! Persistent memory in `status`, in the QEMU guest with an emulated NVDIMM on
//! node 1 and a memory-only node 2 (`hugeshm_testkit::guest::Boot`): the fsdax
//! namespace, the DAX mount and the CPU-less node in its own memory tier.
//! Skips only where QEMU or a guest kernel is missing.

use hugeshm_testkit::guest::{Boot, Guest, GuestRun};
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

enum Outcome {
    Skip(String),
    Ran(Box<GuestRun>),
    Failed(String),
}

fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Outcome> = OnceLock::new();
    let outcome = RUN.get_or_init(|| {
        let guest = match Guest::find() {
            Ok(g) => g,
            Err(why) => return Outcome::Skip(why),
        };
        let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest-scenarios/pmem.sh");
        if let Err(e) = guest.build(&scenario, &[Path::new(env!("CARGO_BIN_EXE_hugeshm"))]) {
            return Outcome::Failed(e);
        }
        let boot = Boot {
            nvdimm: true,
            memory_only_node: true,
            ..Boot::default()
        };
        match guest.boot(&boot) {
            Ok(run) => Outcome::Ran(Box::new(run)),
            Err(e) => Outcome::Failed(e),
        }
    });
    match outcome {
        Outcome::Skip(why) => {
            println!("SKIP {test}: {why}");
            None
        }
        Outcome::Ran(run) => Some(run),
        Outcome::Failed(why) => panic!("the guest did not run: {why}"),
    }
}

#[test]
fn guest_status_shows_namespace_dax_mount_and_memory_only_node() {
    let Some(run) = guest_run("guest_status_shows_namespace_dax_mount_and_memory_only_node") else {
        return;
    };
    println!("{}", run.console.ok("pmem.status").unwrap());
    let s: Value = run
        .console
        .json("pmem.status.json")
        .unwrap_or_else(|e| panic!("{e}"));
    let p = &s["pmem"];
    let ns = p["namespaces"].as_array().expect("namespaces");
    assert_eq!(ns.len(), 1, "{p:#}");
    assert_eq!(ns[0]["name"], "namespace0.0", "{p:#}");
    assert_eq!(ns[0]["mode"], "fsdax", "{p:#}");
    assert_eq!(ns[0]["align_bytes"].as_u64(), Some(2 << 20), "{p:#}");
    assert_eq!(ns[0]["numa_node"].as_u64(), Some(1), "{p:#}");
    assert_eq!(ns[0]["blockdev"], "pmem0", "{p:#}");
    assert_eq!(ns[0]["region"], "region0", "{p:#}");
    let size = ns[0]["size_bytes"].as_u64().unwrap();
    assert!(size > 200 << 20 && size < 256 << 20, "{p:#}");

    let mounts = p["dax_mounts"].as_array().expect("dax_mounts");
    assert_eq!(mounts.len(), 1, "{p:#}");
    assert_eq!(mounts[0]["target"], "/mnt/pmem", "{p:#}");
    assert_eq!(mounts[0]["fstype"], "ext4", "{p:#}");
    assert_eq!(mounts[0]["dax"], "always", "{p:#}");
    assert_eq!(mounts[0]["stripe_blocks"].as_u64(), Some(512), "{p:#}");

    let mo = p["memory_only_nodes"]
        .as_array()
        .expect("memory_only_nodes");
    assert_eq!(mo.len(), 1, "{p:#}");
    assert_eq!(mo[0]["node"].as_u64(), Some(2), "{p:#}");
    // 512 MiB given; what the kernel shows after its own use varies by
    // boot (392 to 437 MiB seen).
    assert!(
        mo[0]["mem_total_bytes"].as_u64().unwrap() > 256 << 20,
        "{p:#}"
    );
    let tier = mo[0]["tier"].as_u64().expect("node 2 has a tier");
    let tiers = p["tiers"].as_array().unwrap();
    let of_node = |n: u64| {
        tiers
            .iter()
            .find(|t| {
                t["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x.as_u64() == Some(n))
            })
            .map(|t| t["tier"].as_u64().unwrap())
    };
    assert_eq!(of_node(2), Some(tier), "{p:#}");
    println!("tiers: {tiers:?}");

    // Nothing left: the scenario unmounted it.
    let after = run.console.ok("pmem.after").unwrap();
    assert!(!after.contains("/mnt/pmem"), "{after}");
}
