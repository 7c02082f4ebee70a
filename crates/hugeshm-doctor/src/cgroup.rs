//! The hugetlb cgroup findings of `status`: a limit below what the shared
//! memory of the cgroup's processes needs (`cgroup-limit-short`), a limit
//! on faulted pages without a reservation limit, so that faults are
//! refused with SIGBUS instead of the mapping up front
//! (`cgroup-rsvd-unset`), and charges the kernel already refused
//! (`cgroup-faults-refused`).

use crate::finding::{plural, Finding, Severity};
use crate::segments::Segment;
use hugeshm_parse::cgroup::is_within;
use hugeshm_parse::size::{format_bytes, BASE_PAGE, GIB, KIB, MIB};
use hugeshm_probe::{HugetlbCgroup, HugetlbCgroupLevel, HugetlbCgroupSize};
use std::collections::BTreeMap;

/// The page size a segment needs in a pool: its own when it sits on huge
/// pages; the default size for a SysV, anonymous or memfd segment of at
/// least one default page that sits on 4 KiB pages (it fell back, or will
/// want huge pages at its next start); `None` otherwise.
pub(crate) fn needed_page_size(seg: &Segment, default: Option<u64>) -> Option<u64> {
    let ps = seg.page_size_bytes?;
    if seg.kind == crate::segments::SegmentKind::Dax {
        None // persistent memory: its 2 MiB entries take nothing from a pool
    } else if ps > BASE_PAGE {
        Some(ps)
    } else if seg.kind.huge_on_request() {
        default.filter(|d| seg.size_bytes >= *d)
    } else {
        None
    }
}

/// A Kubernetes resource name and quantity: `hugepages-2Mi`, `64Mi`.
pub(crate) fn k8s(page: u64, bytes: u64) -> (String, String) {
    let q = |b: u64| {
        if b > 0 && b % GIB == 0 {
            format!("{}Gi", b / GIB)
        } else if b % MIB == 0 {
            format!("{}Mi", b / MIB)
        } else {
            format!("{}Ki", b.div_ceil(KIB))
        }
    };
    (format!("hugepages-{}", q(page)), q(bytes))
}

fn file(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// [`file`] as one word of a shell command (a cgroup's name is anyone's
/// choice under a delegated subtree).
fn file_word(dir: &str, name: &str) -> String {
    hugeshm_fix::shell_quote(&file(dir, name)).into_owned()
}

fn pages_of(bytes: u64, page: u64) -> u64 {
    bytes / page.max(1)
}

/// The cgroup findings. `pid_paths` maps the pids attached to `segments`
/// to their cgroup path in the hugetlb hierarchy (pids whose
/// `/proc/PID/cgroup` could not be read are absent); `default` is the
/// default huge page size; `empty_pools` the page sizes whose pool can
/// give no page at all (no pages, no overcommit): a mapping of those fails
/// on the pool before any cgroup limit matters, so `cgroup-rsvd-unset` is
/// not said of them.
pub fn findings(
    cg: &HugetlbCgroup,
    segments: &[Segment],
    pid_paths: &BTreeMap<u32, String>,
    default: Option<u64>,
    empty_pools: &[u64],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for s in &cg.sizes {
        out.extend(limit_short(cg, s, segments, pid_paths, default));
        if !empty_pools.contains(&s.page_size_bytes) {
            out.extend(rsvd_unset(cg, s));
        }
        out.extend(faults_refused(cg, s));
    }
    out
}

/// `cgroup-limit-short`: per level with a limit, the segments mapped by a
/// process in it (or below it) that need this page size, against the limit.
fn limit_short(
    cg: &HugetlbCgroup,
    s: &HugetlbCgroupSize,
    segments: &[Segment],
    pid_paths: &BTreeMap<u32, String>,
    default: Option<u64>,
) -> Vec<Finding> {
    let page = s.page_size_bytes;
    let size = format_bytes(page);
    // Levels short of what their processes' segments need, grouped when
    // they have the same limit and the same segments (a pod and its one
    // container).
    let mut groups: Vec<(u64, u64, Vec<String>, Vec<&HugetlbCgroupLevel>)> = Vec::new();
    for l in &s.levels {
        let Some(limit) = l.limit_bytes else {
            continue;
        };
        let mut need = 0u64;
        let mut who = Vec::new();
        for seg in segments {
            if needed_page_size(seg, default) != Some(page) {
                continue;
            }
            let inside: Vec<String> = seg
                .attached_pids
                .iter()
                .filter(|p| {
                    pid_paths
                        .get(p)
                        .is_some_and(|path| is_within(path, &l.path))
                })
                .map(|p| p.to_string())
                .collect();
            if inside.is_empty() {
                continue;
            }
            need = need.saturating_add(seg.size_bytes.div_ceil(page));
            who.push(format!(
                "{} ({} {})",
                seg.label(),
                if inside.len() == 1 { "pid" } else { "pids" },
                inside.join(", ")
            ));
        }
        if need.saturating_mul(page) <= limit {
            continue;
        }
        match groups
            .iter_mut()
            .find(|g| g.0 == limit && g.1 == need && g.2 == who)
        {
            Some(g) => g.3.push(l),
            None => groups.push((limit, need, who, vec![l])),
        }
    }
    groups
        .into_iter()
        .map(|(limit, need, who, levels)| {
            let limit_name = cg.limit_file_name(page, false);
            let rsvd_name = cg.limit_file_name(page, true);
            let paths: Vec<&str> = levels.iter().map(|l| l.path.as_str()).collect();
            let want = need.saturating_mul(page);
            let mut fix: Vec<String> = Vec::new();
            for l in &levels {
                fix.push(format!("echo {want} > {}", file_word(&l.dir, &limit_name)));
                if l.rsvd_limit_bytes.is_some_and(|r| r < want) {
                    fix.push(format!("echo {want} > {}", file_word(&l.dir, &rsvd_name)));
                }
            }
            let (res, qty) = k8s(page, want);
            Finding::new(
                Severity::Warning,
                "cgroup-limit-short",
                format!(
                    "{} {} {} {} {size} pages ({}, {limit_name}) but the shared memory of \
                     {} processes needs {need}: {}: faults past the limit are refused (SIGBUS), \
                     and a server asking for huge pages with a fall-back starts on 4 KiB pages",
                    if levels.len() == 1 {
                        "cgroup"
                    } else {
                        "cgroups"
                    },
                    paths.join(" and "),
                    if levels.len() == 1 { "allows" } else { "allow" },
                    pages_of(limit, page),
                    format_bytes(limit),
                    if levels.len() == 1 { "its" } else { "their" },
                    who.join(", ")
                ),
                Some(format!(
                    "{}   # Kubernetes: resources.limits.{res}: {qty} (and the same in requests)",
                    fix.join("; ")
                )),
            )
        })
        .collect()
}

/// `cgroup-rsvd-unset`: faulted pages are limited but reservations are
/// not (or less): `mmap` and `shmget` succeed past the limit and the faults
/// are refused later, with SIGBUS.
fn rsvd_unset(cg: &HugetlbCgroup, s: &HugetlbCgroupSize) -> Option<Finding> {
    let limit = s.effective_limit_bytes?;
    if s.effective_rsvd_limit_bytes.is_some_and(|r| r <= limit) {
        return None;
    }
    let page = s.page_size_bytes;
    let size = format_bytes(page);
    // The level that holds the limit (the deepest on a tie).
    let at = s.levels.iter().find(|l| l.limit_bytes == Some(limit))?;
    let limit_name = cg.limit_file_name(page, false);
    let rsvd_name = cg.limit_file_name(page, true);
    let rsvd_supported = s.levels.iter().any(|l| l.rsvd_usage_bytes.is_some());
    let allows = format!(
        "cgroup {} allows {} {size} pages ({}, {limit_name})",
        at.path,
        pages_of(limit, page),
        format_bytes(limit)
    );
    let finding = if rsvd_supported {
        Finding::new(
            Severity::Warning,
            "cgroup-rsvd-unset",
            format!(
                "{allows} but limits reservations {} ({rsvd_name}): mmap and shmget succeed past \
                 the limit and the faults are refused later with SIGBUS instead of the mapping \
                 failing up front (container runtimes often set only {limit_name})",
                match s.effective_rsvd_limit_bytes {
                    None => "not at all".to_string(),
                    Some(r) => format!("only to {}", format_bytes(r)),
                }
            ),
            Some(format!(
                "echo {limit} > {}   # the reservation limit equal to the limit",
                file_word(&at.dir, &rsvd_name)
            )),
        )
    } else {
        Finding::new(
            Severity::Warning,
            "cgroup-rsvd-unset",
            format!(
                "{allows} and this kernel has no reservation limits (no {rsvd_name}; Linux 5.7 \
                 and later have them): mmap and shmget succeed past the limit and the faults are \
                 refused later with SIGBUS"
            ),
            Some(
                "pre-fault huge page memory when it is created (MAP_POPULATE, \
                 MADV_POPULATE_WRITE; hugeshm create does) so a refusal is an error at start, or \
                 run Linux 5.7+ and set the reservation limit"
                    .to_string(),
            ),
        )
    };
    Some(finding)
}

/// `cgroup-faults-refused`: the kernel already refused charges in the
/// cgroup, or (the deepest such) an ancestor.
fn faults_refused(cg: &HugetlbCgroup, s: &HugetlbCgroupSize) -> Option<Finding> {
    let l = s
        .levels
        .iter()
        .find(|l| l.max_events.is_some_and(|n| n > 0))?;
    let n = l.max_events.unwrap_or(0);
    let page = s.page_size_bytes;
    let events = if cg.version == 2 {
        format!(
            "hugetlb.{}.events max",
            hugeshm_parse::hugetlb_cgroup::hugetlb_size_name(page)
        )
    } else {
        format!(
            "hugetlb.{}.failcnt",
            hugeshm_parse::hugetlb_cgroup::hugetlb_size_name(page)
        )
    };
    let whose = if l.path == cg.path {
        format!("cgroup {}", l.path)
    } else {
        format!(
            "cgroup {} (an ancestor of {}; it counts all below it)",
            l.path, cg.path
        )
    };
    let limit = s
        .binding_file
        .clone()
        .unwrap_or_else(|| file(&l.dir, &cg.limit_file_name(page, false)));
    Some(Finding::new(
        Severity::Warning,
        "cgroup-faults-refused",
        format!(
            "{} of {} pages refused in {whose} ({events} {n}): each one a fault refused (the \
             process got SIGBUS, or a pre-fault failed) or a mapping refused (a server fell back \
             to 4 KiB pages or failed to start)",
            plural(n as usize, "charge", "charges"),
            format_bytes(page),
        ),
        Some(format!(
            "raise {limit} (in Kubernetes the pod's resources.limits.{}) to what the server \
             needs, and set {} to the same value so that a mapping is refused up front instead of a fault",
            k8s(page, page).0,
            cg.limit_file_name(page, true)
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segments::SegmentKind;
    use serde_json::json;

    const M2: u64 = 2 * MIB;

    fn level(
        path: &str,
        limit: Option<u64>,
        usage: u64,
        rsvd: Option<u64>,
        events: u64,
    ) -> serde_json::Value {
        json!({
            "path": path,
            "dir": format!("/sys/fs/cgroup{}", if path == "/" { "" } else { path }),
            "limit_bytes": limit,
            "usage_bytes": usage,
            "rsvd_limit_bytes": rsvd,
            "rsvd_usage_bytes": usage,
            "max_events": events,
        })
    }

    /// A v2 cgroup `/pod/ctr` whose pod allows `limit` of 2 MiB pages.
    fn cgroup(limit: u64, rsvd: Option<u64>, events: u64, rsvd_files: bool) -> HugetlbCgroup {
        let mut levels = vec![
            level("/pod/ctr", None, limit, None, events),
            level("/pod", Some(limit), limit, rsvd, events),
        ];
        if !rsvd_files {
            for l in &mut levels {
                l["rsvd_usage_bytes"] = serde_json::Value::Null;
            }
        }
        serde_json::from_value(json!({
            "version": 2,
            "mount_point": "/sys/fs/cgroup",
            "path": "/pod/ctr",
            "dir": "/sys/fs/cgroup/pod/ctr",
            "sizes": [{
                "page_size_bytes": M2,
                "limit_bytes": null,
                "usage_bytes": limit,
                "rsvd_limit_bytes": null,
                "rsvd_usage_bytes": limit,
                "max_events": events,
                "effective_limit_bytes": limit,
                "effective_rsvd_limit_bytes": rsvd,
                "binding_file": "/sys/fs/cgroup/pod/hugetlb.2MB.max",
                "room_bytes": 0,
                "rsvd_room_bytes": rsvd.map(|r| r.saturating_sub(limit)),
                "levels": levels,
            }],
        }))
        .unwrap()
    }

    fn sysv(id: u64, size: u64, page: u64, pids: &[u32]) -> Segment {
        Segment {
            kind: SegmentKind::Sysv,
            id: Some(id),
            key: None,
            path: None,
            size_bytes: size,
            page_size_bytes: Some(page),
            page_size_source: String::new(),
            resident_bytes: None,
            thp_bytes: None,
            collapse_aligned: None,
            owner_uid: None,
            mode: None,
            creator_pid: pids.first().copied(),
            creator_name: None,
            attached_pids: pids.to_vec(),
            attached: Vec::new(),
            nattch: None,
            nodes: BTreeMap::new(),
            numa_policy: None,
            findings: Vec::new(),
            dax: None,
            run: None,
        }
    }

    fn codes(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.code.as_str()).collect()
    }

    #[test]
    fn a_segment_above_the_pod_limit() {
        let cg = cgroup(256 * M2, None, 3, true);
        let paths = BTreeMap::from([
            (10, "/pod/ctr".to_string()),
            (11, "/pod/ctr".to_string()),
            (20, "/other".to_string()),
        ]);
        let segs = [
            // 1 GiB on 2 MiB pages, in the pod.
            sysv(7, GIB, M2, &[10, 11]),
            // Another pod's segment does not count.
            sysv(8, GIB, M2, &[20]),
            // A 4 KiB SysV segment in the pod wants 2 MiB pages too.
            sysv(9, 64 * MIB, BASE_PAGE, &[10]),
        ];
        let f = findings(&cg, &segs, &paths, Some(M2), &[]);
        assert_eq!(
            codes(&f),
            [
                "cgroup-limit-short",
                "cgroup-rsvd-unset",
                "cgroup-faults-refused"
            ]
        );
        let short = &f[0];
        assert!(
            short.message.starts_with(
                "cgroup /pod allows 256 2 MiB pages (512 MiB, hugetlb.2MB.max) but the shared \
                 memory of its processes needs 544: sysv 7 (pids 10, 11), sysv 9 (pid 10):"
            ),
            "{}",
            short.message
        );
        assert_eq!(
            short.fix.as_deref(),
            Some(
                "echo 1140850688 > /sys/fs/cgroup/pod/hugetlb.2MB.max   # Kubernetes: \
                 resources.limits.hugepages-2Mi: 1088Mi (and the same in requests)"
            )
        );
        let rsvd = &f[1];
        assert!(
            rsvd.message
                .contains("but limits reservations not at all (hugetlb.2MB.rsvd.max)"),
            "{}",
            rsvd.message
        );
        assert_eq!(
            rsvd.fix.as_deref(),
            Some("echo 536870912 > /sys/fs/cgroup/pod/hugetlb.2MB.rsvd.max   # the reservation limit equal to the limit")
        );
        let refused = &f[2];
        assert!(
            refused.message.starts_with(
                "3 charges of 2 MiB pages refused in cgroup /pod/ctr (hugetlb.2MB.events max 3)"
            ),
            "{}",
            refused.message
        );
        assert!(refused
            .fix
            .as_deref()
            .unwrap()
            .starts_with("raise /sys/fs/cgroup/pod/hugetlb.2MB.max"));
    }

    #[test]
    fn nothing_to_say_when_it_fits_and_reservations_are_limited() {
        let cg = cgroup(1024 * M2, Some(1024 * M2), 0, true);
        let paths = BTreeMap::from([(10, "/pod/ctr".to_string())]);
        let f = findings(&cg, &[sysv(7, GIB, M2, &[10])], &paths, Some(M2), &[]);
        assert!(f.is_empty(), "{f:#?}");
        // A reservation limit above the limit still lets faults be refused.
        let cg = cgroup(512 * M2, Some(1024 * M2), 0, true);
        let f = findings(&cg, &[sysv(7, GIB, M2, &[10])], &paths, Some(M2), &[]);
        assert_eq!(codes(&f), ["cgroup-rsvd-unset"]);
        assert!(f[0].message.contains("only to 2 GiB"), "{}", f[0].message);
        // Processes whose cgroup is unknown are not counted.
        let f = findings(&cg, &[sysv(7, 2 * GIB, M2, &[99])], &paths, Some(M2), &[]);
        assert_eq!(codes(&f), ["cgroup-rsvd-unset"]);
    }

    #[test]
    fn a_kernel_without_reservation_limits() {
        // Kubernetes gives a pod that asks for no huge pages a limit of 0.
        let cg = cgroup(0, None, 0, false);
        let f = findings(&cg, &[], &BTreeMap::new(), Some(M2), &[]);
        assert_eq!(codes(&f), ["cgroup-rsvd-unset"]);
        // Not said of a page size without a pool: the pool refuses first.
        assert!(findings(&cg, &[], &BTreeMap::new(), Some(M2), &[M2]).is_empty());
        assert!(f[0].message.contains("allows 0 2 MiB pages (0 B, hugetlb.2MB.max) and this kernel has no reservation limits"), "{}", f[0].message);
        assert!(f[0].fix.as_deref().unwrap().starts_with("pre-fault"));
    }

    #[test]
    fn kubernetes_quantities() {
        assert_eq!(
            k8s(M2, 64 * MIB),
            ("hugepages-2Mi".to_string(), "64Mi".to_string())
        );
        assert_eq!(
            k8s(GIB, 4 * GIB),
            ("hugepages-1Gi".to_string(), "4Gi".to_string())
        );
        assert_eq!(k8s(64 * KIB, 64 * KIB).0, "hugepages-64Ki");
    }
}
