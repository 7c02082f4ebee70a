//! `hugeshm run`'s records as root's `segments` and `exporter --once` see
//! them, against what user 65534 plants in /dev/shm (sticky: only it, and
//! root, can remove what it creates there):
//!
//! * the record of a live server is found from its mapping, whatever else
//!   is in /dev/shm (1,024 well-formed records of a pid that cannot exist
//!   used to push it out of the first 1,024 names); planted records that
//!   name a live mapping are refused and said (another user's file, a link,
//!   a FIFO, escape sequences); none is listed as a posix segment;
//! * a record naming a program the process does not run is refused;
//! * a record's counts are bounded by its mapping (1,024 node lines of
//!   2^64 - 1 bytes once overflowed root's `segments`);
//! * 200,000 empty files planted in /dev/shm do not grow root's
//!   `segments` or `exporter --once` (maximum resident set, from
//!   `getrusage` of that one child).

use crate::common;
use crate::run::{as_nobody, bin_dir, Held};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use hugeshm_testkit::live;
use serde_json::Value;

const M1: u64 = 1 << 20;

/// What user 65534 planted in /dev/shm, removed when dropped.
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `text` written by user 65534 at each of `names` in /dev/shm (one
/// shell, builtins only); `tag` names the copy it reads it from.
fn plant(tag: &str, text: &str, names: &[String]) -> Planted {
    let src = bin_dir().join(format!("planted-{tag}"));
    std::fs::write(&src, text).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o644)).unwrap();
    let planted = Planted(
        names
            .iter()
            .map(|n| Path::new("/dev/shm").join(n))
            .collect(),
    );
    let mut args = vec![
        "sh",
        "-c",
        r#"r=$(cat "$0"); for n; do printf '%s\n' "$r" > "/dev/shm/$n"; done"#,
        src.to_str().unwrap(),
    ];
    args.extend(names.iter().map(String::as_str));
    as_nobody(&args);
    planted
}

/// The name `hugeshm run` gives the record of `pid`'s mapping at `addr`.
fn name(pid: u32, addr: u64) -> String {
    format!("hugeshm-run.{pid}.{addr:x}")
}

/// A well-formed record of `pid`'s shared anonymous mapping of 1 MiB on
/// 4 KiB pages at `addr`, as user 65534 would write one for its own
/// process, naming `exe`, with `nodes` lines.
fn record(pid: u32, addr: u64, exe: &str, nodes: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ticks = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_owned();
    format!(
        "hugeshm-run-record 1\npid {pid}\nstart_ticks {ticks}\nuid 65534\nexe {exe}\n\
         object anon\naddress {addr:#x}\nsize {M1}\nrequested {M1}\npage_size_asked 4096\n\
         page_size 4096\npolicy try\nnuma default\nresident 4096\nverified_page_size 4096\n\
         {nodes}"
    )
}

/// The executable of `pid`, as the kernel says.
fn exe(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .unwrap()
        .display()
        .to_string()
}

/// Root's `segments --json`, `segments` and `exporter --once`.
struct Seen {
    json: Value,
    human: String,
    metrics: String,
}

impl Seen {
    fn now() -> Seen {
        let json = common::json(common::hugeshm(&["segments", "--json"]));
        let human = common::hugeshm(&["segments"]);
        assert!(human.status.success(), "segments: {}", human.status);
        let metrics = common::hugeshm(&["exporter", "--once"]);
        let metrics = String::from_utf8_lossy(&metrics.stdout).into_owned();
        assert!(metrics.contains("\nhugeshm_up 1\n"), "{metrics}");
        Seen {
            json,
            human: String::from_utf8_lossy(&human.stdout).into_owned(),
            metrics,
        }
    }

    /// The segment placed by `hugeshm run` for `pid`, of `kind`.
    fn placed(&self, kind: &str, pid: u32) -> Option<&Value> {
        self.json["segments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["kind"] == kind && s["run"]["record"]["pid"] == pid)
    }

    /// Why the record at `name` is not shown, if it is said.
    fn ignored(&self, name: &str) -> Option<String> {
        let file = format!("/dev/shm/{name}");
        self.json["run_records_ignored"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["file"] == file.as_str())
            .map(|i| i["reason"].as_str().unwrap().to_owned())
    }

    fn metric(&self, prefix: &str) -> u64 {
        self.metrics
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

#[test]
fn planted_records_neither_hide_a_servers_record_nor_pass_for_one() {
    // What it plants in /dev/shm is host state other tests compare under
    // the pool lock.
    let Some(_pool) = live!() else { return };
    let held = Held::start(
        &["--min-size", "8M", "--prefault"],
        &["shared:16m", "shm:12m", "shared:1m", "hold"],
    );
    let pid = held.pid();
    let (anon_at, shm_at) = (held.addr("shared"), held.addr("shm"));
    // Below --min-size: a mapping of the server without a record.
    let small_at = held.addrs("shared")[1];
    let theirs = Held::as_nobody(&["shared:1m", "shared:1m", "shared:1m", "hold"]);
    let at = theirs.addrs("shared");
    let who = theirs.pid();
    let good = record(who, at[0], &exe(who), "node 0 4096\n");
    // 1,024 records of a pid above pid_max: they sort before the server's.
    let flood: Vec<String> = (1..=1024)
        .map(|i| format!("hugeshm-run.10000000.{i}000"))
        .collect();
    let _flood = plant("flood", &good, &flood);
    // Another user's file at the name of the server's mapping.
    let forged = name(pid, small_at);
    let _forged = plant(
        "forged",
        &record(pid, small_at, &exe(who), "node 0 4096\n"),
        std::slice::from_ref(&forged),
    );
    let (link, fifo, escapes) = (name(who, at[0]), name(who, at[1]), name(who, at[2]));
    let _others = Planted(
        [&link, &fifo, &escapes]
            .iter()
            .map(|n| Path::new("/dev/shm").join(n))
            .collect(),
    );
    as_nobody(&["ln", "-s", "/etc/shadow", &format!("/dev/shm/{link}")]);
    as_nobody(&["mkfifo", &format!("/dev/shm/{fifo}")]);
    as_nobody(&[
        "sh",
        "-c",
        &format!("printf 'hugeshm-run-record 1\\npid 1\\e[2J\\n' > /dev/shm/{escapes}"),
    ]);
    let seen = Seen::now();
    drop(theirs);
    assert!(
        !seen.json.to_string().contains("\\u001b") && !seen.human.contains('\u{1b}'),
        "escape sequences printed"
    );
    // The server's records: on their segments, with what they say.
    let anon = seen
        .placed("anon", pid)
        .unwrap_or_else(|| panic!("no anon placed by run for {pid}: {:#}", seen.json));
    assert_eq!(anon["run"]["record"]["address"], anon_at);
    assert_eq!(anon["run"]["record"]["resident_bytes"], 16 << 20);
    assert_eq!(
        anon["run"]["record"]["prefault"]["method"],
        "populate_write"
    );
    let sysv = seen.placed("sysv", pid).expect("sysv placed by run");
    assert_eq!(sysv["run"]["record"]["address"], shm_at);
    assert!(
        seen.human.contains("placed by hugeshm run in probe"),
        "{}",
        seen.human
    );
    assert!(
        seen.metric("hugeshm_run_placed_bytes{") >= (16 + 12) << 20,
        "{}",
        seen.metrics
    );
    // The planted ones that name a live mapping: refused, each for its
    // reason, and counted; the flood names nothing live: never read.
    let reason = |n: &str| {
        seen.ignored(n)
            .unwrap_or_else(|| panic!("{n} not refused: {:#}", seen.json["run_records_ignored"]))
    };
    assert!(
        reason(&forged).contains("the file belongs to uid 65534"),
        "{}",
        reason(&forged)
    );
    assert_eq!(reason(&link), "a symbolic link");
    assert_eq!(reason(&fifo), "not a regular file");
    assert!(
        reason(&escapes).contains("not a record"),
        "{}",
        reason(&escapes)
    );
    assert!(
        seen.metric("hugeshm_run_records_ignored ") >= 4,
        "{}",
        seen.metrics
    );
    assert!(seen.ignored(&flood[0]).is_none());
    for s in seen.json["segments"].as_array().unwrap() {
        let path = s["path"].as_str().unwrap_or("");
        assert!(
            !path.starts_with("/dev/shm/hugeshm-run."),
            "a record listed as a segment: {s}"
        );
    }
}

#[test]
fn a_record_naming_another_program_than_the_process_runs_is_refused() {
    let Some(_pool) = live!() else { return };
    let theirs = Held::as_nobody(&["shared:1m", "shared:1m", "hold"]);
    let (who, at) = (theirs.pid(), theirs.addrs("shared"));
    let postgres = "/usr/lib/postgresql/15/bin/postgres";
    let (lie, true_) = (name(who, at[0]), name(who, at[1]));
    let _lie = plant(
        "lie",
        &record(who, at[0], postgres, "node 0 4096\n"),
        std::slice::from_ref(&lie),
    );
    let _true = plant(
        "true",
        &record(who, at[1], &exe(who), "node 0 4096\n"),
        std::slice::from_ref(&true_),
    );
    let seen = Seen::now();
    drop(theirs);
    assert!(
        !seen.human.contains("placed by hugeshm run in postgres"),
        "{}",
        seen.human
    );
    assert_eq!(
        seen.ignored(&lie),
        Some(format!(
            "it names the program \"{postgres}\", pid {who} runs \"{}\"",
            crate::run::probe().display()
        ))
    );
    // The user's own record of its own program is what it says.
    let placed = seen.placed("anon", who).expect("the true record shown");
    assert_eq!(placed["run"]["record"]["address"], at[1]);
    assert!(seen.ignored(&true_).is_none());
}

#[test]
fn a_records_counts_are_bounded_by_its_mapping() {
    let Some(_pool) = live!() else { return };
    let theirs = Held::as_nobody(&["shared:1m", "hold"]);
    let (who, at) = (theirs.pid(), theirs.addr("shared"));
    let nodes: String = (0..1024)
        .map(|n| format!("node {n} 18446744073709551615\n"))
        .collect();
    let big = name(who, at);
    let _big = plant(
        "big",
        &record(who, at, &exe(who), &nodes),
        std::slice::from_ref(&big),
    );
    // Root's segments and exporter answer (a debug build panicked on the
    // sum, a release build printed a number the user chose).
    let seen = Seen::now();
    drop(theirs);
    let why = seen.ignored(&big).expect("refused");
    assert!(why.contains("the nodes hold more than size"), "{why}");
    assert!(
        !seen.human.contains("TiB left their nodes"),
        "{}",
        seen.human
    );
    assert!(seen.placed("anon", who).is_none());
}

/// The exit status and the maximum resident set (KiB) of `hugeshm ARGS`,
/// run as the one child of a python3 that asks `getrusage` after it.
fn max_rss_kib(args: &[&str]) -> (bool, u64) {
    let c = common::cmd(args);
    let mut py = Command::new("python3");
    py.args([
        "-c",
        "import resource, subprocess, sys\n\
         r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n\
         print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
    ])
    .arg(c.get_program())
    .args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => py.env(k, v),
            None => py.env_remove(k),
        };
    }
    let out = py.output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut w = text.split_whitespace();
    let (rc, rss) = (w.next(), w.next().and_then(|r| r.parse().ok()));
    (
        rc == Some("0"),
        rss.unwrap_or_else(|| panic!("python3 said {text:?}")),
    )
}

#[test]
fn planted_empty_files_do_not_grow_the_scan() {
    let Some(_pool) = live!() else { return };
    // 200,000 empty files named like records, 50,000 named otherwise.
    let names: Vec<String> = (0..200_000)
        .map(|i| format!("hugeshm-run.{}.1000", 20_000_000 + i))
        .chain((0..50_000).map(|i| format!("planted-empty.{i}")))
        .collect();
    let _planted = Planted(
        names
            .iter()
            .map(|n| Path::new("/dev/shm").join(n))
            .collect(),
    );
    let list = bin_dir().join("planted-names");
    std::fs::write(&list, names.join("\n")).unwrap();
    std::fs::set_permissions(&list, std::fs::Permissions::from_mode(0o644)).unwrap();
    as_nobody(&[
        "sh",
        "-c",
        &format!("cd /dev/shm && xargs touch < {}", list.display()),
    ]);
    for args in [&["segments", "--json"][..], &["exporter", "--once"]] {
        let (ok, rss) = max_rss_kib(args);
        assert!(ok, "{args:?} failed");
        assert!(rss < 64 << 10, "{args:?}: {rss} KiB resident at most");
    }
    // The listing stopped at its bound (the time is bounded too) and says
    // so, with what the tmpfs holds in all: nothing is hidden silently.
    let report = common::json(common::hugeshm(&["segments", "--json"]));
    let cut = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "mount-listing-cut")
        .unwrap_or_else(|| panic!("no mount-listing-cut: {:#}", report["findings"]));
    let reason = cut["message"].as_str().unwrap();
    assert!(
        reason.starts_with("/dev/shm: ")
            && reason.contains(&format!(
                "{} of them empty files or hugeshm run records nobody maps",
                hugeshm_probe::MAX_PASSED_OVER
            ))
            && reason.contains("inodes, by statvfs"),
        "{reason}"
    );
    assert_eq!(cut["severity"], "warning");
}
