//! `hugeshm run`'s records in `segments`: the segment a server got through
//! `hugeshm run` says so ("placed by hugeshm run": page size asked and
//! given, placement, pre-fault, the split at start), and what has changed
//! since is a finding (pages that left their nodes, a pool shrunk under a
//! server that will need it again at its next start).
//!
//! The records are files in `/dev/shm` that the server's user wrote and
//! anyone could have planted. They are looked up from what is live: for
//! each mapping of a segment the scan found (pid and start address), the
//! one name the writer gives its record; `/dev/shm` is not listed, so what
//! other users create there neither hides a record nor slows the scan, and
//! a record whose process is gone is not seen at all (the next `hugeshm
//! run` of that user removes it). The doctor, often root, trusts none of
//! them: each is read bounded and without following links (the probe),
//! parsed strictly (its counts bounded by the size it claims), and shown
//! only when it is owned by the uid of the process it names, that process
//! runs the executable it names (`/proc/PID/exe`) and started when it says
//! (a reused pid is not taken for it), and it maps what the record
//! describes: address, size, kind, page size, nodes that are online. Any
//! record read that does not hold is said, as a report finding.

use std::collections::{BTreeMap, HashMap};

use hugeshm_parse::maps::MapsEntry;
use hugeshm_parse::pid_status::PidStatus;
use hugeshm_parse::run_record::{self, RunObject, RunRecord};
use hugeshm_parse::size::{format_bytes, BASE_PAGE};
use hugeshm_probe::{HostSnapshot, Probe, ReadError};
use serde::{Deserialize, Serialize};

use super::{Segment, SegmentKind, SegmentsReport};
use crate::finding::{pool_fix, Finding, Severity};

/// What `segments` shows of a segment placed by `hugeshm run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunPlacement {
    /// The record file.
    pub file: String,
    /// What it says (checked against the process).
    pub record: RunRecord,
    /// Decimal GB/s of the pre-fault.
    pub prefault_gbps: f64,
}

// The record's numbers come from the strict parser (digits and a point:
// finite) and the rate divides by a positive time: no NaN to break Eq.
impl Eq for RunPlacement {}

/// A record that is not shown, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IgnoredRunRecord {
    /// The record file.
    pub file: String,
    /// Why it is not shown.
    pub reason: String,
}

/// A live mapping a record may describe: process `pid` maps the segment
/// at index `segment` of the report at `start`.
pub(super) struct Candidate {
    pub(super) segment: usize,
    pub(super) pid: u32,
    pub(super) start: u64,
}

/// Whether mappings of segments of `kind` can have a record: `hugeshm run`
/// changes shared anonymous memory, SysV segments and private mappings.
pub(super) fn may_have_record(kind: SegmentKind) -> bool {
    matches!(
        kind,
        SegmentKind::Anon | SegmentKind::Sysv | SegmentKind::PrivateHugetlb
    )
}

/// Looks up the record of each candidate mapping and puts each that holds
/// on its segment; called by the segments scan once it has its segments.
pub(super) fn attach(
    probe: &Probe,
    host: &HostSnapshot,
    report: &mut SegmentsReport,
    candidates: &[Candidate],
) {
    let mut procs: HashMap<u32, Proc> = HashMap::new();
    for c in candidates {
        let Some(f) = probe.run_record(c.pid, c.start) else {
            continue;
        };
        let p = procs
            .entry(c.pid)
            .or_insert_with(|| Proc::read(probe, c.pid));
        match check(f.named, &f.read, p, &report.segments[c.segment], host) {
            Check::Gone => {}
            Check::Ignored(reason) => {
                report.findings.push(Finding::new(
                    Severity::Warning,
                    "run-record-ignored",
                    format!("{}: not shown: {reason}", f.path),
                    None,
                ));
                report.run_records_ignored.push(IgnoredRunRecord {
                    file: f.path.clone(),
                    reason,
                });
            }
            Check::Holds(rec) => place(host, f.path.clone(), *rec, c.segment, report),
        }
    }
}

/// What a record is checked against, read once per process.
struct Proc {
    status: Result<PidStatus, ReadError>,
    /// `/proc/PID/stat` field 22.
    start_ticks: Option<u64>,
    /// `/proc/PID/exe`, as the writer records it, or why it cannot be read.
    exe: Result<String, String>,
    maps: Result<Vec<MapsEntry>, ReadError>,
}

impl Proc {
    fn read(probe: &Probe, pid: u32) -> Proc {
        let files = probe.pid(pid);
        Proc {
            status: files.status(),
            start_ticks: std::fs::read_to_string(probe.proc_path(&format!("{pid}/stat")))
                .ok()
                .and_then(|t| start_ticks(&t)),
            exe: std::fs::read_link(probe.proc_path(&format!("{pid}/exe")))
                .map(|l| printable(&l.to_string_lossy()))
                .map_err(|e| e.to_string()),
            maps: files.maps(),
        }
    }
}

/// What the writer makes of a path (`hugeshm_region::run`): a control
/// character as `?`.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Whether the record's `exe` is what the kernel says the process runs:
/// the same path, or that path replaced since (`PATH (deleted)`, a
/// package upgraded under a running server).
fn same_exe(recorded: &str, kernel: &str) -> bool {
    kernel == recorded || kernel.strip_suffix(" (deleted)") == Some(recorded)
}

enum Check {
    /// Its process is gone.
    Gone,
    Ignored(String),
    /// It holds.
    Holds(Box<RunRecord>),
}

/// Checks the record file named for `named` (pid, address), as `read`,
/// against its process `p` and the segment `seg` the scan found it maps.
fn check(
    named: (u32, u64),
    read: &Result<(String, u32), String>,
    p: &Proc,
    seg: &Segment,
    host: &HostSnapshot,
) -> Check {
    let (text, owner) = match read {
        Ok(r) => r,
        Err(why) => return Check::Ignored(why.clone()),
    };
    let rec = match run_record::parse(text) {
        Ok(r) => r,
        Err(e) => return Check::Ignored(format!("not a record ({e})")),
    };
    if (rec.pid, rec.address) != named {
        return Check::Ignored(format!(
            "it names pid {} at {:#x}, its file name pid {} at {:#x}",
            rec.pid, rec.address, named.0, named.1
        ));
    }
    let status = match &p.status {
        Ok(s) => s,
        Err(e) if e.is_not_found() => return Check::Gone,
        Err(e) => return Check::Ignored(format!("pid {} cannot be read: {e}", rec.pid)),
    };
    if let Some(now) = p.start_ticks.filter(|&s| s != rec.start_ticks) {
        return Check::Ignored(format!(
            "it names pid {} started at tick {}, pid {} now started at tick {now} \
             (a record of an earlier process)",
            rec.pid, rec.start_ticks, rec.pid
        ));
    }
    if status.uid != Some(*owner) || rec.uid != *owner {
        return Check::Ignored(format!(
            "the file belongs to uid {owner}, the record says uid {}, pid {} runs as uid {}",
            rec.uid,
            rec.pid,
            status.uid.map_or("?".to_owned(), |u| u.to_string())
        ));
    }
    match &p.exe {
        Ok(exe) if same_exe(&rec.exe, exe) => {}
        Ok(exe) => {
            return Check::Ignored(format!(
                "it names the program {:?}, pid {} runs {exe:?}",
                rec.exe, rec.pid
            ))
        }
        Err(e) => {
            return Check::Ignored(format!(
                "pid {}'s program cannot be read (/proc/{}/exe: {e})",
                rec.pid, rec.pid
            ))
        }
    }
    let maps = match &p.maps {
        Ok(m) => m,
        Err(e) if e.is_not_found() => return Check::Gone,
        Err(e) => return Check::Ignored(format!("pid {} cannot be read: {e}", rec.pid)),
    };
    let Some(m) = maps.iter().find(|m| m.start == rec.address) else {
        return Check::Ignored(format!(
            "pid {} has no mapping at {:#x} (it may have unmapped it past hugeshm run)",
            rec.pid, rec.address
        ));
    };
    if let Err(why) = same_mapping(&rec, m) {
        return Check::Ignored(format!(
            "does not match pid {}'s mapping at {:#x}: {why}",
            rec.pid, rec.address
        ));
    }
    let kind_ok = match rec.object {
        RunObject::Sysv { shmid } => seg.kind == SegmentKind::Sysv && seg.id == Some(shmid),
        RunObject::Anon => seg.kind == SegmentKind::Anon,
        RunObject::Private => seg.kind == SegmentKind::PrivateHugetlb,
    };
    if !kind_ok {
        return Check::Ignored(format!(
            "it says {}, pid {}'s mapping at {:#x} is {}",
            rec.object.as_str(),
            rec.pid,
            rec.address,
            seg.label()
        ));
    }
    if let Some(now) = seg
        .page_size_bytes
        .filter(|&p| p != rec.verified_page_size_bytes)
    {
        return Check::Ignored(format!(
            "pid {}'s mapping at {:#x} is on {} pages, the record says {}",
            rec.pid,
            rec.address,
            format_bytes(now),
            format_bytes(rec.verified_page_size_bytes)
        ));
    }
    // One line per node at most, and only nodes the host has (the parser
    // bounds their sum by the size, which is the mapping's).
    if !host.nodes.is_empty() {
        if let Some(n) = rec
            .nodes
            .keys()
            .find(|n| !host.nodes.iter().any(|h| h.node == **n))
        {
            return Check::Ignored(format!(
                "it names node {n}, which this host does not have ({} node{})",
                host.nodes.len(),
                if host.nodes.len() == 1 { "" } else { "s" }
            ));
        }
    }
    Check::Holds(Box::new(rec))
}

/// Size and kind of the mapping against the record.
fn same_mapping(rec: &RunRecord, m: &MapsEntry) -> Result<(), String> {
    let size = m.end.saturating_sub(m.start);
    if size != rec.size_bytes {
        return Err(format!(
            "{size} bytes mapped, the record says {}",
            rec.size_bytes
        ));
    }
    let path = m.pathname.as_deref().unwrap_or("");
    let ok = match rec.object {
        RunObject::Sysv { shmid } => path.starts_with("/SYSV") && m.inode == shmid,
        RunObject::Anon => m.perms.shared && (path == "/anon_hugepage" || path == "/dev/zero"),
        RunObject::Private => !m.perms.shared,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the record says {}, the mapping is not one",
            rec.object.as_str()
        ))
    }
}

/// Field 22 of `/proc/PID/stat`.
fn start_ticks(stat: &str) -> Option<u64> {
    stat.get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

fn nodes_text(nodes: &BTreeMap<u32, u64>) -> String {
    nodes
        .iter()
        .map(|(n, b)| format!("node {n} {}", format_bytes(*b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Puts a record that holds on segment `i`, with its findings.
fn place(host: &HostSnapshot, file: String, rec: RunRecord, i: usize, report: &mut SegmentsReport) {
    let placement = RunPlacement {
        file,
        prefault_gbps: rec.prefault_gbps(),
        record: rec,
    };
    let seg = &mut report.segments[i];
    let r = &placement.record;
    let label = seg.label();
    // Pages that left their nodes since the start.
    let now: BTreeMap<u32, u64> = seg
        .nodes
        .iter()
        .filter_map(|(n, b)| Some((n.parse().ok()?, *b)))
        .collect();
    if !r.nodes.is_empty() && !now.is_empty() {
        let moved: u64 = r
            .nodes
            .iter()
            .map(|(n, then)| then.saturating_sub(now.get(n).copied().unwrap_or(0)))
            .fold(0u64, u64::saturating_add)
            .min(r.size_bytes);
        if moved >= r.page_size_bytes && moved.saturating_mul(100) >= r.size_bytes {
            seg.findings.push(Finding::new(
                Severity::Warning,
                "run-pages-moved",
                format!(
                    "{label}: placed by hugeshm run ({}) as {}; now {}: {} left their nodes",
                    r.numa,
                    nodes_text(&r.nodes),
                    nodes_text(&now),
                    format_bytes(moved)
                ),
                Some(
                    "find what migrates them (automatic NUMA balancing: sysctl kernel.numa_balancing; \
                     numad; migratepages) or restart the server to place them again"
                        .to_owned(),
                ),
            ));
        }
    }
    // A pool shrunk under the server: its pages are surplus now, and go back
    // to the kernel when it stops; its next start needs them again.
    if r.page_size_bytes > BASE_PAGE {
        if let Some(p) = host.pool(r.page_size_bytes).filter(|p| p.surplus > 0) {
            let need = r.size_bytes / r.page_size_bytes;
            seg.findings.push(Finding::new(
                Severity::Warning,
                "run-pool-shrunk",
                format!(
                    "{label}: the {} pool was shrunk under {} (pid {}): {} of its pages are surplus \
                     and return to the kernel when it stops; its next start needs {need} pages \
                     (policy {}: {})",
                    format_bytes(r.page_size_bytes),
                    r.exe,
                    r.pid,
                    p.surplus,
                    r.policy,
                    if r.policy == "only" {
                        "it would fail to start"
                    } else {
                        "it would start on 4 KiB pages"
                    }
                ),
                Some(pool_fix(
                    r.page_size_bytes,
                    host.default_page_size(),
                    p.nr.saturating_add(p.surplus),
                )),
            ));
        }
    }
    // Placed on 4 KiB pages by run itself (--page-size keep, or a pool too
    // short under try): the fix is run's, not the server's settings.
    if r.page_size_bytes <= BASE_PAGE {
        let fix = run_base_fix(host, r);
        for f in seg
            .findings
            .iter_mut()
            .filter(|f| f.code == "silent-fallback")
        {
            f.fix = Some(fix.clone());
        }
    }
    seg.run = Some(placement);
}

/// The fix of a mapping `hugeshm run` placed on 4 KiB pages: restart the
/// server under `run --page-size` with the pool it needs.
fn run_base_fix(host: &HostSnapshot, r: &RunRecord) -> String {
    let huge = host.default_page_size().unwrap_or(2 << 20);
    let pages = r.size_bytes.div_ceil(huge);
    let avail = host.pool(huge).map(|p| p.available()).unwrap_or(0);
    let total = host.pool(huge).map(|p| p.total()).unwrap_or(0);
    let pool = if avail < pages {
        format!(
            "{}, then ",
            pool_fix(huge, Some(huge), total + (pages - avail) + 2)
        )
    } else {
        String::new()
    };
    let why = match &r.fallback {
        Some(f) => format!("it fell back: {}", f.chars().take(120).collect::<String>()),
        None => "--page-size keep".to_owned(),
    };
    format!(
        "{pool}restart {} under hugeshm run --page-size {} ({} pages of {}; hugeshm run put it on 4 KiB pages: {why})",
        r.exe,
        format_bytes(huge).replace(" MiB", "m").replace(" GiB", "g"),
        pages,
        format_bytes(huge)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::run_record::RunPrefault;

    const MIB: u64 = 1 << 20;

    fn segment(nodes: &[(&str, u64)]) -> Segment {
        Segment {
            kind: SegmentKind::Anon,
            id: Some(77),
            key: None,
            path: Some("/anon_hugepage".into()),
            size_bytes: 16 * MIB,
            page_size_bytes: Some(2 * MIB),
            page_size_source: "smaps of pid 9".into(),
            resident_bytes: Some(16 * MIB),
            thp_bytes: Some(0),
            collapse_aligned: None,
            owner_uid: Some(105),
            mode: None,
            creator_pid: None,
            creator_name: None,
            attached_pids: vec![9],
            attached: vec![],
            nattch: None,
            nodes: nodes.iter().map(|(n, b)| (n.to_string(), *b)).collect(),
            numa_policy: Some("interleave:0-1".into()),
            findings: vec![],
            dax: None,
            run: None,
        }
    }

    fn record() -> RunRecord {
        RunRecord {
            pid: 9,
            start_ticks: 1,
            uid: 105,
            exe: "/usr/lib/postgresql/15/bin/postgres".into(),
            object: RunObject::Anon,
            address: 0x7f00_0000_0000,
            size_bytes: 16 * MIB,
            requested_bytes: 16 * MIB,
            page_size_asked_bytes: 2 * MIB,
            page_size_bytes: 2 * MIB,
            policy: "only".into(),
            numa: "interleave".into(),
            prefault: Some(RunPrefault {
                method: "populate_write".into(),
                threads: 2,
                seconds: 0.01,
            }),
            resident_bytes: 16 * MIB,
            verified_page_size_bytes: 2 * MIB,
            nodes: [(0, 8 * MIB), (1, 8 * MIB)].into_iter().collect(),
            fallback: None,
            warnings: vec![],
        }
    }

    fn placed(nodes: &[(&str, u64)], surplus: u64) -> Segment {
        let mut host = HostSnapshot::default();
        host.pools = vec![PoolCounters::new(2 * MIB, 8, 0, Some(0), surplus, Some(0))];
        let mut report = SegmentsReport {
            segments: vec![segment(nodes)],
            ..Default::default()
        };
        place(
            &host,
            "/dev/shm/hugeshm-run.9.7f0000000000".into(),
            record(),
            0,
            &mut report,
        );
        report.segments.remove(0)
    }

    #[test]
    fn a_mapping_run_left_on_base_pages_gets_runs_fix() {
        let mut host = HostSnapshot::default();
        host.pools = vec![PoolCounters::new(2 * MIB, 8, 2, Some(0), 0, Some(0))];
        let mut seg = segment(&[("0", 16 * MIB)]);
        seg.findings.push(Finding::new(
            Severity::Warning,
            "silent-fallback",
            "x".to_owned(),
            Some(
                "restart its owner with huge pages required (PostgreSQL huge_pages=on)".to_owned(),
            ),
        ));
        let mut report = SegmentsReport {
            segments: vec![seg],
            ..Default::default()
        };
        let mut rec = record();
        rec.page_size_bytes = 4096;
        rec.page_size_asked_bytes = 4096;
        rec.verified_page_size_bytes = 4096;
        rec.fallback = Some("2 MiB pages: required 8, available 2".into());
        place(&host, "f".into(), rec, 0, &mut report);
        let fix = report.segments[0].findings[0].fix.clone().unwrap();
        assert!(
            fix.starts_with("sysctl -w vm.nr_hugepages=16, then "),
            "{fix}"
        );
        assert!(
            fix.ends_with(
                "then restart /usr/lib/postgresql/15/bin/postgres under hugeshm run --page-size 2m \
                 (8 pages of 2 MiB; hugeshm run put it on 4 KiB pages: it fell back: 2 MiB pages: \
                 required 8, available 2)"
            ),
            "{fix}"
        );
    }

    #[test]
    fn a_placement_that_holds_says_nothing_more() {
        let s = placed(&[("0", 8 * MIB), ("1", 8 * MIB)], 0);
        assert!(s.findings.is_empty(), "{:?}", s.findings);
        let run = s.run.expect("placed by hugeshm run");
        assert_eq!(run.file, "/dev/shm/hugeshm-run.9.7f0000000000");
        assert!((run.prefault_gbps - 16.0 * MIB as f64 / 1e9 / 0.01).abs() < 1e-6);
    }

    #[test]
    fn pages_that_left_their_nodes_are_a_finding() {
        let s = placed(&[("0", 16 * MIB)], 0);
        let f = s
            .findings
            .iter()
            .find(|f| f.code == "run-pages-moved")
            .expect("drift");
        assert_eq!(
            f.message,
            "/anon_hugepage: placed by hugeshm run (interleave) as node 0 8 MiB, node 1 8 MiB; \
             now node 0 16 MiB: 8 MiB left their nodes"
        );
        // 2 MiB of 16 moved: more than a page and 1%.
        assert!(placed(&[("0", 10 * MIB), ("1", 6 * MIB)], 0)
            .findings
            .iter()
            .any(|f| f.code == "run-pages-moved"));
    }

    #[test]
    fn a_pool_shrunk_under_the_server_is_a_finding_with_the_pool_it_needs() {
        let s = placed(&[("0", 8 * MIB), ("1", 8 * MIB)], 3);
        let f = s
            .findings
            .iter()
            .find(|f| f.code == "run-pool-shrunk")
            .expect("shrunk");
        assert!(
            f.message.contains("3 of its pages are surplus and return to the kernel when it stops; its next start needs 8 pages (policy only: it would fail to start)"),
            "{}",
            f.message
        );
        assert_eq!(
            f.fix.as_deref(),
            Some("echo 11 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
        );
    }

    /// `record()` checked against a process that is what it says, but for
    /// `exe` (what `/proc/PID/exe` says) and `nodes` (the host's).
    fn checked(rec: &RunRecord, exe: &str, nodes: &[u32]) -> Result<(), String> {
        let mut status = PidStatus::default();
        status.uid = Some(105);
        let maps = hugeshm_parse::maps::parse(
            "7f0000000000-7f0001000000 rw-s 00000000 00:0f 77 /anon_hugepage (deleted)\n",
        )
        .unwrap();
        let p = Proc {
            status: Ok(status),
            start_ticks: Some(1),
            exe: Ok(exe.to_owned()),
            maps: Ok(maps),
        };
        let mut host = HostSnapshot::default();
        host.nodes = nodes
            .iter()
            .map(|&n| {
                let mut i = hugeshm_probe::NodeInfo::default();
                i.node = n;
                i
            })
            .collect();
        let read = Ok((rec.format(), 105));
        match check((9, rec.address), &read, &p, &segment(&[]), &host) {
            Check::Holds(r) => {
                assert_eq!(*r, *rec);
                Ok(())
            }
            Check::Ignored(why) => Err(why),
            Check::Gone => Err("gone".to_owned()),
        }
    }

    #[test]
    fn a_record_holds_only_for_the_program_the_kernel_says_the_process_runs() {
        let pg = "/usr/lib/postgresql/15/bin/postgres";
        assert_eq!(checked(&record(), pg, &[0, 1]), Ok(()));
        // Upgraded under the running server: the kernel says so.
        assert_eq!(
            checked(&record(), &format!("{pg} (deleted)"), &[0, 1]),
            Ok(())
        );
        assert_eq!(
            checked(&record(), "/usr/bin/python3.11", &[0, 1]),
            Err(format!(
                "it names the program \"{pg}\", pid 9 runs \"/usr/bin/python3.11\""
            ))
        );
    }

    #[test]
    fn a_record_naming_nodes_the_host_lacks_is_ignored() {
        assert_eq!(
            checked(&record(), &record().exe, &[0]),
            Err("it names node 1, which this host does not have (1 node)".to_owned())
        );
        // A host without NUMA sysfs cannot say.
        assert_eq!(checked(&record(), &record().exe, &[]), Ok(()));
    }

    #[test]
    fn counts_beyond_what_a_record_can_hold_do_not_overflow() {
        // Past the parser's bounds (a record made in memory): no panic,
        // and the moved bytes are bounded.
        let mut host = HostSnapshot::default();
        host.pools = vec![PoolCounters::new(2 * MIB, 8, 0, Some(0), 0, Some(0))];
        let mut rec = record();
        rec.nodes = (0..4).map(|n| (n, u64::MAX)).collect();
        let mut report = SegmentsReport {
            segments: vec![segment(&[("0", 16 * MIB)])],
            ..Default::default()
        };
        place(&host, "f".into(), rec, 0, &mut report);
        let f = &report.segments[0].findings[0];
        assert!(
            f.message
                .ends_with("now node 0 16 MiB: 16 MiB left their nodes"),
            "{}",
            f.message
        );
    }

    #[test]
    fn start_time_is_field_22_whatever_the_name() {
        let stat = "4242 (post gres) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks("garbage"), None);
    }
}
