//! `dax` regions on an emulated NVDIMM (a QEMU guest, see
//! `hugeshm_testkit::guest`; the scenario is guest-scenarios/dax.sh): an
//! fsdax namespace with ext4 mounted `-o dax`; a region created there is
//! mapped MAP_SYNC at 2 MiB, attached by name from another process and
//! listed; a region larger than the device is NoSpace with the numbers and
//! leaves no file; a directory that is not DAX is refused. Then bytes are
//! written and persisted and the guest loses power (sysrq o: no sync, no
//! unmount); booted again from the same NVDIMM image, the region is there,
//! ready, with the bytes. Beside the fsdax namespace, a devdax one: a
//! region on its device (`--device /dev/daxX.Y`) is MAP_SYNC at the
//! device's 2 MiB alignment, held and attached by name from other
//! processes, refuses another name and a size beyond the device, keeps its
//! persisted bytes across the power-off, and `rm` frees the device for the
//! next region. Skips only where QEMU or a guest kernel is missing.

use crate::shared::{self, json};
use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::sync::OnceLock;

/// The two boots of dax.sh (before and after the power-off), once for
/// every test of this file.
fn guest_runs(test: &str) -> Option<(&'static GuestRun, &'static GuestRun)> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        let boot = Boot {
            nvdimm: true,
            ..Boot::default()
        };
        Scenario::run(
            &shared::scenario("dax.sh"),
            &[shared::hugeshm()],
            &[boot.clone(), boot],
        )
    })
    .runs(test)
    .map(|r| (&r[0], &r[1]))
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

/// The device-dax of the guest (`/dev/daxX.Y`) and its size and alignment
/// from sysfs.
fn device(run: &GuestRun) -> (String, u64, u64) {
    let out = run.console.ok("devdax.device").unwrap();
    let mut lines = out.lines();
    let dev = lines.next().unwrap_or_default().to_owned();
    let mut num = || -> u64 {
        lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("devdax.device: {out}"))
    };
    let (size, align) = (num(), num());
    assert!(dev.starts_with("/dev/dax"), "{out}");
    (dev, size, align)
}

fn regions(v: &Value) -> &Vec<Value> {
    v["regions"].as_array().unwrap()
}

#[test]
fn guest_devdax_region_is_map_sync_held_and_refuses_others() {
    let Some((run, _)) = guest_runs("guest_devdax_region_is_map_sync_held_and_refuses_others")
    else {
        return;
    };
    let (dev, dev_size, align) = device(run);
    assert_eq!(align, 2 << 20);
    // Held by `create --hold`: listed with its holder; another name on the
    // device and rm are refused.
    let held = json(run, "devdax.held");
    println!("{held:#}");
    assert_eq!(held["path"], dev.as_str(), "{held:#}");
    let holder = held["pid"].as_u64().unwrap();
    let ls = json(run, "devdax.heldls");
    let dh = regions(&ls)
        .iter()
        .find(|x| x["name"] == "dh")
        .unwrap_or_else(|| panic!("{ls:#}"));
    assert_eq!(dh["object"]["path"], dev.as_str(), "{dh:#}");
    assert_eq!(dh["held"], true, "{dh:#}");
    assert_eq!(dh["holders"][0].as_u64(), Some(holder), "{dh:#}");
    assert_eq!(dh["owner"]["uid"].as_u64(), Some(0), "{dh:#}");
    let busy = stderr(run, "devdax.busy");
    println!("{busy}");
    assert_ne!(run.console.block("devdax.busy").unwrap().rc, 0);
    assert!(busy.contains("it holds the dax region \"dh\""), "{busy}");
    let inuse = stderr(run, "devdax.inuse");
    assert!(
        inuse.contains(&format!("in use: mapped by pid(s) {holder}")),
        "{inuse}"
    );
    // Let go, rm frees the device: ls no longer shows it.
    let rm = json(run, "devdax.rmheld");
    assert_eq!(rm["removed"][0]["object"], dev.as_str(), "{rm:#}");
    let free = json(run, "devdax.freels");
    assert!(
        !regions(&free).iter().any(|x| x["name"] == "dh"),
        "{free:#}"
    );

    // Four creators race for the free device: exactly one wins, and it is
    // the one region on the device; the others say why; rm frees it.
    let rcs = run.console.ok("devdax.race").unwrap();
    println!("{rcs}");
    let winners: Vec<&str> = rcs.lines().filter_map(|l| l.strip_suffix(" 0")).collect();
    assert_eq!(winners.len(), 1, "{rcs}");
    assert_eq!(rcs.lines().count(), 4, "{rcs}");
    let errs = run.console.ok("devdax.raceerr").unwrap();
    println!("{errs}");
    let refused = errs
        .lines()
        .filter(|l| {
            l.contains("it holds the dax region \"race") || l.contains("another process holds it")
        })
        .count();
    assert_eq!(refused, 3, "{errs}");
    let ls = json(run, "devdax.racels");
    let on_dev: Vec<&Value> = regions(&ls)
        .iter()
        .filter(|x| x["object"]["path"] == dev.as_str())
        .collect();
    assert_eq!(on_dev.len(), 1, "{ls:#}");
    assert_eq!(on_dev[0]["name"], winners[0], "{ls:#}");
    let rm = json(run, "devdax.racerm");
    assert_eq!(rm["removed"][0]["object"], dev.as_str(), "{rm:#}");

    // The region that meets the power-off: MAP_SYNC, verified on PMD
    // entries (pagemap), every byte present; attached by name.
    let r = json(run, "devdax.create");
    println!("{r:#}");
    assert_eq!(r["backend"], "dax", "{r:#}");
    assert_eq!(r["path"], dev.as_str(), "{r:#}");
    assert_eq!(r["map_sync"], true, "{r:#}");
    assert_eq!(r["page_size_bytes"].as_u64(), Some(align), "{r:#}");
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(align), "{r:#}");
    assert_eq!(r["size_bytes"].as_u64(), Some(32 << 20), "{r:#}");
    assert_eq!(r["resident_bytes"].as_u64(), Some(32 << 20), "{r:#}");
    assert_eq!(r["fell_back"], false, "{r:#}");
    assert_eq!(r["address"].as_u64().unwrap() % align, 0, "{r:#}");
    let a = json(run, "devdax.attach");
    assert_eq!(a["path"], dev.as_str(), "{a:#}");
    assert_eq!(a["header"]["name"], "dd", "{a:#}");
    assert_eq!(
        a["header"]["generation"], r["header"]["generation"],
        "{a:#}"
    );
    // Nobody holds it: the name is refused with the ways out; reuse keeps
    // it (same generation), recreate (found by name, no --device) makes it
    // anew on the same device.
    let again = stderr(run, "devdax.again");
    assert!(
        again.contains(&format!(
            "dax region \"dd\" ({dev}) exists but no process holds it"
        )),
        "{again}"
    );
    let reuse = json(run, "devdax.reuse");
    assert_eq!(reuse["reclaimed"]["action"], "reuse", "{reuse:#}");
    assert_eq!(reuse["path"], dev.as_str(), "{reuse:#}");
    assert_eq!(reuse["header"]["generation"], r["header"]["generation"]);
    let re = json(run, "devdax.recreate");
    println!("{re:#}");
    assert_eq!(re["reclaimed"]["action"], "recreate", "{re:#}");
    assert_eq!(re["reclaimed"]["previous_object"], dev.as_str(), "{re:#}");
    assert_eq!(re["path"], dev.as_str(), "{re:#}");
    assert_eq!(re["map_sync"], true, "{re:#}");
    assert_ne!(re["header"]["generation"], r["header"]["generation"]);
    let ls = json(run, "devdax.ls");
    assert!(
        regions(&ls)
            .iter()
            .any(|x| x["name"] == "dd" && x["object"]["path"] == dev.as_str()),
        "{ls:#}"
    );
    // Not trusted: a node owned by another user, or writable by others.
    for (block, why) in [
        ("devdax.foreign", "it is owned by uid 1000, not uid 0"),
        ("devdax.foreignrm", "it is owned by uid 1000, not uid 0"),
        (
            "devdax.writable",
            "its mode 0666 lets its group and others write it",
        ),
    ] {
        assert_ne!(run.console.block(block).unwrap().rc, 0, "{block}");
        let err = stderr(run, block);
        println!("{block}: {err}");
        assert!(err.contains(&format!("{dev}: {why}")), "{block}: {err}");
        assert!(
            err.contains("will not use or remove another user's"),
            "{err}"
        );
    }
    // Another name, and a size beyond the device: refused, nothing written
    // (the region is still there after the power-off, below).
    let taken = stderr(run, "devdax.taken");
    assert!(
        taken.contains("it holds the dax region \"dd\" (32 MiB, ready"),
        "{taken}"
    );
    let big = stderr(run, "devdax.big");
    println!("{big}");
    assert!(
        big.contains(&format!(
            "{dev}: not enough space on device-dax: needed 1073741824 bytes (1 GiB), free {dev_size} bytes"
        )),
        "{big}"
    );
    assert!(
        big.contains("ndctl create-namespace --mode=devdax"),
        "{big}"
    );
}

#[test]
fn guest_devdax_bytes_survive_a_power_off_and_rm_frees_the_device() {
    let Some((first, second)) =
        guest_runs("guest_devdax_bytes_survive_a_power_off_and_rm_frees_the_device")
    else {
        return;
    };
    let (dev, _, _) = device(second);
    let w = first.console.ok("devdax.write").unwrap();
    assert!(w.contains("wrote 15 bytes at 13, persisted with cl"), "{w}");
    let ls = json(second, "after.ls");
    let dd = regions(&ls)
        .iter()
        .find(|x| x["name"] == "dd")
        .unwrap_or_else(|| panic!("the device's region after the power-off: {ls:#}"));
    println!("{dd:#}");
    assert_eq!(dd["object"]["path"], dev.as_str(), "{dd:#}");
    assert_eq!(dd["header"]["state"], "ready", "{dd:#}");
    let read = second.console.ok("after.devread").unwrap();
    assert_eq!(read.trim(), "device-survives");
    let rm = json(second, "after.devrm");
    assert_eq!(rm["removed"][0]["object"], dev.as_str(), "{rm:#}");
    let ls = json(second, "after.devls");
    assert!(!regions(&ls).iter().any(|x| x["name"] == "dd"), "{ls:#}");
    // The device is free: another name takes it, and goes again.
    let again = json(second, "after.devagain");
    assert_eq!(again["path"], dev.as_str(), "{again:#}");
    assert_eq!(again["size_bytes"].as_u64(), Some(4 << 20), "{again:#}");
    second.console.ok("after.devrm2").unwrap();
    let end = json(second, "after.devend");
    assert!(regions(&end).is_empty(), "nothing left: {end:#}");
}
