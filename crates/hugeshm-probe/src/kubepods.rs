//! The kubelet's `kubepods` cgroup: the cgroup every pod sits under, whose
//! hugetlb limits the kubelet sets, when it starts, to the node's
//! allocatable huge pages (its capacity: the pools it counted then).
//!
//! The kubelet makes it at the root of each hierarchy, named by its cgroup
//! driver (`kubepods.slice` with systemd, `kubepods` with cgroupfs), and
//! writes `hugetlb.<size>.max` (v2) or `hugetlb.<size>.limit_in_bytes` (v1)
//! for every page size the kernel has: the node's allocatable bytes of that
//! size, 0 for a size it found no pages of (kubernetes `pkg/kubelet/cm`:
//! `getCgroupConfig` → `HugePageLimits`, then the cgroup manager's "for
//! each page size omitted, limit to 0").

use crate::cgroup::{join_host, read_level};
use crate::read::ReadError;
use crate::{HugetlbCgroupLevel, Probe};
use hugeshm_parse::cgroup::KUBEPODS;
use serde::{Deserialize, Serialize};

/// The kubelet's `kubepods` cgroup in the hugetlb hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Kubepods {
    /// 1 or 2: the hugetlb hierarchy's cgroup version.
    pub version: u8,
    /// The kubelet's cgroup driver the name says: `systemd`
    /// (`kubepods.slice`) or `cgroupfs` (`kubepods`).
    pub driver: String,
    /// Its cgroup path (`/kubepods.slice`, `/kubepods`).
    pub path: String,
    /// Its directory, as this host sees it.
    pub dir: String,
    /// Per page size (smallest first) the files of the cgroup; a size
    /// without files is absent.
    pub sizes: Vec<KubepodsSize>,
}

/// One page size of [`Kubepods`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KubepodsSize {
    /// The huge page size.
    pub page_size_bytes: u64,
    /// Its limit and usage (all pods together: the kernel charges a page
    /// to every ancestor of the cgroup that faults it).
    pub level: HugetlbCgroupLevel,
}

impl Probe {
    /// The kubelet's `kubepods` cgroup, or `None` when no hugetlb
    /// hierarchy is mounted whole or it has no `kubepods.slice` nor
    /// `kubepods` at its root. The hierarchy is looked for in the mounts of
    /// pid 1 (`<proc>/1/mountinfo`: the host's, where the fs root is the
    /// host's root seen from a container, whose own mounts show only its
    /// cgroup), then in this process's. An unreadable or malformed limit
    /// or usage file is an error.
    pub fn kubepods(&self) -> Result<Option<Kubepods>, ReadError> {
        let whole = |mounts: &[hugeshm_parse::mountinfo::MountInfo]| {
            self.hugetlb_hierarchy(mounts)
                .map(|h| h.filter(|(_, m)| m.root == "/"))
        };
        let host = self.mountinfo(Some(1)).unwrap_or_default();
        let found = match whole(&host)? {
            Some(h) => Some(h),
            None => whole(&self.mountinfo(None)?)?,
        };
        let Some((version, mount)) = found else {
            return Ok(None);
        };
        let Some((path, driver, dir)) = KUBEPODS.iter().find_map(|(path, driver)| {
            let dir = join_host(&mount.mount_point, path);
            self.fs_path(&dir)
                .is_dir()
                .then(|| (path.to_string(), driver.to_string(), dir))
        }) else {
            return Ok(None);
        };
        let fs_dir = self.fs_path(&dir);
        let sizes = self.hugetlb_sizes(std::iter::once(dir.as_str()));
        let mut out = Vec::new();
        for page in sizes {
            if let Some(level) = read_level(version, page, &fs_dir, path.clone(), dir.clone())? {
                out.push(KubepodsSize {
                    page_size_bytes: page,
                    level,
                });
            }
        }
        Ok(Some(Kubepods {
            version,
            driver,
            path,
            dir,
            sizes: out,
        }))
    }
}
