//! Oracle instances under Automatic Memory Management (`memory_target`):
//! the SGA lives in files of /dev/shm (`ora_<SID>_<id>_<n>`, one per
//! granule), which are never on huge pages, and every process of the
//! instance maps them with 4 KiB page tables. A file counts only where a
//! process whose executable the kernel names `oracle` (`/proc/PID/exe`)
//! maps it: a file another user names so proves nothing.

use super::{Segment, SegmentKind};
use crate::finding::{Finding, Severity};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::Probe;
use std::collections::{BTreeMap, HashMap};

/// `oracle-amm`, one per instance whose AMM files an `oracle` process maps.
pub(super) fn amm_findings(probe: &Probe, segs: &[Segment]) -> Vec<Finding> {
    // One exe read per process, however many granule files it maps.
    let mut known: HashMap<u32, bool> = HashMap::new();
    let mut is_oracle = |pid: u32| {
        *known.entry(pid).or_insert_with(|| {
            std::fs::read_link(probe.proc_path(&format!("{pid}/exe")))
                .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "oracle"))
        })
    };
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
