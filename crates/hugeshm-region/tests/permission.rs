//! Permission errors, for real: this test binary is re-run as an
//! unprivileged user (`setpriv`, uid/gid 65534, no capabilities), which
//! may neither use SysV `SHM_HUGETLB` (not in `vm.hugetlb_shm_group`, no
//! `CAP_IPC_LOCK`) nor lock more than its memlock limit.

mod common;

use std::process::Command;

use common::*;
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder, RegionError};
use hugeshm_testkit::HostState;

const CHILD_ENV: &str = "HUGESHM_REGION_PERM_CHILD";

/// Runs as the unprivileged child: tries what it is told and prints the
/// error kind and message.
#[test]
#[ignore = "helper: its parent test runs it"]
fn unprivileged_child() {
    let Some(what) = helper_spec(CHILD_ENV) else {
        return;
    };
    let b = match what.as_str() {
        "sysv-huge" => RegionBuilder::new(16 << 20)
            .backend(Backend::Sysv)
            .page_size(PageSize::HUGE_2M)
            .policy(Policy::Only),
        "mlock" => RegionBuilder::new(64 << 20)
            .backend(Backend::Anon)
            .page_size(PageSize::Base)
            .policy(Policy::Only)
            .mlock(true),
        other => panic!("unknown child task {other}"),
    };
    let kind = match b.create() {
        Ok(_) => "ok".to_owned(),
        Err(e @ RegionError::Permission { .. }) => {
            format!("permission {e}; to fix: {}", e.fix().unwrap())
        }
        Err(e @ RegionError::MemlockLimit { .. }) => {
            format!("memlock {e}; to fix: {}", e.fix().unwrap())
        }
        Err(e) => format!("other {e}"),
    };
    println!("\nPERM-RESULT {kind}");
}

fn run_unprivileged(task: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(exe)
        .args(helper_args("unprivileged_child"))
        .env(CHILD_ENV, task)
        .output()
        .expect("run setpriv");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("PERM-RESULT ").map(str::to_owned))
        .unwrap_or_else(|| {
            panic!(
                "no result from the unprivileged child ({}): {text}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

#[test]
fn unprivileged_errors_name_the_fix() {
    let Some(pool) = live!() else {
        return;
    };
    if skip_without_setpriv(pool.name()) {
        return;
    }
    let group: u32 = std::fs::read_to_string("/proc/sys/vm/hugetlb_shm_group")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if group == 65534 {
        return pool.skip("gid 65534 is vm.hugetlb_shm_group");
    }
    pool.ensure_free(MIB2, 8).unwrap();
    let before = HostState::capture().unwrap();
    let r = run_unprivileged("sysv-huge");
    println!("sysv-huge: {r}");
    assert!(r.starts_with("permission "), "{r}");
    assert!(r.contains("sysctl -w vm.hugetlb_shm_group=65534"), "{r}");
    assert!(r.contains("CAP_IPC_LOCK"), "{r}");
    let r = run_unprivileged("mlock");
    println!("mlock: {r}");
    assert!(r.starts_with("memlock "), "{r}");
    assert!(r.contains("LimitMEMLOCK="), "{r}");
    assert!(r.contains("/etc/security/limits.conf"), "{r}");
    assert_no_leaks(&before, "unprivileged");
    pool.finish();
}
