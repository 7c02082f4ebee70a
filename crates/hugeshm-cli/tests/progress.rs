//! The pre-fault progress bar (`indicatif`): drawn on a terminal at once,
//! then with the bytes, the rate (decimal GB/s, as the report) and the time
//! left; absent when stderr is not a terminal.
//! A terminal is had from `script` (util-linux); without it the test skips.

mod common;

use common::{cmd, hugeshm};
use hugeshm_testkit::observe;
use std::process::Command;

#[test]
fn bar_on_a_terminal_only() {
    // Its posix region in /dev/shm is host state other tests compare
    // under the pool lock.
    let pool = observe!();
    if Command::new("script").arg("--version").output().is_err() {
        return pool.skip("no `script` (util-linux) to give hugeshm a terminal");
    }
    let name = format!("pbar{}", std::process::id());
    let bin = env!("CARGO_BIN_EXE_hugeshm");
    let create = format!(
        "NO_COLOR=1 {bin} create {name} --backend posix --size 512M --page-size 4k --policy off --prefault-threads 1"
    );
    // On a terminal (script's pty): the bar, with its rate and time left.
    let log = std::env::temp_dir().join(format!("{name}.log"));
    let out = Command::new("script")
        .args(["-qec", &create])
        .arg(&log)
        .output()
        .expect("run script");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let rm = hugeshm(&["rm", &name, "--backend", "posix"]);
    assert!(rm.status.success(), "{rm:?}");
    assert!(out.status.success(), "{out:?}\n{text}");
    let lines: Vec<&str> = text.split(['\r', '\n']).collect();
    // Shown at once, while the region is set up, before any byte.
    let creating = format!("creating {name} [");
    let first = lines
        .iter()
        .find(|l| l.contains(&creating) || l.contains("pre-faulting ["));
    assert!(
        first.is_some_and(|l| l.contains(&creating) && l.contains("setting up")),
        "{text}"
    );
    let draws: Vec<&str> = lines
        .into_iter()
        .filter(|l| l.contains("pre-faulting ["))
        .collect();
    assert!(!draws.is_empty(), "no progress bar on a terminal:\n{text}");
    // Decimal GB/s as the report under it, from the first sample with
    // bytes on (never `0 B/s, 0s left`).
    for d in &draws {
        assert!(!d.contains("iB/s") && !d.contains(" 0.0 GB/s"), "{d:?}");
        if !d.contains("] 0 B of ") {
            assert!(d.contains(" GB/s, ") && d.contains(" left"), "{d:?}");
        }
    }
    let last = draws.last().unwrap();
    assert!(last.contains("512 MiB of 512 MiB, "), "{last:?}");
    assert!(
        text.contains(" GB/s, 1 thread"),
        "the report's rate is in GB/s too: {text}"
    );
    assert!(
        text.contains("region ") && text.contains("pre-fault "),
        "{text}"
    );

    // stderr a pipe: no bar, and the report on stdout is the same.
    let out = cmd(&[
        "create",
        &name,
        "--backend",
        "posix",
        "--size",
        "512M",
        "--page-size",
        "4k",
        "--policy",
        "off",
    ])
    .output()
    .expect("run hugeshm");
    let rm = hugeshm(&["rm", &name, "--backend", "posix"]);
    assert!(out.status.success(), "{out:?}");
    assert!(rm.status.success(), "{rm:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("pre-faulting"),
        "a bar without a terminal: {err:?}"
    );
    assert!(!err.contains('\r'), "{err:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("pre-fault "));
}
