//! Persistent memory in `status` and `segments`, in the QEMU guest with an
//! emulated NVDIMM on node 1 and a memory-only node 2
//! (`hugeshm_testkit::guest::Boot`): the fsdax namespace, the DAX mount, the
//! CPU-less node in its own memory tier, and two processes mapping files
//! there, one served by 2 MiB (PMD) faults and one by 4 KiB faults.
//! Skips only where QEMU or a guest kernel is missing.

use crate::shared::{self, json};
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::sync::OnceLock;

fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        let testproc = hugeshm_testkit::testproc_built()
            .unwrap_or_else(|e| panic!("the guest did not run: {e}"));
        let boot = Boot {
            nvdimm: true,
            memory_only_node: true,
            ..Boot::default()
        };
        shared::boot("pmem.sh", &[testproc.as_path()], boot)
    })
    .runs(test)
    .map(|r| &r[0])
}

#[test]
fn guest_status_shows_namespace_dax_mount_and_memory_only_node() {
    let Some(run) = guest_run("guest_status_shows_namespace_dax_mount_and_memory_only_node") else {
        return;
    };
    println!("{}", run.console.ok("pmem.status").unwrap());
    let s: Value = json(run, "pmem.status.json");
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

/// The `dax` segment of `path` in a `segments --json` document.
fn dax_segment<'a>(doc: &'a Value, path: &str) -> &'a Value {
    doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "dax" && s["path"] == path)
        .unwrap_or_else(|| panic!("no dax segment {path}: {doc:#}"))
}

fn codes(findings: &Value) -> Vec<&str> {
    findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect()
}

#[test]
fn guest_segments_tell_pmd_from_4k_dax_faults() {
    let Some(run) = guest_run("guest_segments_tell_pmd_from_4k_dax_faults") else {
        return;
    };
    println!("{}", run.console.ok("pmem.procs").unwrap());
    for f in ["aligned", "misaligned"] {
        println!(
            "{f} smaps:\n{}",
            run.console.ok(&format!("pmem.smaps.{f}")).unwrap()
        );
        println!(
            "{f} {}",
            run.console.ok(&format!("pmem.vmpte.{f}")).unwrap()
        );
    }
    println!("{}", run.console.ok("pmem.segments").unwrap());
    let doc = json(run, "pmem.segments.json");
    const M64: u64 = 64 << 20;

    // At file offset 0, 2 MiB-aligned address and extents: one PMD entry
    // per 2 MiB window, no finding.
    let good = dax_segment(&doc, "/mnt/pmem/aligned");
    assert_eq!(good["page_size_bytes"].as_u64(), Some(2 << 20), "{good:#}");
    assert_eq!(good["resident_bytes"].as_u64(), Some(M64), "{good:#}");
    assert_eq!(good["nodes"]["1"].as_u64(), Some(M64), "{good:#}");
    let d = &good["dax"];
    assert_eq!(d["mount"], "/mnt/pmem", "{d:#}");
    assert_eq!(d["device"], "pmem0", "{d:#}");
    assert_eq!(d["namespace"], "namespace0.0", "{d:#}");
    assert_eq!(d["numa_node"].as_u64(), Some(1), "{d:#}");
    let m = &d["mappings"][0];
    assert_eq!(m["faults"], "pmd", "{m:#}");
    assert_eq!(m["frames_visible"], true, "{m:#}");
    // Each signal alone: PM_FILE on every page, frames in 2 MiB runs.
    assert_eq!(m["file_pages"].as_u64(), Some(16384), "{m:#}");
    assert_eq!(
        (
            m["windows"].as_u64(),
            m["pmd_windows"].as_u64(),
            m["pte_windows"].as_u64()
        ),
        (Some(32), Some(32), Some(0)),
        "{m:#}"
    );
    assert!(codes(&good["findings"]).is_empty(), "{good:#}");

    // At file offset 4096: every window on 4 KiB entries, and the finding.
    let bad = dax_segment(&doc, "/mnt/pmem/misaligned");
    assert_eq!(bad["page_size_bytes"].as_u64(), Some(4096), "{bad:#}");
    assert_eq!(bad["resident_bytes"].as_u64(), Some(M64), "{bad:#}");
    let m = &bad["dax"]["mappings"][0];
    assert_eq!(m["faults"], "pte", "{m:#}");
    assert_eq!(m["offset"].as_u64(), Some(4096), "{m:#}");
    assert_eq!(
        (m["pmd_windows"].as_u64(), m["pte_windows"].as_u64()),
        (Some(0), Some(32)),
        "{m:#}"
    );
    assert_eq!(m["causes"], serde_json::json!(["file-offset"]), "{m:#}");
    // PM_FILE on none of its pages (Linux 6.1: PTE-mapped DAX pages have
    // no struct page to show).
    assert_eq!(m["file_pages"].as_u64(), Some(0), "{m:#}");
    assert_eq!(m["pte_table_bytes"].as_u64(), Some(128 << 10), "{m:#}");
    assert_eq!(codes(&bad["findings"]), ["dax-4k-faults"], "{bad:#}");
    let f = &bad["findings"][0];
    assert_eq!(f["severity"], "warning");
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("at file offset 4096 with 4 KiB page-table entries"),
        "{msg}"
    );
    assert!(msg.contains("in 32 of 32 windows of 2 MiB"), "{msg}");
    assert!(msg.contains("128 KiB"), "{msg}");
    let fix = f["fix"].as_str().unwrap();
    assert!(fix.contains("multiple of 2 MiB (not 4096"), "{fix}");
    assert!(fix.contains("hugeshm create NAME --backend dax"), "{fix}");

    // The page tables the kernel charged the two processes (VmPTE, all of
    // their mappings; the processes are alike but for the offset) differ
    // by what the verdict says the 4 KiB entries cost: one page-table page
    // per 2 MiB window, 32 of them.
    let pte = |s: &Value| s["attached"][0]["vm_pte_bytes"].as_u64().unwrap();
    let extra = pte(bad) as i64 - pte(good) as i64;
    println!("VmPTE: aligned {} B, misaligned {} B", pte(good), pte(bad));
    // (The rest of their page tables is not quite the same: 116 KiB
    // apart was seen.)
    assert!(
        (extra - (128 << 10)).abs() <= 32 << 10,
        "VmPTE differs by {extra} B, expected about 128 KiB"
    );

    // status: both files in the pmem section, the finding in the summary.
    let s = json(run, "pmem.status.json");
    let mapped = s["pmem"]["mapped"].as_array().expect("pmem.mapped");
    let page_of = |p: &str| {
        mapped
            .iter()
            .find(|m| m["path"] == p)
            .unwrap_or_else(|| panic!("{p} not in {mapped:?}"))["page_size_bytes"]
            .as_u64()
    };
    assert_eq!(page_of("/mnt/pmem/aligned"), Some(2 << 20));
    assert_eq!(page_of("/mnt/pmem/misaligned"), Some(4096));
    let summary = s["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "segment-findings")
        .expect("segment-findings");
    assert!(
        summary["message"]
            .as_str()
            .unwrap()
            .contains("dax-4k-faults x1"),
        "{summary:#}"
    );
    // The processes removed their files.
    let files = run.console.ok("pmem.files").unwrap();
    assert!(!files.contains("aligned"), "{files}");
}

/// The `dax` segment mapped by the process of `procs` (a testproc's JSON
/// line) whose file is `path`.
fn mapping_of<'a>(doc: &'a Value, path: &str) -> (&'a Value, &'a Value) {
    let s = dax_segment(doc, path);
    (s, &s["dax"]["mappings"][0])
}

#[test]
fn guest_dax_inode_files_without_the_flag_are_page_cache() {
    let Some(run) = guest_run("guest_dax_inode_files_without_the_flag_are_page_cache") else {
        return;
    };
    println!("{}", run.console.ok("pmem.inode.lsattr").unwrap());
    println!("{}", run.console.ok("pmem.inode.segments").unwrap());
    let doc = json(run, "pmem.inode.segments.json");
    const M16: u64 = 16 << 20;

    // Created in a directory with the flag: DAX from its creation, on PMD
    // entries, no finding.
    let (on, m) = mapping_of(&doc, "/mnt/pmem/flagged/on");
    let d = &on["dax"];
    assert_eq!(d["dax"], "inode", "{d:#}");
    assert_eq!(
        d["file"],
        serde_json::json!({"dax": true, "flag": true}),
        "{d:#}"
    );
    assert_eq!(m["faults"], "pmd", "{m:#}");
    assert_eq!(on["page_size_bytes"].as_u64(), Some(2 << 20), "{on:#}");
    assert_eq!(on["resident_bytes"].as_u64(), Some(M16), "{on:#}");
    assert!(codes(&on["findings"]).is_empty(), "{on:#}");

    // Without the flag: the page cache, judged so (not 4 KiB DAX faults),
    // its pages counted by smaps; the finding and the fix.
    let (off, m) = mapping_of(&doc, "/mnt/pmem/off");
    let d = &off["dax"];
    assert_eq!(
        d["file"],
        serde_json::json!({"dax": false, "flag": false}),
        "{d:#}"
    );
    assert_eq!(m["faults"], "page-cache", "{m:#}");
    assert_eq!(m["pte_table_bytes"].as_u64(), Some(0), "{m:#}");
    assert_eq!(off["page_size_bytes"].as_u64(), Some(4096), "{off:#}");
    assert_eq!(off["resident_bytes"].as_u64(), Some(M16), "{off:#}");
    assert_eq!(codes(&off["findings"]), ["dax-page-cache"], "{off:#}");
    let f = &off["findings"][0];
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "/mnt/pmem/off is on the dax=inode mount /mnt/pmem and is not DAX (it has no DAX flag): pid "
        ),
        "{msg}"
    );
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.starts_with("set its DAX flag: chattr +x /mnt/pmem/off;"),
        "{fix}"
    );

    // Given the flag while mapped: set, not in force.
    let (late, m) = mapping_of(&doc, "/mnt/pmem/late");
    let d = &late["dax"];
    assert_eq!(
        d["file"],
        serde_json::json!({"dax": false, "flag": true}),
        "{d:#}"
    );
    assert_eq!(m["faults"], "page-cache", "{m:#}");
    let f = &late["findings"][0];
    assert_eq!(f["code"], "dax-page-cache", "{late:#}");
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .starts_with("its DAX flag is set but not in force"),
        "{f:#}"
    );
    // The flags as lsattr shows them (x: DAX).
    let attrs = run.console.ok("pmem.inode.lsattr").unwrap();
    let has_x = |p: &str| {
        attrs
            .lines()
            .find(|l| l.ends_with(&format!(" {p}")))
            .unwrap_or_else(|| panic!("{p}: {attrs}"))
            .split(' ')
            .next()
            .unwrap()
            .contains('x')
    };
    assert!(
        has_x("/mnt/pmem/flagged") && has_x("/mnt/pmem/flagged/on"),
        "{attrs}"
    );
    assert!(
        !has_x("/mnt/pmem/off") && has_x("/mnt/pmem/late"),
        "{attrs}"
    );
}

#[test]
fn guest_dax_region_on_a_dax_inode_mount_has_the_flag_and_map_sync() {
    let Some(run) = guest_run("guest_dax_region_on_a_dax_inode_mount_has_the_flag_and_map_sync")
    else {
        return;
    };
    let r = json(run, "pmem.inode.create");
    println!("{r:#}");
    assert_eq!(r["backend"], "dax", "{r:#}");
    assert_eq!(r["path"], "/mnt/pmem/hugeshm.pi", "{r:#}");
    assert_eq!(r["map_sync"], true, "{r:#}");
    assert_eq!(r["fell_back"], false, "{r:#}");
    assert_eq!(
        r["verified_page_size_bytes"].as_u64(),
        Some(2 << 20),
        "{r:#}"
    );
    let attr = run.console.ok("pmem.inode.regionattr").unwrap();
    println!("{attr}");
    let flags = attr.split(' ').next().unwrap();
    assert!(flags.contains('x'), "{attr}");
    // Listed (ls looks on dax=inode mounts), then removed by name.
    let ls = json(run, "pmem.inode.ls");
    let names: Vec<&str> = ls["regions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["backend"] == "dax")
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"pi"), "{ls:#}");
    let rm = json(run, "pmem.inode.rm");
    assert_eq!(rm["removed"][0]["object"], "/mnt/pmem/hugeshm.pi", "{rm:#}");
    // In a directory that has the flag (the mount's root, found by
    // default): made there directly, the same.
    let f = json(run, "pmem.inode.createflagged");
    assert_eq!(f["path"], "/mnt/pmem/hugeshm.pf", "{f:#}");
    assert_eq!(f["map_sync"], true, "{f:#}");
    assert_eq!(
        f["verified_page_size_bytes"].as_u64(),
        Some(2 << 20),
        "{f:#}"
    );
    let rm = json(run, "pmem.inode.rmflagged");
    assert_eq!(rm["removed"][0]["object"], "/mnt/pmem/hugeshm.pf", "{rm:#}");
    // Nothing left: no region file, no staging directory (the one a
    // killed creator left was swept), no mount.
    let files = run.console.ok("pmem.inode.files").unwrap();
    assert!(!files.contains("hugeshm"), "{files}");
    let after = run.console.ok("pmem.inode.after").unwrap();
    assert!(!after.contains("/mnt/pmem"), "{after}");
}

#[test]
fn guest_dax_region_where_the_file_cannot_be_dax_follows_the_policy() {
    let Some(run) = guest_run("guest_dax_region_where_the_file_cannot_be_dax_follows_the_policy")
    else {
        return;
    };
    run.console.ok("pmem.nodax.mount").unwrap();
    let only = run
        .console
        .block("pmem.nodax.only")
        .expect("pmem.nodax.only");
    assert_ne!(only.rc, 0);
    let err = run
        .console
        .block("pmem.nodax.only.stderr")
        .map(|b| b.text.clone())
        .unwrap_or_default();
    println!("{err}");
    assert!(
        err.contains(
            "/mnt/pmem/hugeshm.nd: the file is not DAX although it has the DAX flag: this file \
             system cannot serve files by DAX (its blocks are 1 KiB, DAX needs 4 KiB)"
        ),
        "{err}"
    );
    assert!(err.contains("mkfs.ext4 -b 4096"), "{err}");
    let files = run.console.ok("pmem.nodax.onlyfiles").unwrap();
    assert!(!files.contains("hugeshm"), "nothing left: {files}");
    // try: a plain shared mapping, and the reason.
    let r = json(run, "pmem.nodax.try");
    println!("{r:#}");
    // (map_sync is left out of the JSON when false.)
    assert_eq!(r.get("map_sync"), None, "{r:#}");
    assert_eq!(r["fell_back"], true, "{r:#}");
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(4096), "{r:#}");
    assert_eq!(r["resident_bytes"].as_u64(), Some(4 << 20), "{r:#}");
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.contains("is not mapped MAP_SYNC"), "{reason}");
    let rm = json(run, "pmem.nodax.rm");
    assert_eq!(rm["removed"][0]["object"], "/mnt/pmem/hugeshm.nd", "{rm:#}");
    let files = run.console.ok("pmem.nodax.files").unwrap();
    assert!(!files.contains("hugeshm"), "nothing left: {files}");
}
