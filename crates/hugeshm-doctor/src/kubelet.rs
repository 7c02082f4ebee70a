//! The Kubernetes node's view of its huge pages: what the kubelet limited
//! its `kubepods` cgroup to when it started (the node's allocatable huge
//! pages, which it counted then and never again: kubernetes #72307,
//! #111757), against the pools now.
//!
//! * `kubelet-capacity-stale`: the pool grew or shrank since the kubelet
//!   started: the node advertises N pages, the pool holds M. Pods are
//!   scheduled on N; the pages above it are idle, or pods are admitted
//!   onto pages that are gone (SIGBUS at their first fault).
//! * `kubelet-capacity-held`: pages that processes outside `kubepods` hold
//!   (a host daemon such as OVS-DPDK) are still inside the kubelet's
//!   allocatable: the kubelet cannot reserve huge pages for system daemons
//!   (#140544, KEP-6252), so pods may be scheduled onto pages that are not
//!   there.

use crate::finding::{Finding, Severity};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::Kubepods;
use serde::{Deserialize, Serialize};

/// The kubelet's `kubepods` cgroup against the pools (`status --json`'s
/// `kubelet`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KubeletReport {
    /// The hugetlb hierarchy's cgroup version.
    pub version: u8,
    /// `systemd` (`kubepods.slice`) or `cgroupfs` (`kubepods`).
    pub driver: String,
    /// The cgroup's path.
    pub path: String,
    /// Its directory on this host.
    pub dir: String,
    /// Per page size with a pool or a limit file.
    pub sizes: Vec<KubeletSize>,
}

/// One page size of [`KubeletReport`]; counts are pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KubeletSize {
    /// The page size.
    pub page_size_bytes: u64,
    /// The limit file the kubelet wrote.
    pub limit_file: String,
    /// Its limit in pages: what the node advertises as allocatable
    /// (`None`: `max`, not set by a kubelet).
    pub allocatable_pages: Option<u64>,
    /// Pages in the pool now.
    pub pool_pages: u64,
    /// Pages the pool has given out: faulted (total − free) and reserved.
    pub pool_taken_pages: u64,
    /// Pages charged to `kubepods` (the larger of its faulted pages and
    /// its reservations).
    pub pods_pages: u64,
    /// Pages taken by processes outside `kubepods`: `pool_taken_pages` −
    /// `pods_pages`.
    pub outside_pages: u64,
}

/// One host-wide pool now, in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolNow {
    /// The page size.
    pub page_size_bytes: u64,
    /// Pages in the pool.
    pub total: u64,
    /// Pages nobody faulted.
    pub free: u64,
    /// Pages reserved, not faulted yet.
    pub reserved: u64,
}

/// The report and its findings from the `kubepods` cgroup and the host
/// pools.
pub fn build(kp: &Kubepods, pools: &[PoolNow]) -> (KubeletReport, Vec<Finding>) {
    let mut sizes = Vec::new();
    let mut findings = Vec::new();
    for s in &kp.sizes {
        let page = s.page_size_bytes.max(1);
        let Some(pool) = pools
            .iter()
            .find(|p| p.page_size_bytes == s.page_size_bytes)
        else {
            continue;
        };
        let l = &s.level;
        let name = if kp.version == 2 {
            "max"
        } else {
            "limit_in_bytes"
        };
        let size_name = hugeshm_parse::hugetlb_cgroup::hugetlb_size_name(page);
        let k = KubeletSize {
            page_size_bytes: s.page_size_bytes,
            limit_file: format!("{}/hugetlb.{size_name}.{name}", kp.dir),
            allocatable_pages: l.limit_bytes.map(|b| b / page),
            pool_pages: pool.total,
            pool_taken_pages: pool
                .total
                .saturating_sub(pool.free)
                .saturating_add(pool.reserved),
            pods_pages: l.usage_bytes.max(l.rsvd_usage_bytes.unwrap_or(0)) / page,
            outside_pages: 0,
        };
        let k = KubeletSize {
            outside_pages: k.pool_taken_pages.saturating_sub(k.pods_pages),
            ..k
        };
        findings.extend(stale(kp, &k));
        findings.extend(held(kp, &k));
        sizes.push(k);
    }
    let report = KubeletReport {
        version: kp.version,
        driver: kp.driver.clone(),
        path: kp.path.clone(),
        dir: kp.dir.clone(),
        sizes,
    };
    (report, findings)
}

/// `hugepages-2Mi`.
fn resource(page: u64) -> String {
    crate::cgroup::k8s(page, page).0
}

fn stale(kp: &Kubepods, k: &KubeletSize) -> Option<Finding> {
    let n = k.allocatable_pages?;
    let m = k.pool_pages;
    if n == m {
        return None;
    }
    let size = format_bytes(k.page_size_bytes);
    let how = if m > n { "grew" } else { "shrank" };
    let matches_held = m > n && k.outside_pages == m - n;
    let (severity, why) = if matches_held {
        (
            Severity::Info,
            format!(
                "the {} pages it grew by are the pages processes outside {} hold: the node \
                 advertises what pods can have, but a kubelet restart would advertise all {m}",
                m - n,
                kp.path
            ),
        )
    } else if m > n && m - n > k.outside_pages {
        let idle = m - n - k.outside_pages;
        (
            Severity::Warning,
            format!(
                "{idle} pages ({}) are idle for pods until the kubelet restarts",
                format_bytes(idle.saturating_mul(k.page_size_bytes))
            ),
        )
    } else if m > n {
        (
            Severity::Warning,
            format!(
                "the {} pages it grew by do not cover the {} that processes outside {} hold \
                 (kubelet-capacity-held)",
                m - n,
                k.outside_pages,
                kp.path
            ),
        )
    } else {
        (
            Severity::Warning,
            format!(
                "pods may be admitted onto {} pages that are gone: their first fault past the \
                 pool is a SIGBUS",
                n - m
            ),
        )
    };
    Some(Finding::new(
        severity,
        "kubelet-capacity-stale",
        format!(
            "the kubelet ({} driver) advertises {n} {size} pages ({}, {} of {}) but the pool \
             holds {m}: it {how} since the kubelet started, which counts the pools only then; {why}",
            kp.driver,
            resource(k.page_size_bytes),
            k.limit_file.rsplit('/').next().unwrap_or_default(),
            kp.path,
        ),
        Some(
            "systemctl restart kubelet   # after every change of the pools (or reserve them at \
             boot: hugeshm apply --persist, so that the kubelet counts them when it starts)"
                .to_string(),
        ),
    ))
}

fn held(kp: &Kubepods, k: &KubeletSize) -> Option<Finding> {
    let n = k.allocatable_pages?;
    let room = k.pool_pages.saturating_sub(k.outside_pages);
    if k.outside_pages == 0 || n <= room {
        return None;
    }
    let size = format_bytes(k.page_size_bytes);
    let res = resource(k.page_size_bytes);
    Some(Finding::new(
        Severity::Warning,
        "kubelet-capacity-held",
        format!(
            "{} {size} pages of the pool are held by processes outside {} (host daemons), but \
             the kubelet counts them in the node's allocatable {res}: it allows pods {n} pages \
             where {room} are left to them ({} taken from the pool, {} by pods): pods may be \
             scheduled onto pages that are not there and die of SIGBUS at their first fault",
            k.outside_pages, kp.path, k.pool_taken_pages, k.pods_pages
        ),
        Some(format!(
            "add the {} pages to the pool, or keep pods' {res} on this node within {room} pages \
             ({}); a kubelet with KEP-6252 (SystemReservedHugepages) takes \
             --system-reserved={res}={}",
            k.outside_pages,
            format_bytes(room.saturating_mul(k.page_size_bytes)),
            crate::cgroup::k8s(
                k.page_size_bytes,
                k.outside_pages.saturating_mul(k.page_size_bytes)
            )
            .1,
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const M2: u64 = 2 << 20;

    fn kubepods(limit: Option<u64>, usage: u64, rsvd: u64) -> Kubepods {
        serde_json::from_value(json!({
            "version": 2, "driver": "systemd", "path": "/kubepods.slice",
            "dir": "/sys/fs/cgroup/kubepods.slice",
            "sizes": [{"page_size_bytes": M2, "level": {
                "path": "/kubepods.slice", "dir": "/sys/fs/cgroup/kubepods.slice",
                "limit_bytes": limit.map(|p| p * M2), "usage_bytes": usage * M2,
                "rsvd_limit_bytes": null, "rsvd_usage_bytes": rsvd * M2, "max_events": 0,
            }}],
        }))
        .unwrap()
    }

    fn pool(total: u64, free: u64, reserved: u64) -> PoolNow {
        PoolNow {
            page_size_bytes: M2,
            total,
            free,
            reserved,
        }
    }

    fn codes(f: &[Finding]) -> Vec<(&str, Severity)> {
        f.iter().map(|f| (f.code.as_str(), f.severity)).collect()
    }

    #[test]
    fn the_pool_as_the_kubelet_counted_it_says_nothing() {
        // 600 pages, pods fault 256 and reserve 512: all taken pages are theirs.
        let (r, f) = build(&kubepods(Some(600), 256, 512), &[pool(600, 344, 256)]);
        assert!(f.is_empty(), "{f:?}");
        let s = &r.sizes[0];
        assert_eq!(
            (
                s.allocatable_pages,
                s.pool_taken_pages,
                s.pods_pages,
                s.outside_pages
            ),
            (Some(600), 512, 512, 0)
        );
        assert_eq!(
            s.limit_file,
            "/sys/fs/cgroup/kubepods.slice/hugetlb.2MB.max"
        );
        // No limit (not a kubelet's cgroup, or a size it never set): silent.
        let (_, f) = build(&kubepods(None, 0, 0), &[pool(8, 8, 0)]);
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn a_pool_changed_since_the_kubelet_started_is_stale() {
        let (_, f) = build(&kubepods(Some(600), 0, 0), &[pool(700, 700, 0)]);
        assert_eq!(codes(&f), [("kubelet-capacity-stale", Severity::Warning)]);
        assert!(
            f[0].message.contains("advertises 600 2 MiB pages"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("holds 700: it grew"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("hugepages-2Mi"), "{}", f[0].message);
        let (_, f) = build(&kubepods(Some(600), 0, 0), &[pool(500, 500, 0)]);
        assert_eq!(codes(&f), [("kubelet-capacity-stale", Severity::Warning)]);
        assert!(f[0].message.contains("it shrank"), "{}", f[0].message);
        assert!(f[0].message.contains("onto 100 pages that are gone"));
        // Grown by exactly what a host daemon holds: pods get what the node
        // advertises; worth knowing only.
        let (_, f) = build(&kubepods(Some(600), 0, 0), &[pool(640, 600, 0)]);
        assert_eq!(codes(&f), [("kubelet-capacity-stale", Severity::Info)]);
    }

    #[test]
    fn pages_a_host_daemon_holds_inside_the_allocatable_are_held() {
        // 620 pages, pods 512, a daemon faulted 40: pods are allowed 600
        // but 580 are left to them.
        let (r, f) = build(&kubepods(Some(620), 256, 512), &[pool(620, 324, 256)]);
        assert_eq!(r.sizes[0].outside_pages, 40);
        assert_eq!(codes(&f), [("kubelet-capacity-held", Severity::Warning)]);
        assert!(
            f[0].message.starts_with("40 2 MiB pages"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.contains("allows pods 620 pages where 580"));
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("--system-reserved=hugepages-2Mi=80Mi"));
        // Both: the pool grew by 20 and a daemon holds 40.
        let (_, f) = build(&kubepods(Some(600), 256, 512), &[pool(620, 324, 256)]);
        assert_eq!(
            codes(&f),
            [
                ("kubelet-capacity-stale", Severity::Warning),
                ("kubelet-capacity-held", Severity::Warning)
            ]
        );
        // The daemon's pages outside what the node advertises: not held.
        let (_, f) = build(&kubepods(Some(580), 256, 512), &[pool(620, 324, 256)]);
        assert_eq!(codes(&f), [("kubelet-capacity-stale", Severity::Info)]);
    }
}
