//! Huge pages inside a hugetlb cgroup, for real: a cgroup v2 child with
//! `hugetlb.2MB.max` = 8 MiB (4 pages) and a host pool with 32 free pages.
//! The kernel charges the limit at fault time, so a region of 16 pages
//! gets its reservation and is then refused when faulted: `try` must fall
//! back whole to 4 KiB pages and say why, `only` must fail with the
//! numbers and the cgroup fix; never SIGBUS, never a bare errno, nothing
//! left behind.

mod common;

use hugeshm_testkit::{skip_unless_root, HostState, PoolGuard, TestCgroup};
use serde_json::Value;

const M2: u64 = 2 << 20;

fn in_cgroup(cg: &TestCgroup, args: &[&str]) -> std::process::Output {
    cg.command(env!("CARGO_BIN_EXE_hugeshm"), args)
        .env("NO_COLOR", "1")
        .env_remove(hugeshm_probe::PROC_ROOT_ENV)
        .env_remove(hugeshm_probe::SYS_ROOT_ENV)
        .output()
        .unwrap()
}

#[test]
fn a_cgroup_limit_below_the_region_is_a_clean_fallback_or_error() {
    const T: &str = "a_cgroup_limit_below_the_region_is_a_clean_fallback_or_error";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    pool.ensure_free(M2, 32).expect("32 free 2 MiB pages");
    let before = HostState::capture().unwrap();
    let Some(cg) = TestCgroup::new("limit", &[(M2, 8 << 20)]) else {
        return;
    };
    let name = format!("cg-{}", std::process::id());
    let create = |policy: &str, json: bool| {
        let mut a = vec![
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
        ];
        if json {
            a.push("--json");
        }
        in_cgroup(&cg, &a)
    };

    // only: the numbers and the fix, nothing left.
    let out = create("only", false);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("only: {err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        !err.contains("Bad address (os error 14)") || err.contains("refused"),
        "{err}"
    );
    assert!(err.contains("2 MiB pages"), "{err}");
    // The cgroup allows 4 pages: the kernel gave those, then refused.
    assert!(err.contains("after 4 of 16"), "{err}");
    assert!(err.contains("hugetlb.2MB.max"), "{err}");
    assert_eq!(HostState::capture().unwrap(), before, "only: left behind");
    assert!(cg.max_events(M2) > 0, "the cgroup counted the refusals");

    // try: the whole region on 4 KiB pages, with the reason.
    let out = create("try", true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["fell_back"], true, "{r:#}");
    assert_eq!(r["page_size_bytes"].as_u64(), Some(4096));
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(4096));
    let reason = r["reason"].as_str().unwrap();
    println!("try: {reason}");
    assert!(reason.contains("2 MiB pages"), "{reason}");
    assert!(
        reason.ends_with("the whole region uses 4 KiB pages instead"),
        "{reason}"
    );
    let rm = common::hugeshm(&["rm", &name, "--backend", "sysv"]);
    assert!(rm.status.success());
    drop(cg);
    assert_eq!(HostState::capture().unwrap(), before, "try: left behind");
    pool.restore().unwrap();
}
