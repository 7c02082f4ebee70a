//! Root's `hugeshm` against what user 65534 planted: symlinks to a
//! root-only file at the names root's commands write (the exporter's
//! textfile, the benches' data files in a `/var/tmp`-like directory, the
//! lab's and `generate`'s output directories). Each command refuses or
//! writes elsewhere; the root-only file is never changed.

use crate::common;

use crate::common::{as_nobody, cannot_act_as_nobody, hugeshm, nobodys_dir, NOBODY};
use hugeshm_testkit::{live, test_name, TempDir};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SECRET: &str = "SECRET_TOKEN=only-root-reads-this\n";

/// `setpriv ... as 65534`: the attacker's prefix of a shell command.
const AS_NOBODY: &str = "setpriv --reuid=65534 --regid=65534 --clear-groups";

/// `sh -c SCRIPT` as root, with `$HUGESHM` the binary: a script that
/// plants a name with its own pid (`$$`) and then `exec`s hugeshm, which
/// keeps that pid: the names the old code derived from its pid.
fn exec_as_pid(script: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("HUGESHM", env!("CARGO_BIN_EXE_hugeshm"))
        .env_remove(hugeshm_probe::PROC_ROOT_ENV)
        .env_remove(hugeshm_probe::SYS_ROOT_ENV)
        .env_remove(hugeshm_probe::FS_ROOT_ENV)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A root-only (0600) file in a root-owned directory.
struct Victim {
    _dir: TempDir,
    path: PathBuf,
}

impl Victim {
    fn new() -> Victim {
        let dir = TempDir::new("planted-victim");
        let path = dir.join("secret");
        std::fs::write(&path, SECRET).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Victim { _dir: dir, path }
    }

    fn unchanged(&self) {
        let now = std::fs::read(&self.path).unwrap();
        assert!(
            now == SECRET.as_bytes(),
            "the root-only file was written: {} bytes now",
            now.len()
        );
        let mode = std::fs::metadata(&self.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

/// A root-owned sticky directory every user can write, like /var/tmp.
fn var_tmp(what: &str) -> TempDir {
    let d = TempDir::new(what);
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn exporter_textfile_symlinks_are_not_followed() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let v = Victim::new();
    let d = nobodys_dir("planted-textfile");
    let (dp, vp) = (d.path().display(), v.path.display());
    // A symlink at the textfile: refused, not written through.
    as_nobody(&format!("ln -s {vp} {dp}/hugeshm.prom"));
    let out = hugeshm(&["exporter", "--textfile", &dp.to_string()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    v.unchanged();
    // A symlink at the temporary name the old writer took (its pid).
    as_nobody(&format!("rm {dp}/hugeshm.prom"));
    let out = exec_as_pid(&format!(
        "{AS_NOBODY} ln -s {vp} {dp}/.hugeshm.prom.$$.tmp && exec \"$HUGESHM\" exporter --textfile {dp}"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    v.unchanged();
    let prom = d.join("hugeshm.prom");
    assert!(std::fs::symlink_metadata(&prom).unwrap().is_file());
    assert!(std::fs::read_to_string(&prom).unwrap().contains("hugeshm_"));
}

#[test]
fn bench_dmbc_data_file_is_private() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let v = Victim::new();
    let d = var_tmp("planted-dmbc");
    let (dp, vp) = (d.path().display(), v.path.display());
    // The old data file name, `hugeshm-dmbc-<pid>.data`, planted.
    let out = exec_as_pid(&format!(
        "{AS_NOBODY} ln -s {vp} {dp}/hugeshm-dmbc-$$.data && exec \"$HUGESHM\" bench dmbc --dir {dp} \
         --data-size 1M --cache-size 256k --duration 0.05 --json"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    v.unchanged();
    // Only the planted link is left: the private directory went with the run.
    let left = names(d.path());
    assert!(
        left.len() == 1 && left[0].starts_with("hugeshm-dmbc-") && left[0].ends_with(".data"),
        "{left:?}"
    );

    // A --dir another user owns is refused before anything is written.
    let theirs = nobodys_dir("planted-dmbc-theirs");
    let out = hugeshm(&[
        "bench",
        "dmbc",
        "--dir",
        theirs.path().to_str().unwrap(),
        "--data-size",
        "1M",
        "--cache-size",
        "256k",
        "--duration",
        "0.05",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("owned by uid 65534"),
        "{}",
        stderr(&out)
    );
    assert!(names(theirs.path()).is_empty());
}

#[test]
fn bench_oltp_data_file_is_private() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let v = Victim::new();
    let d = var_tmp("planted-oltp");
    let (dp, vp) = (d.path().display(), v.path.display());
    // 1 GiB pages on posix files are never measured: the run makes its
    // data file and reports rows that say why, quickly.
    let out = exec_as_pid(&format!(
        "{AS_NOBODY} ln -s {vp} {dp}/hugeshm-oltp-$$.data && exec \"$HUGESHM\" bench oltp --data-dir {dp} \
         --cache-size 1M --data-size 1M --duration 0.1 --runs 1 --page-sizes 1g --backends posix \
         --no-reserve --json"
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    v.unchanged();
    let left = names(d.path());
    assert!(
        left.len() == 1 && left[0].starts_with("hugeshm-oltp-"),
        "{left:?}"
    );
}

#[test]
fn lab_and_generate_refuse_an_out_directory_another_user_controls() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let v = Victim::new();
    let vp = v.path.display();
    // A directory 65534 owns, with symlinks at the names root writes.
    let theirs = nobodys_dir("planted-out");
    let tp = theirs.path().display();
    as_nobody(&format!(
        "ln -s {vp} {tp}/lab.json && ln -s {vp} {tp}/report.html && ln -s {vp} {tp}/hugeshm.1 \
         && ln -s {vp} {tp}/hugeshm.bash"
    ));
    // A symlink 65534 planted in a sticky directory, to a root-owned one.
    let sticky = var_tmp("planted-out-link");
    let root_dir = TempDir::new("planted-out-target");
    let link = sticky.join("out");
    as_nobody(&format!(
        "ln -s {} {}",
        root_dir.path().display(),
        link.display()
    ));
    // A root-owned directory that others can write.
    let open = TempDir::new("planted-out-open");
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();

    for (dir, why) in [
        (theirs.path(), "owned by uid 65534"),
        (link.as_path(), "symbolic link owned by uid 65534"),
        (open.path(), "writable by others"),
        // Under a directory 65534 owns: it could swap what is below.
        (&theirs.join("sub"), "owned by uid 65534"),
    ] {
        let d = dir.to_str().unwrap();
        for args in [
            &["generate", "man", "--out", d][..],
            &["generate", "completions", "--out", d],
            &[
                "lab",
                "--quick",
                "--only",
                "numa",
                "--no-reserve",
                "--out",
                d,
            ],
        ] {
            let out = hugeshm(args);
            assert!(!out.status.success(), "{args:?} succeeded");
            assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
        }
    }
    v.unchanged();
    assert!(names(root_dir.path()).is_empty());
    assert!(names(open.path()).is_empty());
    assert!(!theirs.join("sub").exists());

    // Under sudo, the directories of the user who ran it count as root's
    // own (they could write anywhere as root anyway), and still no
    // symlink in them is written through.
    let sudo = |uid: &str, args: &[&str]| common::cmd(args).env("SUDO_UID", uid).output().unwrap();
    let t = theirs.path().to_str().unwrap();
    let out = sudo("1000", &["generate", "man", "--out", t]);
    assert!(
        stderr(&out).contains("owned by uid 65534"),
        "{}",
        stderr(&out)
    );
    let out = sudo("65534", &["generate", "man", "--out", t]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    v.unchanged();
    let fresh = nobodys_dir("planted-out-sudo");
    let out = sudo(
        "65534",
        &[
            "generate",
            "completions",
            "--out",
            fresh.path().to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        names(fresh.path()),
        ["_hugeshm", "hugeshm.bash", "hugeshm.fish"]
    );

    // A directory of root's own, made 0755 whatever the umask.
    let mine = TempDir::new("planted-out-mine");
    let out_dir = mine.join("man");
    let out = exec_as_pid(&format!(
        "umask 000 && exec \"$HUGESHM\" generate man --out {}",
        out_dir.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&out_dir), 0o755);
    assert_eq!(mode(&out_dir.join("hugeshm.1")), 0o644);
}

/// `advise --postgres DATADIR` as root, with `SECRET_TOKEN` and `HOME=/root`
/// in its environment.
fn advise_postgres(dd: &Path, bin: Option<&Path>) -> Output {
    let mut args = vec!["60".to_owned(), env!("CARGO_BIN_EXE_hugeshm").to_owned()];
    args.extend(["advise", "--json", "--postgres"].map(String::from));
    args.push(dd.display().to_string());
    if let Some(b) = bin {
        args.extend(["--postgres-bin".to_owned(), b.display().to_string()]);
    }
    // `timeout`: the old code blocked for ever on a FIFO.
    Command::new("timeout")
        .args(&args)
        .env_remove(hugeshm_probe::PROC_ROOT_ENV)
        .env_remove(hugeshm_probe::SYS_ROOT_ENV)
        .env_remove(hugeshm_probe::FS_ROOT_ENV)
        .env("SECRET_TOKEN", "hunter2")
        .env("HOME", "/root")
        .output()
        .unwrap()
}

/// A shell script standing in for `postgres -C`: records its environment,
/// uid and session in `record`, answers each setting.
fn fake_postgres(record: &Path) -> String {
    format!(
        "#!/bin/sh\n{{ env; echo uid=$(id -u); echo \"sid=$(cut -d' ' -f6 /proc/$$/stat) pid=$$\"; }} > {}\n\
         case \"$*\" in *in_huge_pages*) echo 1;; *huge_page_size*) echo 2048;; \
         *shared_memory_size*) echo 2;; *) echo try;; esac\n",
        record.display()
    )
}

#[test]
fn advise_postgres_refuses_a_hostile_pg_version() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let v = Victim::new();
    let home = nobodys_dir("planted-pg");
    let hp = home.path().display();
    let record = home.join("ran");
    // The owner's data directory, and a "server" of theirs to run.
    as_nobody(&format!("mkdir -p {hp}/data {hp}/evil/bin"));
    std::fs::write(home.join("evil/bin/postgres"), fake_postgres(&record)).unwrap();
    std::os::unix::fs::chown(home.join("evil/bin/postgres"), Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(
        home.join("evil/bin/postgres"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let pg_version = format!("{hp}/data/PG_VERSION");
    for (what, make, says) in [
        (
            "path traversal",
            format!("echo ../../../../../../../..{hp}/evil > {pg_version}"),
            "not a PostgreSQL major version",
        ),
        (
            "not a number",
            format!("echo 15abc > {pg_version}"),
            "not a PostgreSQL major version",
        ),
        (
            "huge",
            format!("head -c 1048576 /dev/zero | tr \"\\\\000\" 1 > {pg_version}"),
            "more than the 64",
        ),
        (
            "a symlink to a root-only file",
            format!("ln -s {} {pg_version}", v.path.display()),
            "symbolic link",
        ),
        ("a FIFO", format!("mkfifo {pg_version}"), "a FIFO"),
    ] {
        as_nobody(&format!("rm -f {pg_version} && {make}"));
        let out = advise_postgres(&home.join("data"), None);
        let err = stderr(&out);
        assert!(!out.status.success(), "{what}: accepted");
        assert_ne!(out.status.code(), Some(124), "{what}: hung");
        assert!(err.contains(says), "{what}: {err}");
        assert!(!err.contains("SECRET_TOKEN"), "{what}: {err}");
        assert!(!record.exists(), "{what}: the planted binary ran");
    }
    v.unchanged();

    // A --postgres-bin of the owner's: refused, not run.
    as_nobody(&format!("rm -f {pg_version} && echo 16 > {pg_version}"));
    let out = advise_postgres(&home.join("data"), Some(&home.join("evil/bin/postgres")));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("owned by uid 65534"),
        "{}",
        stderr(&out)
    );
    assert!(!record.exists(), "the owner's binary ran");
}

#[test]
fn advise_postgres_runs_the_server_with_a_cleared_environment() {
    if cannot_act_as_nobody(test_name!()) {
        return;
    }
    let home = nobodys_dir("planted-pg-env");
    let hp = home.path().display();
    as_nobody(&format!(
        "mkdir {hp}/data && echo 16 > {hp}/data/PG_VERSION"
    ));
    // root's own stand-in for the server, where only root writes.
    let bin = TempDir::new("planted-pg-bin");
    let record = home.join("ran");
    let server = bin.join("postgres");
    std::fs::write(&server, fake_postgres(&record)).unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = advise_postgres(&home.join("data"), Some(&server));
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = std::fs::read_to_string(&record).unwrap();
    let env: Vec<&str> = seen
        .lines()
        .filter(|l| !l.starts_with("uid=") && !l.starts_with("sid="))
        .collect();
    // Names only in messages: the test's own environment is not printed.
    let names: Vec<&str> = env.iter().filter_map(|l| l.split('=').next()).collect();
    for want in [
        "PATH=/usr/bin:/bin",
        "LC_ALL=C",
        &format!("PGDATA={hp}/data"),
    ] {
        assert!(env.contains(&want), "{want} not in {names:?}");
    }
    // Only what the shell sets itself besides those three.
    for k in &names {
        assert!(
            ["PATH", "LC_ALL", "PGDATA", "PWD", "OLDPWD", "SHLVL", "_"].contains(k),
            "{k} reached the server: {names:?}"
        );
    }
    assert!(seen.contains("uid=65534"), "{seen}");
    // Its own session: the session id is its pid.
    let sid = seen.lines().find(|l| l.starts_with("sid=")).unwrap();
    let (s, p) = sid.split_once(' ').unwrap();
    assert_eq!(&s[4..], &p[4..], "{sid}");
}

#[test]
fn advise_postgres_still_asks_a_real_cluster() {
    use hugeshm_testkit::postgres::{skip_unless_postgres, PgCluster};
    // A cluster's shared memory is host state other tests compare under
    // the pool lock.
    let Some(pool) = live!() else { return };
    if cannot_act_as_nobody(pool.name()) || skip_unless_postgres(pool.name()) {
        return;
    }
    let mut pg = PgCluster::init("16MB").expect("initdb");
    for (state, how) in [("down", "postgres -C"), ("up", "running server")] {
        if state == "up" {
            pg.start("off").expect("start");
        }
        let out = advise_postgres(pg.datadir(), None);
        assert!(out.status.success(), "{state}: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let counted = &v["counted"][0];
        assert!(counted["pages"].as_u64().unwrap() > 0, "{v:#}");
        assert!(
            counted["note"].as_str().unwrap().contains(how),
            "{state}: {counted}"
        );
    }
}
