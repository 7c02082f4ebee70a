//! Oracle instances, as the kernel shows them: a process is the
//! instance's only where its executable is named `oracle` (the exe link,
//! which no user can change) and its command line names the SID (a
//! background process `ora_pmon_ORCL`, a server process `oracleORCL`).
//!
//! * Under Automatic Memory Management (`memory_target`) the SGA lives in
//!   files of /dev/shm (`ora_<SID>_<id>_<n>`, one per granule), which are
//!   never on huge pages, and every process of the instance maps them with
//!   4 KiB page tables: `oracle-amm`. A file another user names so proves
//!   nothing: it counts only where an `oracle` process maps it.
//! * Otherwise the SGA is SysV segments; with `use_large_pages=TRUE` (the
//!   default) an instance short of huge pages puts part of it on 4 KiB
//!   pages and starts: `oracle-sga-4k`. ONLY would have refused to start.

use super::{Segment, SegmentKind};
use crate::finding::{plural, Finding, Severity};
use hugeshm_parse::size::{format_bytes, BASE_PAGE};
use hugeshm_probe::Probe;
use std::collections::{BTreeMap, HashMap};

/// The SID an Oracle process's command line names: `ora_pmon_ORCL` (a
/// background process), `oracleORCL (LOCAL=NO)` (a server process).
pub(crate) fn sid_of(args: &[String]) -> Option<&str> {
    let first = args.first()?.split_whitespace().next()?;
    let sid = match first.strip_prefix("ora_") {
        Some(rest) => rest.split_once('_')?.1,
        None => first.strip_prefix("oracle")?,
    };
    (!sid.is_empty()).then_some(sid)
}

/// The processes of the probe's host whose executable is `oracle`, each
/// looked up once: pid -> the SID its command line names (`None`: an
/// `oracle` process that names none; absent: not an `oracle` process).
pub(crate) struct OracleProcesses<'a> {
    probe: &'a Probe,
    known: HashMap<u32, Option<Option<String>>>,
}

impl<'a> OracleProcesses<'a> {
    /// None looked up yet.
    pub(crate) fn new(probe: &'a Probe) -> Self {
        OracleProcesses {
            probe,
            known: HashMap::new(),
        }
    }

    /// `Some(sid)` where `pid` is an `oracle` process (`sid`: the SID its
    /// command line names, if any); `None` otherwise.
    pub(crate) fn of(&mut self, pid: u32) -> Option<Option<&str>> {
        let probe = self.probe;
        self.known
            .entry(pid)
            .or_insert_with(|| {
                let exe = std::fs::read_link(probe.proc_path(&format!("{pid}/exe"))).ok()?;
                if exe.file_name()? != "oracle" {
                    return None;
                }
                let args = super::servers::command_line(probe, pid);
                Some(sid_of(&args).map(str::to_owned))
            })
            .as_ref()
            .map(Option::as_deref)
    }

    /// The first process of `seg` that is an `oracle` process, and the SID
    /// it names.
    pub(crate) fn in_segment(&mut self, seg: &Segment) -> Option<(u32, Option<String>)> {
        seg.attached
            .iter()
            .find_map(|a| Some((a.pid, self.of(a.pid)?.map(str::to_owned))))
    }
}

/// `oracle-sga-4k`, one per instance whose `oracle` processes attach SysV
/// segments of at least one huge page that sit on 4 KiB pages.
pub(super) fn sga_findings(probe: &Probe, segs: &[Segment], huge: u64) -> Vec<Finding> {
    let mut oracle = OracleProcesses::new(probe);
    // SID -> (segments, bytes, a pid)
    let mut by_sid: BTreeMap<String, (usize, u64, u32)> = BTreeMap::new();
    for s in segs.iter().filter(|s| {
        s.kind == SegmentKind::Sysv && s.page_size_bytes == Some(BASE_PAGE) && s.size_bytes >= huge
    }) {
        let Some((pid, sid)) = oracle.in_segment(s) else {
            continue;
        };
        let sid = sid.unwrap_or_else(|| "(unnamed)".to_owned());
        let e = by_sid.entry(sid).or_insert((0, 0, pid));
        e.0 += 1;
        e.1 += s.size_bytes;
    }
    by_sid
        .into_iter()
        .map(|(sid, (n, bytes, pid))| {
            Finding::new(
                Severity::Warning,
                "oracle-sga-4k",
                format!(
                    "Oracle instance {sid} (pid {pid}) has {} of its SGA ({}) on 4 KiB pages: \
                     use_large_pages=TRUE placed part of the SGA on 4 KiB pages when the huge \
                     page pool was short at its start (use_large_pages=ONLY refuses to start \
                     instead)",
                    plural(n, "SysV segment", "SysV segments"),
                    format_bytes(bytes)
                ),
                Some(format!(
                    "hugeshm apply --oracle-sid {sid} (or --oracle PFILE) for the pages, \
                     use_large_pages=ONLY in its pfile, then restart the instance"
                )),
            )
        })
        .collect()
}

/// `oracle-amm`, one per instance whose AMM files an `oracle` process maps.
pub(super) fn amm_findings(probe: &Probe, segs: &[Segment]) -> Vec<Finding> {
    // One exe read per process, however many granule files it maps.
    let mut oracle = OracleProcesses::new(probe);
    let mut is_oracle = |pid: u32| oracle.of(pid).is_some();
    // SID -> (files, bytes, a pid of the instance)
    let mut by_sid: BTreeMap<String, (usize, u64, u32)> = BTreeMap::new();
    for s in segs.iter().filter(|s| s.kind == SegmentKind::Posix) {
        let Some(sid) = s
            .path
            .as_deref()
            .and_then(|p| p.strip_prefix("/dev/shm/ora_"))
            .and_then(|rest| rest.split('_').next())
            .filter(|sid| !sid.is_empty())
        else {
            continue;
        };
        let Some(pid) = s.attached.iter().map(|a| a.pid).find(|&p| is_oracle(p)) else {
            continue;
        };
        let e = by_sid.entry(sid.to_owned()).or_insert((0, 0, pid));
        e.0 += 1;
        e.1 += s.size_bytes;
    }
    by_sid
        .into_iter()
        .map(|(sid, (files, bytes, pid))| {
            Finding::new(
                Severity::Warning,
                "oracle-amm",
                format!(
                    "Oracle instance {sid} (pid {pid}) keeps its SGA in {files} /dev/shm files \
                     ({}) under Automatic Memory Management (memory_target): they are never on \
                     huge pages, and each of its processes maps them with 4 KiB page tables",
                    format_bytes(bytes)
                ),
                Some(
                    "in its pfile: memory_target=0, memory_max_target=0, sga_target and \
                     sga_max_size for the SGA, pga_aggregate_target, use_large_pages=ONLY; then \
                     hugeshm advise --oracle PFILE"
                        .to_owned(),
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sid_is_read_from_background_and_server_processes() {
        let a = |s: &str| vec![s.to_owned()];
        assert_eq!(sid_of(&a("ora_pmon_ORCL")), Some("ORCL"));
        assert_eq!(sid_of(&a("ora_j000_DB_1")), Some("DB_1"));
        assert_eq!(sid_of(&a("oracleORCL (LOCAL=NO)")), Some("ORCL"));
        assert_eq!(sid_of(&a("oracle")), None);
        assert_eq!(sid_of(&a("ora_pmon")), None);
        assert_eq!(sid_of(&a("/usr/bin/sleep")), None);
        assert_eq!(sid_of(&[]), None);
    }
}
