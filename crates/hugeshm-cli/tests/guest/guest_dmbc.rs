//! `hugeshm bench dmbc` in the QEMU guest with an emulated NVDIMM
//! (`hugeshm_testkit::guest`; the scenario is guest-scenarios/dmbc.sh):
//! with the data file on ext4 mounted `-o dax` the direct mode reads the
//! persistent memory in place (the kernel says the file is DAX), copies
//! nothing on reads and does fewer physical reads than the classic mode;
//! on the guest's tmpfs the report says the mapping is the page cache.
//! Skips only where QEMU or a guest kernel is missing.

use crate::shared::{self, json};
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::sync::OnceLock;

fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        shared::boot(
            "dmbc.sh",
            &[],
            Boot {
                nvdimm: true,
                ..Boot::default()
            },
        )
    })
    .runs(test)
    .map(|r| &r[0])
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn guest_dmbc_direct_mode_reads_dax_in_place() {
    let Some(run) = guest_run("guest_dmbc_direct_mode_reads_dax_in_place") else {
        return;
    };
    let mounted = run.console.ok("mounted").unwrap();
    assert!(mounted.contains("dax"), "{mounted}");
    let v = json(run, "dmbc.dax.json");
    println!("{v:#}");
    assert_eq!(v["dax"], true, "{v:#}");
    assert_eq!(v["data"]["file_dax"], true, "{v:#}");
    assert_eq!(v["data"]["mount_dax"], true, "{v:#}");
    assert_eq!(v["data"]["mount"], "/mnt/pmem", "{v:#}");
    assert_eq!(v["direct"]["mapping"], "dax", "{v:#}");
    let (c, d) = (&v["classic"], &v["direct"]);
    assert!(f(&c["transactions"]) > 0.0 && f(&d["transactions"]) > 0.0);
    assert!(f(&d["in_place_reads"]) > 0.0, "{d:#}");
    assert_eq!(f(&d["bytes_copied_by_reads"]), 0.0, "{d:#}");
    assert!(f(&c["bytes_copied_by_reads"]) > 0.0, "{c:#}");
    assert!(
        f(&d["physical_per_tx"]) < f(&c["physical_per_tx"]),
        "direct {} vs classic {} physical reads per transaction",
        d["physical_per_tx"],
        c["physical_per_tx"]
    );
    let table = run.console.ok("dmbc.dax").unwrap();
    println!("{table}");
    assert!(table.contains("is on DAX"), "{table}");
    assert!(table.contains("physical reads (blocks)"), "{table}");
    let files = run.console.ok("dmbc.files").unwrap();
    assert!(!files.contains("hugeshm-dmbc"), "data file left: {files}");
}

#[test]
fn guest_dmbc_on_tmpfs_says_page_cache() {
    let Some(run) = guest_run("guest_dmbc_on_tmpfs_says_page_cache") else {
        return;
    };
    let v = json(run, "dmbc.tmp.json");
    assert_eq!(v["dax"], false, "{v:#}");
    assert_eq!(v["direct"]["mapping"], "page cache", "{v:#}");
    assert!(v["note"].as_str().unwrap().contains("not on DAX"), "{v:#}");
}
