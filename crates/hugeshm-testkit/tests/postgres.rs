//! Live tests of the PostgreSQL harness (`hugeshm_testkit::postgres`)
//! against a real server: what `postgres -C shared_memory_size_in_huge_pages`
//! promises is what the running server maps (per `/proc/PID/smaps`), the
//! mapping is shared by the backends, a pool one page short makes
//! `huge_pages = on` fail (and `try` fall back), and nothing is left behind.
//!
//! Root only (the huge page pool is raised and lowered through the
//! harness, `live!`); without root or without a PostgreSQL server they
//! skip (`hugeshm_testkit::skip`).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use hugeshm_testkit::postgres::{
    main_shm_vma, skip_unless_postgres, sweep_stale_clusters, PgCluster, SmapsVma, ANON_HUGEPAGE,
    DEV_ZERO,
};
use hugeshm_testkit::{helper_args, helper_spec, live, HostState, Live, HUGEPAGES_SYSFS};

const MIB2: u64 = 2 << 20;
const KB2M: u64 = 2048;

/// Root (`pool`: the test's `live!()`), PostgreSQL and a 2 MiB default
/// huge page size, or `None` (after a skip). Returns the harness (holding
/// the pool lock).
fn setup(pool: Option<Live>) -> Option<Live> {
    let mut pool = pool?;
    let test = pool.name();
    if skip_unless_postgres(test) {
        return None;
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let default_kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
    if default_kb != Some(KB2M) {
        pool.skip(format_args!(
            "default huge page size is {default_kb:?} kB, not 2048 kB"
        ));
        return None;
    }
    assert!(pool.page_sizes().contains(&MIB2));
    // Clusters of killed earlier runs would otherwise vanish between the
    // tests' before/after snapshots (PgCluster::init sweeps them too).
    for line in sweep_stale_clusters() {
        println!("{test}: {line}");
    }
    pool.rebase();
    Some(pool)
}

fn pool_dir() -> PathBuf {
    Path::new(HUGEPAGES_SYSFS).join(format!("hugepages-{KB2M}kB"))
}

fn read_pool(file: &str) -> u64 {
    let p = pool_dir().join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .parse()
        .unwrap()
}

fn write_pool(file: &str, v: u64) {
    let p = pool_dir().join(file);
    std::fs::write(&p, format!("{v}\n")).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

/// Makes exactly `pages` 2 MiB pages available (free - reserved), with no
/// overcommit. The guard restores everything.
fn make_available_exactly(pool: &Live, pages: u64) {
    write_pool("nr_overcommit_hugepages", 0);
    pool.ensure_free(MIB2, pages).unwrap();
    let avail = read_pool("free_hugepages") - read_pool("resv_hugepages");
    if avail > pages {
        write_pool("nr_hugepages", read_pool("nr_hugepages") - (avail - pages));
    }
    let avail = read_pool("free_hugepages") - read_pool("resv_hugepages");
    assert_eq!(
        avail, pages,
        "could not set the pool to {pages} available pages"
    );
}

/// 2 MiB pages in use or reserved: `(total - free) + resv`.
fn committed(state: &HostState) -> u64 {
    let c = state.pools[&KB2M];
    c.total - c.free + c.resv
}

/// Live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            if text.contains(needle) {
                out.push((pid, text));
            }
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn shm_vma(pid: u32) -> SmapsVma {
    main_shm_vma(pid)
        .unwrap()
        .unwrap_or_else(|| panic!("process {pid} has no main shared memory mapping"))
}

/// Stops, drops and checks that nothing of the cluster remains.
fn finish(mut pg: PgCluster, pids: &[u32], before: &HostState) {
    pg.stop().unwrap();
    let root = pg.root().to_owned();
    drop(pg);
    let still: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(still.is_empty(), "cluster processes still alive: {still:?}");
    let mentions = processes_mentioning(&root.to_string_lossy());
    assert!(mentions.is_empty(), "processes left: {mentions:?}");
    assert!(!root.exists(), "{} not removed", root.display());
    let leaks = before.diff(&HostState::capture().unwrap());
    assert!(leaks.is_empty(), "left behind: {leaks:#?}");
}

/// One line: range, name and the page-size and residency fields.
fn describe(v: &SmapsVma) -> String {
    let f = |k: &str| v.fields.get(k).copied().unwrap_or(0);
    format!(
        "{:#x}-{:#x} {} {:?} Size {} kB, KernelPageSize {} kB, Rss {} kB, \
         Shared_Hugetlb {} kB, Private_Hugetlb {} kB",
        v.start,
        v.end,
        v.perms,
        v.path,
        f("Size"),
        f("KernelPageSize"),
        f("Rss"),
        f("Shared_Hugetlb"),
        f("Private_Hugetlb")
    )
}

/// `shared_memory_size` as printed by `postgres -C` ("139" or "139MB").
fn parse_mb(text: &str) -> u64 {
    text.trim_end_matches("MB").trim().parse().unwrap()
}

#[test]
fn huge_pages_on_maps_exactly_the_reported_pages() {
    let t0 = Instant::now();
    let Some(pool) = setup(live!()) else {
        return;
    };
    let mut pg = PgCluster::init("128MB").unwrap();
    let major = pg.major_version().unwrap();
    let n: u64 = pg
        .postgres_c("shared_memory_size_in_huge_pages")
        .unwrap()
        .parse()
        .unwrap();
    let size_mb = parse_mb(&pg.postgres_c("shared_memory_size").unwrap());
    println!(
        "PostgreSQL {major} at {}: shared_memory_size {size_mb} MB, \
         shared_memory_size_in_huge_pages {n} (init {:?})",
        pg.datadir().display(),
        t0.elapsed()
    );
    // size_mb is rounded up to whole MB; n to whole 2 MiB pages.
    assert!(
        n >= (size_mb - 1).div_ceil(2) && n <= size_mb.div_ceil(2),
        "{n} pages for {size_mb} MB"
    );

    pool.ensure_free(MIB2, n).unwrap();
    let before = HostState::capture().unwrap();

    // huge_pages = on: n huge pages, mapped as /anon_hugepage.
    pg.start("on").unwrap();
    let pm = pg.postmaster_pid().expect("postmaster pid");
    assert_eq!(pg.show("huge_pages").unwrap(), "on");
    assert_eq!(
        pg.show("shared_memory_size_in_huge_pages").unwrap(),
        n.to_string()
    );
    match pg.show("huge_pages_status") {
        // PostgreSQL 17 added it.
        Ok(v) => assert!(major >= 17 && v == "on", "PG {major}: {v:?}"),
        Err(e) => assert!(
            major < 17 && e.contains("unrecognized configuration parameter"),
            "PG {major}: {e}"
        ),
    }
    let vma = shm_vma(pm);
    println!("postmaster {pm}, huge_pages=on: {}", describe(&vma));
    assert_eq!(vma.path, ANON_HUGEPAGE);
    assert!(vma.is_shared());
    assert_eq!(vma.kernel_page_kb(), Some(KB2M));
    assert_eq!(vma.size_kb(), Some(n * KB2M));
    let during = HostState::capture().unwrap();
    assert_eq!(
        committed(&during) - committed(&before),
        n,
        "pool before {:?}, during {:?}",
        before.pools[&KB2M],
        during.pools[&KB2M]
    );
    // The interlock segment and the DSM files.
    let interlock: Vec<_> = during
        .sysv
        .iter()
        .filter(|(id, s)| !before.sysv.contains_key(id) && s.cpid as u32 == pm)
        .collect();
    assert_eq!(interlock.len(), 1, "SysV segments: {:?}", during.sysv);
    assert_eq!(interlock[0].1.uid, pg.uid());
    assert!(
        during
            .devshm_files
            .difference(&before.devshm_files)
            .any(|p| p.to_string_lossy().starts_with("/dev/shm/PostgreSQL.")),
        "no /dev/shm/PostgreSQL.* file"
    );

    // A client backend (and every other child) maps the same area.
    let held = pg.hold_backend().unwrap();
    let bpid = held.backend_pid();
    let backends = pg.backends();
    println!("backends: {backends:?}");
    assert!(
        backends
            .iter()
            .any(|p| p.pid == bpid && p.is_client_backend()),
        "backend {bpid} not among {backends:?}"
    );
    for p in &backends {
        let b = shm_vma(p.pid);
        assert_eq!(
            (b.start, b.end, b.path.as_str(), b.kernel_page_kb()),
            (vma.start, vma.end, ANON_HUGEPAGE, Some(KB2M)),
            "{p:?}"
        );
    }
    held.release().unwrap();
    let pids = pg.all_pids();
    pg.stop().unwrap();
    assert!(pg.postmaster_pid().is_none());
    let still: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(still.is_empty(), "still alive after stop: {still:?}");
    let leaks = before.diff(&HostState::capture().unwrap());
    assert!(leaks.is_empty(), "left behind after stop: {leaks:#?}");

    // huge_pages = off: the same area on 4 kB pages, /dev/zero.
    pg.start("off").unwrap();
    let pm = pg.postmaster_pid().expect("postmaster pid");
    assert_eq!(pg.show("huge_pages").unwrap(), "off");
    let vma = shm_vma(pm);
    println!("postmaster {pm}, huge_pages=off: {}", describe(&vma));
    assert_eq!(vma.path, DEV_ZERO);
    assert!(vma.is_shared());
    assert_eq!(vma.kernel_page_kb(), Some(4));
    assert!(vma.size_kb().unwrap() <= n * KB2M);
    assert_eq!(
        committed(&HostState::capture().unwrap()),
        committed(&before)
    );
    let pids = pg.all_pids();

    finish(pg, &pids, &before);
    pool.finish();
    println!(
        "huge_pages_on_maps_exactly_the_reported_pages took {:?}",
        t0.elapsed()
    );
}

#[test]
fn huge_pages_on_fails_one_page_short_and_try_falls_back() {
    let t0 = Instant::now();
    let Some(pool) = setup(live!()) else {
        return;
    };
    let mut pg = PgCluster::init("128MB").unwrap();
    let n: u64 = pg
        .postgres_c("shared_memory_size_in_huge_pages")
        .unwrap()
        .parse()
        .unwrap();
    assert!(n > 1);
    make_available_exactly(&pool, n - 1);
    let before = HostState::capture().unwrap();

    let err = pg.start("on").unwrap_err();
    println!("start with {} of {n} pages: {err}", n - 1);
    assert!(
        err.contains("could not map anonymous shared memory"),
        "{err}"
    );
    assert!(!pg.is_running());
    let leaks = before.diff(&HostState::capture().unwrap());
    assert!(leaks.is_empty(), "failed start left: {leaks:#?}");

    // try: starts anyway, silently on 4 kB pages.
    pg.start("try").unwrap();
    let pm = pg.postmaster_pid().expect("postmaster pid");
    assert_eq!(pg.show("huge_pages").unwrap(), "try");
    let vma = shm_vma(pm);
    assert_eq!(vma.path, DEV_ZERO);
    assert_eq!(vma.kernel_page_kb(), Some(4));
    assert_eq!(
        committed(&HostState::capture().unwrap()),
        committed(&before)
    );
    let pids = pg.all_pids();

    finish(pg, &pids, &before);
    pool.finish();
    println!(
        "huge_pages_on_fails_one_page_short_and_try_falls_back took {:?}",
        t0.elapsed()
    );
}

#[test]
fn drop_stops_a_running_cluster() {
    // No huge pages involved, but the leak check needs the pool lock.
    let Some(_pool) = setup(live!()) else {
        return;
    };
    let before = HostState::capture().unwrap();
    let mut pg = PgCluster::init("16MB").unwrap();
    pg.start("off").unwrap();
    let held = pg.hold_backend().unwrap();
    let pids = pg.all_pids();
    assert!(pids.contains(&held.backend_pid()));
    let root = pg.root().to_owned();
    // Dropped while running and while a client is connected.
    drop(pg);
    drop(held);
    let still: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(still.is_empty(), "still alive after drop: {still:?}");
    assert!(!root.exists());
    let leaks = before.diff(&HostState::capture().unwrap());
    assert!(leaks.is_empty(), "left behind: {leaks:#?}");
}

/// Set in the environment of [`stale_cluster_child`] when
/// [`sweep_cleans_up_after_a_killed_process`] runs it.
const STALE_CHILD_ENV: &str = "HUGESHM_PG_STALE_CHILD";

#[test]
#[ignore = "helper: run by sweep_cleans_up_after_a_killed_process"]
fn stale_cluster_child() {
    if helper_spec(STALE_CHILD_ENV).is_none() {
        return;
    }
    // Runs while the parent test holds the pool lock: no PoolGuard here.
    let mut pg = PgCluster::init("16MB").unwrap();
    pg.start("off").unwrap();
    println!("ROOT={}", pg.root().display());
    // Exit like a killed test: no Drop, the server keeps running.
    std::process::exit(0);
}

#[test]
fn sweep_cleans_up_after_a_killed_process() {
    let Some(_pool) = setup(live!()) else {
        return;
    };
    let before = HostState::capture().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(helper_args("stale_cluster_child"))
        .env(STALE_CHILD_ENV, "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let root = stdout
        .lines()
        // libtest may put its own words before it on the line.
        .find_map(|l| l.split_once("ROOT=").map(|(_, root)| root))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "child gave no ROOT ({}): {stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let pid_file = root.join("data/postmaster.pid");
    let pm: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(alive(pm), "the child's postmaster {pm} should still run");
    let mut pids = vec![pm];
    pids.extend(
        processes_mentioning("postgres: ")
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .ok()
                    .and_then(|s| {
                        s.rsplit(')')
                            .next()?
                            .split_whitespace()
                            .nth(1)?
                            .parse()
                            .ok()
                    })
                    == Some(pm)
            }),
    );
    assert!(!before.diff(&HostState::capture().unwrap()).is_empty());

    let swept = sweep_stale_clusters();
    println!("swept: {swept:?}");
    assert!(
        swept.iter().any(|l| l.contains(&*root.to_string_lossy())),
        "{swept:?}"
    );
    let still: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(still.is_empty(), "still alive after sweep: {still:?}");
    assert!(!root.exists());
    let leaks = before.diff(&HostState::capture().unwrap());
    assert!(leaks.is_empty(), "left behind: {leaks:#?}");
}
