//! Sampling an object's processes: their `smaps` and `numa_maps`, and the
//! DAX pass.

use super::scan::Obj;
use super::{Segment, SAMPLE_PROCESSES};
use crate::dax;
use hugeshm_probe::{Probe, ReadError};
use std::collections::BTreeMap;

/// One sampled process's `smaps` and `numa_maps` (`None` where unreadable).
pub(super) struct Sample {
    pub(super) smaps: Option<Vec<hugeshm_parse::smaps::SmapsEntry>>,
    pub(super) numa: Option<Vec<hugeshm_parse::numa_maps::NumaMapsEntry>>,
}

impl Sample {
    /// Reads both; a failure goes to `problem` (numa_maps missing on a
    /// kernel without NUMA is not one).
    pub(super) fn read(probe: &Probe, pid: u32, problem: &mut dyn FnMut(u32, ReadError)) -> Sample {
        let files = probe.pid(pid);
        let smaps = match files.smaps() {
            Ok(s) => s,
            Err(e) => {
                problem(pid, e);
                return Sample {
                    smaps: None,
                    numa: None,
                };
            }
        };
        let numa = match files.numa_maps() {
            Ok(n) => Some(n),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                problem(pid, e);
                None
            }
        };
        Sample {
            smaps: Some(smaps),
            numa,
        }
    }
}

/// A `dax` segment: where its memory is, and the fault size of the
/// mappings of a few of its processes from their pagemap (smaps counts no
/// DAX page: its page size, residency and nodes come from here).
pub(super) fn dax_pass(
    probe: &Probe,
    o: &Obj,
    seg: &mut Segment,
    mounts: &[&hugeshm_parse::mounts::Mount],
    pmem: &hugeshm_probe::PmemSnapshot,
) {
    let path = o.path.as_deref().unwrap_or("");
    let mut info = dax::info_for(path, mounts, pmem);
    for (pid, ranges) in o.ranges.iter().take(SAMPLE_PROCESSES) {
        let files = probe.pid(*pid);
        for &(start, end, offset) in ranges {
            info.mappings
                .push(dax::judge(&files, start, end, offset, info.align_bytes));
        }
    }
    // dax=inode: the file's own state, through the first mapping.
    if info.file.is_some() {
        let first = o
            .ranges
            .iter()
            .find_map(|(pid, r)| r.first().map(|&(s, e, _)| (*pid, s, e)));
        if let Some((pid, start, end)) = first {
            info.file = Some(dax::file_dax(probe, pid, start, end, path));
        }
        dax::mark_page_cache(&mut info);
        if info.file.and_then(|f| f.dax) == Some(false) {
            // Page cache: smaps counts its pages, as for any file.
            seg.dax = Some(info);
            return;
        }
    }
    let (page, source) = dax::page_size(&info);
    seg.page_size_bytes = page;
    seg.page_size_source = source;
    seg.resident_bytes = info.mappings.iter().filter_map(|m| m.resident_bytes).max();
    seg.thp_bytes = None;
    seg.nodes = match (info.numa_node, seg.resident_bytes) {
        (Some(n), Some(r)) if r > 0 => [(n.to_string(), r)].into_iter().collect(),
        _ => BTreeMap::new(),
    };
    seg.numa_policy = None;
    seg.dax = Some(info);
}
