//! Huge pages inside a hugetlb cgroup, for real: a cgroup v2 child with
//! `hugetlb.2MB.max` = 8 MiB (4 pages) and a host pool with 32 free pages.
//! * `status` run inside the cgroup says what a new mapping can get.
//! * `create --policy only` of 16 pages fails before creating anything,
//!   naming the cgroup file and the numbers; `try` falls back whole to
//!   4 KiB pages and says why.
//! * If the limit drops after the check (here: while `create` is stopped
//!   by the test hook after the name claim), the kernel's refusal at fault
//!   time is still an error with the numbers and the file: never SIGBUS,
//!   never a bare errno, nothing left behind.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use hugeshm_region::testhook::STOP_AT_ENV;
use hugeshm_testkit::{assert_no_leaks, live, HostState, Lack, TestCgroup};
use serde_json::Value;

const M2: u64 = 2 << 20;

fn argv(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn in_cgroup(cg: &TestCgroup, args: &[&str]) -> std::process::Command {
    let mut c = cg.command(env!("CARGO_BIN_EXE_hugeshm"), args);
    c.env("NO_COLOR", "1")
        .env_remove(hugeshm_probe::PROC_ROOT_ENV)
        .env_remove(hugeshm_probe::SYS_ROOT_ENV);
    c
}

#[test]
fn a_cgroup_limit_below_the_region_is_a_clean_fallback_or_error() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 32).expect("32 free 2 MiB pages");
    let before = HostState::capture().unwrap();
    let Some(cg) = TestCgroup::new(pool.name(), &[(M2, 8 << 20)]) else {
        return;
    };
    let name = format!("cg-{}", std::process::id());
    let create = |policy: &str| -> Vec<String> {
        [
            "create",
            &name,
            "--size",
            "32M",
            "--page-size",
            "2m",
            "--policy",
            policy,
            "--backend",
            "sysv",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };

    // status inside the cgroup: 32 free in the pool, 4 for a new mapping.
    let out = in_cgroup(&cg, &["status", "--json"]).output().unwrap();
    assert!(out.status.success());
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = st["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["page_size_bytes"].as_u64() == Some(M2) && p["node"].is_null())
        .unwrap()
        .clone();
    assert!(row["available"].as_u64().unwrap() >= 32, "{row}");
    assert_eq!(row["can_get_pages"].as_u64(), Some(4), "{row}");
    assert_eq!(st["cgroup"]["version"], 2, "{st:#}");

    // only: refused before anything is created, with the file and numbers.
    let out = in_cgroup(&cg, &argv(&create("only"))).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("only: {err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("hugetlb.2MB.max allows 4 more 2 MiB pages, required 16"),
        "{err}"
    );
    assert!(err.contains("to fix: echo 33554432 > "), "{err}");
    assert!(err.contains("hugepages-2Mi: 32Mi"), "{err}");
    assert_eq!(cg.max_events(M2), 0, "decided before any fault");
    assert_no_leaks(&before, "only");

    // try: the whole region on 4 KiB pages, with the reason.
    let mut a = create("try");
    a.push("--json".into());
    let out = in_cgroup(&cg, &argv(&a)).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["fell_back"], true, "{r:#}");
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(4096));
    let reason = r["reason"].as_str().unwrap();
    println!("try: {reason}");
    assert!(reason.contains("hugetlb.2MB.max allows 4 more"), "{reason}");
    assert!(
        reason.ends_with("the whole region uses 4 KiB pages instead"),
        "{reason}"
    );
    assert!(common::hugeshm(&["rm", &name, "--backend", "sysv"])
        .status
        .success());
    assert_no_leaks(&before, "try");

    // The limit lowered after the check: refused at fault time, still an
    // error with the numbers and the file.
    cg.set_limit(M2, 64 << 20);
    let flag = std::env::temp_dir().join(format!("hugeshm-stop-{}-cg", std::process::id()));
    let child = in_cgroup(&cg, &argv(&create("only")))
        .env(STOP_AT_ENV, format!("name-claimed:{}", flag.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !flag.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never reached");
        std::thread::sleep(Duration::from_millis(5));
    }
    cg.set_limit(M2, 8 << 20);
    std::fs::remove_file(&flag).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("lowered meanwhile: {err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("the kernel refused to fault them in after 4 of 16"),
        "{err}"
    );
    assert!(err.contains("hugetlb.2MB.max allows 4 pages"), "{err}");
    assert!(err.contains("to fix: echo 33554432 > "), "{err}");
    assert!(cg.max_events(M2) > 0, "the cgroup counted the refusals");
    // segments: a holder inside the cgroup is shown with its cgroup.
    let mut holder = in_cgroup(
        &cg,
        &[
            "create",
            "cg-hold",
            "--size",
            "6M",
            "--page-size",
            "2m",
            "--policy",
            "only",
            "--backend",
            "anon",
            "--hold",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(holder.stderr.take().unwrap()).lines();
        assert!(lines.any(|l| l.unwrap().contains("holding region")));
        // Keep reading, so the holder's last words do not hit a closed pipe.
        std::thread::spawn(move || for _ in lines {});
    }
    let segs = common::json(common::hugeshm(&["segments", "--json"]));
    let cg_path = format!("/{}", cg.dir().file_name().unwrap().to_string_lossy());
    let mine = segs["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["attached"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["pid"].as_u64() == Some(holder.id() as u64))
        })
        .unwrap_or_else(|| panic!("the holder's region: {segs:#}"))
        .clone();
    assert_eq!(mine["attached"][0]["cgroup"], cg_path.as_str(), "{mine:#}");
    assert!(
        !mine["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "segment-cgroup-short"),
        "6 MiB fits the 8 MiB limit: {mine:#}"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(holder.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(holder.wait().unwrap().success());
    drop(cg);
    pool.finish();
}

/// PostgreSQL with `huge_pages = try` started inside a cgroup that allows
/// 4 of the ~40 2 MiB pages its shared memory needs, as a pod with a too
/// small `hugepages-2Mi` limit does:
/// * without a reservation limit its `mmap` succeeds and the faults past
///   the limit are refused (SIGBUS): whether it survives start-up or not,
///   hugeshm shows why (the segment larger than the cgroup allows, or the
///   refused charges);
/// * with `hugetlb.2MB.rsvd.max` set as well, its `mmap` is refused and it
///   starts on 4 KiB pages: `segments` shows the area on 4 KiB pages and
///   `status` in the cgroup says what a mapping can get.
#[test]
fn postgres_in_a_limited_cgroup_is_explained() {
    use hugeshm_testkit::postgres::{skip_unless_postgres, PgCluster};
    let Some(pool) = live!() else { return };
    if skip_unless_postgres(pool.name()) {
        return;
    }
    pool.ensure_free(M2, 64).expect("64 free 2 MiB pages");
    let Some(cg) = TestCgroup::new(pool.name(), &[(M2, 8 << 20)]) else {
        return;
    };
    {
        let mut pg = PgCluster::init("64MB").expect("initdb");
        pg.in_cgroup(cg.dir());

        // No reservation limit: faults refused.
        let started = pg.start("try");
        let log = pg.log();
        println!(
            "without rsvd.max: {}",
            match &started {
                Ok(()) => "started".to_owned(),
                Err(e) => format!("failed: {}", e.lines().last().unwrap_or("")),
            }
        );
        match &started {
            Ok(()) => {
                let post = pg.postmaster_pid().expect("postmaster");
                let segs = common::json(common::hugeshm(&["segments", "--json"]));
                let area = segs["segments"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| {
                        s["kind"] == "anon"
                            && s["attached"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|a| a["pid"].as_u64() == Some(post as u64))
                    })
                    .unwrap_or_else(|| panic!("PostgreSQL's area: {segs:#}"))
                    .clone();
                let codes: Vec<&str> = area["findings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|f| f["code"].as_str())
                    .collect();
                assert!(codes.contains(&"segment-cgroup-short"), "{area:#}");
                pg.stop().expect("stop");
            }
            Err(_) => {
                // It died on a refused fault: the cgroup counted it, and
                // status in the cgroup says so.
                assert!(cg.max_events(M2) > 0, "no refused charge: {log}");
                let out = in_cgroup(&cg, &["status", "--json"]).output().unwrap();
                let st: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert!(
                    st["findings"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f["code"] == "cgroup-faults-refused"),
                    "{st:#}"
                );
            }
        }

        // With the reservation limit: mmap refused, 4 KiB pages.
        if !cg.set_rsvd_limit(M2, 8 << 20) {
            pool.skip_part(
                "rsvd",
                Lack::HugetlbRsvdCgroup,
                "no hugetlb.2MB.rsvd.max on this kernel",
            );
        } else {
            pg.start("try").expect("PostgreSQL starts on 4 KiB pages");
            let post = pg.postmaster_pid().expect("postmaster");
            let segs = common::json(common::hugeshm(&["segments", "--json"]));
            let area = segs["segments"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| {
                    s["kind"] == "anon"
                        && s["attached"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|a| a["pid"].as_u64() == Some(post as u64))
                })
                .unwrap_or_else(|| panic!("PostgreSQL's area: {segs:#}"))
                .clone();
            println!(
                "with rsvd.max: started, area {} bytes on {} pages",
                area["size_bytes"], area["page_size_bytes"]
            );
            assert_eq!(area["page_size_bytes"].as_u64(), Some(4096), "{area:#}");
            // The cgroup refused the pages, not the pool: the fix raises
            // the cgroup's limits (huge_pages=on alone would stop it from
            // starting).
            let codes: Vec<&str> = area["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|f| f["code"].as_str())
                .collect();
            assert!(
                codes.contains(&"cgroup-fallback") && !codes.contains(&"silent-fallback"),
                "{area:#}"
            );
            let finding = area["findings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["code"] == "cgroup-fallback")
                .unwrap()
                .clone();
            let fix = finding["fix"].as_str().unwrap().to_owned();
            println!("cgroup-fallback: {}\n  fix: {fix}", finding["message"]);
            assert!(
                !fix.contains("with huge pages required") && fix.contains("rsvd.max"),
                "{fix}"
            );
            // Root's plain status lists the cgroup beside its own.
            let st = common::json(common::hugeshm(&["status", "--json"]));
            assert!(
                st["server_cgroups"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|c| c["pids"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p.as_u64() == Some(post as u64)))),
                "{:#}",
                st["server_cgroups"]
            );
            let out = in_cgroup(&cg, &["status", "--json"]).output().unwrap();
            let st: Value = serde_json::from_slice(&out.stdout).unwrap();
            let row = st["pools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["page_size_bytes"].as_u64() == Some(M2) && p["node"].is_null())
                .unwrap()
                .clone();
            assert_eq!(row["can_get_pages"].as_u64(), Some(4), "{row}");
            pg.stop().expect("stop");

            // The printed fix, as an admin runs it, then a restart: huge pages.
            let command = fix.split(" (Kubernetes").next().unwrap();
            let ran = std::process::Command::new("sh")
                .args(["-c", command])
                .status()
                .unwrap();
            assert!(ran.success(), "{command}");
            pg.start("try").expect("PostgreSQL starts after the fix");
            let post = pg.postmaster_pid().expect("postmaster");
            let vma = hugeshm_testkit::postgres::main_shm_vma(post)
                .unwrap()
                .expect("its shared memory");
            assert_eq!(vma.kernel_page_kb(), Some(2048), "{vma:?}");
            pg.stop().expect("stop");
        }
    }
    drop(cg);
    pool.finish();
}

/// A server run by systemd does not get limits.d's memlock: `advise` gives
/// its service a drop-in. PostgreSQL started in a cgroup named like a
/// service (what systemd makes for a unit), on huge pages: the live plan
/// names that service and the cluster's owner, and `apply --persist` writes
/// the drop-in.
#[test]
fn postgres_in_a_service_gets_a_memlock_drop_in() {
    use hugeshm_testkit::postgres::{skip_unless_postgres, PgCluster};
    let Some(pool) = live!() else { return };
    if skip_unless_postgres(pool.name()) {
        return;
    }
    pool.ensure_free(M2, 64).expect("64 free 2 MiB pages");
    let Some(cg) = TestCgroup::service(pool.name(), &[]) else {
        return;
    };
    let unit = cg.dir().file_name().unwrap().to_string_lossy().into_owned();
    let tmp = hugeshm_testkit::TempDir::new("pg-service");
    {
        let mut pg = PgCluster::init("64MB").expect("initdb");
        pg.in_cgroup(cg.dir());
        pg.start("on").expect("PostgreSQL starts on huge pages");
        let plan = common::json(common::hugeshm(&["advise", "--json"]));
        let units: Vec<&str> = plan["config"]["systemd_units"]
            .as_array()
            .unwrap_or_else(|| panic!("no systemd_units: {plan:#}"))
            .iter()
            .map(|u| u.as_str().unwrap())
            .collect();
        assert!(units.contains(&unit.as_str()), "{unit} not in {units:?}");
        let dropin = format!("/etc/systemd/system/{unit}.d/60-hugeshm.conf");
        let bytes = plan["config"]["memlock_kib"].as_u64().unwrap() * 1024;
        let content = plan["config"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == dropin.as_str())
            .unwrap_or_else(|| panic!("no {dropin}: {plan:#}"))["content"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            content.ends_with(&format!("LimitMEMLOCK={bytes}\n")),
            "{content}"
        );
        // (The memlock users are checked where the plan's owners are all
        // known: fixtures and the --postgres test; the live host may hold
        // segments of unknown owners, which make them `*`.)
        // apply --persist-only into a staging root writes it.
        let root = tmp.path().join("root");
        let out = common::hugeshm(&["apply", "--persist-only", "--root", root.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("systemctl daemon-reload"), "{text}");
        assert_eq!(
            std::fs::read_to_string(root.join(dropin.trim_start_matches('/'))).unwrap(),
            content
        );
        pg.stop().expect("stop");
    }
    drop(cg);
    pool.finish();
}
