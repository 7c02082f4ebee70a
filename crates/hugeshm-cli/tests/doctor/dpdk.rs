//! The doctor against a real DPDK application, `dpdk-testpmd` on a null
//! device (Debian package `dpdk-dev`), as an admin starts it:
//! * `--in-memory --single-file-segments -m 64` maps one 64 MiB memfd as 32
//!   mappings of 2 MiB at growing offsets: one object of 64 MiB, counted as
//!   32 pages by `advise --live` (it was sized by its largest piece, 2 MiB);
//!   without `--single-file-segments`, one memfd per page, 64 MiB in all;
//! * run as root it calls `mlockall` with `CAP_IPC_LOCK`, its `VmLck`
//!   counting 128 GiB of `PROT_NONE` reservations: the memlock limit does
//!   not bind it, so no `memlock-small`; run as a user whose limit is
//!   lowered below what it locked, it gets one, sized from its locked
//!   mappings that can be accessed, not from `VmLck`;
//! * `advise --dpdk "EAL ARGS"` gives the pages (`apply` reserves them) it
//!   starts with and not one fewer (`-m 64`, `--socket-mem 64`, in memory or in a hugetlbfs mount),
//!   and with one page fewer says how many are short, as testpmd fails
//!   with the EAL's "Not enough memory available".

use crate::common;

use hugeshm_testkit::dpdk::{skip_unless_testpmd, Testpmd, TestpmdOptions};
use hugeshm_testkit::live;
use hugeshm_testkit::HugetlbfsMount;
use serde_json::Value;

const M2: u64 = 2 << 20;
const MIB: u64 = 1 << 20;

/// The segments the process maps.
fn segments_of(pid: u32) -> Vec<Value> {
    let segs = common::json(common::hugeshm(&["segments", "--json"]));
    segs["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["attached_pids"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_u64() == Some(u64::from(pid)))
        })
        .cloned()
        .collect()
}

/// The huge pages `advise --live` counts for the segments `labels` names.
fn advised_pages(labels: &[String]) -> u64 {
    let plan = common::json(common::hugeshm(&["advise", "--live", "--json"]));
    plan["counted"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| labels.iter().any(|l| c["label"] == l.as_str()))
        .map(|c| c["pages"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_memfd_mapped_in_pieces_is_sized_whole() {
    let Some(pool) = live!() else { return };
    if skip_unless_testpmd(pool.name()) {
        return;
    }
    pool.ensure_free(M2, 40).expect("40 free 2 MiB pages");
    for single_file in [true, false] {
        let pmd = Testpmd::start(&TestpmdOptions {
            single_file_segments: single_file,
            ..TestpmdOptions::default()
        })
        .expect("testpmd starts");
        let segs: Vec<Value> = segments_of(pmd.pid())
            .into_iter()
            .filter(|s| s["kind"] == "memfd")
            .collect();
        let sizes: Vec<u64> = segs
            .iter()
            .map(|s| s["size_bytes"].as_u64().unwrap())
            .collect();
        let labels: Vec<String> = segs
            .iter()
            .map(|s| s["path"].as_str().unwrap().to_owned())
            .collect();
        println!("single file {single_file}: memfds {labels:?} of {sizes:?} bytes");
        if single_file {
            // One memfd, mapped as 32 pieces.
            assert_eq!(sizes, [64 * MIB], "{segs:#?}");
            assert_eq!(segs[0]["page_size_bytes"].as_u64(), Some(M2));
            assert_eq!(segs[0]["resident_bytes"].as_u64(), Some(64 * MIB));
        } else {
            // One memfd per page.
            assert_eq!(sizes.len(), 32, "{segs:#?}");
            assert!(sizes.iter().all(|s| *s == M2), "{sizes:?}");
        }
        assert_eq!(advised_pages(&labels), 32, "advise --live");
        drop(pmd);
    }
    pool.finish();
}

/// `status --json`'s entry for `pid` among the servers, and the
/// `memlock-small` findings that name it.
fn memlock_of(pid: u32) -> (Value, Vec<Value>) {
    let st = common::json(common::hugeshm(&["status", "--json"]));
    let server = st["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["pid"].as_u64() == Some(u64::from(pid)))
        .unwrap_or_else(|| panic!("pid {pid} not among the servers: {:#}", st["servers"]))
        .clone();
    let findings = st["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["code"] == "memlock-small"
                && f["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("pid {pid} "))
        })
        .cloned()
        .collect();
    (server, findings)
}

#[test]
fn memlock_is_judged_only_where_the_limit_binds() {
    let Some(pool) = live!() else { return };
    if skip_unless_testpmd(pool.name()) {
        return;
    }
    pool.ensure_free(M2, 40).expect("40 free 2 MiB pages");
    {
        // Root: CAP_IPC_LOCK, mlockall of everything (VmLck 128 GiB),
        // under an 8 MiB limit that does not bind it.
        let pmd = Testpmd::start(&TestpmdOptions {
            memlock: Some(Some(8 * MIB)),
            ..TestpmdOptions::default()
        })
        .expect("testpmd starts as root");
        let (server, findings) = memlock_of(pmd.pid());
        println!("root: {server}");
        assert_eq!(server["cap_ipc_lock"], true, "{server}");
        assert!(
            server["locked_bytes"].as_u64().unwrap() > 8 * MIB,
            "it locked its memory: {server}"
        );
        assert!(findings.is_empty(), "{findings:#?}");
    }
    {
        // A user without the capability, under this host's largest limit
        // (8 MiB: without CAP_SYS_RESOURCE no limit can be raised past the
        // hard one): its mlockall is refused and it runs unlocked, as
        // testpmd says. Nothing is locked, so nothing is flagged.
        let pmd = Testpmd::start(&TestpmdOptions {
            user: Some(65534),
            memlock: Some(Some(8 * MIB)),
            ..TestpmdOptions::default()
        })
        .expect("testpmd starts as user 65534");
        assert!(pmd.log().contains("mlockall() failed"), "{}", pmd.log());
        let (server, findings) = memlock_of(pmd.pid());
        println!("user testpmd: {server}");
        assert_eq!(server["cap_ipc_lock"], false, "{server}");
        assert_eq!(server["locked_bytes"].as_u64(), Some(0), "{server}");
        assert!(findings.is_empty(), "{findings:#?}");
    }
    {
        // A user's server that did lock, as DPDK does with a limit that
        // allows it: 4 MiB of PROT_NONE reservation and 2 MiB of memory it
        // can touch, locked, beside a huge page memfd. Its limit then drops
        // (a changed limits.conf, for its next start): to 4 MiB, below
        // VmLck (6 MiB) but above what the limit would refuse (2 MiB): no
        // finding; to 1 MiB: memlock-small for the 2 MiB.
        let mut locker = Locker::start(65534);
        let pid = locker.pid();
        locker.set_limit(4 * MIB);
        let (server, findings) = memlock_of(pid);
        println!("locker under 4 MiB: {server}");
        assert_eq!(server["locked_bytes"].as_u64(), Some(6 * MIB), "{server}");
        assert_eq!(
            server["locked_accessible_bytes"].as_u64(),
            Some(2 * MIB),
            "{server}"
        );
        assert!(findings.is_empty(), "{findings:#?}");
        locker.set_limit(MIB);
        let (_, findings) = memlock_of(pid);
        assert_eq!(findings.len(), 1, "{findings:#?}");
        let msg = findings[0]["message"].as_str().unwrap();
        assert!(
            msg.contains("needs 2 MiB of locked memory (its locked mappings that can be accessed; VmLck 6 MiB also counts 4 MiB of PROT_NONE reservations)"),
            "{msg}"
        );
    }
    pool.finish();
}

/// A small C program run as a user: maps a 2 MiB huge page memfd (so that
/// the doctor counts it among the servers), locks 4 MiB of PROT_NONE
/// reservation and 2 MiB of private memory, then waits for stdin to close.
struct Locker {
    child: std::process::Child,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    _dir: hugeshm_testkit::TempDir,
}

const LOCKER_C: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
int main(void) {
    int fd = memfd_create("locker", MFD_HUGETLB);
    if (fd < 0 || ftruncate(fd, 2 << 20)) { perror("memfd"); return 1; }
    char *huge = mmap(0, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *none = mmap(0, 4 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *mem = mmap(0, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (huge == MAP_FAILED || none == MAP_FAILED || mem == MAP_FAILED) { perror("mmap"); return 1; }
    huge[0] = 1;
    /* PROT_NONE: marked locked (VmLck counts it), nothing to fault in,
       so mlock reports ENOMEM after locking it. */
    mlock(none, 4 << 20);
    if (mlock(mem, 2 << 20)) { perror("mlock"); return 1; }
    printf("ready\n");
    fflush(stdout);
    /* Each line on stdin: a new memlock limit (soft and hard) to take. */
    unsigned long long n;
    while (scanf("%llu", &n) == 1) {
        struct rlimit r = { n, n };
        printf(setrlimit(RLIMIT_MEMLOCK, &r) ? "failed\n" : "ok\n");
        fflush(stdout);
    }
    return 0;
}
"#;

impl Locker {
    fn start(uid: u32) -> Locker {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let dir = hugeshm_testkit::TempDir::new("locker");
        std::fs::write(dir.join("locker.c"), LOCKER_C).unwrap();
        let built = Command::new("cc")
            .arg("-o")
            .arg(dir.join("locker"))
            .arg(dir.join("locker.c"))
            .status()
            .unwrap();
        assert!(built.success(), "cc locker.c");
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid)).unwrap();
        let mut child = Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
            ])
            .arg(dir.join("locker"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Locker {
            child,
            stdout,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Has it lower its own memlock limit (soft and hard): root may not
    /// change another user's limits without CAP_SYS_RESOURCE.
    fn set_limit(&mut self, bytes: u64) {
        use std::io::{BufRead, Write};
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{bytes}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ok", "setrlimit({bytes})");
    }
}

impl Drop for Locker {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `advise --dpdk ARGS --json`: the pages counted for the EAL, and the
/// plan's warnings.
fn advise_dpdk(args: &str) -> (u64, Vec<String>) {
    let plan = common::json(common::hugeshm(&[
        "advise", "--dpdk", args, "--spare", "0", "--json",
    ]));
    let pages = plan["counted"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["label"].as_str().unwrap().starts_with("dpdk "))
        .map(|c| c["pages"].as_u64().unwrap())
        .sum();
    let warnings = plan["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect();
    (pages, warnings)
}

#[test]
fn advise_dpdk_gives_the_pages_testpmd_starts_with_and_not_one_fewer() {
    let Some(pool) = live!() else { return };
    if skip_unless_testpmd(pool.name()) {
        return;
    }
    let mount = HugetlbfsMount::new().expect("a hugetlbfs mount");
    let cases = [
        TestpmdOptions::default(),
        TestpmdOptions {
            socket_mem: true,
            ..TestpmdOptions::default()
        },
        TestpmdOptions {
            huge_dir: Some(mount.path().to_owned()),
            single_file_segments: false,
            ..TestpmdOptions::default()
        },
    ];
    for o in cases {
        let args = o.eal_memory_args().join(" ");
        let (pages, warnings) = advise_dpdk(&args);
        // 64 MB: 32 pages of 2 MiB, the -m the EAL preallocates.
        assert_eq!(pages, 32, "advise --dpdk {args:?}");
        // The plan applied (the pool restored by the guard), where no other
        // page is free.
        pool.set_available(M2, 0).expect("an empty pool");
        let applied = common::hugeshm(&["apply", "--dpdk", &args, "--spare", "0"]);
        assert!(applied.status.success(), "apply: {applied:?}");
        let (_, warnings_now) = advise_dpdk(&args);
        assert!(
            warnings_now.iter().all(|w| !w.contains(" short")),
            "{args}: {warnings_now:?} (before: {warnings:?})"
        );
        let pmd = Testpmd::start(&o).expect("testpmd starts with the advised pages");
        let huge: u64 = segments_of(pmd.pid())
            .iter()
            .filter(|s| s["page_size_bytes"].as_u64() == Some(M2))
            .map(|s| s["size_bytes"].as_u64().unwrap())
            .sum();
        println!(
            "{args}: advise and apply {pages} pages; started, mapped {huge} bytes on 2 MiB pages"
        );
        assert_eq!(huge, 64 * MIB, "{args}");
        drop(pmd);
        // One page fewer: advise says so before the start, in DPDK's words,
        // and testpmd stops with them.
        pool.set_available(M2, pages - 1).expect("one page fewer");
        let (_, warnings) = advise_dpdk(&args);
        let node = if o.socket_mem { " on socket 0" } else { "" };
        let said =
            format!("EAL: Not enough memory available{node}! Requested: 64MB, available: 62MB");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("31 free pages now, 32 needed: 1 short") && w.contains(&said)),
            "{args}: {warnings:?}"
        );
        let err = Testpmd::start(&o)
            .err()
            .expect("testpmd fails one page short");
        assert!(err.contains(&said), "{args}: {err}");
    }
    drop(mount);
    pool.finish();
}
