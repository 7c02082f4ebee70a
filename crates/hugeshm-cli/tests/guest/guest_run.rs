//! `hugeshm run` on a real 2-node kernel (a QEMU guest, see
//! `hugeshm_testkit::guest`, scenario `tests/guest-scenarios/run.sh`) with
//! two servers:
//!
//! * **PostgreSQL** (the host's, packed with its libraries, a data directory
//!   `initdb` made on the host with `shared_buffers = 64MB` and `huge_pages =
//!   on`, and a `postgres` user), started through `pg_ctl` (`--target
//!   postgres`) on node 0's CPU: under `--numa interleave --prefault` the
//!   postmaster's main segment (numa_maps) is split evenly over both nodes,
//!   interleaved, while its private memory keeps the default policy and
//!   stays on node 0; `segments --json` shows the record on it; under
//!   `--numa bind=1 --policy only` with node 1's pool short it does not
//!   start and its log has the library's line with node 1's numbers.
//!   Skipped where the host has no PostgreSQL.
//! * **The C probe** of `tests/run/probe.c` (what PostgreSQL does not
//!   make): a SysV segment interleaved like the shared mapping while the
//!   program's private memory stays where its own first touch put it;
//!   `--numa bind=1` puts every page on node 1; with node 1 short,
//!   `--policy only` fails with node 1's numbers and `try` falls back whole.
//!
//! Skips only where QEMU, a guest kernel or PostgreSQL is missing.

use crate::shared;
use hugeshm_testkit::guest::{Boot, Extra, GuestRun, Scenario};
use hugeshm_testkit::postgres::{pg_bin_dir, pg_unavailable_reason, PgCluster};
use hugeshm_testkit::TempDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const M2: u64 = 2 << 20;

/// Where the guest has the data directory.
const GUEST_PGDATA: &str = "/var/lib/postgresql/guest";

/// The probe, compiled for the guest, in `dir`.
fn probe(dir: &Path) -> PathBuf {
    let out = dir.join("probe");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run/probe.c"))
        .status()
        .expect("cc");
    assert!(st.success());
    out
}

/// PostgreSQL in the guest: the 2 MiB pages of its main segment, or why
/// it is not there.
enum Pg {
    Packed(u64),
    /// The host has no PostgreSQL: its tests skip.
    Absent(String),
    /// Packing it failed: its tests fail.
    Failed(String),
}

/// A cluster made on the host for the guest (kept until the image is
/// built), the image's PostgreSQL files and its main segment's pages.
fn pack_postgres(dir: &Path) -> Result<(PgCluster, Vec<Extra>, u64), String> {
    let bin = pg_bin_dir().ok_or("no PostgreSQL bin directory")?;
    let mut pg = PgCluster::init("64MB")?;
    for (name, value) in [
        ("huge_pages", "on"),
        ("unix_socket_directories", "/tmp"),
        ("timezone", "UTC"),
        ("log_timezone", "UTC"),
    ] {
        pg.set(name, value)?;
    }
    let pages: u64 = pg
        .postgres_c("shared_memory_size_in_huge_pages")?
        .parse()
        .map_err(|e| format!("shared_memory_size_in_huge_pages: {e}"))?;
    // The directories the programs compute from their own path: the
    // share directory, and the library directory the postmaster opens.
    let pg_config = |what: &str, or: PathBuf| {
        Command::new(bin.join("pg_config"))
            .arg(what)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map_or(or, |o| {
                PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
            })
    };
    let major = pg.major_version()?;
    let share = pg_config(
        "--sharedir",
        PathBuf::from(format!("/usr/share/postgresql/{major}")),
    );
    let pkglib = pg_config("--pkglibdir", bin.with_file_name("lib"));
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).map_err(|e| format!("{}: {e}", empty.display()))?;
    let write = |name: &str, text: String| -> Result<PathBuf, String> {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    };
    let guest_path = |p: &Path| p.to_string_lossy().into_owned();
    let extras = vec![
        Extra::Program(bin.join("postgres"), guest_path(&bin.join("postgres"))),
        Extra::Program(bin.join("pg_ctl"), guest_path(&bin.join("pg_ctl"))),
        Extra::Dir(
            share.join("timezonesets"),
            guest_path(&share.join("timezonesets")),
        ),
        Extra::File(
            "/usr/share/zoneinfo/UTC".into(),
            "/usr/share/zoneinfo/UTC".into(),
        ),
        Extra::Dir(empty, guest_path(&pkglib)),
        Extra::Dir(pg.datadir().to_path_buf(), GUEST_PGDATA.into()),
        Extra::File(
            write(
                "passwd",
                "root:x:0:0:root:/root:/bin/sh\npostgres:x:70:70::/tmp:/bin/sh\n".into(),
            )?,
            "/etc/passwd".into(),
        ),
        Extra::File(
            write("group", "root:x:0:\npostgres:x:70:\n".into())?,
            "/etc/group".into(),
        ),
        Extra::File(
            write(
                "pg.env",
                format!("pg_bin={}\npg_data={GUEST_PGDATA}\n", bin.display()),
            )?,
            "/etc/hugeshm-pg.env".into(),
        ),
    ];
    Ok((pg, extras, pages))
}

struct Booted {
    scenario: Scenario,
    pg: Pg,
}

/// The guest run of run.sh, booted once for every test of this file.
fn booted() -> &'static Booted {
    static RUN: OnceLock<Booted> = OnceLock::new();
    RUN.get_or_init(|| {
        let lib = hugeshm_testkit::run_library_built().expect("libhugeshm_run.so");
        let dir = TempDir::new("guest-run");
        let probe = probe(dir.path());
        let (cluster, extras, pg) = match pg_unavailable_reason() {
            Some(why) => (None, Vec::new(), Pg::Absent(why)),
            None => match pack_postgres(dir.path()) {
                Ok((c, extras, pages)) => (Some(c), extras, Pg::Packed(pages)),
                Err(e) => (None, Vec::new(), Pg::Failed(e)),
            },
        };
        // All in /usr/local/bin: hugeshm finds the library beside itself.
        let scenario = Scenario::run_with(
            &shared::scenario("run.sh"),
            &[shared::hugeshm(), &lib, &probe],
            &extras,
            &[Boot::default()],
        );
        drop(cluster);
        Booted { scenario, pg }
    })
}

fn guest_run(test: &str) -> Option<&'static GuestRun> {
    booted().scenario.runs(test).map(|r| &r[0])
}

/// The guest run and the pages of PostgreSQL's main segment, for a
/// PostgreSQL test.
fn guest_pg(test: &str) -> Option<(&'static GuestRun, u64)> {
    let run = guest_run(test)?;
    match &booted().pg {
        Pg::Packed(pages) => Some((run, *pages)),
        Pg::Absent(why) => {
            hugeshm_testkit::skip(test, why);
            None
        }
        Pg::Failed(why) => panic!("PostgreSQL not packed for the guest: {why}"),
    }
}

/// The probe's JSON lines in block `name`.
fn lines(run: &GuestRun, name: &str) -> Vec<Value> {
    run.console
        .ok(name)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn op<'a>(lines: &'a [Value], op: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["op"] == op)
        .unwrap_or_else(|| panic!("no {op}: {lines:#?}"))
}

/// `N0=4 N1=4` as node → pages.
fn nodes(v: &Value) -> Vec<(u32, u64)> {
    v["nodes"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .filter_map(|t| {
            let (n, p) = t.strip_prefix('N')?.split_once('=')?;
            Some((n.parse().ok()?, p.parse().ok()?))
        })
        .collect()
}

fn stderr(run: &GuestRun, name: &str) -> String {
    run.console
        .block(&format!("{name}.stderr"))
        .map(|b| b.text.clone())
        .unwrap_or_default()
}

#[test]
fn guest_interleave_splits_the_shared_memory_only() {
    let Some(run) = guest_run("guest_interleave_splits_the_shared_memory_only") else {
        return;
    };
    let l = lines(run, "interleave.probe");
    for o in ["shared", "shm"] {
        let v = op(&l, o);
        assert_eq!(v["kernel_page_kb"], 2048, "{v}");
        assert_eq!(v["resident_kb"], 16 << 10, "{v}");
        assert_eq!(nodes(v), vec![(0, 4), (1, 4)], "{o} split evenly: {v}");
    }
    // The program's own memory: not interleaved, all where its touch was.
    let private = op(&l, "private-full");
    let n = nodes(private);
    assert_eq!(n.len(), 1, "private memory on one node: {private}");
    assert_eq!(n[0].1, 4096, "{private}");
    for f in l.iter().filter(|v| v["op"] == "free") {
        assert_eq!(f["rc"], 0, "{f}");
    }
    assert_eq!(stderr(run, "interleave.probe"), "", "nothing to say");
}

/// One line of `/proc/PID/numa_maps`: policy, what is mapped
/// (`file=...`, `heap`, `stack` or nothing), the `huge` flag, the
/// `anon=` pages and the pages per node.
#[derive(Debug)]
struct NumaMap {
    line: String,
    policy: String,
    file: Option<String>,
    huge: bool,
    anon: bool,
    nodes: Vec<(u32, u64)>,
}

fn numa_maps(text: &str) -> Vec<NumaMap> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            NumaMap {
                line: l.to_owned(),
                policy: words.get(1).unwrap_or(&"").to_string(),
                file: words
                    .iter()
                    .find_map(|w| w.strip_prefix("file="))
                    .map(str::to_owned),
                huge: words.contains(&"huge"),
                anon: words.iter().any(|w| w.starts_with("anon=")),
                nodes: words
                    .iter()
                    .filter_map(|w| {
                        let (n, p) = w.strip_prefix('N')?.split_once('=')?;
                        Some((n.parse().ok()?, p.parse().ok()?))
                    })
                    .collect(),
            }
        })
        .collect()
}

fn postmaster_pid(run: &GuestRun) -> u64 {
    let out = run.console.ok("pg.start").unwrap_or_else(|e| {
        let log = run.console.block("pg.log").map(|b| b.text.as_str());
        panic!("{e}\nserver log:\n{log:?}")
    });
    println!("pg_ctl: {out}");
    let pid = run.console.ok("pg.pid").unwrap();
    pid.trim()
        .parse()
        .unwrap_or_else(|e| panic!("postmaster pid {pid:?}: {e}"))
}

#[test]
fn guest_postgres_interleave_splits_its_main_segment_only() {
    let Some((run, pages)) = guest_pg("guest_postgres_interleave_splits_its_main_segment_only")
    else {
        return;
    };
    postmaster_pid(run);
    let maps = numa_maps(run.console.ok("pg.numa_maps").unwrap());
    // The main segment: huge pages, interleaved, half on each node.
    let main: Vec<&NumaMap> = maps
        .iter()
        .filter(|m| m.huge && m.file.as_deref() == Some("/anon_hugepage\\040(deleted)"))
        .collect();
    assert_eq!(main.len(), 1, "one main segment: {maps:#?}");
    let main = main[0];
    assert_eq!(main.policy, "interleave:0-1", "{}", main.line);
    assert!(
        main.line.contains("kernelpagesize_kB=2048"),
        "{}",
        main.line
    );
    assert_eq!(
        main.nodes,
        vec![(0, pages / 2), (1, pages - pages / 2)],
        "{pages} pages split evenly, all resident: {}",
        main.line
    );
    // The postmaster's own memory (heap, stack, anonymous mappings): the
    // default policy, all on node 0 where it runs.
    let private: Vec<&NumaMap> = maps.iter().filter(|m| m.anon && m.file.is_none()).collect();
    assert!(
        private.iter().any(|m| m.line.contains(" heap ")),
        "{maps:#?}"
    );
    let mut on_node0 = 0;
    for m in &private {
        assert_eq!(m.policy, "default", "{}", m.line);
        for &(n, p) in &m.nodes {
            assert_eq!(n, 0, "private pages off node 0: {}", m.line);
            on_node0 += p;
        }
    }
    assert!(on_node0 > 0, "{private:#?}");
    println!("postmaster: {pages} pages interleaved, {on_node0} private pages on node 0");
    let log = run.console.ok("pg.log").unwrap();
    assert!(log.contains("database system is ready"), "{log}");
    assert!(!log.contains("hugeshm run:"), "nothing to say: {log}");
    run.console.ok("pg.stop").unwrap();
}

#[test]
fn guest_segments_shows_the_run_record() {
    let Some((run, pages)) = guest_pg("guest_segments_shows_the_run_record") else {
        return;
    };
    let pid = postmaster_pid(run);
    let doc = run
        .console
        .json("pg.segments")
        .unwrap_or_else(|e| panic!("{e}"));
    let seg = doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["run"]["record"]["pid"] == pid)
        .unwrap_or_else(|| panic!("no segment placed by run for {pid}: {doc:#}"));
    let rec = &seg["run"]["record"];
    let half = |n: u64| serde_json::json!({"0": n / 2 * M2, "1": (n - n / 2) * M2});
    assert_eq!(seg["kind"], "anon", "{seg:#}");
    assert_eq!(seg["size_bytes"], pages * M2, "{seg:#}");
    assert_eq!(rec["numa"], "interleave", "{rec:#}");
    assert_eq!(rec["page_size_bytes"], M2);
    assert_eq!(rec["nodes"], half(pages), "{rec:#}");
    assert_eq!(seg["nodes"], half(pages), "{seg:#}");
    assert_eq!(rec["prefault"]["threads"], 2, "{rec:#}");
}

#[test]
fn guest_postgres_does_not_start_on_a_short_node() {
    let Some((run, pages)) = guest_pg("guest_postgres_does_not_start_on_a_short_node") else {
        return;
    };
    let start = run.console.block("pg.short").expect("pg.short block");
    assert_ne!(start.rc, 0, "pg_ctl start must fail: {}", start.text);
    let log = run.console.ok("pg.short.log").unwrap();
    println!("server log: {log}");
    let line: Vec<&str> = log.lines().filter(|l| l.contains("hugeshm run:")).collect();
    assert_eq!(line.len(), 1, "{log}");
    let want = format!(
        "failed with ENOMEM (--policy only): 2 MiB pages on --numa bind=1: \
         node 1 required {pages}, available 2"
    );
    assert!(line[0].contains(&want), "{log}");
    assert!(line[0].contains("to fix:"), "{log}");
    assert!(
        log.contains("Cannot allocate memory"),
        "PostgreSQL's own FATAL: {log}"
    );
    let after = run.console.ok("pg.short.after").unwrap();
    assert_eq!(after, "no postgres\nno postmaster.pid");
}

#[test]
fn guest_bind_puts_every_page_on_the_node() {
    let Some(run) = guest_run("guest_bind_puts_every_page_on_the_node") else {
        return;
    };
    let v = op(&lines(run, "bind.probe"), "shared").clone();
    assert_eq!(nodes(&v), vec![(1, 8)], "{v}");
    assert_eq!(v["resident_kb"], 16 << 10);
}

#[test]
fn guest_a_short_node_fails_only_with_its_numbers_and_try_falls_back() {
    let Some(run) = guest_run("guest_a_short_node_fails_only_with_its_numbers_and_try_falls_back")
    else {
        return;
    };
    let v = op(&lines(run, "short.only"), "shared").clone();
    assert_eq!(v["errno"], 12, "ENOMEM: {v}");
    let err = stderr(run, "short.only");
    println!("only: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("failed with ENOMEM (--policy only)"), "{err}");
    assert!(
        err.contains("2 MiB pages on --numa bind=1: node 1 required 8, available 2"),
        "{err}"
    );
    assert!(err.contains("to fix:"), "{err}");
    let v = op(&lines(run, "short.try"), "shared").clone();
    assert_eq!(v["kernel_page_kb"], 4, "{v}");
    assert_eq!(v["resident_kb"], 16 << 10, "{v}");
    let err = stderr(run, "short.try");
    assert!(err.contains("node 1 required 8, available 2"), "{err}");
    assert!(
        err.trim_end()
            .ends_with("the whole region uses 4 KiB pages instead"),
        "{err}"
    );
}
