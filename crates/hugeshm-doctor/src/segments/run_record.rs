//! `hugeshm run`'s records in `segments`: the segment a server got through
//! `hugeshm run` says so ("placed by hugeshm run": page size asked and
//! given, placement, pre-fault, the split at start), and what has changed
//! since is a finding (pages that left their nodes, a pool shrunk under a
//! server that will need it again at its next start).
//!
//! The records are files in `/dev/shm` that the server's user wrote and
//! anyone could have planted; the doctor, often root, trusts none of them:
//! each is read bounded and without following links (the probe), parsed
//! strictly, and shown only when it is owned by the uid of the live
//! process it names (its start time checked, so a reused pid is not taken
//! for it) and that process really has the mapping it describes: address,
//! size, kind and page size. A record of a process that is gone is
//! ignored silently (the next `hugeshm run` of that user removes it); any
//! other mismatch is said, as a report finding. The record files
//! themselves are not segments: unmapped ones are dropped from the list.

use std::collections::BTreeMap;

use hugeshm_parse::maps::MapsEntry;
use hugeshm_parse::run_record::{self, RunObject, RunRecord};
use hugeshm_parse::size::{format_bytes, BASE_PAGE};
use hugeshm_probe::{HostSnapshot, Probe, RunRecordFile, SysvAttachments, SysvMapping};
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

/// Whether a posix segment is one of the record files, which nobody maps.
fn is_record_file(s: &Segment) -> bool {
    s.kind == SegmentKind::Posix
        && s.attached_pids.is_empty()
        && s.path
            .as_deref()
            .and_then(|p| p.strip_prefix("/dev/shm/"))
            .is_some_and(|n| run_record::parse_file_name(n).is_some())
}

/// Reads the records and puts each that holds on its segment; called by
/// the segments scan once it has its segments.
pub fn attach(probe: &Probe, host: &HostSnapshot, report: &mut SegmentsReport) {
    report.segments.retain(|s| !is_record_file(s));
    let sysv = probe.sysv_attachments(Some(&host.shm));
    for f in probe.run_records() {
        match check(probe, &sysv, &f, &report.segments) {
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
            Check::Holds(rec, at) => place(host, f.path.clone(), *rec, at, report),
        }
    }
}

enum Check {
    /// Its process is gone (or the pid is another process now).
    Gone,
    Ignored(String),
    /// It holds: the record and the index of its segment (none for a
    /// private mapping on base pages, which segments does not list).
    Holds(Box<RunRecord>, Option<usize>),
}

fn check(probe: &Probe, sysv: &SysvAttachments, f: &RunRecordFile, segments: &[Segment]) -> Check {
    let (text, owner) = match &f.read {
        Ok(r) => r,
        Err(why) => return Check::Ignored(why.clone()),
    };
    let rec = match run_record::parse(text) {
        Ok(r) => r,
        Err(e) => return Check::Ignored(format!("not a record ({e})")),
    };
    if (rec.pid, rec.address) != f.named {
        return Check::Ignored(format!(
            "it names pid {} at {:#x}, its file name pid {} at {:#x}",
            rec.pid, rec.address, f.named.0, f.named.1
        ));
    }
    let files = probe.pid(rec.pid);
    let status = match files.status() {
        Ok(s) => s,
        Err(e) if e.is_not_found() => return Check::Gone,
        Err(e) => return Check::Ignored(format!("pid {} cannot be read: {e}", rec.pid)),
    };
    let started = std::fs::read_to_string(probe.proc_path(&format!("{}/stat", rec.pid)))
        .ok()
        .and_then(|t| start_ticks(&t));
    if started.is_some_and(|s| s != rec.start_ticks) {
        return Check::Gone;
    }
    if status.uid != Some(*owner) || rec.uid != *owner {
        return Check::Ignored(format!(
            "the file belongs to uid {owner}, the record says uid {}, pid {} runs as uid {}",
            rec.uid,
            rec.pid,
            status.uid.map_or("?".to_owned(), |u| u.to_string())
        ));
    }
    let maps = match files.maps() {
        Ok(m) => m,
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
    if let RunObject::Sysv { shmid } = rec.object {
        if sysv.of(probe, rec.pid, m) != Some(SysvMapping::Here(shmid)) {
            return Check::Ignored(format!(
                "pid {}'s mapping at {:#x} is named like SysV segment {shmid} but is not an \
                 attachment of it (its device, namespace, key or the kernel's count of \
                 attachments disagree)",
                rec.pid, rec.address
            ));
        }
    }
    let at = segments.iter().position(|s| match rec.object {
        RunObject::Sysv { shmid } => s.kind == SegmentKind::Sysv && s.id == Some(shmid),
        RunObject::Anon => s.kind == SegmentKind::Anon && s.id == Some(m.inode),
        RunObject::Private => {
            s.kind == SegmentKind::PrivateHugetlb
                && s.creator_pid == Some(rec.pid)
                && s.size_bytes == rec.size_bytes
        }
    });
    let page_now = match at {
        Some(i) => segments[i].page_size_bytes,
        None => files.smaps().ok().and_then(|sm| {
            sm.iter()
                .find(|e| e.map.start == rec.address)
                .and_then(|e| e.kernel_page_size_bytes)
        }),
    };
    if page_now.is_some_and(|p| p != rec.verified_page_size_bytes) {
        return Check::Ignored(format!(
            "pid {}'s mapping at {:#x} is on {} pages, the record says {}",
            rec.pid,
            rec.address,
            format_bytes(page_now.unwrap_or(0)),
            format_bytes(rec.verified_page_size_bytes)
        ));
    }
    Check::Holds(Box::new(rec), at)
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

/// Puts a record that holds on its segment, with its findings.
fn place(
    host: &HostSnapshot,
    file: String,
    rec: RunRecord,
    at: Option<usize>,
    report: &mut SegmentsReport,
) {
    let placement = RunPlacement {
        file,
        prefault_gbps: rec.prefault_gbps(),
        record: rec,
    };
    let Some(i) = at else {
        let r = &placement.record;
        report.findings.push(Finding::new(
            Severity::Info,
            "run-placed",
            format!(
                "pid {}'s private mapping at {:#x} ({}) placed by hugeshm run on {} pages{}",
                r.pid,
                r.address,
                format_bytes(r.size_bytes),
                format_bytes(r.page_size_bytes),
                r.fallback
                    .as_ref()
                    .map(|f| format!(": {f}"))
                    .unwrap_or_default()
            ),
            None,
        ));
        return;
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
            .sum();
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
    seg.run = Some(placement);
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
            Some(0),
            &mut report,
        );
        report.segments.remove(0)
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

    #[test]
    fn start_time_is_field_22_whatever_the_name() {
        let stat = "4242 (post gres) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks("garbage"), None);
    }
}
