//! The hugetlb cgroups of the processes that map shared memory, for every
//! segment whatever its page size:
//!
//! * on huge pages, a segment larger than what the cgroup of a process
//!   mapping it allows: `segment-cgroup-short` (its faults past the limit
//!   are refused);
//! * on 4 KiB pages where huge pages were asked for, a cgroup that lets a
//!   new mapping have fewer huge pages than the segment needs: the fall-back
//!   is the cgroup's doing. `cgroup-fallback` replaces `silent-fallback`, and
//!   its fix raises the cgroup's limits: asking the server for huge pages
//!   alone (PostgreSQL `huge_pages = on`) would only stop it from starting;
//! * the limited cgroups themselves, for `segments` and `status` to show.
//!
//! One read per distinct process and cgroup.

use super::{Segment, SegmentKind};
use crate::finding::{Finding, Severity};
use hugeshm_fix::Fix;
use hugeshm_parse::hugetlb_cgroup::hugetlb_size_name;
use hugeshm_parse::size::{format_bytes, BASE_PAGE, MIB};
use hugeshm_probe::{HugetlbCgroup, HugetlbCgroupSize, Probe};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A hugetlb cgroup with a limit on some page size, and the processes in
/// it that map the segments the scan looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LimitedCgroup {
    /// Those processes.
    pub pids: Vec<u32>,
    /// Its limits, usage and room per page size.
    pub cgroup: HugetlbCgroup,
}

/// What a segment is checked for.
#[derive(Clone, Copy)]
enum Check {
    /// On huge pages of this size: does the cgroup allow all of it?
    Short { page: u64 },
    /// On 4 KiB pages, `pages` huge pages of `page` asked for: did the
    /// cgroup refuse them?
    Fallback { page: u64, pages: u64 },
}

fn check_of(seg: &Segment, default_huge: Option<u64>) -> Option<Check> {
    match seg.page_size_bytes? {
        // tmpfs THP and DAX are not charged to the hugetlb controller.
        _ if matches!(seg.kind, SegmentKind::Posix | SegmentKind::Dax) => None,
        p if p > BASE_PAGE => Some(Check::Short { page: p }),
        _ if seg.kind.huge_on_request()
            && seg.findings.iter().any(|f| f.code == "silent-fallback") =>
        {
            let page = default_huge.unwrap_or(2 * MIB);
            Some(Check::Fallback {
                page,
                pages: seg.size_bytes.div_ceil(page),
            })
        }
        _ => None,
    }
}

/// The cgroups read so far, by path, and their processes.
#[derive(Default)]
struct Cgroups {
    by_path: BTreeMap<String, Option<HugetlbCgroup>>,
    pids: BTreeMap<String, BTreeSet<u32>>,
}

impl Cgroups {
    /// The hugetlb cgroup of `pid` (its path, and the cgroup where it
    /// could be read).
    fn of(&mut self, probe: &Probe, pid: u32) -> Option<(String, Option<&HugetlbCgroup>)> {
        let entries = probe.cgroups(Some(pid)).ok()?;
        let path = hugeshm_parse::cgroup::find(&entries, "hugetlb", false)
            .or_else(|| hugeshm_parse::cgroup::find(&entries, "hugetlb", true))
            .map(|e| e.path.clone())?;
        self.pids.entry(path.clone()).or_default().insert(pid);
        let cg = self
            .by_path
            .entry(path.clone())
            .or_insert_with(|| probe.hugetlb_cgroup(Some(pid)).ok().flatten());
        Some((path, cg.as_ref()))
    }

    /// The cgroups that limit some page size.
    fn limited(self) -> Vec<LimitedCgroup> {
        let mut pids = self.pids;
        self.by_path
            .into_iter()
            .filter_map(|(path, cg)| {
                let cg = cg?;
                cg.sizes
                    .iter()
                    .any(|s| s.binding_file.is_some())
                    .then(|| LimitedCgroup {
                        pids: pids.remove(&path).unwrap_or_default().into_iter().collect(),
                        cgroup: cg,
                    })
            })
            .collect()
    }
}

/// Runs the checks over `segments` (their processes' `cgroup` filled in,
/// findings added or replaced) and returns the limited cgroups seen.
pub(super) fn pass(
    probe: &Probe,
    host: &hugeshm_probe::HostSnapshot,
    segments: &mut [Segment],
    default_huge: Option<u64>,
) -> Vec<LimitedCgroup> {
    let mut cgroups = Cgroups::default();
    for seg in segments.iter_mut() {
        let Some(check) = check_of(seg, default_huge) else {
            continue;
        };
        let page = match check {
            Check::Short { page } | Check::Fallback { page, .. } => page,
        };
        let mut hit: Option<Finding> = None;
        let mut paths = Vec::with_capacity(seg.attached.len());
        for pid in seg.attached.iter().map(|a| a.pid).collect::<Vec<_>>() {
            let Some((path, cg)) = cgroups.of(probe, pid) else {
                paths.push(None);
                continue;
            };
            if hit.is_none() {
                if let Some(size) = cg.and_then(|c| c.size(page)) {
                    hit = match check {
                        Check::Short { page } => short(seg, pid, &path, page, size),
                        Check::Fallback { page, pages } => {
                            fallback(seg, pid, &path, page, pages, size)
                        }
                    };
                }
            }
            paths.push(Some(path));
        }
        for (a, path) in seg.attached.iter_mut().zip(paths) {
            if path.is_some() {
                a.cgroup = path;
            }
        }
        if let Some(mut f) = hit {
            if f.code == "cgroup-fallback" {
                // Where the pool is short too, its fix comes first.
                let pool = seg
                    .findings
                    .iter()
                    .find(|x| x.code == "silent-fallback")
                    .and_then(|x| x.fix.as_deref()?.split_once(", then restart its owner"))
                    .map(|(pool, _)| pool.to_owned());
                // And the collapse that needs no restart, where it applies
                // (THP is charged to the memory cgroup, not hugetlb's).
                let now = super::in_place::collapse_fix(super::in_place::in_place(seg, host))
                    .map(|c| format!("; or {c}"));
                if let (Some(pool), Some(fix)) = (pool, f.fix.as_mut()) {
                    *fix = format!("{pool}, and {fix}");
                }
                if let (Some(now), Some(fix)) = (now, f.fix.as_mut()) {
                    fix.push_str(&now);
                }
                seg.findings.retain(|x| x.code != "silent-fallback");
            }
            seg.findings.push(f);
        }
    }
    cgroups.limited()
}

/// `segment-cgroup-short`: the segment is larger than the cgroup's limit
/// on faulted pages.
fn short(
    seg: &Segment,
    pid: u32,
    path: &str,
    page: u64,
    size: &HugetlbCgroupSize,
) -> Option<Finding> {
    let limit = size.effective_limit_bytes.filter(|l| *l < seg.size_bytes)?;
    let file = size
        .binding_file
        .clone()
        .unwrap_or_else(|| format!("hugetlb limit of {path}"));
    Some(Finding::new(
        Severity::Warning,
        "segment-cgroup-short",
        format!(
            "{} ({} on {} pages) is mapped by pid {pid} in cgroup {path}, whose hugetlb limit \
             allows {} ({file}): its faults past the limit are refused (SIGBUS, or an error \
             where they are pre-faulted)",
            seg.label(),
            format_bytes(seg.size_bytes),
            format_bytes(page),
            format_bytes(limit)
        ),
        Some(
            Fix::RaiseCgroupLimit {
                page_size_bytes: page,
                file: Some(file),
                bytes: seg.size_bytes,
            }
            .to_string(),
        ),
    ))
}

/// `cgroup-fallback`: a segment on 4 KiB pages that would take `pages`
/// pages of `page`, in a cgroup that lets a new mapping have fewer (its
/// reservation at `mmap`/`shmget`, or its faults, would be refused).
fn fallback(
    seg: &Segment,
    pid: u32,
    path: &str,
    page: u64,
    pages: u64,
    size: &HugetlbCgroupSize,
) -> Option<Finding> {
    let room = size.new_mapping_pages().filter(|r| *r < pages)?;
    let need = pages.saturating_mul(page);
    // The binding level: what it holds already stays, the segment comes on
    // top of it.
    let file = size.binding_file.clone();
    let level = file.as_deref().and_then(|f| {
        size.levels
            .iter()
            .find(|l| f.starts_with(&format!("{}/", l.dir.trim_end_matches('/'))))
    });
    let held = level.map_or(size.usage_bytes, |l| {
        l.usage_bytes.max(l.rsvd_usage_bytes.unwrap_or(0))
    });
    let limits = level
        .map(|l| {
            let show = |v: Option<u64>| v.map_or_else(|| "max".to_owned(), format_bytes);
            format!(
                "hugetlb.{}.max = {}, rsvd.max = {}",
                hugetlb_size_name(page),
                show(l.limit_bytes),
                show(l.rsvd_limit_bytes)
            )
        })
        .unwrap_or_else(|| "its hugetlb limits".to_owned());
    let fix = Fix::RaiseCgroupLimit {
        page_size_bytes: page,
        file,
        bytes: held.saturating_add(need),
    };
    Some(Finding::new(
        Severity::Warning,
        "cgroup-fallback",
        format!(
            "{} ({}) sits on 4 KiB pages: on {} pages it would take {pages} pages, and the \
             hugetlb cgroup {path} of pid {pid} lets a new mapping have {room} ({limits}): the \
             cgroup refused them, not the pool",
            seg.label(),
            format_bytes(seg.size_bytes),
            format_bytes(page),
        ),
        Some(format!(
            "{fix}, then restart its owner (asking it for huge pages alone, PostgreSQL \
             huge_pages=on, makes it fail to start while the limit stays)"
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const M2: u64 = 2 * MIB;

    /// A 2 MiB size entry of a cgroup `/pg` whose own level limits faults
    /// and reservations to `limit` and holds `held`.
    fn size(limit: u64, held: u64) -> HugetlbCgroupSize {
        let dir = "/sys/fs/cgroup/pg";
        serde_json::from_value(serde_json::json!({
            "page_size_bytes": M2,
            "limit_bytes": limit, "usage_bytes": held,
            "rsvd_limit_bytes": limit, "rsvd_usage_bytes": held,
            "max_events": 0,
            "effective_limit_bytes": limit, "effective_rsvd_limit_bytes": limit,
            "binding_file": format!("{dir}/hugetlb.2MB.rsvd.max"),
            "room_bytes": limit - held, "rsvd_room_bytes": limit - held,
            "levels": [{"path": "/pg", "dir": dir, "limit_bytes": limit, "usage_bytes": held,
                        "rsvd_limit_bytes": limit, "rsvd_usage_bytes": held, "max_events": 0}],
        }))
        .unwrap()
    }

    fn segment() -> Segment {
        serde_json::from_value(serde_json::json!({
            "kind": "anon", "id": 7, "key": null, "path": "/dev/zero", "size_bytes": 70 * MIB,
            "page_size_bytes": 4096, "page_size_source": "smaps", "resident_bytes": null,
            "thp_bytes": null, "owner_uid": 0, "mode": null, "creator_pid": null,
            "creator_name": null, "attached_pids": [9], "attached": [], "nattch": null,
            "nodes": {}, "numa_policy": null, "findings": [],
        }))
        .unwrap()
    }

    #[test]
    fn a_cgroup_with_too_little_room_explains_the_fallback() {
        // 8 MiB allowed, 2 MiB held by another process: room for 3 pages
        // of the 35 the segment needs.
        let f = fallback(&segment(), 9, "/pg", M2, 35, &size(8 * MIB, M2)).unwrap();
        assert_eq!(f.code, "cgroup-fallback");
        assert!(
            f.message
                .contains("lets a new mapping have 3 (hugetlb.2MB.max = 8 MiB, rsvd.max = 8 MiB)"),
            "{}",
            f.message
        );
        // What it holds plus the 35 pages, in both files.
        let bytes = 2 * MIB + 35 * M2;
        let fix = f.fix.unwrap();
        assert!(
            fix.starts_with(&format!(
                "echo {bytes} > /sys/fs/cgroup/pg/hugetlb.2MB.max && echo {bytes} > \
                 /sys/fs/cgroup/pg/hugetlb.2MB.rsvd.max"
            )),
            "{fix}"
        );
        // Room enough: the cgroup is not why.
        assert!(fallback(&segment(), 9, "/pg", M2, 35, &size(80 * MIB, 0)).is_none());
    }

    #[test]
    fn only_fallen_back_or_huge_segments_are_checked() {
        let mut s = segment();
        assert!(
            check_of(&s, Some(M2)).is_none(),
            "no silent-fallback finding"
        );
        s.findings.push(Finding::new(
            Severity::Warning,
            "silent-fallback",
            "x",
            None,
        ));
        assert!(matches!(
            check_of(&s, Some(M2)),
            Some(Check::Fallback { pages: 35, .. })
        ));
        s.kind = SegmentKind::Posix;
        assert!(check_of(&s, Some(M2)).is_none(), "tmpfs is not charged");
        s.kind = SegmentKind::Sysv;
        s.page_size_bytes = Some(M2);
        assert!(matches!(
            check_of(&s, Some(M2)),
            Some(Check::Short { page: M2 })
        ));
    }
}
