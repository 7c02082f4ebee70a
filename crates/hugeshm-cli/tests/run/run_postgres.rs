//! `hugeshm run` with a real, unmodified PostgreSQL 15 started the usual
//! way (`pg_ctl` → `sh` → `postgres`, so `--target postgres`), as root:
//!
//! * `--prefault`: the main segment is resident, whole, when `pg_ctl start`
//!   returns; every other mapping of the postmaster is what it is in a
//!   plain start (smaps, the main segment and the library aside); the
//!   tiny SysV interlock segment passes untouched; `segments` shows the
//!   record on the main segment; stopping removes it.
//! * In a hugetlb cgroup allowing 16 MiB (`rsvd.max` unset, as container
//!   runtimes leave it), `huge_pages = on` and 256 MB of shared_buffers: a
//!   plain start dies on SIGBUS with an empty log; `--policy try` starts on
//!   4 KiB pages with one line naming the limit file; `--policy only` fails
//!   at once with the numbers, the file and the fix; `status` explains both.

use std::ffi::OsString;

use crate::common::{hugeshm, json};
use hugeshm_testkit::postgres::{
    main_shm_vma, read_smaps, skip_unless_postgres, PgCluster, SmapsVma,
};
use hugeshm_testkit::{live, run_library_built, Live, TestCgroup};
use serde_json::Value;

const M2: u64 = 2 << 20;

/// `hugeshm run ARGS --`, the wrapper of `pg_ctl`.
pub(crate) fn run_wrapper(args: &[&str]) -> Vec<OsString> {
    run_library_built().expect("libhugeshm_run.so");
    let mut w: Vec<OsString> = vec![env!("CARGO_BIN_EXE_hugeshm").into(), "run".into()];
    w.extend(args.iter().map(OsString::from));
    w.push("--".into());
    w
}

/// The postmaster's mappings, the main segment and the library's own
/// aside: the file-backed ones as (permissions, name, size in kB), sorted
/// (the dynamic shared memory's random name made generic), and of the
/// anonymous ones (the heap included) the total and the largest in kB.
/// Which anonymous mappings the kernel merges depends on where the
/// libraries were put, and one more library moves them; what must not
/// appear is a thread stack or a malloc arena (2 MiB, 64 MiB), and the
/// total must stay where it was.
struct Mappings {
    files: Vec<(String, String, u64)>,
    anon_kb: u64,
    largest_anon_kb: u64,
}

fn other_mappings(pid: u32, main_start: u64) -> Mappings {
    let all = read_smaps(pid).expect("postmaster smaps");
    let lib_end = all
        .iter()
        .filter(|m| m.path.contains("libhugeshm_run.so"))
        .map(|m| m.end)
        .max();
    let mut files = Vec::new();
    let (mut anon_kb, mut largest_anon_kb) = (0, 0);
    for m in all {
        let kb = m.size_kb().unwrap_or(0);
        let library = m.path.contains("libhugeshm_run.so") || Some(m.start) == lib_end;
        if m.start == main_start || library {
            continue;
        }
        if m.path.is_empty() || m.path == "[heap]" {
            anon_kb += kb;
            if m.path.is_empty() {
                largest_anon_kb = largest_anon_kb.max(kb);
            }
        } else if m.path.starts_with("/dev/shm/PostgreSQL.") {
            files.push((m.perms.clone(), "/dev/shm/PostgreSQL.*".to_owned(), kb));
        } else {
            files.push((m.perms.clone(), m.path.clone(), kb));
        }
    }
    files.sort();
    Mappings {
        files,
        anon_kb,
        largest_anon_kb,
    }
}

fn resident_kb(v: &SmapsVma) -> u64 {
    ["Rss", "Shared_Hugetlb", "Private_Hugetlb"]
        .iter()
        .map(|k| v.fields.get(*k).copied().unwrap_or(0))
        .sum()
}

pub(crate) fn records_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("hugeshm-run.{pid}.")))
        .collect()
}

/// A 256 MB cluster, and its 2 MiB pages free in the pool.
fn cluster_with_its_pages(pool: &Live) -> (PgCluster, u64) {
    let pg = PgCluster::init("256MB").expect("initdb");
    let pages: u64 = pg
        .postgres_c("shared_memory_size_in_huge_pages")
        .unwrap()
        .parse()
        .unwrap();
    pool.ensure_free(M2, pages).expect("the server's pages");
    (pg, pages)
}

#[test]
fn postgres_under_run_prefault_is_resident_at_start_and_nothing_else_changes() {
    let Some(pool) = live!() else { return };
    if skip_unless_postgres(pool.name()) {
        return;
    }
    let (mut pg, pages) = cluster_with_its_pages(&pool);
    let root = pg.root().display().to_string();
    pg.set("archive_mode", "on").unwrap();
    pg.set(
        "archive_command",
        &format!("env > {root}/archived.env.tmp; cat /proc/$$/maps > {root}/archived.maps; mv {root}/archived.env.tmp {root}/archived.env"),
    )
    .unwrap();

    // Plain: the segment is faulted as the server touches it.
    pg.start("on").expect("plain start");
    let pm = pg.postmaster_pid().unwrap();
    let main = main_shm_vma(pm).unwrap().expect("main segment");
    let plain_resident = resident_kb(&main);
    let plain = other_mappings(pm, main.start);
    pg.stop().unwrap();
    assert!(
        plain_resident < main.size_kb().unwrap(),
        "a plain start leaves most of it unfaulted: {main:?}"
    );

    // Under hugeshm run --prefault: whole when pg_ctl returns.
    pg.start_under("on", &run_wrapper(&["--target", "postgres", "--prefault"]))
        .expect("start under hugeshm run");
    let pm = pg.postmaster_pid().unwrap();
    let main = main_shm_vma(pm).unwrap().expect("main segment");
    assert_eq!(main.kernel_page_kb(), Some(2048), "{main:?}");
    assert_eq!(main.size_kb(), Some(pages * 2048), "{main:?}");
    assert_eq!(
        resident_kb(&main),
        pages * 2048,
        "not all resident: {main:?}"
    );
    let now = other_mappings(pm, main.start);
    let changed: Vec<_> = now
        .files
        .iter()
        .filter(|f| !plain.files.contains(f))
        .collect();
    let gone: Vec<_> = plain
        .files
        .iter()
        .filter(|f| !now.files.contains(f))
        .collect();
    assert!(
        now.files == plain.files,
        "file mappings changed: new {changed:?}, gone {gone:?}"
    );
    assert!(
        now.largest_anon_kb <= plain.largest_anon_kb,
        "a new anonymous mapping (a thread stack, an arena?): {} kB, plain {} kB",
        now.largest_anon_kb,
        plain.largest_anon_kb
    );
    assert!(
        now.anon_kb.abs_diff(plain.anon_kb) <= 1024,
        "anonymous memory {} kB, plain {} kB",
        now.anon_kb,
        plain.anon_kb
    );
    assert!(
        !pg.log().contains("hugeshm run:"),
        "nothing to say: {}",
        pg.log()
    );

    // segments: the record on the main segment; the interlock untouched.
    let doc = json(hugeshm(&["segments", "--json"]));
    let segs = doc["segments"].as_array().unwrap();
    let seg = segs
        .iter()
        .find(|s| {
            s["kind"] == "anon" && s["attached_pids"].as_array().unwrap().contains(&pm.into())
        })
        .unwrap_or_else(|| panic!("no main segment of {pm}: {doc:#}"));
    let rec = &seg["run"]["record"];
    assert_eq!(rec["pid"], pm, "{seg:#}");
    assert_eq!(rec["page_size_bytes"], M2);
    assert_eq!(rec["resident_bytes"], pages * M2);
    assert_eq!(rec["prefault"]["method"], "populate_write");
    assert!(rec["exe"].as_str().unwrap().ends_with("/postgres"), "{rec}");
    let interlock = segs
        .iter()
        .find(|s| s["kind"] == "sysv" && s["creator_pid"] == pm)
        .expect("the SysV interlock segment");
    assert!(
        interlock["size_bytes"].as_u64().unwrap() < 4096,
        "{interlock}"
    );
    assert!(interlock["run"].is_null(), "{interlock}");
    // What the server execs (the archiver's shell) loads nothing and sees
    // neither variable.
    pg.query("create table t as select 1 as x").unwrap();
    pg.query("select pg_switch_wal()").unwrap();
    let seen = pg.root().join("archived.env");
    let t0 = std::time::Instant::now();
    while !seen.exists() && t0.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let env = std::fs::read_to_string(&seen).expect("archive_command ran");
    assert!(
        !env.contains("HUGESHM_RUN") && !env.contains("LD_PRELOAD"),
        "{env}"
    );
    let maps = std::fs::read_to_string(pg.root().join("archived.maps")).unwrap();
    assert!(!maps.contains("libhugeshm"), "{maps}");
    pg.stop().unwrap();
    assert!(
        records_of(pm).is_empty(),
        "the record goes with the mapping"
    );
    drop(pg);
    pool.finish();
}

/// `hugeshm ARGS` inside the cgroup.
fn in_cgroup(cg: &TestCgroup, args: &[&str]) -> std::process::Output {
    let mut c = cg.command(env!("CARGO_BIN_EXE_hugeshm"), args);
    c.env("NO_COLOR", "1")
        .env_remove(hugeshm_probe::PROC_ROOT_ENV)
        .env_remove(hugeshm_probe::SYS_ROOT_ENV)
        .output()
        .unwrap()
}

fn finding<'a>(doc: &'a Value, code: &str) -> Option<&'a Value> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == code)
}

#[test]
fn postgres_in_a_small_hugetlb_cgroup_starts_on_4k_or_fails_with_the_numbers() {
    let Some(pool) = live!() else { return };
    if skip_unless_postgres(pool.name()) {
        return;
    }
    let (mut pg, pages) = cluster_with_its_pages(&pool);
    let Some(cg) = TestCgroup::new(pool.name(), &[(M2, 16 << 20)]) else {
        return;
    };
    pg.in_cgroup(cg.dir());
    let limit_file = cg.dir().join("hugetlb.2MB.max").display().to_string();

    // Plain: the pool reserves, the cgroup refuses the 9th fault: SIGBUS.
    let e = pg.start("on").expect_err("a plain start dies of SIGBUS");
    println!("plain: {e}");
    assert!(e.contains("could not start server"), "{e}");
    assert!(cg.max_events(M2) > 0, "the cgroup refused faults");

    // try: 4 KiB pages, one line naming the limit file.
    pg.start_under(
        "on",
        &run_wrapper(&["--target", "postgres", "--prefault", "--policy", "try"]),
    )
    .expect("starts on 4 KiB pages");
    let pm = pg.postmaster_pid().unwrap();
    let main = main_shm_vma(pm).unwrap().expect("main segment");
    assert_eq!(main.kernel_page_kb(), Some(4), "{main:?}");
    let log = pg.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("hugeshm run:")).collect();
    println!("try: {lines:?}");
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(&format!(
            "{limit_file} allows 8 more 2 MiB pages, required {pages}"
        )),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].ends_with("the whole region uses 4 KiB pages instead"),
        "{}",
        lines[0]
    );
    // status for the postmaster: the limit is below what it needs.
    let st = json(hugeshm(&["status", "--pid", &pm.to_string(), "--json"]));
    let f = finding(&st, "cgroup-limit-short").unwrap_or_else(|| panic!("{st:#}"));
    println!("status (try): {f}");
    assert!(
        f["message"].as_str().unwrap().contains(&pm.to_string()),
        "{f}"
    );
    pg.stop().unwrap();

    // only: fails at once, the line with the numbers, the file and the fix.
    let t0 = std::time::Instant::now();
    let e = pg
        .start_under(
            "on",
            &run_wrapper(&["--target", "postgres", "--prefault", "--policy", "only"]),
        )
        .expect_err("refused");
    let took = t0.elapsed();
    println!("only ({took:?}): {e}");
    let line = e
        .lines()
        .find(|l| l.contains("hugeshm run:"))
        .unwrap_or_else(|| panic!("no hugeshm run line in the log: {e}"));
    assert!(
        line.contains("failed with ENOMEM (--policy only)"),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "{limit_file} allows 8 more 2 MiB pages, required {pages}"
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!("; to fix: echo {} > {limit_file}", pages * M2)),
        "{line}"
    );
    assert!(
        e.contains("could not map anonymous shared memory"),
        "PostgreSQL's own FATAL: {e}"
    );
    assert!(pg.postmaster_pid().is_none());
    // status inside the cgroup: 8 pages for a new mapping, faults limited
    // without a reservation limit.
    let st = json(in_cgroup(&cg, &["status", "--json"]));
    let row = st["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["page_size_bytes"].as_u64() == Some(M2) && p["node"].is_null())
        .unwrap();
    assert_eq!(row["can_get_pages"].as_u64(), Some(8), "{row}");
    let f = finding(&st, "cgroup-rsvd-unset").unwrap_or_else(|| panic!("{st:#}"));
    println!("status (only): {f}");
    drop(pg);
    drop(cg);
    pool.finish();
}
