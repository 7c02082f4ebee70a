//! Root's `advise --spec`, `apply --plan` and `apply --persist --root`
//! against what uid 65534 planted (issue 32): a link to a root-only file,
//! a FIFO, a 300 MB file, a file of another user whose lines must not be
//! quoted, a staging tree with a directory of 65534 (mode 0777) or a
//! symlinked directory. Each is a usage error (exit 2) that says what is
//! there; nothing of a root-only file is shown, nothing is written.

use crate::common::{self, as_nobody, cannot_act_as_nobody, nobodys_dir, NOBODY};

use hugeshm_testkit::{test_name, TempDir};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const SECRET: &str = "SECRET_TOKEN=only-root-reads-this\n";

/// Exit 2 and nothing on stdout; stderr.
fn usage_error(what: &str, out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: stdout not empty");
    assert!(!err.contains("panicked"), "{what}: {err}");
    err
}

/// `advise --spec FILE` and `apply --dry-run --plan FILE` on the `clean`
/// fixture, each within 20 s: (command, output).
fn both_read(file: &Path) -> Vec<(&'static str, Output)> {
    [
        ("advise --spec", &["advise", "--spec"][..]),
        ("apply --plan", &["apply", "--dry-run", "--plan"][..]),
    ]
    .into_iter()
    .map(|(what, args)| {
        let mut c = common::on_fixture("clean");
        c.args(args).arg(file);
        (what, common::output_within_20s(c))
    })
    .collect()
}

/// A root-only (0600) file in a root-owned directory, holding `SECRET`.
fn root_only(dir: &TempDir) -> std::path::PathBuf {
    let p = dir.join("secret");
    std::fs::write(&p, SECRET).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

#[test]
fn a_link_a_fifo_or_a_huge_file_is_refused_unread() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let victim_dir = TempDir::new("planted-input-victim");
    let victim = root_only(&victim_dir);
    let u = nobodys_dir("planted-input");
    let d = u.path().display();
    as_nobody(&format!(
        "ln -s {} {d}/link && mkfifo {d}/fifo && truncate -s 300M {d}/huge",
        victim.display()
    ));
    for (what, out) in both_read(&u.join("link")) {
        let err = usage_error(what, out);
        assert!(
            !err.contains("only-root"),
            "{what}: the secret shown: {err}"
        );
        assert!(
            err.contains("is a symbolic link (owned by uid 65534)"),
            "{what}: {err}"
        );
    }
    for (what, out) in both_read(&u.join("fifo")) {
        let err = usage_error(what, out);
        assert!(
            err.contains("is a FIFO (named pipe) (owned by uid 65534)"),
            "{what}: {err}"
        );
    }
    for (what, out) in both_read(&u.join("huge")) {
        let err = usage_error(what, out);
        assert!(
            err.contains("is 314572800 bytes (300 MiB, owned by uid 65534)")
                && err.contains("more than the 1 MiB"),
            "{what}: {err}"
        );
    }
}

#[test]
fn another_users_file_is_not_quoted_in_errors() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let u = nobodys_dir("planted-input-quote");
    let d = u.path().display();
    as_nobody(&format!(
        "printf 'token = nobodys-line\\n' > {d}/syntax.toml && \
         printf '[[region]]\\nname = \"nobodys-name\"\\nsize = \"nobodys-size\"\\n' > {d}/data.toml && \
         printf '{{\"schema\": \"nobodys-schema\"}}' > {d}/plan.json"
    ));
    for (file, args, at) in [
        (
            "syntax.toml",
            &["advise", "--spec"][..],
            Some("line 1, column 9"),
        ),
        ("data.toml", &["advise", "--spec"][..], None),
        ("plan.json", &["apply", "--dry-run", "--plan"][..], None),
    ] {
        let out = common::on_fixture("clean")
            .args(args)
            .arg(u.join(file))
            .output()
            .unwrap();
        let err = usage_error(file, out);
        assert!(!err.contains("nobodys-"), "{file}: quoted: {err}");
        assert!(
            err.contains(&format!("not shown: it belongs to uid {NOBODY}")),
            "{file}: {err}"
        );
        if let Some(at) = at {
            assert!(err.contains(at), "{file}: {err}");
        }
    }
    // Root's own file is quoted as before: the line and a caret.
    let mine = TempDir::new("planted-input-mine");
    std::fs::write(mine.join("spec.toml"), "token = roots-line\n").unwrap();
    let out = common::on_fixture("clean")
        .args(["advise", "--spec"])
        .arg(mine.join("spec.toml"))
        .output()
        .unwrap();
    let err = usage_error("root's spec", out);
    assert!(err.contains("1 | token = roots-line"), "{err}");
}

#[test]
fn a_file_the_real_uid_cannot_read_is_not_quoted() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    // uid 65534 with CAP_DAC_OVERRIDE (as a binary given that
    // capability would run): it reads root's 0600 file, but may not show it.
    let victim_dir = TempDir::new("planted-input-cap");
    let victim = root_only(&victim_dir);
    let on_fixture = common::on_fixture("clean");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["--inh-caps=+dac_override", "--ambient-caps=+dac_override"])
        .arg(on_fixture.get_program())
        .args(on_fixture.get_args())
        .args(["advise", "--spec"])
        .arg(&victim)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let err = usage_error("advise --spec as 65534 with CAP_DAC_OVERRIDE", out);
    assert!(!err.contains("only-root"), "the secret shown: {err}");
    assert!(
        err.contains("line 1, column") && err.contains("uid 65534 cannot read it (mode 0600"),
        "{err}"
    );
}

/// Every file under `dir`, recursively (directories are not listed).
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_under(&e.path()));
        } else if !t.is_symlink() {
            out.push(e.path().display().to_string());
        }
    }
    out
}

#[test]
fn persist_refuses_a_staging_tree_another_user_can_change() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let persist = |root: &Path| {
        common::on_fixture("clean")
            .args(["apply", "--size", "64M", "--persist-only", "--root"])
            .arg(root)
            .output()
            .unwrap()
    };
    // etc/sysctl.d of 65534, mode 0777.
    let stage = TempDir::new("planted-stage");
    std::fs::create_dir_all(stage.join("etc/sysctl.d")).unwrap();
    let sysctl_d = stage.join("etc/sysctl.d");
    std::os::unix::fs::chown(&sysctl_d, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&sysctl_d, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = usage_error("sysctl.d of 65534", persist(stage.path()));
    assert!(
        err.contains(&format!("{}: is owned by uid 65534", sysctl_d.display()))
            && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(files_under(stage.path()), Vec::<String>::new());
    // Root's, but 0777 (not sticky).
    std::os::unix::fs::chown(&sysctl_d, Some(0), Some(0)).unwrap();
    let err = usage_error("sysctl.d 0777", persist(stage.path()));
    assert!(err.contains("writable by others (mode 0777"), "{err}");
    assert_eq!(files_under(stage.path()), Vec::<String>::new());
    // etc/security a symlink of 65534 to a directory of root's: the
    // first files (sysctl.d) are not written either.
    std::fs::set_permissions(&sysctl_d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let elsewhere = TempDir::new("planted-stage-elsewhere");
    let u = nobodys_dir("planted-stage-link");
    as_nobody(&format!(
        "ln -s {} {}/security",
        elsewhere.path().display(),
        u.path().display()
    ));
    std::fs::rename(u.join("security"), stage.join("etc/security")).unwrap();
    let err = usage_error("a symlinked etc/security", persist(stage.path()));
    assert!(
        err.contains("is a symbolic link owned by uid 65534"),
        "{err}"
    );
    assert_eq!(files_under(stage.path()), Vec::<String>::new());
    assert_eq!(files_under(elsewhere.path()), Vec::<String>::new());
    // Root's own staging tree is written.
    std::fs::remove_file(stage.join("etc/security")).unwrap();
    let out = persist(stage.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stage.join("etc/sysctl.d/60-hugeshm.conf").is_file());
}
