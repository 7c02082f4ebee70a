//! `dax` regions on an emulated NVDIMM (a QEMU guest, see
//! `hugeshm_testkit::guest`; the scenario is guest-scenarios/dax.sh): an
//! fsdax namespace with ext4 mounted `-o dax`; a region created there is
//! mapped MAP_SYNC at 2 MiB, attached by name from another process and
//! listed; a region larger than the device is NoSpace with the numbers and
//! leaves no file; a directory that is not DAX is refused. Then bytes are
//! written and persisted and the guest loses power (sysrq o: no sync, no
//! unmount); booted again from the same NVDIMM image, the region is there,
//! ready, with the bytes. Skips only where QEMU or a guest kernel is
//! missing.

use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

/// The two boots of dax.sh (before and after the power-off), once for
/// every test of this file.
fn guest_runs(test: &str) -> Option<(&'static GuestRun, &'static GuestRun)> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest-scenarios/dax.sh");
        let boot = Boot {
            nvdimm: true,
            ..Boot::default()
        };
        Scenario::run(
            &scenario,
            &[Path::new(env!("CARGO_BIN_EXE_hugeshm"))],
            &[boot.clone(), boot],
        )
    })
    .runs(test)
    .map(|r| (&r[0], &r[1]))
}

fn json(run: &GuestRun, block: &str) -> Value {
    run.console.json(block).unwrap_or_else(|e| panic!("{e}"))
}

fn stderr(run: &GuestRun, block: &str) -> String {
    run.console
        .block(&format!("{block}.stderr"))
        .map(|b| b.text.clone())
        .unwrap_or_default()
}

#[test]
fn guest_dax_region_is_map_sync_and_attachable() {
    let Some((run, _)) = guest_runs("guest_dax_region_is_map_sync_and_attachable") else {
        return;
    };
    let mounted = run.console.ok("mounted").unwrap();
    assert!(mounted.contains("dax"), "{mounted}");
    let r = json(run, "create.pm");
    println!("{r:#}");
    assert_eq!(r["backend"], "dax", "{r:#}");
    assert_eq!(r["map_sync"], true, "{r:#}");
    assert_eq!(r["page_size_bytes"].as_u64(), Some(2 << 20), "{r:#}");
    assert_eq!(r["size_bytes"].as_u64(), Some(32 << 20), "{r:#}");
    assert_eq!(r["path"], "/mnt/pmem/hugeshm.pm", "{r:#}");
    // On the striped file system: PMD entries after the pre-fault
    // (pagemap), every byte present.
    assert_eq!(
        r["verified_page_size_bytes"].as_u64(),
        Some(2 << 20),
        "{r:#}"
    );
    assert_eq!(r["resident_bytes"].as_u64(), Some(32 << 20), "{r:#}");
    assert_eq!(r["fell_back"], false, "{r:#}");
    let a = json(run, "create.attach");
    assert_eq!(a["backend"], "dax", "{a:#}");
    let ls = json(run, "create.ls");
    let listed = ls["regions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["name"] == "pm" && x["backend"] == "dax");
    assert!(listed, "{ls:#}");
}

#[test]
fn guest_dax_full_device_and_wrong_directory_are_clear_errors() {
    let Some((run, _)) = guest_runs("guest_dax_full_device_and_wrong_directory_are_clear_errors")
    else {
        return;
    };
    let full = run.console.block("create.full").expect("create.full");
    assert_ne!(full.rc, 0);
    let err = stderr(run, "create.full");
    println!("{err}");
    assert!(
        err.contains("needed 1073741824 bytes (1 GiB), free"),
        "{err}"
    );
    assert!(err.contains("ndctl create-namespace"), "{err}");
    let files = run.console.ok("create.files").unwrap();
    assert!(!files.contains("hugeshm.big"), "nothing left: {files}");
    let nd = run.console.block("create.notdax").expect("create.notdax");
    assert_ne!(nd.rc, 0);
    let err = stderr(run, "create.notdax");
    println!("{err}");
    assert!(err.contains("not on a DAX file system"), "{err}");
}

#[test]
fn guest_dax_persisted_bytes_survive_a_power_off() {
    let Some((first, second)) = guest_runs("guest_dax_persisted_bytes_survive_a_power_off") else {
        return;
    };
    let w = first.console.ok("create.write").unwrap();
    println!("{w}");
    assert!(w.contains("wrote 17 bytes at 13, persisted with cl"), "{w}");
    let ls = json(second, "after.ls");
    let pm = ls["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "pm")
        .unwrap_or_else(|| panic!("the region after the power-off: {ls:#}"));
    println!("{pm:#}");
    assert_eq!(pm["backend"], "dax", "{pm:#}");
    let read = second.console.ok("after.read").unwrap();
    assert_eq!(read.trim(), "survives-poweroff");
    second.console.ok("after.rm").unwrap();
    let files = second.console.ok("after.files").unwrap();
    assert!(!files.contains("hugeshm.pm"), "{files}");
}
