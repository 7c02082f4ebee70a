//! `hugeshm collapse`: shared memory on 4 KiB pages, mapped by a holder
//! and its forked children that keep writing to it, moved onto 2 MiB pages
//! in place (SysV, shared anonymous, a /dev/shm file); an unaligned
//! mapping refused with the reason; `--dry-run` changes nothing; uid 65534
//! cannot collapse root's process.

use crate::common::{cannot_act_as_nobody, cmd, hugeshm, json, output_within_20s};
use hugeshm_testkit::{live, TestProc};
use serde_json::Value;
use std::time::{Duration, Instant};

const M: u64 = 1 << 20;

/// A field (`Rss`, `ShmemPmdMapped`) of `pid`'s mapping at `start`, in
/// bytes.
fn field(pid: u32, start: u64, key: &str) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-')) {
            let lo = u64::from_str_radix(range.split('-').next().unwrap(), 16).unwrap_or(0);
            inside = lo == start;
        } else if inside && line.split_whitespace().next() == Some(key) {
            return line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
                * 1024;
        }
    }
    0
}

/// `ShmemPmdMapped` of `pid`'s mapping at `start`, and its `VmPTE`.
fn mapped(pid: u32, start: u64) -> (u64, u64) {
    let pmd = field(pid, start, "ShmemPmdMapped:");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let pte = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPTE:"))
        .map(|v| v.split_whitespace().next().unwrap().parse::<u64>().unwrap() * 1024)
        .unwrap();
    (pmd, pte)
}

/// Waits (up to 10 s) until every process of `holder` maps each of its
/// objects on 2 MiB pages: the children write every 20 ms, and refault a
/// collapsed block as one PMD.
fn all_on_2m(holder: &TestProc) -> Vec<(u32, u64, u64)> {
    let pids: Vec<u32> = std::iter::once(holder.pid())
        .chain(holder.report().children.iter().copied())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now: Vec<(u32, u64, u64)> = pids
            .iter()
            .flat_map(|&p| {
                holder.objects().iter().map(move |o| {
                    let (pmd, pte) = mapped(p, o.addr);
                    (p, pmd, pte)
                })
            })
            .collect();
        let done = now
            .iter()
            .zip(holder.objects().iter().cycle())
            .all(|((_, pmd, _), o)| *pmd == o.size);
        if done || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn collapse_json(pid: u32, extra: &[&str]) -> Value {
    let p = pid.to_string();
    json(hugeshm(
        &[&["collapse", "--pid", &p, "--json"][..], extra].concat(),
    ))
}

/// The doctor's view of the SysV segments of `holder` (`segments --json`):
/// (its `collapse_aligned`, `thp_bytes`, finding codes, fixes).
fn doctor_sees(holder: &TestProc) -> Vec<(Value, Value, Vec<String>, String)> {
    let v = json(hugeshm(&["segments", "--json"]));
    let segs = v["segments"].as_array().unwrap();
    let mut seen = Vec::new();
    for id in holder.objects().iter().filter_map(|o| o.shmid) {
        let s = segs
            .iter()
            .find(|s| s["kind"] == "sysv" && s["id"].as_i64() == Some(i64::from(id)))
            .unwrap_or_else(|| panic!("segment {id} not in {v:#}"));
        let f = s["findings"].as_array().unwrap();
        let codes = f.iter().map(|f| f["code"].as_str().unwrap().to_owned());
        let fixes = f
            .iter()
            .filter_map(|f| f["fix"].as_str())
            .collect::<Vec<_>>();
        seen.push((
            s["collapse_aligned"].clone(),
            s["thp_bytes"].clone(),
            codes.collect(),
            fixes.join("\n"),
        ));
    }
    seen
}

#[test]
fn shared_memory_of_every_kind_moves_onto_2m_pages_for_every_process() {
    let Some(live) = live!() else { return };
    for specs in [
        &["sysv-plain:64M"][..],
        &[
            "anon-shared-plain:32M",
            &format!("devshm:hugeshm-collapse-{}:32M", std::process::id()),
        ][..],
    ] {
        let args = [&["--touch", "--align", "2M", "--forks", "3"][..], specs].concat();
        let holder = TestProc::spawn(&args).unwrap();
        // The children have written every page (their page tables built).
        let deadline = Instant::now() + Duration::from_secs(10);
        for &c in &holder.report().children {
            for o in holder.objects() {
                while field(c, o.addr, "Rss:") < o.size && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let ptes_before: Vec<u64> = std::iter::once(holder.pid())
            .chain(holder.report().children.iter().copied())
            .map(|p| mapped(p, holder.objects()[0].addr).1)
            .collect();

        // --dry-run changes nothing.
        let dry = collapse_json(holder.pid(), &["--dry-run"]);
        assert!(dry["result"].is_null(), "{dry:#}");
        let total: u64 = holder.objects().iter().map(|o| o.size).sum();
        let planned: u64 = dry["plan"]["mappings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["blocks"].as_u64().unwrap() * 2 * M)
            .sum();
        assert_eq!(planned, total, "{dry:#}");
        assert_eq!(mapped(holder.pid(), holder.objects()[0].addr).0, 0);

        // The doctor names the collapse of the holder as the fix that
        // needs no restart.
        let collapse = format!("hugeshm collapse --pid {}", holder.pid());
        for (aligned, thp, codes, fixes) in doctor_sees(&holder) {
            assert_eq!((aligned, thp), (Value::Bool(true), Value::from(0)));
            assert!(codes.contains(&"page-tables".to_owned()), "{codes:?}");
            assert!(fixes.contains(&collapse), "{fixes}");
        }

        let v = collapse_json(holder.pid(), &[]);
        let r = &v["result"];
        assert_eq!(r["collapsed"].as_u64(), Some(total / (2 * M)), "{v:#}");
        assert_eq!(r["blocks"].as_u64(), Some(total / (2 * M)), "{v:#}");
        assert!(r["stopped"].is_null(), "{v:#}");
        // Every process that maps the memory is in the report, on 4 KiB
        // pages before.
        let before = r["before"].as_array().unwrap();
        assert_eq!(before.len(), 4, "the holder and its 3 children: {v:#}");
        assert!(before.iter().all(|m| m["pmd_mapped_bytes"] == 0), "{v:#}");
        // After: each of them maps every block as one 2 MiB page, and its
        // page tables shrank; the children never stopped writing.
        let after = all_on_2m(&holder);
        for (i, (pid, pmd, pte)) in after.iter().enumerate() {
            let o = &holder.objects()[i % holder.objects().len()];
            assert_eq!(*pmd, o.size, "pid {pid} {}: {after:?}", o.kind);
            let before = ptes_before[i / holder.objects().len()];
            assert!(*pte < before, "pid {pid}: VmPTE {pte} not below {before}");
        }
        // The doctor sees it on 2 MiB THP: no fall-back any more.
        for (_, thp, codes, fixes) in doctor_sees(&holder) {
            assert_eq!(thp.as_u64(), Some(64 * M));
            assert_eq!(codes, ["thp-shmem"], "{fixes}");
        }
        // A second run finds nothing to do.
        let again = collapse_json(holder.pid(), &[]);
        assert_eq!(again["result"]["blocks"].as_u64(), Some(0), "{again:#}");
        holder.finish().unwrap();
    }
    live.finish();
}

#[test]
fn an_unaligned_mapping_is_refused_with_the_reason() {
    let Some(live) = live!() else { return };
    // A /dev/shm file mapped from offset 4 KiB at a 2 MiB-aligned address:
    // no block of it can be mapped as one 2 MiB page.
    let name = format!("hugeshm-collapse-off-{}", std::process::id());
    let holder = TestProc::spawn([
        "--touch",
        "--align",
        "2M",
        "--map-offset",
        "4096",
        &format!("devshm:{name}:16M"),
    ])
    .unwrap();
    let out = hugeshm(&["collapse", "--pid", &holder.pid().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not 2 MiB-aligned"), "{err}");
    assert!(err.contains("shmem_enabled at `advise`"), "{err}");
    assert_eq!(mapped(holder.pid(), holder.objects()[0].addr).0, 0);
    // A process with no shared memory: nothing to collapse; none at all.
    let out = hugeshm(&["collapse", "--pid", "1", "--shmid", "999999999"]);
    assert_eq!(out.status.code(), Some(2));
    let out = hugeshm(&["collapse", "--pid", "999999999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no process 999999999"));
    holder.finish().unwrap();
    live.finish();
}

/// `collapse --path`: a /dev/shm file written by its holder and mapped by
/// a child that keeps writing moves onto 2 MiB pages though hugeshm maps it
/// only for the call; the child then maps every block by PMD; a hole
/// punched in it splits a huge page, which status notices. A link, a
/// FIFO and a file outside a tmpfs are refused (exit 2), never followed or
/// waited on.
#[test]
fn a_dev_shm_file_moves_onto_2m_pages_by_its_path() {
    let Some(live) = live!() else { return };
    let name = format!("hugeshm-collapse-path-{}", std::process::id());
    let holder = TestProc::spawn([
        "--touch",
        "--align",
        "2M",
        "--forks",
        "1",
        &format!("devshm:{name}:16M"),
    ])
    .unwrap();
    let path = format!("/dev/shm/{name}");
    let v = json(hugeshm(&["collapse", "--path", &path, "--json"]));
    assert_eq!(v["blocks"].as_u64(), Some(8), "{v:#}");
    assert_eq!(v["collapsed"].as_u64(), Some(8), "{v:#}");
    let pids: Vec<u64> = v["mappers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["pid"].as_u64().unwrap())
        .collect();
    assert!(pids.contains(&u64::from(holder.pid())), "{v:#}");
    let after = all_on_2m(&holder);
    assert!(after.iter().any(|(_, pmd, _)| *pmd == 16 * M), "{after:?}");
    // A hole punched in the file splits the huge page that holds it: the
    // kernel counts it, and status says so while shmem sits on THP.
    let split = || {
        let v = std::fs::read_to_string("/proc/vmstat").unwrap();
        hugeshm_parse::vmstat::parse(&v)
            .unwrap()
            .thp_split_page
            .unwrap()
    };
    let splits = split();
    let punched = std::process::Command::new("fallocate")
        .args([
            "--punch-hole",
            "--offset",
            "1MiB",
            "--length",
            "4KiB",
            &path,
        ])
        .status()
        .unwrap();
    assert!(punched.success());
    let st = json(hugeshm(&["status", "--json"]));
    assert!(split() > splits, "the punched hole split nothing");
    assert!(
        st["thp"]["split_since_boot"].as_u64().unwrap() > splits,
        "{:#}",
        st["thp"]
    );
    assert!(
        st["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "thp-split"),
        "{:#}",
        st["findings"]
    );
    holder.finish().unwrap();

    let dir = hugeshm_testkit::TempDir::new("collapse-path");
    let fifo = format!("/dev/shm/{name}.fifo");
    let link = format!("/dev/shm/{name}.link");
    let plain = dir.path().join("file");
    std::fs::write(&plain, vec![1u8; 4 << 20]).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let theirs = format!("/dev/shm/{name}.nobody");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        // O_EXCL, no link followed: a name in /dev/shm anyone may take.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&theirs)
            .unwrap();
        f.write_all(&vec![1u8; 4 << 20]).unwrap();
    }
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    for (p, want) in [
        (fifo.as_str(), "not a regular file"),
        (link.as_str(), "link"),
        (plain.to_str().unwrap(), "not on a tmpfs"),
        (theirs.as_str(), "belongs to uid 65534"),
    ] {
        let out = output_within_20s(cmd(&["collapse", "--path", p]));
        assert_eq!(out.status.code(), Some(2), "{p}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{p}: {err}");
    }
    std::fs::remove_file(&fifo).unwrap();
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&theirs).unwrap();
    live.finish();
}

/// `ShmemHugePages` of /proc/meminfo, in bytes: the host's shmem on THP.
fn shmem_huge_bytes() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap();
    hugeshm_parse::meminfo::parse(&m)
        .unwrap()
        .shmem_huge_pages_bytes
        .unwrap()
}

/// `collapse --shmid ID` alone: a SysV segment nobody has attached (root's,
/// left as a kept region is) is attached for the call and its blocks move
/// onto 2 MiB pages (the host's ShmemHugePages grows by its size); another
/// user's segment is refused with exit 2 and never attached.
#[test]
fn a_segment_nobody_attaches_moves_by_its_shmid() {
    let Some(live) = live!() else { return };
    let tp = TestProc::spawn(["--orphan-sysv", "--touch", "sysv-plain:16M"]).unwrap();
    let shmid = tp.objects()[0].shmid.unwrap();
    assert!(tp.finish().unwrap().success());
    let before = shmem_huge_bytes();
    let id = shmid.to_string();
    let out = hugeshm(&["collapse", "--shmid", &id, "--json"]);
    let after = shmem_huge_bytes();
    std::process::Command::new("ipcrm")
        .args(["-m", &id])
        .status()
        .unwrap();
    let v = json(out);
    assert_eq!(
        (v["blocks"].as_u64(), v["collapsed"].as_u64()),
        (Some(8), Some(8)),
        "{v:#}"
    );
    assert!(
        after >= before + 16 * M,
        "ShmemHugePages {before} -> {after}: {v:#}"
    );

    // A kept region, by its name: the same through `hugeshm ls`'s object.
    let name = format!("collapse-region-{}", std::process::id());
    let made = hugeshm(&["create", &name, "--size", "16M", "--page-size", "4k"]);
    assert!(made.status.success(), "{made:?}");
    let out = hugeshm(&["collapse", "--region", &name, "--json"]);
    let rm = hugeshm(&["rm", &name]);
    let v = json(out);
    assert!(rm.status.success(), "{rm:?}");
    assert!(v["object"].as_str().unwrap().starts_with("sysv "), "{v:#}");
    assert!(v["blocks"].as_u64().unwrap() >= 8, "{v:#}");
    assert_eq!(v["collapsed"], v["blocks"], "{v:#}");

    if !cannot_act_as_nobody("a_segment_nobody_attaches_moves_by_its_shmid [65534]") {
        let testproc = hugeshm_testkit::testproc_built().unwrap();
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&testproc)
            .args(["--orphan-sysv", "--touch", "sysv-plain:4M"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let theirs = report["objects"][0]["shmid"].as_i64().unwrap().to_string();
        let r = hugeshm(&["collapse", "--shmid", &theirs]);
        let stat = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
        std::process::Command::new("ipcrm")
            .args(["-m", &theirs])
            .status()
            .unwrap();
        assert_eq!(r.status.code(), Some(2), "{r:?}");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("belongs to uid 65534"),
            "{r:?}"
        );
        // Never attached: its last attach/detach pid is still its creator's.
        let line = stat
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(theirs.as_str()))
            .unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[4], f[5], "cpid and lpid: {line}");
    }
    live.finish();
}

#[test]
fn another_user_cannot_collapse_roots_process() {
    let Some(live) = live!() else { return };
    if cannot_act_as_nobody(hugeshm_testkit::test_name!()) {
        return;
    }
    let holder = TestProc::spawn(["--touch", "--align", "2M", "sysv-plain:8M"]).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(cmd(&[]).get_program())
        .args(["collapse", "--pid", &holder.pid().to_string()])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("run as root"), "{err}");
    assert_eq!(mapped(holder.pid(), holder.objects()[0].addr).0, 0);
    holder.finish().unwrap();
    live.finish();
}

/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` set for a while
/// (under the test kit's lock, which covers the THP settings), put back as
/// it was when dropped.
struct ShmemEnabled(String);

const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

impl ShmemEnabled {
    fn set(value: &str) -> ShmemEnabled {
        let text = std::fs::read_to_string(SHMEM_ENABLED).expect(SHMEM_ENABLED);
        let was = text
            .split('[')
            .nth(1)
            .and_then(|t| t.split(']').next())
            .unwrap_or_else(|| panic!("{SHMEM_ENABLED}: {text:?}"))
            .to_owned();
        std::fs::write(SHMEM_ENABLED, value).expect(SHMEM_ENABLED);
        ShmemEnabled(was)
    }
}

impl Drop for ShmemEnabled {
    fn drop(&mut self) {
        std::fs::write(SHMEM_ENABLED, &self.0).expect(SHMEM_ENABLED);
    }
}

/// PostgreSQL on 4 KiB pages (`huge_pages = try` with no free huge page,
/// else `off`), started while `shmem_enabled = advise` so that the kernel
/// placed its main shared memory (shared anonymous) 2 MiB-aligned, then
/// set back; a table fills most of its buffers: `hugeshm collapse --pid
/// POSTMASTER` moves them onto 2 MiB pages for the postmaster and every
/// child, with a client connected, and the server answers after it with
/// nothing in its log.
#[test]
fn postgres_on_4k_pages_moves_onto_2m_pages_without_a_restart() {
    use hugeshm_testkit::postgres::{skip_unless_postgres, PgCluster};
    let Some(live) = live!() else { return };
    if skip_unless_postgres(live.name()) {
        return;
    }
    {
        let mut pg = PgCluster::init("64MB").expect("initdb");
        let free =
            std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
                .map(|t| t.trim() == "0")
                .unwrap_or(true);
        {
            let _advise = ShmemEnabled::set("advise");
            pg.start(if free { "try" } else { "off" })
                .expect("PostgreSQL starts on 4 KiB pages");
        }
        let client = pg.hold_backend().expect("a client backend");
        // 40 MB of the 64 MB of buffers in use: the kernel collapses only
        // blocks with a page in memory (an untouched one is EINVAL).
        // (An INSERT, not CREATE TABLE AS: that writes through a ring of
        // 16 MB of buffers.)
        pg.query("CREATE TABLE fill (g int, pad text)")
            .expect("a table");
        pg.query("INSERT INTO fill SELECT g, repeat('x', 400) FROM generate_series(1, 100000) g")
            .expect("its rows in the buffers");
        let pm = pg.postmaster_pid().expect("the postmaster");
        let v = collapse_json(pm, &[]);
        let anon: Vec<&Value> = v["plan"]["mappings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["kind"] == "shared-anonymous" || m["kind"]["kind"] == "shared-anonymous")
            .collect();
        assert!(!anon.is_empty(), "PostgreSQL's main shared memory: {v:#}");
        let blocks: u64 = anon.iter().map(|m| m["blocks"].as_u64().unwrap()).sum();
        assert!(
            blocks >= 32,
            "64 MB of shared_buffers in 2 MiB blocks: {v:#}"
        );
        let r = &v["result"];
        assert!(r["stopped"].is_null(), "{v:#}");
        let collapsed = r["collapsed"].as_u64().unwrap();
        assert!(
            collapsed >= blocks / 2,
            "{collapsed} of {blocks} blocks: {v:#}"
        );
        // Every process that maps it is in the report: the postmaster, its
        // background processes and the client's backend.
        let pids = |side: &str| -> Vec<u64> {
            r[side]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["pid"].as_u64().unwrap())
                .collect()
        };
        let before = pids("before");
        assert!(before.contains(&u64::from(pm)), "{v:#}");
        assert!(before.contains(&u64::from(client.backend_pid())), "{v:#}");
        assert!(before.len() >= 4, "{v:#}");
        // The postmaster maps what was collapsed as 2 MiB pages; the
        // others lost their page tables for it (they refault it as PMDs).
        let side = |s: &str, pid: u32, key: &str| {
            r[s].as_array()
                .unwrap()
                .iter()
                .find(|m| m["pid"].as_u64() == Some(u64::from(pid)))
                .and_then(|m| m[key].as_u64())
                .unwrap_or(0)
        };
        assert!(
            side("after", pm, "pmd_mapped_bytes") >= collapsed * 2 * M,
            "{v:#}"
        );
        let ptes = |s: &str| -> u64 {
            r[s].as_array()
                .unwrap()
                .iter()
                .filter_map(|m| m["vm_pte_bytes"].as_u64())
                .sum()
        };
        assert!(ptes("after") < ptes("before"), "{v:#}");
        // The server answers, through the connection held throughout too.
        assert_eq!(pg.query("SELECT 6 * 7").unwrap().trim(), "42");
        client.release().expect("the client's session ends cleanly");
        pg.stop().expect("PostgreSQL stops");
        let log = pg.log();
        assert!(
            !log.contains("PANIC")
                && !log.contains("FATAL:  terminating")
                && !log.contains("ERROR"),
            "{log}"
        );
    }
    live.finish();
}
