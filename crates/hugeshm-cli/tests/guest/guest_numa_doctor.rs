//! The NUMA doctor on a real 2-node kernel: a QEMU guest (TCG, 2 nodes of
//! 1 GiB and one CPU each; `hugeshm_testkit::guest`, `scripts/guest/`)
//! boots this build's `hugeshm` and runs
//! `tests/guest-scenarios/numa-doctor.sh`; the tests check what it printed.
//! One boot serves every test here. Skips (passes with a `SKIP` line) only
//! where `qemu-system-x86_64` or a guest kernel is missing; root is not
//! needed.
//!
//! - uneven per-node pools (100/20) give `pool-uneven` with the per-node
//!   writes, which the guest runs as printed; the persistence advice is per
//!   node, not a sysctl;
//! - a /dev/shm file written by a process bound to node 1 is `single-node`
//!   ("Cyclops"), `tmpfs-no-mpol` gives the remount, the guest runs it as
//!   printed, and a file written afterwards by the same bound process
//!   spreads over both nodes (so does one written by `dd`, by the nodes'
//!   Shmem); with the old file gone the findings go;
//! - `apply --size 200M --spread` ends exactly as `advise` planned, per
//!   node; beside a live region on node 0 it is refused, changing nothing,
//!   until `--live` counts the region, and then ends as planned again.
//!
//! Alone: `cargo test -p hugeshm --test guest guest_numa_doctor:: -- --nocapture`
//! (prints the timings; `HUGESHM_GUEST_KEEP=1` keeps the console log).

use crate::shared::{self, json_v1 as json};
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::sync::OnceLock;

const M2: u64 = 2 << 20;
const MIB: u64 = 1 << 20;

/// The guest run of numa-doctor.sh, booted once for all the tests of this
/// file; None (after a skip) when this host cannot run it.
fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        let scenario = shared::boot("numa-doctor.sh", &[], Boot::default());
        shared::print_marks(&scenario, &["uneven", "cyclops", "apply"]);
        scenario
    })
    .runs(test)
    .map(|r| &r[0])
}

/// The numbers a block printed, one per line (the per-node pools).
fn numbers(run: &GuestRun, block: &str) -> Vec<u64> {
    run.console
        .ok(block)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{block}: {l:?}"))
        })
        .collect()
}

fn findings(doc: &Value) -> &Vec<Value> {
    doc["findings"].as_array().expect("findings")
}

fn find<'a>(doc: &'a Value, code: &str) -> Option<&'a Value> {
    findings(doc).iter().find(|f| f["code"] == code)
}

fn finding<'a>(doc: &'a Value, code: &str) -> &'a Value {
    find(doc, code).unwrap_or_else(|| panic!("no {code} in {:#}", doc["findings"]))
}

fn text<'a>(f: &'a Value, key: &str) -> &'a str {
    f[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {f:#}"))
}

/// The segment whose path is `path` in a `segments --json` document.
fn segment<'a>(segs: &'a Value, path: &str) -> &'a Value {
    segs["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .find(|s| s["path"] == path)
        .unwrap_or_else(|| panic!("no segment {path}: {segs:#}"))
}

fn nodes_of(seg: &Value) -> Vec<(String, u64)> {
    seg["nodes"]
        .as_object()
        .expect("nodes")
        .iter()
        .map(|(n, b)| (n.clone(), b.as_u64().unwrap()))
        .collect()
}

fn codes_of(seg: &Value) -> Vec<&str> {
    findings(seg)
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect()
}

/// Per node, kB of Shmem before and after (a block printing `before\tafter`
/// per node).
fn shmem_growth_kb(run: &GuestRun, block: &str) -> Vec<i64> {
    run.console
        .ok(block)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .map(|l| {
            let v: Vec<i64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            v[1] - v[0]
        })
        .collect()
}

/// `(node, pages, spare)` of each pool row of a plan.
fn plan_pools(plan: &Value) -> Vec<(Option<u64>, u64, u64)> {
    plan["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .map(|p| {
            (
                p["node"].as_u64(),
                p["pages"].as_u64().unwrap(),
                p["spare_pages"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `(node, requested, granted)` of each change `apply` made.
fn applied(doc: &Value) -> Vec<(Option<u64>, u64, u64)> {
    assert_eq!(doc["result"]["complete"], true, "{doc:#}");
    doc["result"]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["node"].as_u64(),
                c["requested"].as_u64().unwrap(),
                c["granted"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn guest_uneven_pools_get_the_per_node_fix_and_per_node_persistence() {
    let Some(run) = guest_run("guest_uneven_pools_get_the_per_node_fix_and_per_node_persistence")
    else {
        return;
    };
    assert_eq!(numbers(run, "uneven.pools"), [100, 20]);
    let st = json(run, "uneven.status");
    let f = finding(&st, "pool-uneven");
    assert_eq!(f["severity"], "warning");
    let msg = text(f, "message");
    // "1 CPU and 962 MiB each", or "1 CPU each (and 1007 MiB and 896 MiB of
    // memory)": what the kernel keeps of each node differs from boot to boot.
    assert!(
        msg.starts_with(
            "2 MiB pool uneven over the NUMA nodes: node 0 holds 100 pages and node 1 holds 20, \
             while the nodes have 1 CPU "
        ),
        "{msg}"
    );
    assert!(
        msg.contains(
            "an even split is 60 and 60. Processes on node 1 get remote huge pages once its 20 \
             are used, and a region bound to node 1 can have no more than 20"
        ),
        "{msg}"
    );
    let node_file = |n: u32| {
        format!("/sys/devices/system/node/node{n}/hugepages/hugepages-2048kB/nr_hugepages")
    };
    let fix = text(f, "fix");
    assert!(
        fix.starts_with(&format!(
            "echo 60 > {} && echo 60 > {}   # ",
            node_file(0),
            node_file(1)
        )),
        "{fix}"
    );
    assert!(fix.contains("hugepagesz=2M hugepages=0:60,1:60"), "{fix}");
    // Persistence per node: the kernel would split a vm.nr_hugepages of
    // 120 into 60/60 at boot.
    let p = text(finding(&st, "pool-not-persisted"), "fix");
    assert!(
        p.starts_with(&format!(
            "printf 'w {} - - - - 100\\nw {} - - - - 20\\n' > /etc/tmpfiles.d/60-hugeshm.conf   # or hugepagesz=2M hugepages=0:100,1:20 on the kernel command line",
            node_file(0),
            node_file(1)
        )),
        "{p}"
    );
    assert!(!p.contains("vm.nr_hugepages ="), "{p}");

    // The guest ran the fix as printed: the pools are even and the finding
    // is gone; the persistence advice is the sysctl again.
    run.console.ok("uneven.fix").unwrap();
    assert_eq!(numbers(run, "uneven.fixed-pools"), [60, 60]);
    let st = json(run, "uneven.fixed-status");
    assert!(find(&st, "pool-uneven").is_none(), "{:#}", st["findings"]);
    assert_eq!(
        text(finding(&st, "pool-not-persisted"), "fix"),
        "echo 'vm.nr_hugepages = 120' > /etc/sysctl.d/60-hugeshm.conf"
    );
}

#[test]
fn guest_a_dev_shm_file_written_from_node_1_is_a_cyclops_until_the_mpol_remount() {
    let Some(run) =
        guest_run("guest_a_dev_shm_file_written_from_node_1_is_a_cyclops_until_the_mpol_remount")
    else {
        return;
    };
    // A region file in /dev/shm, created and pre-faulted by `hugeshm create`
    // under numactl --cpunodebind=1 --membind=1: all 64 MiB on node 1.
    let create = &run.console.ok("cyclops.create").unwrap();
    assert!(create.contains("holding region cyc1"), "{create}");
    let segs = json(run, "cyclops.segments");
    let cyc1 = segment(&segs, "/dev/shm/hugeshm.cyc1");
    assert_eq!(cyc1["kind"], "posix");
    assert_eq!(nodes_of(cyc1), [("1".to_string(), 64 * MIB)], "{cyc1:#}");
    let single = finding(cyc1, "single-node");
    assert_eq!(single["severity"], "warning");
    assert_eq!(
        single["message"],
        "all 64 MiB resident of /dev/shm/hugeshm.cyc1 sit on node 1 of 2 (a \"Cyclops\" file: \
         /dev/shm has no mpol=, so each page went to the node of the process that first touched \
         it): processes on the other nodes work on remote memory"
    );
    assert_eq!(
        single["fix"],
        "mount -o remount,mpol=interleave /dev/shm, then have its owner recreate it (restart it): \
         pages already allocated keep their node"
    );
    // The same from dd, which nobody maps: the nodes' Shmem tells.
    let dd = shmem_growth_kb(run, "cyclops.dd-shmem");
    assert!(
        dd[0] < 1024 && dd[1] >= 63 * 1024,
        "Shmem growth per node, kB: {dd:?}"
    );
    let dd1 = segment(&segs, "/dev/shm/dd1");
    assert!(nodes_of(dd1).is_empty(), "nobody maps it: {dd1:#}");

    // status: /dev/shm has no mpol= and holds 128 MiB of files.
    let st = json(run, "cyclops.status");
    let t = finding(&st, "tmpfs-no-mpol");
    assert_eq!(t["severity"], "warning");
    assert!(
        text(t, "message").ends_with("(\"Cyclops\"); its files hold 128 MiB now"),
        "{t:#}"
    );
    assert!(
        text(t, "fix").starts_with("mount -o remount,mpol=interleave /dev/shm   # "),
        "{t:#}"
    );
    assert!(
        text(finding(&st, "segment-findings"), "message").contains("single-node x1"),
        "{:#}",
        st["findings"]
    );

    // The guest ran that fix as printed; the kernel shows the policy.
    run.console.ok("cyclops.remount").unwrap();
    let mounts = run.console.ok("cyclops.mounts").unwrap();
    assert!(
        mounts.contains("mpol=interleave:0-1"),
        "/dev/shm after the remount: {mounts}"
    );
    // A new file from the same bound process spreads over both nodes (the
    // mount's policy wins over the process's --membind); so does dd's.
    let segs = json(run, "cyclops.segments2");
    let cyc2 = segment(&segs, "/dev/shm/hugeshm.cyc2");
    let n = nodes_of(cyc2);
    assert_eq!(n.len(), 2, "{cyc2:#}");
    assert_eq!(n.iter().map(|(_, b)| b).sum::<u64>(), 64 * MIB, "{cyc2:#}");
    for (node, bytes) in &n {
        assert!(*bytes >= 16 * MIB, "node {node} has {bytes}: {cyc2:#}");
    }
    assert!(
        cyc2["numa_policy"]
            .as_str()
            .unwrap()
            .starts_with("interleave"),
        "{cyc2:#}"
    );
    assert!(!codes_of(cyc2).contains(&"single-node"), "{cyc2:#}");
    // The old file stays where it was, now with the reason.
    let cyc1 = segment(&segs, "/dev/shm/hugeshm.cyc1");
    assert!(
        text(finding(cyc1, "single-node"), "message")
            .contains("written before /dev/shm got mpol=interleave:0-1"),
        "{cyc1:#}"
    );
    let dd = shmem_growth_kb(run, "cyclops.dd2-shmem");
    assert!(
        dd.iter().all(|kb| *kb >= 16 * 1024) && dd.iter().sum::<i64>() >= 63 * 1024,
        "Shmem growth per node, kB: {dd:?}"
    );

    // With the old file gone, the findings go.
    let segs = json(run, "cyclops.segments3");
    for s in segs["segments"].as_array().unwrap() {
        assert!(!codes_of(s).contains(&"single-node"), "{s:#}");
    }
    let st = json(run, "cyclops.status3");
    assert!(find(&st, "tmpfs-no-mpol").is_none(), "{:#}", st["findings"]);
    assert!(
        find(&st, "segment-findings").is_none(),
        "{:#}",
        st["findings"]
    );
    assert_eq!(
        run.console.ok("cyclops.left").unwrap(),
        "",
        "left in /dev/shm"
    );
}

#[test]
fn guest_apply_spread_ends_exactly_as_advise_planned_per_node() {
    let Some(run) = guest_run("guest_apply_spread_ends_exactly_as_advise_planned_per_node") else {
        return;
    };
    // 200 MiB spread over 2 nodes: 50 pages each, and each node its spare.
    let plan = json(run, "apply.advise");
    assert_eq!(
        plan_pools(&plan),
        [(Some(0), 52, 2), (Some(1), 52, 2)],
        "{plan:#}"
    );
    assert_eq!(plan["warnings"], serde_json::json!([]));
    let done = json(run, "apply.apply");
    assert_eq!(
        applied(&done),
        [(Some(0), 52, 52), (Some(1), 52, 52)],
        "{done:#}"
    );
    assert_eq!(numbers(run, "apply.pools"), [52, 52]);

    // A live 64 MiB region bound to node 0: 32 of node 0's 100 pages.
    let live = json(run, "apply.live-create");
    assert_eq!(live["page_size_bytes"].as_u64(), Some(M2), "{live:#}");
    assert_eq!(numbers(run, "apply.live-before"), [100, 20]);
    let plan = json(run, "apply.live-advise");
    assert_eq!(plan_pools(&plan), [(Some(0), 52, 2), (Some(1), 52, 2)]);
    assert_eq!(plan["keep_live"], true);
    let w = plan["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:#?}");
    let shmid = live["shmid"].as_u64().unwrap();
    assert_eq!(
        w[0],
        format!(
            "live huge page segments use 32 pages of the 2 MiB pool of node 0 now (sysv {shmid} \
             of 64 MiB), which this plan does not count: at 52 pages the pool leaves 20 free for \
             the 50 the plan counts there; count them too with --live (apply refuses this plan; \
             --force applies it anyway)"
        )
    );
    // apply refuses and changes nothing.
    let refused = run.console.block("apply.live-refused").unwrap();
    assert_eq!(refused.rc, 3, "{}", refused.text);
    let err = &run.console.block("apply.live-refused.stderr").unwrap().text;
    assert_eq!(
        err.trim(),
        "hugeshm: error: refused: the 2 MiB pool of node 0 would hold 52 pages, but live huge \
         page segments use 32 of its pages now and the plan counts 50 more there without \
         counting them (it was made from --size or --spec alone): only 20 would be free for \
         those 50; count the live segments too with --live, or --force to apply it anyway \
         (nothing was changed)"
    );
    assert_eq!(numbers(run, "apply.live-after-refusal"), [100, 20]);
    // --live counts the region where it sits: node 0 gets its 32 pages too.
    let plan = json(run, "apply.live-advise-counted");
    assert_eq!(
        plan_pools(&plan),
        [(Some(0), 84, 2), (Some(1), 52, 2)],
        "{plan:#}"
    );
    assert_eq!(plan["warnings"], serde_json::json!([]));
    let counted = plan["counted"].as_array().unwrap();
    assert_eq!(
        counted[1]["note"],
        "counted on the nodes it sits on now (node 0: 32 pages)"
    );
    let done = json(run, "apply.live-apply");
    assert_eq!(
        applied(&done),
        [(Some(0), 84, 84), (Some(1), 52, 52)],
        "{done:#}"
    );
    assert_eq!(numbers(run, "apply.live-pools"), [84, 52]);

    // Nothing left: no SysV segment, nothing in /dev/shm, pools back to 0.
    let end = run.console.ok("apply.end").unwrap();
    let lines: Vec<&str> = end.lines().collect();
    assert_eq!(lines.len(), 3, "{end}");
    assert!(lines[0].trim_start().starts_with("key"), "{end}");
    assert_eq!(&lines[1..], ["0", "0"], "{end}");
}

#[test]
fn guest_numa_doctor_scenario_ended_cleanly() {
    let Some(run) = guest_run("guest_numa_doctor_scenario_ended_cleanly") else {
        return;
    };
    assert_eq!(run.exit_code, Some(0), "QEMU: {}", run.qemu_output);
    assert_eq!(run.console.done.map(|d| d.0), Some(0));
    let warnings = run.console.ok("dmesg-warnings").unwrap();
    assert!(
        !warnings.contains("cut here") && !warnings.contains("Oops"),
        "kernel warnings in the guest:\n{warnings}"
    );
}
