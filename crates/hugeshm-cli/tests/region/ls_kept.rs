//! `ls` and `ls --check` tell a region made to be kept (`hugeshm create`
//! without `--hold`, its creator exited as planned: listed `kept`, an info
//! line, exit 0) from one its holder left behind (created with `--hold`,
//! the holder killed: `orphaned`, a warning, exit 1). Real SysV segments on
//! 2 MiB pages, under the pool guard.
//!
//! `segments` and `status` (the doctor) tell them apart the same way: the
//! kept one is the info `kept-unattached`, the killed holder's and another
//! user's (whose header root does not trust) the warning `orphan`.

use crate::common;

use crate::common::{cmd, hugeshm as run, json, listed};
use hugeshm_testkit::live;
use serde_json::Value;
use std::process::{Command, Stdio};

const M2: u64 = 2 << 20;

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

/// `hugeshm create NAME ARGS --hold`, once it holds the region.
fn hold(name: &str, args: &[&str]) -> std::process::Child {
    let mut holder = cmd(&["create", name])
        .args(args)
        .arg("--hold")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_stderr(&mut holder, "holding region");
    holder
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
    let mut holder = hold(&left, &create);
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

/// The findings of the SysV segment `shmid` in `segments --json`.
fn segment_findings(shmid: u64) -> Vec<Value> {
    sysv_segment(shmid)["findings"].as_array().unwrap().clone()
}

/// `segments --json`'s SysV segment `shmid`.
fn sysv_segment(shmid: u64) -> Value {
    let s = json(run(&["segments", "--json"]));
    s["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"] == "sysv" && g["id"] == shmid)
        .unwrap_or_else(|| panic!("sysv {shmid} not in segments: {s:#}"))
        .clone()
}

/// The `(code, severity)` of each finding.
fn codes(findings: &[Value]) -> Vec<(String, String)> {
    findings
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
            (s("code"), s("severity"))
        })
        .collect()
}

/// `status --json`'s warnings and errors (codes), and how many orphans its
/// `segment-findings` summary counts.
fn status_actionable() -> (Vec<String>, u64) {
    let s = json(run(&["status", "--json"]));
    let findings = s["findings"].as_array().unwrap();
    let mut orphans = 0;
    for f in findings.iter().filter(|f| f["code"] == "segment-findings") {
        let m = f["message"].as_str().unwrap();
        // "... need attention: orphan x2, silent-fallback x1"
        for part in m.rsplit(": ").next().unwrap().split(", ") {
            if let Some(n) = part.strip_prefix("orphan x") {
                orphans += n.parse::<u64>().unwrap();
            }
        }
    }
    let mut codes: Vec<String> = findings
        .iter()
        .filter(|f| f["severity"] != "info")
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect();
    codes.sort();
    codes.dedup();
    (codes, orphans)
}

/// The shmid of SysV region `n`, from `ls --json`.
fn shmid_of(n: &str) -> u64 {
    let r = listed(n);
    assert_eq!(r["object"]["kind"], "sysv", "{r:#}");
    r["object"]["shmid"].as_u64().unwrap()
}

#[test]
fn the_doctor_tells_a_kept_region_from_an_orphan() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 64).expect("64 free 2 MiB pages");
    let kept = format!("clitest-dkept-{}", std::process::id());
    let left = format!("clitest-dleft-{}", std::process::id());
    let theirs = format!("clitest-dtheirs-{}", std::process::id());
    let _remove = Remove(vec![kept.clone(), left.clone()]);
    let create = ["--size", "64M", "--page-size", "2m", "--policy", "only"];
    // What the host says before: its own warnings are not this test's.
    let (before, orphans_before) = status_actionable();

    // The plain create, and a holder (create --hold) killed.
    let out = cmd(&["create", &kept]).args(create).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut holder = hold(&left, &create);
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let (kept_id, left_id) = (shmid_of(&kept), shmid_of(&left));

    let f = segment_findings(kept_id);
    assert_eq!(
        codes(&f),
        [("kept-unattached".to_owned(), "info".to_owned())],
        "{f:#?}"
    );
    let message = f[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "region {kept} (backend sysv; sysv {kept_id}, 64 MiB"
        )),
        "{message}"
    );
    assert_eq!(
        f[0]["fix"],
        format!("hugeshm rm {kept} --backend sysv   # only when no server will attach it again")
    );
    // Nobody is attached to read its page size from: the header says it.
    let seg = sysv_segment(kept_id);
    assert_eq!(seg["page_size_bytes"], 2 << 20, "{seg:#}");
    assert!(
        seg["page_size_source"]
            .as_str()
            .unwrap()
            .starts_with("the hugeshm region's header"),
        "{seg:#}"
    );
    let f = segment_findings(left_id);
    assert_eq!(
        codes(&f),
        [("orphan".to_owned(), "warning".to_owned())],
        "{f:#?}"
    );
    // An orphan's header is nobody's word now: unknown, as any segment.
    assert_eq!(sysv_segment(left_id)["page_size_bytes"], Value::Null);
    // status counts the killed holder's only.
    let (_, orphans) = status_actionable();
    assert_eq!(orphans, orphans_before + 1);

    // Another user's region made to be kept: root does not read its header
    // (ls lists it untrusted), so to root it is an orphan.
    as_nobody(&["create", &theirs, "--size", "4M", "--page-size", "4k"]);
    let key = hugeshm_region::sysv_key(&theirs);
    // Looked at, then removed (as its owner) before anything is asserted.
    let ls = json(run(&["ls", "--json"]));
    let segs = json(run(&["segments", "--json"]));
    as_nobody(&["rm", &theirs]);
    let listed_as = ls["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["object"]["key"] == key)
        .unwrap_or_else(|| panic!("key {key} not listed: {ls:#}"));
    assert_eq!(listed_as["state"], "untrusted", "{listed_as:#}");
    let seg = segs["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == listed_as["object"]["shmid"])
        .unwrap_or_else(|| panic!("{listed_as:#} not in segments: {segs:#}"));
    let f = seg["findings"].as_array().unwrap();
    assert_eq!(
        codes(f),
        [("orphan".to_owned(), "warning".to_owned())],
        "{f:#?}"
    );

    // With only the kept one left, status --check is as the host was: the
    // kept region adds no warning.
    assert!(run(&["rm", &left]).status.success(), "rm {left}");
    let (after, orphans) = status_actionable();
    assert_eq!(orphans, orphans_before);
    let new: Vec<&String> = after.iter().filter(|c| !before.contains(c)).collect();
    assert!(new.is_empty(), "new warnings {new:?}: before {before:?}");
    let code = run(&["status", "--check"]).status.code();
    assert_eq!(code, Some(i32::from(!after.is_empty())), "{after:?}");
    if before.is_empty() {
        assert_eq!(code, Some(0));
    }
    assert!(run(&["rm", &kept]).status.success(), "rm {kept}");
    pool.finish();
}

/// `hugeshm ARGS` as uid 65534 (the exporter's dynamic user is another
/// uid than root, as this one).
fn as_nobody(args: &[&str]) -> std::process::Output {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_hugeshm"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} as 65534: {out:?}");
    out
}

/// `hugeshm_finding{code="CODE",severity="SEV"}` of `exporter --once` as
/// uid 65534 (0 where the exporter knows no such code).
fn exported_as_nobody(code: &str, severity: &str) -> u64 {
    let out = as_nobody(&["exporter", "--once"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let want = format!("hugeshm_finding{{code=\"{code}\",severity=\"{severity}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&want))
        .map_or(0, |n| n.parse().unwrap())
}

/// Root's regions seen by another uid (the packaged exporter runs as a
/// dynamic user): root's objects are trusted by every reader, so a kept
/// region of mode 0644 is `kept-unattached` to uid 65534 as to root. One
/// of mode 0600 (the default) this uid may not read at all: `ls` lists it
/// `unreadable` and `segments` and the exporter give the info
/// `unattached-unreadable`, never the warning `orphan` (it was `orphan`:
/// false alarms wherever a fleet alerts on it), for a kept region and for
/// one a killed holder left alike, which only root tells apart (to root
/// the second stays an `orphan`).
#[test]
fn roots_regions_are_no_orphans_to_another_reader() {
    let Some(pool) = live!() else { return };
    if Command::new("setpriv").arg("--version").output().is_err() {
        hugeshm_testkit::skip(
            hugeshm_testkit::test_name!(),
            "no setpriv to read as uid 65534",
        );
        return;
    }
    pool.ensure_free(M2, 6).expect("6 free 2 MiB pages");
    let pid = std::process::id();
    let [kept, open, left] = ["kept", "open", "left"].map(|s| format!("clitest-rk-{s}-{pid}"));
    let _remove = Remove(vec![kept.clone(), open.clone(), left.clone()]);
    let create = [
        "--backend",
        "sysv",
        "--size",
        "4M",
        "--page-size",
        "2m",
        "--policy",
        "only",
    ];
    let orphans_before = exported_as_nobody("orphan", "warning");
    let unread_before = exported_as_nobody("unattached-unreadable", "info");

    let out = cmd(&["create", &kept]).args(create).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = cmd(&["create", &open])
        .args(create)
        .args(["--mode", "0644"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut holder = hold(&left, &create);
    holder.kill().unwrap();
    holder.wait().unwrap();
    let ids = [&kept, &open, &left].map(|n| shmid_of(n));

    // As 65534.
    let segs = json(as_nobody(&["segments", "--json"]));
    let findings_of = |segs: &Value, id: u64| {
        let seg = segs["segments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["kind"] == "sysv" && g["id"] == id)
            .unwrap_or_else(|| panic!("sysv {id} not in segments: {segs:#}"))
            .clone();
        codes(seg["findings"].as_array().unwrap())
    };
    let info = |code: &str| vec![(code.to_owned(), "info".to_owned())];
    assert_eq!(findings_of(&segs, ids[0]), info("unattached-unreadable"));
    assert_eq!(findings_of(&segs, ids[1]), info("kept-unattached"));
    assert_eq!(findings_of(&segs, ids[2]), info("unattached-unreadable"));
    assert_eq!(exported_as_nobody("orphan", "warning"), orphans_before);
    assert_eq!(
        exported_as_nobody("unattached-unreadable", "info"),
        unread_before + 2
    );
    let ls = json(as_nobody(&["ls", "--json"]));
    let state_of = |id: u64| {
        ls["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["object"]["shmid"] == id)
            .map(|r| (r["state"].clone(), r["header"]["kept"].clone()))
    };
    assert_eq!(state_of(ids[0]), Some(("unreadable".into(), Value::Null)));
    assert_eq!(state_of(ids[1]), Some(("ready".into(), true.into())));
    assert_eq!(state_of(ids[2]), Some(("unreadable".into(), Value::Null)));
    let check = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_hugeshm"))
        .args(["ls", "--check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    for n in [&kept, &open, &left] {
        assert!(
            !text
                .lines()
                .any(|l| l.contains("WARN") && l.contains(n.as_str())),
            "{text}"
        );
    }

    // To root, the killed holder's is an orphan, the others kept.
    assert_eq!(segment_findings(ids[0])[0]["code"], "kept-unattached");
    assert_eq!(segment_findings(ids[1])[0]["code"], "kept-unattached");
    assert_eq!(
        codes(&segment_findings(ids[2])),
        [("orphan".to_owned(), "warning".to_owned())]
    );
    for n in [&kept, &open, &left] {
        assert!(run(&["rm", n]).status.success(), "rm {n}");
    }
    pool.finish();
}
