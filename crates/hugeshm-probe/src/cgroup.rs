//! The hugetlb cgroup of a process: where the controller's hierarchy is
//! mounted, the process's cgroup in it, and per huge page size the limits,
//! usage and refusals of that cgroup and of every ancestor up to the
//! hierarchy's root, with the **effective** limit and the room left under it.
//!
//! The kernel charges a huge page to the cgroup of the process that faults
//! it in, and to every ancestor: a charge that would pass the limit of any
//! of them is refused (SIGBUS at fault time, or `mmap`/`shmget` failing for
//! a reservation limit). So what a process can still get is the least room
//! left at any level, not the room in its own cgroup.

use crate::host::size_dirs;
use crate::read::{io_error, read_parse, read_parse_at, read_parse_reused, ReadError};
use crate::Probe;
use hugeshm_parse::cgroup::{self, CgroupEntry};
use hugeshm_parse::hugetlb_cgroup::{
    hugetlb_size_name, parse_counter, parse_events, parse_limit, split_file_name,
};
use hugeshm_parse::mountinfo::{self, MountInfo};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The hugetlb cgroup of one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HugetlbCgroup {
    /// 1 for a cgroup v1 `hugetlb` hierarchy, 2 for the unified hierarchy.
    pub version: u8,
    /// Where the hierarchy is mounted, as this host sees it
    /// (`/sys/fs/cgroup`, `/sys/fs/cgroup/hugetlb`, `/sys/fs/cgroup/unified`).
    pub mount_point: String,
    /// The process's cgroup path in the hierarchy, as `/proc/PID/cgroup`
    /// prints it (`/kubepods/burstable/pod…/ctr`, `/` for the root).
    pub path: String,
    /// The directory of that cgroup, as this host sees it (under
    /// `mount_point`).
    pub dir: String,
    /// One entry per huge page size the kernel has, smallest first.
    pub sizes: Vec<HugetlbCgroupSize>,
}

/// The hugetlb limits, usage and room of one page size for a process's
/// cgroup. Bytes throughout; a limit `None` is "no limit" (`max`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HugetlbCgroupSize {
    /// The huge page size.
    pub page_size_bytes: u64,
    /// The cgroup's own limit on faulted pages (`hugetlb.<size>.max`, v1
    /// `limit_in_bytes`).
    pub limit_bytes: Option<u64>,
    /// Faulted pages charged to the cgroup and its descendants
    /// (`current`, v1 `usage_in_bytes`); 0 where the cgroup has no files
    /// (the v2 root, or the controller not enabled down to it).
    pub usage_bytes: u64,
    /// The cgroup's own limit on reservations (`rsvd.max`, v1
    /// `rsvd.limit_in_bytes`).
    pub rsvd_limit_bytes: Option<u64>,
    /// Reservations charged (`rsvd.current`, v1 `rsvd.usage_in_bytes`);
    /// `None` on kernels before 5.7, which have no `rsvd.*` files.
    pub rsvd_usage_bytes: Option<u64>,
    /// Charges refused because a limit was reached: v2 `events` `max` (in
    /// this cgroup and below it), v1 `failcnt`. Each is a fault refused (a
    /// SIGBUS, or an `MADV_POPULATE_WRITE` error) or a mapping refused.
    pub max_events: Option<u64>,
    /// The smallest limit on faulted pages of the cgroup and its ancestors.
    pub effective_limit_bytes: Option<u64>,
    /// The smallest reservation limit of the cgroup and its ancestors.
    pub effective_rsvd_limit_bytes: Option<u64>,
    /// The limit file of the level that leaves the least room (the level
    /// holding `effective_limit_bytes` when, as usual, one level is
    /// limited), as this host sees it; `None` when nothing is limited.
    pub binding_file: Option<String>,
    /// Bytes still chargeable for faulted pages: the least, over the cgroup
    /// and its ancestors that have a limit, of limit minus usage (at
    /// `binding_file`'s level); `None` when unlimited.
    pub room_bytes: Option<u64>,
    /// Bytes still chargeable for reservations, computed the same way over
    /// the reservation limits; `None` when unlimited.
    pub rsvd_room_bytes: Option<u64>,
    /// The cgroup and each ancestor that has this size's files, from the
    /// cgroup up to the hierarchy's root.
    pub levels: Vec<HugetlbCgroupLevel>,
}

/// One cgroup on the way from a process's cgroup to the hierarchy's root,
/// for one page size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HugetlbCgroupLevel {
    /// Its cgroup path (as `/proc/PID/cgroup` prints paths).
    pub path: String,
    /// Its directory, as this host sees it.
    pub dir: String,
    /// Its limit on faulted pages.
    pub limit_bytes: Option<u64>,
    /// Faulted pages charged to it and below.
    pub usage_bytes: u64,
    /// Its reservation limit.
    pub rsvd_limit_bytes: Option<u64>,
    /// Reservations charged to it and below (`None`: no `rsvd.*` files).
    pub rsvd_usage_bytes: Option<u64>,
    /// Charges refused (v2 `events` `max`, v1 `failcnt`).
    pub max_events: Option<u64>,
}

impl HugetlbCgroupSize {
    /// [`room_bytes`](Self::room_bytes) in whole pages; `None` when unlimited.
    pub fn room_pages(&self) -> Option<u64> {
        self.room_bytes.map(|b| b / self.page_size_bytes.max(1))
    }

    /// Whole pages a new mapping can have charged: the reservation it takes
    /// at `mmap`/`shmget` must fit [`rsvd_room_bytes`](Self::rsvd_room_bytes)
    /// and its faults [`room_bytes`](Self::room_bytes); `None` when neither
    /// is limited.
    pub fn new_mapping_pages(&self) -> Option<u64> {
        let b = match (self.room_bytes, self.rsvd_room_bytes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        b.map(|b| b / self.page_size_bytes.max(1))
    }
}

impl HugetlbCgroup {
    /// The entry for one page size.
    pub fn size(&self, page_size_bytes: u64) -> Option<&HugetlbCgroupSize> {
        self.sizes
            .iter()
            .find(|s| s.page_size_bytes == page_size_bytes)
    }

    /// The name of a limit file of this hierarchy's version:
    /// `hugetlb.2MB.max` / `hugetlb.2MB.rsvd.max` (v2),
    /// `hugetlb.2MB.limit_in_bytes` / `hugetlb.2MB.rsvd.limit_in_bytes` (v1).
    pub fn limit_file_name(&self, page_size_bytes: u64, rsvd: bool) -> String {
        limit_file_name(self.version, page_size_bytes, rsvd)
    }

    /// A process's cgroup path in this hierarchy, from its
    /// `/proc/PID/cgroup` entries.
    pub fn path_of<'a>(&self, entries: &'a [CgroupEntry]) -> Option<&'a str> {
        cgroup::find(entries, "hugetlb", self.version == 2).map(|e| e.path.as_str())
    }
}

fn limit_file_name(version: u8, page: u64, rsvd: bool) -> String {
    let r = if rsvd { "rsvd." } else { "" };
    let what = if version == 2 {
        "max"
    } else {
        "limit_in_bytes"
    };
    format!("hugetlb.{}.{r}{what}", hugetlb_size_name(page))
}

/// `a` + `/` + `b`, for host paths (`/sys/fs/cgroup` + `/kubepods` →
/// `/sys/fs/cgroup/kubepods`; `b` empty → `a`).
pub(crate) fn join_host(a: &str, b: &str) -> String {
    let b = b.trim_matches('/');
    if b.is_empty() {
        a.to_string()
    } else {
        format!("{}/{b}", a.trim_end_matches('/'))
    }
}

/// The file names of one hierarchy version: limit, usage, rsvd limit,
/// rsvd usage, refusals.
fn file_names(version: u8, page: u64) -> [String; 5] {
    let n = hugetlb_size_name(page);
    if version == 2 {
        [
            format!("hugetlb.{n}.max"),
            format!("hugetlb.{n}.current"),
            format!("hugetlb.{n}.rsvd.max"),
            format!("hugetlb.{n}.rsvd.current"),
            format!("hugetlb.{n}.events"),
        ]
    } else {
        [
            format!("hugetlb.{n}.limit_in_bytes"),
            format!("hugetlb.{n}.usage_in_bytes"),
            format!("hugetlb.{n}.rsvd.limit_in_bytes"),
            format!("hugetlb.{n}.rsvd.usage_in_bytes"),
            format!("hugetlb.{n}.failcnt"),
        ]
    }
}

/// `Ok(None)` for an absent file.
fn absent_ok<T>(r: Result<T, ReadError>) -> Result<Option<T>, ReadError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads one level's files for one size; `Ok(None)` when it has none.
pub(crate) fn read_level(
    version: u8,
    page: u64,
    fs_dir: &Path,
    path: String,
    dir: String,
) -> Result<Option<HugetlbCgroupLevel>, ReadError> {
    let [limit, usage, rsvd_limit, rsvd_usage, events] = file_names(version, page);
    let Some(limit_bytes) = absent_ok(read_parse_at(&fs_dir.join(&limit), parse_limit))? else {
        return Ok(None);
    };
    let usage_bytes = absent_ok(read_parse_at(&fs_dir.join(&usage), parse_counter))?.unwrap_or(0);
    // rsvd.* are absent before Linux 5.7: optional files are never errors.
    let rsvd_limit = read_parse_at(&fs_dir.join(&rsvd_limit), parse_limit).ok();
    let rsvd_usage_bytes = read_parse_at(&fs_dir.join(&rsvd_usage), parse_counter).ok();
    let max_events = if version == 2 {
        read_parse_at(&fs_dir.join(&events), parse_events)
            .ok()
            .map(|e| e.max)
    } else {
        read_parse_at(&fs_dir.join(&events), parse_counter).ok()
    };
    Ok(Some(HugetlbCgroupLevel {
        path,
        dir,
        limit_bytes,
        usage_bytes,
        rsvd_limit_bytes: rsvd_limit.flatten(),
        rsvd_usage_bytes,
        max_events,
    }))
}

/// The least `limit - usage` over the levels that have a limit, and the
/// level it is at (the deepest on a tie).
fn least_room(
    levels: &[HugetlbCgroupLevel],
    limit: impl Fn(&HugetlbCgroupLevel) -> Option<u64>,
    usage: impl Fn(&HugetlbCgroupLevel) -> u64,
) -> Option<(u64, &HugetlbCgroupLevel)> {
    let mut best: Option<(u64, &HugetlbCgroupLevel)> = None;
    for l in levels {
        if let Some(lim) = limit(l) {
            let room = lim.saturating_sub(usage(l));
            if best.is_none_or(|(b, _)| room < b) {
                best = Some((room, l));
            }
        }
    }
    best
}

/// Builds one size's entry from its levels (the process's cgroup first).
fn summarize(
    version: u8,
    page: u64,
    own_path: &str,
    levels: Vec<HugetlbCgroupLevel>,
) -> HugetlbCgroupSize {
    let own = levels.first().filter(|l| l.path == own_path);
    let room = least_room(&levels, |l| l.limit_bytes, |l| l.usage_bytes);
    let rsvd_room = least_room(
        &levels,
        |l| l.rsvd_limit_bytes,
        |l| l.rsvd_usage_bytes.unwrap_or(0),
    );
    HugetlbCgroupSize {
        page_size_bytes: page,
        limit_bytes: own.and_then(|l| l.limit_bytes),
        usage_bytes: own.map_or(0, |l| l.usage_bytes),
        rsvd_limit_bytes: own.and_then(|l| l.rsvd_limit_bytes),
        rsvd_usage_bytes: own.and_then(|l| l.rsvd_usage_bytes),
        max_events: own.and_then(|l| l.max_events),
        effective_limit_bytes: levels.iter().filter_map(|l| l.limit_bytes).min(),
        effective_rsvd_limit_bytes: levels.iter().filter_map(|l| l.rsvd_limit_bytes).min(),
        binding_file: room.map(|(_, l)| join_host(&l.dir, &limit_file_name(version, page, false))),
        room_bytes: room.map(|(r, _)| r),
        rsvd_room_bytes: rsvd_room.map(|(r, _)| r),
        levels,
    }
}

impl Probe {
    /// `/proc/PID/mountinfo` (`None`: this process's).
    pub fn mountinfo(&self, pid: Option<u32>) -> Result<Vec<MountInfo>, ReadError> {
        let who = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
        read_parse(
            &self.proc_path(&format!("{who}/mountinfo")),
            mountinfo::parse,
        )
    }

    /// `/proc/PID/cgroup` (`None`: this process's).
    pub fn cgroups(&self, pid: Option<u32>) -> Result<Vec<CgroupEntry>, ReadError> {
        let who = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
        // Read once per process that maps huge pages by a segment scan:
        // through the reused buffer.
        read_parse_reused(&self.proc_path(&format!("{who}/cgroup")), cgroup::parse)
    }

    /// A host path (a mount point, a cgroup directory) under the fs root.
    pub(crate) fn fs_path(&self, host_path: &str) -> PathBuf {
        self.roots.fs.join(host_path.trim_start_matches('/'))
    }

    /// Page sizes, smallest first: the kernel's pools, and any that the
    /// hugetlb files of the cgroup directories `dirs` (host paths) name.
    pub(crate) fn hugetlb_sizes<'a>(&self, dirs: impl Iterator<Item = &'a str>) -> Vec<u64> {
        let mut sizes: Vec<u64> = size_dirs(&self.sys_path("kernel/mm/hugepages"))
            .map(|d| d.into_iter().map(|(s, _)| s).collect())
            .unwrap_or_default();
        for d in dirs {
            if let Ok(rd) = std::fs::read_dir(self.fs_path(d)) {
                sizes.extend(
                    rd.filter_map(|e| e.ok())
                        .filter_map(|e| split_file_name(e.file_name().to_str()?).map(|(s, _)| s)),
                );
            }
        }
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// The hugetlb controller's hierarchy: a cgroup v1 mount with `hugetlb`
    /// in its super options, else a cgroup2 mount whose `cgroup.controllers`
    /// lists `hugetlb`. Mounts of the whole hierarchy (root `/`) first.
    pub(crate) fn hugetlb_hierarchy(
        &self,
        mounts: &[MountInfo],
    ) -> Result<Option<(u8, MountInfo)>, ReadError> {
        let mut cands: Vec<&MountInfo> = mounts
            .iter()
            .filter(|m| m.is_cgroup_v1() || m.is_cgroup_v2())
            .collect();
        cands.sort_by_key(|m| (m.root != "/", m.is_cgroup_v2()));
        let mut first_error = None;
        for m in cands {
            if m.is_cgroup_v1() {
                if m.has_super_option("hugetlb") {
                    return Ok(Some((1, m.clone())));
                }
                continue;
            }
            let file = self.fs_path(&join_host(&m.mount_point, "cgroup.controllers"));
            match crate::read::read_text(&file) {
                Ok(t) if t.split_whitespace().any(|c| c == "hugetlb") => {
                    return Ok(Some((2, m.clone())))
                }
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(None), Err)
    }

    /// The hugetlb cgroup of a process (`None`: this process), or `None`
    /// when no hugetlb controller is mounted.
    ///
    /// The hierarchy is found in this process's `<proc>/self/mountinfo`
    /// (the mount points another process sees live in its own mount
    /// namespace; `<proc>/PID/mountinfo` is read only when there is no
    /// `self`), the process's cgroup in `<proc>/PID/cgroup`, and the
    /// controller's files under the fs root (`Roots::fs`: `/`, or a
    /// fixture's `fs/`), for the cgroup and each ancestor up to the
    /// mount's root. Page sizes are the kernel's
    /// (`/sys/kernel/mm/hugepages`) and any named by the files.
    ///
    /// Absent optional files (`rsvd.*` before Linux 5.7, `events`) are
    /// not errors; an unreadable or malformed limit or usage file is.
    pub fn hugetlb_cgroup(&self, pid: Option<u32>) -> Result<Option<HugetlbCgroup>, ReadError> {
        let mounts = match self.mountinfo(None) {
            Err(e) if e.is_not_found() && pid.is_some() => self.mountinfo(pid)?,
            r => r?,
        };
        let Some((version, mount)) = self.hugetlb_hierarchy(&mounts)? else {
            return Ok(None);
        };
        let entries = self.cgroups(pid)?;
        let who = pid.map_or_else(|| "self".to_string(), |p| p.to_string());
        let cgroup_file = self
            .proc_path(&format!("{who}/cgroup"))
            .display()
            .to_string();
        let Some(entry) = cgroup::find(&entries, "hugetlb", version == 2) else {
            return Err(ReadError::Io {
                path: cgroup_file,
                source: std::io::Error::other(format!(
                    "no line for the hugetlb hierarchy (cgroup v{version}, mounted at {})",
                    mount.mount_point
                )),
            });
        };
        let path = entry.path.clone();
        // The cgroup's place under the mount: a mount of a subtree (a
        // container's) shows only what lies below its root.
        let rel = if mount.root == "/" {
            path.clone()
        } else if cgroup::is_within(&path, &mount.root) {
            path[mount.root.trim_end_matches('/').len()..].to_string()
        } else {
            return Err(ReadError::Io {
                path: cgroup_file,
                source: std::io::Error::other(format!(
                    "cgroup {path} lies outside the hugetlb hierarchy mounted at {} (its root is {})",
                    mount.mount_point, mount.root
                )),
            });
        };
        let dir = join_host(&mount.mount_point, &rel);
        let top = self.fs_path(&dir);
        if let Err(e) = std::fs::metadata(&top) {
            return Err(io_error(top.display().to_string(), e));
        }

        // Levels from the cgroup up to the mount's root: (cgroup path, host dir).
        let mut chain: Vec<(String, String)> = Vec::new();
        let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
        for k in (0..=comps.len()).rev() {
            let sub = comps[..k].join("/");
            let cg = if mount.root == "/" {
                format!("/{sub}")
            } else {
                join_host(&mount.root, &sub)
            };
            chain.push((cg, join_host(&mount.mount_point, &sub)));
        }

        let sizes = self.hugetlb_sizes(chain.iter().map(|(_, d)| d.as_str()));

        let mut out = Vec::new();
        for page in sizes {
            let mut levels = Vec::new();
            for (cg, d) in &chain {
                if let Some(l) = read_level(version, page, &self.fs_path(d), cg.clone(), d.clone())?
                {
                    levels.push(l);
                }
            }
            out.push(summarize(version, page, &path, levels));
        }
        Ok(Some(HugetlbCgroup {
            version,
            mount_point: mount.mount_point.clone(),
            path,
            dir,
            sizes: out,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M2: u64 = 2 << 20;

    fn level(path: &str, limit: Option<u64>, usage: u64, rsvd: Option<u64>) -> HugetlbCgroupLevel {
        HugetlbCgroupLevel {
            path: path.into(),
            dir: join_host("/sys/fs/cgroup", path),
            limit_bytes: limit,
            usage_bytes: usage,
            rsvd_limit_bytes: rsvd,
            rsvd_usage_bytes: Some(usage),
            max_events: Some(0),
        }
    }

    #[test]
    fn the_least_room_binds_not_the_least_limit() {
        // The pod allows 100 pages and its other container used 90; this
        // container allows 50 and used 10: 10 pages are left, at the pod.
        let s = summarize(
            2,
            M2,
            "/pod/ctr",
            vec![
                level("/pod/ctr", Some(50 * M2), 10 * M2, None),
                level("/pod", Some(100 * M2), 90 * M2, Some(100 * M2)),
                level("/", None, 95 * M2, None),
            ],
        );
        assert_eq!(s.limit_bytes, Some(50 * M2));
        assert_eq!(s.usage_bytes, 10 * M2);
        assert_eq!(s.effective_limit_bytes, Some(50 * M2));
        assert_eq!(s.effective_rsvd_limit_bytes, Some(100 * M2));
        assert_eq!(s.room_pages(), Some(10));
        assert_eq!(
            s.binding_file.as_deref(),
            Some("/sys/fs/cgroup/pod/hugetlb.2MB.max")
        );
        assert_eq!(s.rsvd_room_bytes, Some(10 * M2));
        assert_eq!(s.new_mapping_pages(), Some(10));
        // Equal room: the deepest level binds.
        let s = summarize(
            1,
            M2,
            "/pod/ctr",
            vec![
                level("/pod/ctr", Some(8 * M2), 8 * M2, None),
                level("/pod", Some(8 * M2), 8 * M2, None),
            ],
        );
        assert_eq!(s.room_pages(), Some(0));
        assert_eq!(
            s.binding_file.as_deref(),
            Some("/sys/fs/cgroup/pod/ctr/hugetlb.2MB.limit_in_bytes")
        );
        assert_eq!(s.rsvd_room_bytes, None);
        assert_eq!(s.new_mapping_pages(), Some(0));
    }

    #[test]
    fn unlimited_and_absent() {
        let s = summarize(2, M2, "/", vec![]);
        assert_eq!(
            (s.limit_bytes, s.usage_bytes, s.max_events),
            (None, 0, None)
        );
        assert_eq!(
            (s.room_bytes, s.room_pages(), s.new_mapping_pages()),
            (None, None, None)
        );
        assert_eq!(s.binding_file, None);
        // The process's own cgroup without files (v2, controller not enabled
        // there): its values are absent, the ancestor still binds.
        let s = summarize(2, M2, "/a/b", vec![level("/a", Some(4 * M2), M2, None)]);
        assert_eq!((s.limit_bytes, s.usage_bytes), (None, 0));
        assert_eq!(s.room_pages(), Some(3));
        assert_eq!(s.effective_limit_bytes, Some(4 * M2));
    }

    #[test]
    fn names_and_paths() {
        assert_eq!(limit_file_name(2, 1 << 30, true), "hugetlb.1GB.rsvd.max");
        assert_eq!(limit_file_name(1, M2, false), "hugetlb.2MB.limit_in_bytes");
        assert_eq!(join_host("/sys/fs/cgroup", "/a/b"), "/sys/fs/cgroup/a/b");
        assert_eq!(join_host("/sys/fs/cgroup/", ""), "/sys/fs/cgroup/");
        assert_eq!(join_host("/sys/fs/cgroup", "/"), "/sys/fs/cgroup");
        assert_eq!(join_host("/", "x"), "/x");
    }
}
