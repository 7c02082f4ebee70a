//! Live tests of the real `hugeshm` binary against the running kernel:
//! `status --json` must report exactly what sysfs and `/proc/meminfo` say, and
//! `segments --json` must tell the page size really backing each kind of
//! shared memory the `hugeshm-testproc` helper creates.
//!
//! These tests reserve huge pages, so they run as root only (elsewhere
//! they skip, through `hugeshm_testkit::skip`). Each one is a
//! `hugeshm_testkit::live!()` test: it holds the pool lock for its whole
//! run, and its end restores the pool and checks that it left nothing
//! behind.
//!
//! Run: `cargo test -p hugeshm --test doctor live:: -- --test-threads=1`

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use hugeshm_doctor::segments::{Segment, SegmentKind};
use hugeshm_doctor::status::{PoolRow, StatusReport};
use hugeshm_probe::{FS_ROOT_ENV, MAPS_ENV, PROC_ROOT_ENV, SYS_ROOT_ENV};
use hugeshm_sys as sys;
use hugeshm_testkit::{live, Lack, TestObject, TestProc, HUGEPAGES_SYSFS, NODE_SYSFS};

const MIB: u64 = 1 << 20;
const HUGE_2M: u64 = 2 * MIB;

/// The name `hugeshm-testproc` gives its `memfd-huge` file (it does not
/// report it: `TestObject::path` is `None` for memfds).
const TESTPROC_MEMFD_HUGE_NAME: &str = "hugeshm-testproc-memfd-huge";

// ---------------------------------------------------------------------------
// Running the binary.

/// Runs `hugeshm ARGS` on the live host (fixture-root variables removed),
/// optionally under a wrapper command (e.g. `prlimit ...`); returns stdout,
/// panicking with stderr when it fails.
fn run_hugeshm_wrapped(wrapper: &[&str], args: &[&str]) -> Vec<u8> {
    run_hugeshm_with(wrapper, &[], args)
}

/// [`run_hugeshm_wrapped`] with variables set.
fn run_hugeshm_with(wrapper: &[&str], envs: &[(&str, &str)], args: &[&str]) -> Vec<u8> {
    let bin = env!("CARGO_BIN_EXE_hugeshm");
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(args)
        .env_remove(PROC_ROOT_ENV)
        .env_remove(SYS_ROOT_ENV)
        .env_remove(FS_ROOT_ENV)
        .env_remove(MAPS_ENV)
        .env("NO_COLOR", "1")
        .envs(envs.iter().copied());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run {wrapper:?} hugeshm {args:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.trim().is_empty() {
        eprintln!("[hugeshm {}] {}", args.join(" "), stderr.trim());
    }
    assert!(
        out.status.success(),
        "hugeshm {args:?} failed ({}):\n{stderr}",
        out.status
    );
    out.stdout
}

/// A `--json` document: one object with `"schema": 1`.
fn document(what: &str, out: &[u8]) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(out)
        .unwrap_or_else(|e| panic!("{what} is not JSON: {e}\n{}", String::from_utf8_lossy(out)));
    assert_eq!(v["schema"].as_u64(), Some(1), "{what}: schema of {v:#}");
    v
}

fn status_json() -> StatusReport {
    let out = run_hugeshm_wrapped(&[], &["status", "--json"]);
    let v = document("status --json", &out);
    serde_json::from_value(v).unwrap_or_else(|e| {
        panic!(
            "status --json is not a StatusReport: {e}\n{}",
            String::from_utf8_lossy(&out)
        )
    })
}

fn segments_json() -> Vec<Segment> {
    segments_json_with(&[])
}

fn segments_json_with(envs: &[(&str, &str)]) -> Vec<Segment> {
    let out = run_hugeshm_with(&[], envs, &["segments", "--json"]);
    let v = document("segments --json", &out);
    for key in ["findings", "problems"] {
        assert!(v[key].is_array(), "segments --json: {key}: {v:#}");
    }
    serde_json::from_value(v["segments"].clone()).unwrap_or_else(|e| {
        panic!(
            "segments --json holds no array of segments: {e}\n{}",
            String::from_utf8_lossy(&out)
        )
    })
}

// ---------------------------------------------------------------------------
// What the kernel says, read by the test itself.

fn read_u64(path: &Path) -> u64 {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("parse {} ({:?}): {e}", path.display(), text.trim()))
}

/// `hugepages-2048kB` -> 2 MiB in bytes.
fn size_dir_bytes(name: &str) -> Option<u64> {
    name.strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse::<u64>()
        .ok()
        .map(|kb| kb * 1024)
}

/// `(page size in bytes, dir)` of every `hugepages-*kB` below `dir`, sorted.
fn size_dirs(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((size_dir_bytes(&e.file_name().to_string_lossy())?, e.path())))
        .collect();
    out.sort();
    out
}

/// NUMA node ids that have a `hugepages` directory.
fn node_ids() -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(NODE_SYSFS) else {
        return Vec::new();
    };
    let mut ids: Vec<u32> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("node")?
                .parse()
                .ok()
        })
        .filter(|id| Path::new(&format!("{NODE_SYSFS}/node{id}/hugepages")).is_dir())
        .collect();
    ids.sort_unstable();
    ids
}

/// One pool's sysfs counters. `nr` is the file `nr_hugepages`, which on
/// Linux counts every page in the pool, surplus pages included
/// (`h->nr_huge_pages`; `/proc/meminfo` `HugePages_Total` is the same
/// number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counters {
    nr: u64,
    free: u64,
    /// `resv_hugepages`; host-wide only.
    resv: Option<u64>,
    surplus: u64,
}

/// `/proc/meminfo` as `key -> value` (the `kB` unit is not applied).
fn meminfo() -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string("/proc/meminfo").expect("read /proc/meminfo");
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((
                k.trim().to_owned(),
                v.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// Everything `status` reports about the pools, read straight from the
/// kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KernelPools {
    /// Page size (bytes) -> host-wide counters.
    host: BTreeMap<u64, Counters>,
    /// (node, page size) -> that node's counters.
    nodes: BTreeMap<(u32, u64), Counters>,
    /// `HugePages_Total/Free/Rsvd/Surp`, `Hugepagesize` (kB), `Hugetlb` (kB).
    meminfo: BTreeMap<String, u64>,
}

impl KernelPools {
    fn read() -> KernelPools {
        let mut host = BTreeMap::new();
        for (size, dir) in size_dirs(Path::new(HUGEPAGES_SYSFS)) {
            host.insert(
                size,
                Counters {
                    nr: read_u64(&dir.join("nr_hugepages")),
                    free: read_u64(&dir.join("free_hugepages")),
                    resv: Some(read_u64(&dir.join("resv_hugepages"))),
                    surplus: read_u64(&dir.join("surplus_hugepages")),
                },
            );
        }
        let mut nodes = BTreeMap::new();
        for node in node_ids() {
            for (size, dir) in size_dirs(Path::new(&format!("{NODE_SYSFS}/node{node}/hugepages"))) {
                nodes.insert(
                    (node, size),
                    Counters {
                        nr: read_u64(&dir.join("nr_hugepages")),
                        free: read_u64(&dir.join("free_hugepages")),
                        resv: None,
                        surplus: read_u64(&dir.join("surplus_hugepages")),
                    },
                );
            }
        }
        let meminfo = meminfo()
            .into_iter()
            .filter(|(k, _)| k.starts_with("HugePages_") || k == "Hugepagesize" || k == "Hugetlb")
            .collect();
        KernelPools {
            host,
            nodes,
            meminfo,
        }
    }

    fn default_size(&self) -> Option<u64> {
        self.meminfo.get("Hugepagesize").map(|kb| kb * 1024)
    }
}

/// Compares one pool row with its kernel counters.
fn check_row(
    bad: &mut Vec<String>,
    what: String,
    row: Option<&PoolRow>,
    c: &Counters,
    size: u64,
    default: Option<u64>,
) {
    let Some(row) = row else {
        bad.push(format!("{what}: no row in the report"));
        return;
    };
    let resv = c.resv.unwrap_or(0);
    let available = c.free.saturating_sub(resv);
    for (field, got, want) in [
        // nr_hugepages already counts surplus pages (see `Counters`).
        ("total", row.total, c.nr),
        ("free", row.free, c.free),
        ("reserved", row.reserved, resv),
        ("surplus", row.surplus, c.surplus),
        ("available", row.available, available),
        ("total_bytes", row.total_bytes, c.nr * size),
        ("available_bytes", row.available_bytes, available * size),
    ] {
        if got != want {
            bad.push(format!("{what}: {field} is {got}, kernel says {want}"));
        }
    }
    if row.default != (Some(size) == default) {
        bad.push(format!("{what}: default is {}", row.default));
    }
}

/// Every difference between the report's pool rows and the kernel's counters.
fn pool_mismatches(r: &StatusReport, k: &KernelPools) -> Vec<String> {
    let mut bad = Vec::new();
    let default = k.default_size();
    if r.default_page_size_bytes != default {
        bad.push(format!(
            "default_page_size_bytes {:?}, Hugepagesize says {default:?}",
            r.default_page_size_bytes
        ));
    }
    for (&size, c) in &k.host {
        let rows: Vec<&PoolRow> = r
            .pools
            .iter()
            .filter(|p| p.node.is_none() && p.page_size_bytes == size)
            .collect();
        if rows.len() > 1 {
            bad.push(format!("{} host rows for page size {size}", rows.len()));
        }
        check_row(
            &mut bad,
            format!("host row {size}"),
            rows.first().copied(),
            c,
            size,
            default,
        );
        if Some(size) == default {
            let mi = |key: &str| k.meminfo.get(key).copied();
            if let Some(row) = rows.first() {
                for (field, got, key) in [
                    ("total", row.total, "HugePages_Total"),
                    ("free", row.free, "HugePages_Free"),
                    ("reserved", row.reserved, "HugePages_Rsvd"),
                    ("surplus", row.surplus, "HugePages_Surp"),
                ] {
                    if Some(got) != mi(key) {
                        bad.push(format!(
                            "host row {size}: {field} is {got}, /proc/meminfo {key} is {:?}",
                            mi(key)
                        ));
                    }
                }
            }
        }
    }
    for (&(node, size), c) in &k.nodes {
        let rows: Vec<&PoolRow> = r
            .pools
            .iter()
            .filter(|p| p.node == Some(node) && p.page_size_bytes == size)
            .collect();
        if rows.len() > 1 {
            bad.push(format!("{} rows for node {node} size {size}", rows.len()));
        }
        check_row(
            &mut bad,
            format!("node {node} row {size}"),
            rows.first().copied(),
            c,
            size,
            default,
        );
    }
    for p in &r.pools {
        let known = match p.node {
            None => k.host.contains_key(&p.page_size_bytes),
            Some(n) => k.nodes.contains_key(&(n, p.page_size_bytes)),
        };
        if !known {
            bad.push(format!("row the kernel does not have: {p:?}"));
        }
    }
    let hugetlb = k.meminfo.get("Hugetlb").map(|kb| kb * 1024);
    if r.hugetlb_bytes != hugetlb {
        bad.push(format!(
            "hugetlb_bytes {:?}, /proc/meminfo Hugetlb says {hugetlb:?}",
            r.hugetlb_bytes
        ));
    }
    bad
}

/// `PageTables` of `/proc/meminfo` in bytes.
fn page_tables_bytes() -> u64 {
    meminfo().get("PageTables").copied().expect("PageTables") * 1024
}

/// Column `col` (0 soft, 1 hard) of "Max locked memory" in a
/// `/proc/PID/limits` text; `None` for unlimited.
fn memlock_column(limits: &str, col: usize) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .expect("Max locked memory line");
    let v = line["Max locked memory".len()..]
        .split_whitespace()
        .nth(col)
        .expect("memlock value");
    if v == "unlimited" {
        None
    } else {
        Some(v.parse().expect("numeric memlock"))
    }
}

/// The soft memlock limit; `None` for unlimited.
fn memlock_soft(limits: &str) -> Option<u64> {
    memlock_column(limits, 0)
}

/// The hard memlock limit; `None` for unlimited.
fn memlock_hard(limits: &str) -> Option<u64> {
    memlock_column(limits, 1)
}

/// The selected (`[bracketed]`) value of a THP sysfs selector.
fn thp_selected(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_owned())
}

// ---------------------------------------------------------------------------
// Bookkeeping shared by the tests.

/// Removes an orphaned SysV segment when the test ends, even by panic.
struct RemoveShm(Option<i32>);

impl RemoveShm {
    fn remove_now(&mut self) -> Result<(), String> {
        match self.0.take() {
            Some(id) => sys::shm_remove(id).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

impl Drop for RemoveShm {
    fn drop(&mut self) {
        if let Err(e) = self.remove_now() {
            eprintln!("WARNING live test cleanup: {e}");
        }
    }
}

fn object<'a>(tp: &'a TestProc, kind: &str) -> &'a TestObject {
    tp.objects()
        .iter()
        .find(|o| o.kind == kind)
        .unwrap_or_else(|| panic!("testproc reported no {kind}: {:?}", tp.objects()))
}

fn sysv_segment(segs: &[Segment], shmid: i32) -> &Segment {
    segs.iter()
        .find(|s| s.kind == SegmentKind::Sysv && s.id == Some(shmid as u64))
        .unwrap_or_else(|| panic!("segments --json lists no sysv {shmid}: {segs:#?}"))
}

fn has_finding(s: &Segment, code: &str) -> bool {
    s.findings.iter().any(|f| f.code == code)
}

fn codes(s: &Segment) -> Vec<&str> {
    s.findings.iter().map(|f| f.code.as_str()).collect()
}

// ---------------------------------------------------------------------------
// The tests.

#[test]
fn status_matches_kernel() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(HUGE_2M, 8)
        .expect("8 available 2 MiB pages");

    // 4 MiB reserved, never touched: HugePages_Rsvd > 0.
    let tp = TestProc::spawn(["sysv-huge:4M"]).expect("spawn testproc");
    let resv = read_u64(Path::new(&format!(
        "{HUGEPAGES_SYSFS}/hugepages-2048kB/resv_hugepages"
    )));
    assert!(
        resv >= 2,
        "testproc's segment reserves 2 pages; resv={resv}"
    );

    // The counters may move while hugeshm reads them (another page fault, a
    // process exiting): compare against a reading that did not change
    // across the run, retrying if it did.
    let mut last = String::new();
    let mut matched = false;
    for attempt in 1..=3 {
        let k1 = KernelPools::read();
        let pt1 = page_tables_bytes();
        let report = status_json();
        let k2 = KernelPools::read();
        let pt2 = page_tables_bytes();
        if k1 != k2 {
            last = format!("attempt {attempt}: kernel counters moved: {k1:?} -> {k2:?}");
            eprintln!("[live] {last}");
            continue;
        }
        let mut bad = pool_mismatches(&report, &k1);
        // PageTables moves with every process (hugeshm's own included).
        let tol = 4 * MIB;
        let (lo, hi) = (pt1.min(pt2).saturating_sub(tol), pt1.max(pt2) + tol);
        match report.page_tables_bytes {
            Some(p) if (lo..=hi).contains(&p) => {}
            other => {
                let msg = format!(
                    "page_tables_bytes {other:?} outside {lo}..={hi} (PageTables read {pt1} and {pt2})"
                );
                if attempt < 3 && other.is_some() {
                    last = msg;
                    eprintln!("[live] attempt {attempt}: {last}");
                    continue;
                }
                bad.push(msg);
            }
        }
        // memlock: hugeshm inherits this test's limits.
        let own = std::fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
        let want_memlock = memlock_soft(&own);
        if report.memlock_bytes != want_memlock {
            bad.push(format!(
                "memlock_bytes {:?}, soft Max locked memory is {want_memlock:?}",
                report.memlock_bytes
            ));
        }
        let want_thp = thp_selected("/sys/kernel/mm/transparent_hugepage/enabled");
        if report.thp.enabled != want_thp {
            bad.push(format!(
                "thp.enabled {:?}, sysfs selects {want_thp:?}",
                report.thp.enabled
            ));
        }
        assert!(
            k1.meminfo.get("HugePages_Rsvd").copied().unwrap_or(0) >= 2,
            "the test wanted reserved pages: {k1:?}"
        );
        assert!(
            bad.is_empty(),
            "status --json differs from the kernel:\n{}\nkernel: {k1:#?}\nreport pools: {:#?}",
            bad.join("\n"),
            report.pools
        );
        matched = true;
        break;
    }
    assert!(matched, "no stable reading in 3 attempts; {last}");

    // memlock of the hugeshm process itself, not of its parent: set it on
    // the child only (lowering the soft limit needs no privilege; raising
    // the hard one needs CAP_SYS_RESOURCE, which a container's root may
    // lack, so `unlimited` is tried only when the hard limit already is).
    let own = std::fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
    let mut cases = vec![("--memlock=65536:", Some(65536))];
    if memlock_hard(&own).is_none() {
        cases.push(("--memlock=unlimited:", None));
    } else {
        pool.skip_part(
            "memlock unlimited",
            Lack::MemlockHardLimit,
            "the hard memlock limit is finite: the `null` (unlimited) case is not run",
        );
    }
    for (limit, want) in cases {
        let out = run_hugeshm_wrapped(&["prlimit", limit, "--"], &["status", "--json"]);
        let r: StatusReport =
            serde_json::from_value(document("status --json", &out)).expect("status --json");
        assert_eq!(r.memlock_bytes, want, "hugeshm run under prlimit {limit}");
    }

    assert!(tp.finish().expect("testproc exits").success());
    pool.finish();
}

/// `total` counts every page in the pool once: sysfs `nr_hugepages` (and
/// `HugePages_Total`) already include surplus pages.
#[test]
fn status_counts_surplus_pages_once() {
    let Some(pool) = live!() else { return };
    let dir = format!("{HUGEPAGES_SYSFS}/hugepages-2048kB");
    let p = |f: &str| format!("{dir}/{f}");
    let free = read_u64(Path::new(&p("free_hugepages")));
    let resv = read_u64(Path::new(&p("resv_hugepages")));
    let surplus0 = read_u64(Path::new(&p("surplus_hugepages")));
    let avail = free.saturating_sub(resv);
    if avail > 64 {
        return pool.skip(format_args!(
            "{avail} 2 MiB pages available; the test would have to use them all"
        ));
    }
    // Two pages more than the pool has: they come from overcommit as surplus.
    // (The testkit has no API for nr_overcommit_hugepages; the guard records
    // and restores it.)
    let over = read_u64(Path::new(&p("nr_overcommit_hugepages")));
    std::fs::write(
        p("nr_overcommit_hugepages"),
        format!("{}\n", over + surplus0 + 2),
    )
    .expect("raise nr_overcommit_hugepages");
    let pages = avail + 2;
    let tp = TestProc::spawn([format!("sysv-huge:{}M", pages * 2), "--touch".into()])
        .expect("spawn testproc (needs 2 surplus pages)");

    let mut result = None;
    for _ in 0..3 {
        let k1 = KernelPools::read();
        let report = status_json();
        if k1 == KernelPools::read() {
            result = Some((k1, report));
            break;
        }
    }
    let (k, report) = result.expect("a stable reading of the pool counters");
    let c = k.host[&HUGE_2M];
    assert!(c.surplus >= surplus0 + 2, "surplus pages expected: {c:?}");
    let row = report
        .pools
        .iter()
        .find(|r| r.node.is_none() && r.page_size_bytes == HUGE_2M)
        .expect("host row of 2 MiB");
    let bad = pool_mismatches(&report, &k);
    let meminfo_total = k.meminfo.get("HugePages_Total").copied();
    assert!(tp.finish().expect("testproc exits").success());
    pool.finish();
    assert!(
        Some(row.total) == meminfo_total && bad.is_empty(),
        "total must be HugePages_Total = sysfs nr_hugepages ({}, its {} surplus pages \
         included), not nr_hugepages + surplus; HugePages_Total {meminfo_total:?}, \
         row {row:?}; all differences:\n{}",
        c.nr,
        c.surplus,
        bad.join("\n")
    );
}

#[test]
fn segments_tells_page_sizes() {
    let Some(pool) = live!() else { return };
    // sysv-huge 4 + memfd 2 + private 2 + anon-shared 2.
    pool.ensure_free(HUGE_2M, 10)
        .expect("10 available 2 MiB pages");
    let shm_name = format!(
        "hugeshm-live-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let tp = TestProc::spawn([
        "sysv-huge:8M".to_string(),
        "sysv-plain:8M".into(),
        "memfd-huge:4M".into(),
        "private-huge:4M".into(),
        "anon-shared-huge:4M".into(),
        format!("devshm:{shm_name}:4M"),
        "--touch".into(),
    ])
    .expect("spawn testproc");
    let pid = tp.pid();
    let base = sys::base_page_size() as u64;
    let huge_id = object(&tp, "sysv-huge").shmid.expect("sysv-huge shmid");
    let plain_id = object(&tp, "sysv-plain").shmid.expect("sysv-plain shmid");

    let segs = segments_json();
    let dump = || serde_json::to_string_pretty(&segs).unwrap_or_default();

    // SysV on huge pages.
    let s = sysv_segment(&segs, huge_id);
    assert_eq!(s.page_size_bytes, Some(HUGE_2M), "{s:#?}");
    assert_eq!(s.size_bytes, 8 * MIB, "{s:#?}");
    assert!(s.attached_pids.contains(&pid), "{s:#?}");
    assert_eq!(s.creator_pid, Some(pid), "{s:#?}");
    assert_eq!(s.nattch, Some(1), "{s:#?}");
    assert_eq!(s.resident_bytes, Some(8 * MIB), "{s:#?}");
    if node_ids().len() <= 1 {
        let want: BTreeMap<String, u64> = [("0".to_string(), 8 * MIB)].into();
        assert_eq!(s.nodes, want, "{s:#?}");
    } else {
        assert_eq!(s.nodes.values().sum::<u64>(), 8 * MIB, "{s:#?}");
    }
    assert!(!has_finding(s, "silent-fallback"), "{:?}", codes(s));
    assert!(!has_finding(s, "reserved-untouched"), "{:?}", codes(s));
    assert!(!has_finding(s, "orphan"), "{:?}", codes(s));

    // SysV on 4 KiB pages: the silent fallback.
    let s = sysv_segment(&segs, plain_id);
    assert_eq!(s.page_size_bytes, Some(base), "{s:#?}");
    assert_eq!(s.size_bytes, 8 * MIB, "{s:#?}");
    assert!(s.attached_pids.contains(&pid), "{s:#?}");
    assert!(has_finding(s, "silent-fallback"), "{:?}", codes(s));

    // memfd with MFD_HUGETLB.
    let s = segs
        .iter()
        .find(|s| {
            s.kind == SegmentKind::Memfd
                && s.attached_pids.contains(&pid)
                && s.path
                    .as_deref()
                    .is_some_and(|p| p.contains(TESTPROC_MEMFD_HUGE_NAME))
        })
        .unwrap_or_else(|| {
            panic!(
                "no memfd {TESTPROC_MEMFD_HUGE_NAME} of pid {pid}: {}",
                dump()
            )
        });
    assert_eq!(s.page_size_bytes, Some(HUGE_2M), "{s:#?}");
    assert_eq!(s.size_bytes, 4 * MIB, "{s:#?}");
    assert_eq!(s.resident_bytes, Some(4 * MIB), "{s:#?}");

    // The process's own MAP_PRIVATE|MAP_HUGETLB memory.
    let s = segs
        .iter()
        .find(|s| s.kind == SegmentKind::PrivateHugetlb && s.creator_pid == Some(pid))
        .unwrap_or_else(|| panic!("no private-hugetlb of pid {pid}: {}", dump()));
    assert_eq!(s.page_size_bytes, Some(HUGE_2M), "{s:#?}");
    assert_eq!(s.size_bytes, 4 * MIB, "{s:#?}");
    assert_eq!(s.attached_pids, vec![pid], "{s:#?}");

    // MAP_SHARED|MAP_ANONYMOUS|MAP_HUGETLB.
    let s = segs
        .iter()
        .find(|s| s.kind == SegmentKind::Anon && s.attached_pids.contains(&pid))
        .unwrap_or_else(|| panic!("no anon segment of pid {pid}: {}", dump()));
    assert_eq!(s.page_size_bytes, Some(HUGE_2M), "{s:#?}");
    assert_eq!(s.size_bytes, 4 * MIB, "{s:#?}");

    // A /dev/shm file: tmpfs, 4 KiB pages.
    let path = format!("/dev/shm/{shm_name}");
    let s = segs
        .iter()
        .find(|s| s.kind == SegmentKind::Posix && s.path.as_deref() == Some(path.as_str()))
        .unwrap_or_else(|| panic!("no posix segment {path}: {}", dump()));
    assert_eq!(s.page_size_bytes, Some(base), "{s:#?}");
    assert_eq!(s.size_bytes, 4 * MIB, "{s:#?}");
    assert!(s.attached_pids.contains(&pid), "{s:#?}");

    // Nothing of this process is reported twice or under another kind.
    let of_pid = segs
        .iter()
        .filter(|s| s.attached_pids.contains(&pid))
        .count();
    assert_eq!(of_pid, 6, "six objects of pid {pid}: {}", dump());

    // The same six, field for field, whether the scan reads maps as text
    // or steps over them with PROCMAP_QUERY (the default where the kernel
    // has it, so `segs` above came from one of the two).
    let mine = |segs: &[Segment]| -> Vec<Segment> {
        segs.iter()
            .filter(|s| s.attached_pids.contains(&pid))
            .cloned()
            .collect()
    };
    let by_text = segments_json_with(&[(MAPS_ENV, "text")]);
    assert_eq!(mine(&by_text), mine(&segs), "text read against the default");
    if sys::procmap_query_supported() {
        let by_query = segments_json_with(&[(MAPS_ENV, "query")]);
        assert_eq!(mine(&by_query), mine(&by_text), "ioctl against text");
    } else {
        pool.skip_part(
            "ioctl",
            Lack::ProcmapQuery,
            "the kernel has no PROCMAP_QUERY (before 6.11)",
        );
    }

    assert!(tp.finish().expect("testproc exits").success());
    pool.finish();
}

#[test]
fn segments_flags_reserved_untouched() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(HUGE_2M, 2)
        .expect("2 available 2 MiB pages");
    let tp = TestProc::spawn(["sysv-huge:4M"]).expect("spawn testproc");
    let shmid = object(&tp, "sysv-huge").shmid.expect("shmid");

    let segs = segments_json();
    let s = sysv_segment(&segs, shmid);
    assert_eq!(s.page_size_bytes, Some(HUGE_2M), "{s:#?}");
    assert_eq!(s.resident_bytes, Some(0), "{s:#?}");
    assert!(s.attached_pids.contains(&tp.pid()), "{s:#?}");
    let f = s
        .findings
        .iter()
        .find(|f| f.code == "reserved-untouched")
        .unwrap_or_else(|| panic!("no reserved-untouched finding: {s:#?}"));
    assert!(f.message.contains("2 of 2"), "{f:?}");

    assert!(tp.finish().expect("testproc exits").success());
    pool.finish();
}

#[test]
fn orphan_flagged() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(HUGE_2M, 2)
        .expect("2 available 2 MiB pages");
    let mut cleanup = RemoveShm(None);
    let tp = TestProc::spawn(["--orphan-sysv", "sysv-huge:4M"]).expect("spawn testproc");
    let pid = tp.pid();
    let shmid = object(&tp, "sysv-huge").shmid.expect("shmid");
    cleanup.0 = Some(shmid);
    // It exits on its own, leaving the segment.
    assert!(tp.finish().expect("testproc exits").success());

    let segs = segments_json();
    let s = sysv_segment(&segs, shmid);
    assert_eq!(s.nattch, Some(0), "{s:#?}");
    assert!(s.attached_pids.is_empty(), "{s:#?}");
    assert_eq!(s.creator_pid, Some(pid), "{s:#?}");
    assert_eq!(s.size_bytes, 4 * MIB, "{s:#?}");
    assert_eq!(s.page_size_bytes, None, "{s:#?}");
    assert!(
        s.page_size_source
            .starts_with("unknown: no process attached"),
        "{s:#?}"
    );
    let f = s
        .findings
        .iter()
        .find(|f| f.code == "orphan")
        .unwrap_or_else(|| panic!("no orphan finding: {s:#?}"));
    let fix = f.fix.as_deref().unwrap_or("");
    assert!(fix.contains(&format!("ipcrm -m {shmid}")), "{f:?}");

    cleanup.remove_now().expect("remove the orphaned segment");
    let shm = std::fs::read_to_string("/proc/sysvipc/shm").expect("read /proc/sysvipc/shm");
    let ids: BTreeSet<i32> = shm
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert!(!ids.contains(&shmid), "shmid {shmid} still exists:\n{shm}");
    let segs = segments_json();
    assert!(
        !segs
            .iter()
            .any(|s| s.kind == SegmentKind::Sysv && s.id == Some(shmid as u64)),
        "segments still lists {shmid}"
    );

    pool.finish();
}

#[test]
fn hugetlbfs_file_and_orphan_file() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(HUGE_2M, 2)
        .expect("2 available 2 MiB pages");
    {
        let mnt = hugeshm_testkit::HugetlbfsMount::new().expect("a hugetlbfs mount");
        let path = mnt.path().join("pool");
        let spec = format!("hugetlbfs:{}:4M", path.display());
        let tp =
            TestProc::spawn(["--touch", "--keep-files", spec.as_str()]).expect("spawn testproc");
        let pid = tp.pid();

        // Mapped: the page size comes from the process's smaps.
        let segs = segments_json();
        let p = path.display().to_string();
        let s = segs
            .iter()
            .find(|s| s.kind == SegmentKind::Hugetlbfs && s.path.as_deref() == Some(p.as_str()))
            .unwrap_or_else(|| panic!("no hugetlbfs segment {p} in {segs:#?}"));
        assert_eq!(s.page_size_bytes, Some(HUGE_2M), "{s:#?}");
        assert!(s.page_size_source.starts_with("smaps of pid"), "{s:#?}");
        assert_eq!(s.attached_pids, vec![pid], "{s:#?}");
        assert_eq!(s.size_bytes, 4 * MIB, "{s:#?}");
        assert_eq!(s.resident_bytes, Some(4 * MIB), "{s:#?}");
        assert!(s.findings.is_empty(), "{s:#?}");

        // The process exits, the file stays: its pages are held by nobody.
        assert!(tp.finish().expect("testproc exits").success());
        let segs = segments_json();
        let s = segs
            .iter()
            .find(|s| s.kind == SegmentKind::Hugetlbfs && s.path.as_deref() == Some(p.as_str()))
            .unwrap_or_else(|| panic!("the file vanished from segments: {segs:#?}"));
        assert!(s.attached_pids.is_empty(), "{s:#?}");
        assert_eq!(s.page_size_bytes, Some(HUGE_2M), "from the mount: {s:#?}");
        assert!(s.page_size_source.contains("pagesize"), "{s:#?}");
        assert_eq!(s.resident_bytes, Some(4 * MIB), "{s:#?}");
        let f = s
            .findings
            .iter()
            .find(|f| f.code == "orphan-file")
            .unwrap_or_else(|| panic!("no orphan-file finding: {s:#?}"));
        assert!(f.fix.as_deref().unwrap_or("").contains(&p), "{f:?}");
        // mnt drops here: file removed, unmounted.
    }
    let mounts = std::fs::read_to_string("/proc/mounts").expect("read /proc/mounts");
    assert!(
        !mounts.contains("hugeshm-test"),
        "mount left behind:\n{mounts}"
    );
    pool.finish();
}

/// An Oracle instance under AMM, as far as the kernel can tell: /dev/shm
/// files named as AMM names them, mapped by a process whose executable is
/// named `oracle` (a copy of the test process), give `oracle-amm` with the
/// instance's SID and files; the same files held by a process of another
/// name give nothing (a name another user writes proves nothing).
#[test]
fn oracle_amm_files_are_named_only_when_oracle_maps_them() {
    use std::io::{BufRead, BufReader};
    let Some(pool) = live!() else { return };
    let tmp = hugeshm_testkit::TempDir::new("oracle-amm");
    let testproc = hugeshm_testkit::testproc_built().unwrap();
    let oracle = tmp.path().join("oracle");
    std::fs::copy(&testproc, &oracle).unwrap();
    let id = std::process::id();
    let files = [format!("ora_orcl{id}_1_0"), format!("ora_orcl{id}_1_1")];
    let amm = |exe: &Path| {
        let mut c = Command::new(exe)
            .args(["--touch"])
            .args(files.iter().map(|f| format!("devshm:{f}:4M")))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"pid\""), "{line}");
        let out = run_hugeshm_with(&[], &[], &["segments", "--json"]);
        let v = document("segments --json", &out);
        drop(c.stdin.take());
        assert!(c.wait().unwrap().success());
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == "oracle-amm")
            .filter(|f| {
                f["message"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("orcl{id} "))
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    let found = amm(&oracle);
    assert_eq!(found.len(), 1, "{found:#?}");
    let m = found[0]["message"].as_str().unwrap();
    assert!(m.contains("2 /dev/shm files (8 MiB)"), "{m}");
    assert!(found[0]["fix"]
        .as_str()
        .unwrap()
        .contains("memory_target=0"));
    assert!(amm(&testproc).is_empty(), "a process not named oracle");
    pool.finish();
}
