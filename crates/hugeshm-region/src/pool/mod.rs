//! The pool check and the plan: which pages a region will get, decided from
//! one host snapshot before any system call.
//!
//! Everything here is pure (no I/O): the planner takes a
//! [`HostSnapshot`] and a request and returns a
//! plan or a typed error, so every policy decision is unit-tested on
//! synthetic pools. The one exception, [`checked`]'s cgroup check and the
//! refusals of [`shortfall`], read the host again through the `Probe`.
//!
//! - `mod.rs`: the request and the [`Plan`]; [`plan`] (the page size:
//!   one asked for, or `largest` = the largest whose pool holds the
//!   region; policy `off`, base pages), the `try` fall-back to base pages
//!   ([`fallback_plan`]), and [`checked`]: the plan plus the cgroup and
//!   node checks;
//! - `hugetlb.rs`: one huge page size from the hugetlb pool, and a
//!   hugetlbfs mount of it;
//! - `thp.rs`: transparent huge pages for a tmpfs (`posix`) region;
//! - `dax.rs`: a DAX mount or a device-dax;
//! - `shortfall.rs`: the pool check ([`check_pool`](shortfall::check_pool)), the kernel's
//!   refusals (at the reservation, at fault time) and the cgroup's room;
//! - `numa.rs`: the per-node check of a placed plan.

use std::path::PathBuf;

use hugeshm_parse::size::{format_bytes, round_up};
use hugeshm_probe::{HostSnapshot, Probe};

use crate::error::RegionError;
use crate::model::{Backend, Fallback, PageSize, Policy};
use crate::naming::DEFAULT_POSIX_DIR;

mod dax;
mod hugetlb;
mod numa;
mod shortfall;
mod thp;

use thp::try_thp;

use dax::dax_plan;
pub(crate) use dax::{too_big, DevDax, DAX_PMD};
use hugetlb::try_hugetlb;
pub(crate) use numa::{interleave_shares, numa_check};
pub(crate) use shortfall::{cgroup_check, fault_refused, map_refused, refused};

/// [`plan`], then the checks against the host beyond the pools, before
/// anything is created: the hugetlb cgroup of this process
/// ([`cgroup_check`]: its file and numbers) and, for a mapping placed on
/// some nodes (`numa`: the policy and how to name it), those nodes' pools,
/// node by node ([`numa_check`]). `only` fails with the first problem;
/// `try` plans the whole region on base pages with the reason.
pub(crate) fn checked(
    req: &Request,
    host: &HostSnapshot,
    extra: &HostExtra,
    probe: &Probe,
    numa: Option<&(hugeshm_sys::MemPolicy, String)>,
) -> Result<Plan, RegionError> {
    let mut plan = plan(req, host, extra)?;
    if let Some(e) = cgroup_check(probe, &plan) {
        if req.policy != Policy::Try {
            return Err(e);
        }
        plan = fallback_plan(req, extra, &e)?;
    }
    if let Some(e) = numa.and_then(|(p, d)| numa_check(host, &plan, p, d)) {
        if req.policy != Policy::Try {
            return Err(e);
        }
        plan = fallback_plan(req, extra, &e)?;
    }
    Ok(plan)
}

/// How a `posix` (tmpfs) region gets transparent huge pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThpMode {
    /// The mount (or `shmem_enabled=force`) allocates huge folios even
    /// without a mapping: `fallocate` gets them.
    Always,
    /// Only mappings with `MADV_HUGEPAGE` get them: `fallocate` would
    /// allocate base pages, so the file is filled by faulting the mapping
    /// (`MADV_POPULATE_WRITE`, an error rather than SIGBUS when tmpfs is
    /// full).
    Advise,
}

/// What backs the planned region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// Base pages.
    Base,
    /// The hugetlb pool.
    Hugetlb,
    /// tmpfs transparent huge pages.
    Thp(ThpMode),
    /// A file on a DAX file system (persistent memory), mapped in place;
    /// the page size is the mapping's alignment (2 MiB: the kernel can
    /// map it with PMD entries).
    Dax,
}

/// The request, as far as planning is concerned.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub backend: Backend,
    pub page_size: PageSize,
    pub policy: Policy,
    pub requested_bytes: u64,
    /// The builder's directory: for `hugetlbfs` with its page size (from
    /// `statfs`), for `posix` the tmpfs directory.
    pub directory: Option<(PathBuf, Option<u64>)>,
    /// For `dax`: the device-dax that `directory` names.
    pub device: Option<DevDax>,
}

/// What the host offers, beyond the snapshot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostExtra {
    /// Base page size.
    pub base: u64,
    /// `hpage_pmd_size`: the transparent huge page size (`None` without THP).
    pub pmd_size: Option<u64>,
}

/// The decision: page size, rounded size, where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub page_size: u64,
    pub size_bytes: u64,
    pub backing: Backing,
    /// The hugetlbfs mount or tmpfs directory for file backends.
    pub dir: Option<PathBuf>,
    /// Why the region is not on the pages asked for (policy `try`).
    pub fallback: Option<Fallback>,
    pub warnings: Vec<String>,
}

impl Plan {
    /// Whether the region is on huge pages (hugetlb or THP).
    pub fn is_huge(&self) -> bool {
        self.backing != Backing::Base
    }

    /// The address alignment that lets processes share the page tables of
    /// a mapping of this plan ([`hugeshm_sys::PMD_SHARE_ALIGN`], for
    /// hugetlb pages smaller than it and a mapping at least that large).
    /// The alignment of a mapping on base pages or THP of at least 2 MiB:
    /// 2 MiB, so that each whole block can be one 2 MiB page (a THP fault,
    /// or a later `Region::collapse`).
    pub fn block_align(&self) -> Option<usize> {
        block_align(self.size_bytes)
            .filter(|_| matches!(self.backing, Backing::Base | Backing::Thp(_)))
    }

    pub fn pmd_share_align(&self) -> Option<usize> {
        let align = hugeshm_sys::PMD_SHARE_ALIGN;
        (self.backing == Backing::Hugetlb
            && self.page_size < align as u64
            && self.size_bytes >= align as u64)
            .then_some(align)
    }
}

/// 2 MiB for a mapping of `size` bytes on base pages of at least one
/// block: then each whole block can be one 2 MiB page (a THP fault, a
/// collapse).
pub(crate) fn block_align(size: u64) -> Option<usize> {
    let block = hugeshm_sys::COLLAPSE_BLOCK;
    (size >= block as u64).then_some(block)
}

pub(super) fn size_for(requested: u64, page: u64) -> Result<u64, RegionError> {
    round_up(requested, page).ok_or_else(|| RegionError::InvalidSize {
        requested_bytes: requested,
        reason: format!("rounding up to {} pages overflows", format_bytes(page)),
        fix: None,
    })
}

/// The directory a base-page file of this request goes to.
pub(super) fn base_dir(req: &Request) -> Option<PathBuf> {
    match req.backend {
        Backend::Posix => Some(
            req.directory
                .as_ref()
                .map(|(d, _)| d.clone())
                .unwrap_or_else(|| PathBuf::from(DEFAULT_POSIX_DIR)),
        ),
        // Base pages do not exist on hugetlbfs: the file goes to /dev/shm.
        Backend::Hugetlbfs => Some(PathBuf::from(DEFAULT_POSIX_DIR)),
        _ => None,
    }
}

fn base_plan(req: &Request, extra: &HostExtra) -> Result<Plan, RegionError> {
    Ok(Plan {
        page_size: extra.base,
        size_bytes: size_for(req.requested_bytes, extra.base)?,
        backing: Backing::Base,
        dir: base_dir(req),
        fallback: None,
        warnings: Vec::new(),
    })
}

/// Turns a failed huge-page attempt into the `try` fall-back: the whole
/// region on base pages, the reason and numbers kept.
pub(crate) fn fallback_plan(
    req: &Request,
    extra: &HostExtra,
    err: &RegionError,
) -> Result<Plan, RegionError> {
    let mut plan = base_plan(req, extra)?;
    plan.fallback = Some(Fallback {
        reason: format!(
            "{err}; the whole region uses {} pages instead",
            format_bytes(extra.base)
        ),
        shortfall: err.shortfall().cloned(),
    });
    if req.backend == Backend::Hugetlbfs {
        plan.warnings.push(format!(
            "base pages do not exist on hugetlbfs: the region's file is in {DEFAULT_POSIX_DIR}"
        ));
    }
    Ok(plan)
}

/// Plans one huge page size, whatever the backend.
fn try_size(
    req: &Request,
    host: &HostSnapshot,
    extra: &HostExtra,
    page: u64,
) -> Result<Plan, RegionError> {
    if req.backend == Backend::Posix {
        try_thp(req, host, extra, page)
    } else {
        try_hugetlb(req, host, req.requested_bytes, page)
    }
}

/// The huge page sizes `largest` considers, largest first.
fn largest_candidates(req: &Request, host: &HostSnapshot, extra: &HostExtra) -> Vec<u64> {
    let mut sizes: Vec<u64> = if req.backend == Backend::Posix {
        extra.pmd_size.into_iter().collect()
    } else {
        host.pools.iter().map(|p| p.page_size_bytes).collect()
    };
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let fitting: Vec<u64> = sizes
        .iter()
        .copied()
        .filter(|s| *s <= req.requested_bytes)
        .collect();
    if fitting.is_empty() {
        sizes.last().copied().into_iter().collect()
    } else {
        fitting
    }
}

/// Decides the pages of a region. `Err` only for `only` (or for requests
/// no policy can satisfy, like an invalid size); `try` turns every huge
/// page failure into a base-page plan with the reason.
pub(crate) fn plan(
    req: &Request,
    host: &HostSnapshot,
    extra: &HostExtra,
) -> Result<Plan, RegionError> {
    if req.requested_bytes == 0 {
        return Err(RegionError::InvalidSize {
            requested_bytes: 0,
            reason: "a region needs at least one byte".to_owned(),
            fix: None,
        });
    }
    if req.backend == Backend::Dax {
        return dax_plan(req, host, extra);
    }
    if req.policy == Policy::Off || req.page_size == PageSize::Base {
        let mut plan = base_plan(req, extra)?;
        if req.policy == Policy::Off && req.page_size != PageSize::Base {
            plan.warnings.push(format!(
                "policy off: page size {} ignored, the region uses {} pages",
                req.page_size,
                format_bytes(extra.base)
            ));
        }
        return Ok(plan);
    }
    let attempt = match req.page_size {
        PageSize::Huge(page) if page == extra.base => return base_plan(req, extra),
        PageSize::Huge(page) => try_size(req, host, extra, page),
        PageSize::Largest => {
            let candidates = largest_candidates(req, host, extra);
            if candidates.is_empty() {
                Err(if req.backend == Backend::Posix {
                    try_thp(req, host, extra, 0).unwrap_err()
                } else {
                    RegionError::UnsupportedPageSize {
                        page_size_bytes: 2 << 20,
                        offered: Vec::new(),
                    }
                })
            } else {
                let mut first_err = None;
                let mut found = None;
                for page in &candidates {
                    match try_size(req, host, extra, *page) {
                        Ok(p) => {
                            found = Some(p);
                            break;
                        }
                        Err(e) => {
                            // Report the default size's problem if it was a
                            // candidate, else the largest one's.
                            let primary = host.default_page_size() == Some(*page);
                            if first_err.is_none() || primary {
                                first_err = Some(e);
                            }
                        }
                    }
                }
                match found {
                    Some(p) => Ok(p),
                    None => Err(first_err.expect("at least one candidate")),
                }
            }
        }
        PageSize::Base => unreachable!("handled above"),
    };
    match attempt {
        Ok(plan) => Ok(plan),
        Err(e) if req.policy == Policy::Only => Err(e),
        Err(e) => fallback_plan(req, extra, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::dax::region_size;
    use super::shortfall::check_pool;
    use super::*;
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::mounts;
    use hugeshm_parse::thp::parse_selector;
    use std::path::Path;

    const MIB2: u64 = 2 << 20;
    const GIB: u64 = 1 << 30;

    fn host(pools: &[(u64, u64, u64, u64)], mounts_text: &str, shmem: &str) -> HostSnapshot {
        let mut h = HostSnapshot::default();
        h.pools = pools
            .iter()
            .map(|&(ps, nr, free, resv)| PoolCounters::new(ps, nr, free, Some(resv), 0, Some(0)))
            .collect();
        h.hugetlb_sysfs = true;
        h.meminfo = Some(
            hugeshm_parse::meminfo::parse("MemTotal: 1000 kB\nHugepagesize: 2048 kB\n").unwrap(),
        );
        h.mounts = mounts::parse(mounts_text).unwrap();
        h.thp.shmem_enabled = Some(parse_selector("shmem_enabled", shmem).unwrap());
        h
    }

    fn extra() -> HostExtra {
        HostExtra {
            base: 4096,
            pmd_size: Some(MIB2),
        }
    }

    fn req(backend: Backend, page_size: PageSize, policy: Policy, bytes: u64) -> Request {
        Request {
            backend,
            page_size,
            policy,
            requested_bytes: bytes,
            directory: None,
            device: None,
        }
    }

    const MOUNTS: &str = "tmpfs /dev/shm tmpfs rw,relatime 0 0\n\
                          hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n\
                          none /mnt/h1g hugetlbfs rw,pagesize=1024M 0 0\n\
                          tmpfs /mnt/thp tmpfs rw,huge=within_size 0 0\n\
                          tmpfs /mnt/adv tmpfs rw,huge=advise 0 0\n";

    #[test]
    fn numa_placement_is_checked_node_by_node() {
        use hugeshm_sys::MemPolicy;
        let mut h = host(&[(MIB2, 110, 110, 0)], MOUNTS, "[never]");
        for (node, nr, free) in [(0u32, 100u64, 100u64), (1, 10, 10)] {
            let counters = PoolCounters::new(MIB2, nr, free, None, 0, None);
            h.node_pools.push(
                serde_json::from_value(serde_json::json!({"node": node, "counters": counters}))
                    .unwrap(),
            );
        }
        let p = plan(
            &req(Backend::Anon, PageSize::HUGE_2M, Policy::Only, 64 << 20),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!(p.size_bytes / MIB2, 32);
        let e = numa_check(&h, &p, &MemPolicy::Bind(vec![1]), "--numa bind=1").unwrap();
        assert_eq!(
            e.to_string(),
            "2 MiB pages on --numa bind=1: node 1 required 32, available 10"
        );
        assert_eq!(
            e.fix().unwrap().to_string(),
            "echo 32 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
        );
        assert!(numa_check(&h, &p, &MemPolicy::Bind(vec![0]), "b").is_none());
        assert!(numa_check(&h, &p, &MemPolicy::Bind(vec![0, 1]), "b").is_none());
        assert!(numa_check(&h, &p, &MemPolicy::Preferred(1), "p").is_none());
        // Interleave: each node its half; only node 1 is short.
        let e = numa_check(&h, &p, &MemPolicy::Interleave(vec![0, 1]), "interleave").unwrap();
        assert_eq!(
            e.to_string(),
            "2 MiB pages on interleave: node 0 required 16, available 100; node 1 required 16, available 10"
        );
        assert_eq!(
            e.fix().unwrap().to_string(),
            "echo 16 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
        );
        // Weighted interleave, weights 1 and 3 (Linux 6.9+): 8 and 24
        // pages; the same nodes without weights split evenly.
        let e = numa_check(&h, &p, &MemPolicy::WeightedInterleave(vec![0, 1]), "w").unwrap();
        assert!(
            e.to_string().ends_with("node 1 required 16, available 10"),
            "{e}"
        );
        for (node, w) in [(0u32, 1u64), (1, 3)] {
            let mut info = hugeshm_probe::NodeInfo::default();
            info.node = node;
            info.interleave_weight = Some(w);
            h.nodes.push(info);
        }
        let e = numa_check(&h, &p, &MemPolicy::WeightedInterleave(vec![0, 1]), "w").unwrap();
        assert_eq!(
            e.to_string(),
            "2 MiB pages on w: node 0 required 8, available 100; node 1 required 24, available 10"
        );
        // 33 pages over weights 1 and 3: 8 and 24, and the one left over
        // goes to the first node.
        let p33 = plan(
            &req(Backend::Anon, PageSize::HUGE_2M, Policy::Only, 66 << 20),
            &h,
            &extra(),
        )
        .unwrap();
        let e = numa_check(&h, &p33, &MemPolicy::WeightedInterleave(vec![0, 1]), "w").unwrap();
        assert!(
            e.to_string().contains("node 0 required 9, available 100"),
            "{e}"
        );
        // Base pages and hosts without node pools: nothing to check.
        let mut flat = h.clone();
        flat.node_pools.clear();
        assert!(numa_check(&flat, &p, &MemPolicy::Bind(vec![1]), "b").is_none());
    }

    #[test]
    fn shortfall_message_is_exact() {
        let pool = PoolCounters::new(MIB2, 800, 800, Some(512), 0, Some(0));
        let s = check_pool(&pool, 10432, Some(MIB2)).unwrap_err();
        assert_eq!(
            s.to_string(),
            "2 MiB pages: required 10432, available 288 (free 800, reserved 512)"
        );
        assert_eq!(s.fix.to_string(), "sysctl -w vm.nr_hugepages=10944");
        assert_eq!(s.missing(), 10144);
        let pool = PoolCounters::new(GIB, 2, 1, Some(0), 0, Some(0));
        let s = check_pool(&pool, 3, Some(MIB2)).unwrap_err();
        assert_eq!(
            s.to_string(),
            "1 GiB pages: required 3, available 1 (free 1, reserved 0)"
        );
        assert_eq!(
            s.fix.to_string(),
            "echo 4 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
        );
        assert!(check_pool(&pool, 1, Some(MIB2)).is_ok());
    }

    #[test]
    fn only_fails_and_try_falls_back_whole() {
        let h = host(&[(MIB2, 10, 5, 1), (GIB, 0, 0, 0)], MOUNTS, "[never]");
        // 5 pages needed, 4 available.
        let r = req(
            Backend::Sysv,
            PageSize::HUGE_2M,
            Policy::Only,
            5 * MIB2 - 100,
        );
        let e = plan(&r, &h, &extra()).unwrap_err();
        let s = e.shortfall().unwrap();
        assert_eq!((s.required, s.available, s.free, s.reserved), (5, 4, 5, 1));
        assert_eq!(s.fix.to_string(), "sysctl -w vm.nr_hugepages=11");
        let r = Request {
            policy: Policy::Try,
            ..r
        };
        let p = plan(&r, &h, &extra()).unwrap();
        assert_eq!(p.backing, Backing::Base);
        assert_eq!(p.page_size, 4096);
        assert_eq!(p.size_bytes, 5 * MIB2);
        let fb = p.fallback.unwrap();
        assert_eq!(fb.shortfall.as_ref().unwrap().required, 5);
        let reason = fb.reason;
        assert!(
            reason.starts_with("2 MiB pages: required 5, available 4"),
            "{reason}"
        );
        assert!(
            reason.ends_with("the whole region uses 4 KiB pages instead"),
            "{reason}"
        );
        // Fits: rounded up, on huge pages.
        let r = req(Backend::Anon, PageSize::HUGE_2M, Policy::Only, 3 * MIB2 + 1);
        let p = plan(&r, &h, &extra()).unwrap();
        assert_eq!((p.page_size, p.size_bytes), (MIB2, 4 * MIB2));
        assert_eq!(p.backing, Backing::Hugetlb);
        assert!(p.fallback.is_none());
    }

    #[test]
    fn off_and_base_never_touch_the_pool() {
        let h = host(&[], "", "[never]");
        let p = plan(
            &req(Backend::Sysv, PageSize::HUGE_1G, Policy::Off, 10),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!(
            (p.page_size, p.size_bytes, p.fallback.is_some()),
            (4096, 4096, false)
        );
        assert_eq!(p.warnings.len(), 1);
        let p = plan(
            &req(Backend::Hugetlbfs, PageSize::Base, Policy::Only, 4097),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!(p.size_bytes, 8192);
        assert_eq!(p.dir.as_deref(), Some(Path::new("/dev/shm")));
        assert!(plan(
            &req(Backend::Anon, PageSize::Base, Policy::Try, 0),
            &h,
            &extra()
        )
        .is_err());
    }

    #[test]
    fn unsupported_size_and_missing_mount() {
        let h = host(
            &[(MIB2, 10, 10, 0)],
            "tmpfs /dev/shm tmpfs rw 0 0\n",
            "[never]",
        );
        let e = plan(
            &req(Backend::Memfd, PageSize::HUGE_1G, Policy::Only, GIB),
            &h,
            &extra(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("1 GiB pages are not offered by this kernel (offered: 2 MiB)"),
            "{e}"
        );
        let e = plan(
            &req(Backend::Hugetlbfs, PageSize::HUGE_2M, Policy::Only, MIB2),
            &h,
            &extra(),
        )
        .unwrap_err();
        assert_eq!(
            e.fix().unwrap().to_string(),
            "mkdir -p /dev/hugepages && mount -t hugetlbfs -o pagesize=2M,mode=1770 nodev /dev/hugepages"
        );
        let p = plan(
            &req(Backend::Hugetlbfs, PageSize::HUGE_2M, Policy::Try, MIB2),
            &h,
            &extra(),
        )
        .unwrap();
        assert!(p.fallback.is_some());
        assert_eq!(p.dir.as_deref(), Some(Path::new("/dev/shm")));
    }

    #[test]
    fn hugetlbfs_finds_mount_of_the_size() {
        let h = host(&[(MIB2, 10, 10, 0), (GIB, 2, 2, 0)], MOUNTS, "[never]");
        let p = plan(
            &req(Backend::Hugetlbfs, PageSize::HUGE_1G, Policy::Only, 10),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!(p.dir.as_deref(), Some(Path::new("/mnt/h1g")));
        assert_eq!(p.size_bytes, GIB);
        let p = plan(
            &req(Backend::Hugetlbfs, PageSize::HUGE_2M, Policy::Only, 10),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!(p.dir.as_deref(), Some(Path::new("/dev/hugepages")));
    }

    #[test]
    fn largest_picks_biggest_fitting_pool() {
        let h = host(&[(MIB2, 100, 100, 0), (GIB, 1, 1, 0)], MOUNTS, "[never]");
        let p = plan(
            &req(Backend::Sysv, PageSize::Largest, Policy::Only, GIB),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!(p.page_size, GIB);
        // 2 GiB needs 2 x 1 GiB (only 1): 2 MiB pages hold 100 x 2 MiB < 2 GiB
        // either, so `only` fails on the default size's numbers.
        let e = plan(
            &req(Backend::Sysv, PageSize::Largest, Policy::Only, 2 * GIB),
            &h,
            &extra(),
        )
        .unwrap_err();
        assert_eq!(e.shortfall().unwrap().page_size_bytes, MIB2);
        // 150 MiB: 1 GiB pages are bigger than the region; 2 MiB fit.
        let p = plan(
            &req(Backend::Sysv, PageSize::Largest, Policy::Only, 150 << 20),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!(p.page_size, MIB2);
        // Tiny region: smallest huge size.
        let p = plan(
            &req(Backend::Anon, PageSize::Largest, Policy::Only, 10),
            &h,
            &extra(),
        )
        .unwrap();
        assert_eq!((p.page_size, p.size_bytes), (MIB2, MIB2));
    }

    #[test]
    fn posix_thp_follows_mount_option() {
        let h = host(
            &[(MIB2, 0, 0, 0)],
            MOUNTS,
            "always within_size advise [never] deny force",
        );
        let e = plan(
            &req(Backend::Posix, PageSize::HUGE_2M, Policy::Only, MIB2),
            &h,
            &extra(),
        )
        .unwrap_err();
        assert!(matches!(e, RegionError::ThpUnavailable { .. }), "{e}");
        assert_eq!(
            e.fix().unwrap().to_string(),
            "mount -o remount,huge=within_size /dev/shm"
        );
        let mut r = req(Backend::Posix, PageSize::HUGE_2M, Policy::Only, 3 << 20);
        r.directory = Some((PathBuf::from("/mnt/thp/sub"), None));
        let p = plan(&r, &h, &extra()).unwrap();
        assert_eq!(p.backing, Backing::Thp(ThpMode::Always));
        assert_eq!(p.size_bytes, 2 * MIB2);
        r.directory = Some((PathBuf::from("/mnt/adv"), None));
        assert_eq!(
            plan(&r, &h, &extra()).unwrap().backing,
            Backing::Thp(ThpMode::Advise)
        );
        r.page_size = PageSize::HUGE_1G;
        assert!(plan(&r, &h, &extra())
            .unwrap_err()
            .to_string()
            .contains("2 MiB transparent huge pages only"));
        let forced = host(&[], MOUNTS, "always within_size advise never deny [force]");
        let p = plan(
            &req(Backend::Posix, PageSize::Largest, Policy::Only, 10 << 20),
            &forced,
            &extra(),
        )
        .unwrap();
        assert_eq!(p.backing, Backing::Thp(ThpMode::Always));
        let deny = host(&[], MOUNTS, "always within_size advise never [deny] force");
        let p = plan(
            &req(Backend::Posix, PageSize::HUGE_2M, Policy::Try, 10 << 20),
            &deny,
            &extra(),
        )
        .unwrap();
        assert!(p.fallback.unwrap().reason.contains("[deny]"));
    }

    #[test]
    fn a_dax_plan_takes_dax_inode_mounts_after_dax_always_ones() {
        let inode = "/dev/pmem1 /mnt/inode ext4 rw,relatime,dax=inode 0 0\n";
        let always = "/dev/pmem0 /mnt/always xfs rw,relatime,dax=always 0 0\n";
        let never = "/dev/pmem2 /mnt/never ext4 rw,relatime,dax=never 0 0\n";
        let r = req(Backend::Dax, PageSize::Largest, Policy::Only, 8 << 20);
        let dir = |mounts: &str, r: &Request| {
            plan(r, &host(&[], mounts, "[never]"), &extra()).map(|p| p.dir)
        };
        assert_eq!(dir(inode, &r).unwrap(), Some(PathBuf::from("/mnt/inode")));
        let both = format!("{inode}{always}");
        assert_eq!(dir(&both, &r).unwrap(), Some(PathBuf::from("/mnt/always")));
        assert!(dir(never, &r).is_err());
        // Given: a dax=inode directory is one, dax=never is not.
        let given = |d: &str| Request {
            directory: Some((PathBuf::from(d), None)),
            ..req(Backend::Dax, PageSize::Largest, Policy::Only, 8 << 20)
        };
        let all = format!("{inode}{always}{never}");
        assert_eq!(
            dir(&all, &given("/mnt/inode/db")).unwrap(),
            Some(PathBuf::from("/mnt/inode/db"))
        );
        let e = dir(&all, &given("/mnt/never")).unwrap_err();
        assert!(e.to_string().contains("not on a DAX file system"), "{e}");
    }

    #[test]
    fn a_device_dax_plan_takes_the_device_alignment_and_capacity() {
        let dev = |align: u64| DevDax {
            path: PathBuf::from("/dev/dax0.0"),
            name: "dax0.0".to_owned(),
            size_bytes: 110 * MIB2 / 2,
            align_bytes: align,
        };
        let h = HostSnapshot::default();
        let r = |page_size: PageSize, bytes: u64, d: DevDax| Request {
            device: Some(d),
            directory: Some((PathBuf::from("/dev/dax0.0"), None)),
            ..req(Backend::Dax, page_size, Policy::Only, bytes)
        };
        let p = plan(&r(PageSize::Largest, 5 * MIB2 + 1, dev(MIB2)), &h, &extra()).unwrap();
        assert_eq!(p.page_size, MIB2);
        assert_eq!(p.size_bytes, 6 * MIB2);
        assert_eq!(p.backing, Backing::Dax);
        assert_eq!(p.dir, Some(PathBuf::from("/dev/dax0.0")));
        // The page size is the device's: 2 MiB may be named, others not.
        assert!(plan(&r(PageSize::Huge(MIB2), MIB2, dev(MIB2)), &h, &extra()).is_ok());
        for ps in [PageSize::Base, PageSize::Huge(1 << 30)] {
            let e = plan(&r(ps, MIB2, dev(MIB2)), &h, &extra()).unwrap_err();
            assert!(
                matches!(&e, RegionError::UnsupportedPageSize { offered, .. } if offered == &[MIB2]),
                "{e}"
            );
        }
        // Beyond the capacity: the rounded size and the capacity.
        let e = plan(&r(PageSize::Largest, 56 * MIB2, dev(MIB2)), &h, &extra()).unwrap_err();
        match &e {
            RegionError::NoSpace {
                needed_bytes,
                free_bytes,
                fstype,
                ..
            } => {
                assert_eq!((*needed_bytes, *free_bytes), (56 * MIB2, 55 * MIB2));
                assert_eq!(fstype, "device-dax");
            }
            e => panic!("{e}"),
        }
        // A 1 GiB-aligned device: one 1 GiB unit does not fit 110 MiB.
        let e = plan(&r(PageSize::Largest, MIB2, dev(1 << 30)), &h, &extra()).unwrap_err();
        assert!(
            e.to_string().contains("needed 1073741824 bytes (1 GiB)"),
            "{e}"
        );
    }
    #[test]
    fn sizes_round_to_the_device_alignment_and_must_fit() {
        assert_eq!(region_size(32 << 20, MIB2, 110 << 20), Ok(32 << 20));
        assert_eq!(region_size((32 << 20) + 1, MIB2, 110 << 20), Ok(34 << 20));
        assert_eq!(region_size(4097, MIB2, 110 << 20), Ok(MIB2));
        // 1 GiB alignment: one fault unit at least.
        assert_eq!(region_size(8 << 20, 1 << 30, 4 << 30), Ok(1 << 30));
        // Too big: the rounded size, for the message.
        assert_eq!(region_size(1 << 30, MIB2, 110 << 20), Err(1 << 30));
        assert_eq!(region_size((109 << 20) + 1, MIB2, 110 << 20), Ok(110 << 20));
        assert_eq!(
            region_size((110 << 20) + 1, MIB2, 110 << 20),
            Err(112 << 20)
        );
        assert_eq!(region_size(u64::MAX - 5, MIB2, 110 << 20), Err(u64::MAX));
    }
}
