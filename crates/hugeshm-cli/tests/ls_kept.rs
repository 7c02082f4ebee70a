//! `ls` and `ls --check` tell a region made to be kept (`hugeshm create`
//! without `--hold`, its creator exited as planned: listed `kept`, an info
//! line, exit 0) from one its holder left behind (created with `--hold`,
//! the holder killed: `orphaned`, a warning, exit 1). Real SysV segments on
//! 2 MiB pages, under the pool guard.

mod common;

use common::{cmd, hugeshm as run, json};
use hugeshm_testkit::live;
use serde_json::Value;
use std::process::Stdio;

const M2: u64 = 2 << 20;

/// The `ls --json` entry of region `n`.
fn listed(n: &str) -> Value {
    let l = json(run(&["ls", "--json"]));
    l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == n)
        .unwrap_or_else(|| panic!("{n} not listed: {l:#}"))
        .clone()
}

/// `ls`'s lines that name region `n`.
fn lines_of(n: &str) -> Vec<String> {
    let out = run(&["ls"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == n))
        .map(str::to_owned)
        .collect()
}

/// Removes the regions it names when dropped (before the pool guard's
/// leak check, declared after it), whether the test passed or not.
struct Remove(Vec<String>);

impl Drop for Remove {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = run(&["rm", n]);
        }
    }
}

#[test]
fn a_kept_region_is_not_an_orphan_and_a_killed_holders_is() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 64).expect("64 free 2 MiB pages");
    assert_eq!(
        run(&["ls", "--check"]).status.code(),
        Some(0),
        "this host already has orphaned regions: {}",
        String::from_utf8_lossy(&run(&["ls"]).stdout)
    );
    let kept = format!("clitest-kept-{}", std::process::id());
    let left = format!("clitest-left-{}", std::process::id());
    let _remove = Remove(vec![kept.clone(), left.clone()]);
    let create = ["--size", "64M", "--page-size", "2m", "--policy", "only"];

    // The plain create: the creator exits, nobody attaches.
    let out = cmd(&["create", &kept]).args(create).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = listed(&kept);
    assert_eq!(
        (&r["backend"], &r["held"], &r["header"]["kept"]),
        (&"sysv".into(), &false.into(), &true.into()),
        "{r:#}"
    );
    let lines = lines_of(&kept);
    assert!(lines[0].contains(" kept "), "{lines:?}");
    assert!(lines[1].starts_with("  info "), "{lines:?}");
    assert!(lines[1].contains("kept, not attached"), "{lines:?}");
    assert!(
        lines[1].contains(&format!("hugeshm rm {kept}")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains("WARN")), "{lines:?}");
    assert_eq!(run(&["ls", "--check"]).status.code(), Some(0));

    // A holder (create --hold) killed: its region is abandoned.
    let mut holder = cmd(&["create", &left])
        .args(create)
        .arg("--hold")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_stderr(&mut holder, "holding region");
    assert_eq!(listed(&left)["held"], true);
    assert_eq!(run(&["ls", "--check"]).status.code(), Some(0), "held");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let r = listed(&left);
    assert_eq!(
        (&r["held"], &r["header"]["kept"]),
        (&false.into(), &false.into())
    );
    let lines = lines_of(&left);
    assert!(lines[0].contains(" orphaned "), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("WARN") && l.contains("nobody holds it")),
        "{lines:?}"
    );
    assert_eq!(run(&["ls", "--check"]).status.code(), Some(1));

    for n in [&kept, &left] {
        assert!(run(&["rm", n]).status.success(), "rm {n}");
    }
    assert_eq!(run(&["ls", "--check"]).status.code(), Some(0));
    pool.finish();
}
