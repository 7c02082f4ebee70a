//! `apply_to` against a model of the kernel's pools: it grants at most a
//! limit of pages per size (which compaction can raise), keeps pages in use,
//! and can fail a write, so every path of the all-or-nothing logic runs.

use hugeshm_apply::{apply_to, ApplyError, ApplyOptions, PoolFiles};
use hugeshm_doctor::advise::Plan;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;

const M2: u64 = 2 << 20;
const G1: u64 = 1 << 30;

#[derive(Default)]
struct Kernel {
    nr: RefCell<BTreeMap<u64, u64>>,
    used: BTreeMap<u64, u64>,
    resv: BTreeMap<u64, u64>,
    limit: RefCell<BTreeMap<u64, u64>>,
    after_compaction: BTreeMap<u64, u64>,
    fail_writes_of: Option<u64>,
    writes: Cell<u32>,
    compactions: Cell<u32>,
}

impl Kernel {
    fn with(pools: &[(u64, u64)]) -> Kernel {
        let k = Kernel::default();
        for (s, n) in pools {
            k.nr.borrow_mut().insert(*s, *n);
            k.limit.borrow_mut().insert(*s, u64::MAX);
        }
        k
    }
}

impl PoolFiles for Kernel {
    fn nr(&self, size: u64, _node: Option<u32>) -> Result<u64, ApplyError> {
        Ok(*self.nr.borrow().get(&size).unwrap_or(&0))
    }
    fn free(&self, size: u64, node: Option<u32>) -> Result<u64, ApplyError> {
        Ok(self.nr(size, node)? - self.used.get(&size).copied().unwrap_or(0))
    }
    fn resv(&self, size: u64, _node: Option<u32>) -> Result<u64, ApplyError> {
        Ok(self.resv.get(&size).copied().unwrap_or(0))
    }
    fn set_nr(&self, size: u64, node: Option<u32>, pages: u64) -> Result<(), ApplyError> {
        self.writes.set(self.writes.get() + 1);
        if self.fail_writes_of == Some(size) {
            return Err(ApplyError::Io {
                path: self.describe(size, node),
                source: std::io::Error::from_raw_os_error(5),
            });
        }
        // Like the kernel: a growth gets what memory allows, a shrink never
        // frees pages in use.
        let limit = *self.limit.borrow().get(&size).unwrap_or(&u64::MAX);
        let used = self.used.get(&size).copied().unwrap_or(0);
        self.nr
            .borrow_mut()
            .insert(size, pages.min(limit).max(used));
        Ok(())
    }
    fn compact(&self) -> bool {
        self.compactions.set(self.compactions.get() + 1);
        for (s, l) in &self.after_compaction {
            self.limit.borrow_mut().insert(*s, *l);
        }
        true
    }
    fn nodes(&self) -> Vec<u32> {
        vec![0]
    }
    fn describe(&self, size: u64, _node: Option<u32>) -> String {
        format!(
            "/sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
            size / 1024
        )
    }
}

fn plan(pools: &[(u64, u64)]) -> Plan {
    let rows: Vec<serde_json::Value> = pools
        .iter()
        .map(|(s, p)| serde_json::json!({"page_size_bytes": s, "node": null, "pages": p, "spare_pages": 0, "current_pages": 0, "bytes": s * p}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "pools": rows, "counted": [], "skipped": [], "spare_pages": 0, "mem_total_bytes": null,
        "huge_bytes": 0, "left_bytes": null, "warnings": [],
        "config": {"runtime": [], "files": [], "kernel_cmdline": null, "memlock_kib": 0, "systemd": "",
                   "hugetlb_shm_group": null, "thp": "madvise", "thp_reason": ""}
    }))
    .unwrap()
}

fn opts() -> ApplyOptions {
    let mut o = ApplyOptions::default();
    o.retry_waits = vec![Duration::from_millis(1); 3];
    o
}

fn none() -> String {
    "free memory: 1 GiB".to_string()
}

#[test]
fn complete() {
    let k = Kernel::with(&[(M2, 10), (G1, 0)]);
    let r = apply_to(&k, &plan(&[(M2, 100), (G1, 2)]), &opts(), &none).unwrap();
    assert!(r.complete);
    assert_eq!(k.nr(M2, None).unwrap(), 100);
    assert_eq!(k.nr(G1, None).unwrap(), 2);
    assert_eq!(r.changes[0].before, 10);
    assert_eq!(r.changes[0].granted, 100);
    assert_eq!(r.compactions, 0);
}

/// A plan (a file can say anything) whose bytes do not fit in 64 bits is
/// refused with its numbers before any pool is written.
#[test]
fn a_plan_past_64_bits_is_refused_before_any_write() {
    let k = Kernel::with(&[(M2, 10)]);
    let mut p = plan(&[(M2, 1)]);
    p.pools[0].pages = u64::MAX / 1024;
    let e = apply_to(&k, &p, &opts(), &none).unwrap_err();
    assert!(matches!(e, ApplyError::TooLarge(_)), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("{} * {M2} is more than", u64::MAX / 1024)),
        "{e}"
    );
    assert_eq!(k.writes.get(), 0);
    assert_eq!(k.nr(M2, None).unwrap(), 10);
}

#[test]
fn short_restores_every_pool() {
    let k = Kernel::with(&[(M2, 10), (G1, 1)]);
    k.limit.borrow_mut().insert(G1, 3);
    let e = apply_to(&k, &plan(&[(M2, 100), (G1, 8)]), &opts(), &none).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("1 GiB pool (host-wide): requested 8, granted 3 (was 1)"),
        "{msg}"
    );
    assert!(msg.contains("free memory: 1 GiB"), "{msg}");
    assert!(msg.contains("3 compactions tried"), "{msg}");
    assert!(msg.contains("every pool was restored"), "{msg}");
    assert!(!msg.contains("except"), "{msg}");
    // Both pools are exactly as before, the one that was granted too.
    assert_eq!(k.nr(M2, None).unwrap(), 10);
    assert_eq!(k.nr(G1, None).unwrap(), 1);
}

#[test]
fn compaction_can_make_room() {
    let mut k = Kernel::with(&[(M2, 0)]);
    k.limit.borrow_mut().insert(M2, 40);
    k.after_compaction.insert(M2, 100);
    let r = apply_to(&k, &plan(&[(M2, 100)]), &opts(), &none).unwrap();
    assert!(r.complete);
    assert_eq!(r.compactions, 1);
    assert_eq!(k.nr(M2, None).unwrap(), 100);
}

/// The steps a caller is told as each begins: every pool write
/// (`planned_steps` of them), then a retry while a pool is short.
#[test]
fn each_step_is_told_as_it_begins_within_the_plan() {
    use hugeshm_apply::{planned_steps, ApplyStep, StepHook};
    use std::sync::{Arc, Mutex};
    let run = |k: &Kernel, p: &Plan| {
        let told = Arc::new(Mutex::new(Vec::new()));
        let mut o = opts();
        let t = told.clone();
        o.on_step = Some(StepHook::new(move |s| t.lock().unwrap().push(s)));
        apply_to(k, p, &o, &none).unwrap();
        let told: Vec<ApplyStep> = told.lock().unwrap().clone();
        let writes = told
            .iter()
            .filter(|s| !matches!(s, ApplyStep::Retry { .. }))
            .count();
        assert_eq!(writes as u64, planned_steps(p, &o), "{told:?}");
        told
    };
    let write = |page_size_bytes, pages| ApplyStep::Write {
        page_size_bytes,
        node: None,
        pages,
    };
    let p = plan(&[(M2, 100), (G1, 2)]);
    assert_eq!(planned_steps(&p, &opts()), 2);
    let k = Kernel::with(&[(M2, 10), (G1, 0)]);
    assert_eq!(run(&k, &p), [write(M2, 100), write(G1, 2)]);
    // Short until memory is compacted once.
    let mut k = Kernel::with(&[(M2, 0)]);
    k.limit.borrow_mut().insert(M2, 40);
    k.after_compaction.insert(M2, 100);
    assert_eq!(
        run(&k, &plan(&[(M2, 100)])),
        [write(M2, 100), ApplyStep::Retry { attempt: 1, of: 3 }]
    );
    // A dry run takes no step.
    let mut o = opts();
    o.dry_run = true;
    assert_eq!(planned_steps(&p, &o), 0);
}

#[test]
fn allow_partial_keeps_what_was_granted() {
    let k = Kernel::with(&[(M2, 0)]);
    k.limit.borrow_mut().insert(M2, 40);
    let mut o = opts();
    o.allow_partial = true;
    let r = apply_to(&k, &plan(&[(M2, 100)]), &o, &none).unwrap();
    assert!(!r.complete);
    assert_eq!(r.changes[0].granted, 40);
    assert_eq!(k.nr(M2, None).unwrap(), 40);
}

#[test]
fn never_shrinks_below_pages_in_use_or_reserved() {
    let mut k = Kernel::with(&[(M2, 100)]);
    k.used.insert(M2, 30);
    k.resv.insert(M2, 20);
    let e = apply_to(&k, &plan(&[(M2, 40)]), &opts(), &none).unwrap_err();
    assert!(
        matches!(
            e,
            ApplyError::WouldShrinkInUse {
                requested: 40,
                floor: 50,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(k.writes.get(), 0, "nothing written");
    assert_eq!(k.nr(M2, None).unwrap(), 100);
    // Down to exactly the floor is fine.
    assert!(
        apply_to(&k, &plan(&[(M2, 50)]), &opts(), &none)
            .unwrap()
            .complete
    );
}

#[test]
fn a_failed_write_rolls_back_the_others() {
    let mut k = Kernel::with(&[(M2, 10), (G1, 0)]);
    k.fail_writes_of = Some(G1);
    let e = apply_to(&k, &plan(&[(M2, 100), (G1, 2)]), &opts(), &none).unwrap_err();
    assert!(e.to_string().contains("hugepages-1048576kB"), "{e}");
    assert_eq!(k.nr(M2, None).unwrap(), 10);
}

#[test]
fn dry_run_writes_nothing() {
    let k = Kernel::with(&[(M2, 10)]);
    let mut o = opts();
    o.dry_run = true;
    let r = apply_to(&k, &plan(&[(M2, 100)]), &o, &none).unwrap();
    assert!(r.dry_run);
    assert_eq!(k.writes.get(), 0);
    assert_eq!(r.changes[0].requested, 100);
}

/// A plan of one new region (`--size`): `pages` with `spare` of them spare,
/// that does not count the live segments.
fn new_region_plan(pages: u64, spare: u64) -> Plan {
    let mut v = serde_json::to_value(plan(&[(M2, pages)])).unwrap();
    v["pools"][0]["spare_pages"] = spare.into();
    v["keep_live"] = true.into();
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_plan_of_new_regions_leaves_room_for_live_segments_or_is_refused() {
    // 100 pages, 32 in use by a live segment and 4 reserved; --size 100M
    // plans 50 + 2 spare: it would leave 16 free for its 50.
    let mut k = Kernel::with(&[(M2, 100)]);
    k.used.insert(M2, 32);
    k.resv.insert(M2, 4);
    let e = apply_to(&k, &new_region_plan(52, 2), &opts(), &none).unwrap_err();
    assert!(
        matches!(
            e,
            ApplyError::NoRoomForLive {
                requested: 52,
                live: 36,
                counted: 50,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "refused: the 2 MiB pool (host-wide) would hold 52 pages, but live huge page segments \
         use 36 of its pages now and the plan counts 50 more there without counting them (it \
         was made from --size or --spec alone): only 16 would be free for those 50; count the \
         live segments too with --live, or --force to apply it anyway (nothing was changed)"
    );
    assert_eq!(k.writes.get(), 0, "nothing written");
    // Room for both: 2 pages in use and 50 free for the 50 counted.
    let mut k2 = Kernel::with(&[(M2, 100)]);
    k2.used.insert(M2, 2);
    assert!(
        apply_to(&k2, &new_region_plan(52, 2), &opts(), &none)
            .unwrap()
            .complete
    );
    assert_eq!(k2.nr(M2, None).unwrap(), 52);
    // --force applies it anyway (never below the pages in use, though).
    let mut o = opts();
    o.force = true;
    assert!(
        apply_to(&k, &new_region_plan(52, 2), &o, &none)
            .unwrap()
            .complete
    );
    assert_eq!(k.nr(M2, None).unwrap(), 52);
    // A plan that counts the live segments itself (--live, --postgres, a
    // plan file from before keep_live): only the in-use floor applies.
    assert!(
        apply_to(&k, &plan(&[(M2, 40)]), &opts(), &none)
            .unwrap()
            .complete
    );
}
