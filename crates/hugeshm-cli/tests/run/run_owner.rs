//! `hugeshm run` as root on a program another user can replace (issue
//! 32): COMMAND or `--target` owned by uid 65534, in a directory 65534
//! owns, or reached through 65534's symlink. The server's binary is the
//! admin's choice, so it runs, with a warning on stderr and in
//! `--print-env --json`; a root-owned program (/bin/true) has none. A
//! FIFO as COMMAND is refused at once, not waited on.

use crate::common::{self, as_nobody, cannot_act_as_nobody, nobodys_dir};

use hugeshm_testkit::{run_library_built, test_name};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

const WARNING: &str = "another user can replace the program run as uid 0";

/// `hugeshm run OPTIONS -- PROGRAM`.
fn run(options: &[&str], program: &Path) -> Output {
    run_library_built().expect("libhugeshm_run.so");
    let mut c = common::cmd(&["run"]);
    c.args(options)
        .arg("--")
        .arg(program)
        .env_remove("LD_PRELOAD")
        .env_remove("HUGESHM_RUN");
    common::output_within_20s(c)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_program_another_user_can_replace_runs_with_a_warning() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    // Root's own: no warning.
    let out = run(&[], Path::new("/bin/true"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    // 65534's copy of true in 65534's 0755 directory.
    let u = nobodys_dir("run-owner");
    let d = u.path().display();
    as_nobody(&format!(
        "cp /bin/true {d}/true && chmod 0755 {d}/true && ln -s {d} {d}/link && mkfifo {d}/fifo"
    ));
    let theirs = u.join("true");
    let out = run(&[], &theirs);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "run as asked: {err}");
    assert!(
        err.contains(&format!(
            "warning: {} (COMMAND) belongs to uid 65534, neither root nor you: {WARNING}",
            theirs.display()
        )),
        "{err}"
    );
    // The same as --target, with --print-env --json: in its warnings.
    let out = run(
        &[
            "--print-env",
            "--json",
            "--target",
            theirs.to_str().unwrap(),
        ],
        Path::new("/bin/true"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v:#}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("(--target) belongs to uid 65534") && w.contains(WARNING),
        "{w}"
    );
    // Root's true reached through 65534's symlink: the link counts.
    std::fs::remove_file(u.join("link")).unwrap();
    as_nobody(&format!("ln -s /usr/bin {d}/link"));
    let out = run(&[], &u.join("link/true"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "{}/link (a symbolic link on the way) belongs to uid 65534",
            d
        )) && err.contains(WARNING),
        "{err}"
    );
    // A FIFO is not waited on.
    let out = run(&[], &u.join("fifo"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is a FIFO (named pipe)"),
        "{}",
        stderr(&out)
    );
}
