//! The scan's first phases: which mappings of `/proc/PID/maps` are
//! objects hugeshm reports ([`classify`]), and the objects they add up to
//! ([`Obj`], by [`Key`]).

use super::SegmentKind;
use crate::dax;
use hugeshm_parse::maps::MapsEntry;
use hugeshm_probe::{MountFile, Probe};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Key {
    Sysv(u64),
    File(u32, u32, u64),
    Private(u32, u64),
}

pub(super) struct Obj {
    pub(super) kind: SegmentKind,
    pub(super) path: Option<String>,
    pub(super) size: u64,
    /// pid → start addresses of its mappings of the object.
    pub(super) maps: BTreeMap<u32, Vec<u64>>,
    pub(super) file: Option<MountFile>,
    pub(super) page_from_mount: Option<(u64, String)>,
    /// pid → (start, end, file offset) of its mappings (`dax` only).
    pub(super) ranges: BTreeMap<u32, Vec<(u64, u64, u64)>>,
    /// One mapping (pid, start, end) of a file-backed object, through
    /// which its own size can be read.
    pub(super) first_map: Option<(u32, u64, u64)>,
}

impl Obj {
    pub(super) fn new(kind: SegmentKind, path: Option<String>) -> Obj {
        Obj {
            kind,
            path,
            size: 0,
            maps: BTreeMap::new(),
            file: None,
            page_from_mount: None,
            ranges: BTreeMap::new(),
            first_map: None,
        }
    }

    /// Adds one mapping of the object by `pid`. A file-backed object
    /// (memfd, hugetlbfs or tmpfs file, DAX, shared anonymous memory) is as
    /// long as the furthest `offset + length` of any mapping of it: a
    /// process may map it in pieces (DPDK's `--single-file-segments` maps a
    /// 64 MiB memfd as 32 mappings of 2 MiB). A private mapping is its own
    /// object.
    pub(super) fn add_mapping(&mut self, key: &Key, pid: u32, m: &MapsEntry) {
        let extent = match key {
            Key::File(..) => m.offset.saturating_add(m.size_bytes()),
            Key::Sysv(_) | Key::Private(..) => m.size_bytes(),
        };
        self.size = self.size.max(extent);
        self.maps.entry(pid).or_default().push(m.start);
        if self.kind == SegmentKind::Dax {
            self.ranges
                .entry(pid)
                .or_default()
                .push((m.start, m.end, m.offset));
        }
        if matches!(key, Key::File(..)) && self.first_map.is_none() {
            self.first_map = Some((pid, m.start, m.end));
        }
    }

    /// The object's size: its file's own length where the file can be
    /// read through a mapping (live host, as root) and is not on a mount
    /// hugeshm lists (those have it already), else the extent of its
    /// mappings.
    pub(super) fn size_bytes(&self, probe: &Probe) -> u64 {
        if self.file.is_some()
            || !matches!(
                self.kind,
                SegmentKind::Memfd | SegmentKind::Hugetlbfs | SegmentKind::Posix | SegmentKind::Dax
            )
        {
            return self.size;
        }
        self.first_map
            .and_then(|(pid, start, end)| probe.pid(pid).mapped_file_size(start, end))
            .filter(|&n| n > 0)
            .unwrap_or(self.size)
    }
}

pub(super) struct Mounts {
    pub(super) hugetlbfs: Vec<(String, u64)>,
    pub(super) tmpfs: Vec<(String, bool)>,
    /// Mount points with `dax` (not `dax=never`).
    pub(super) dax: Vec<String>,
}

pub(super) fn under(path: &str, target: &str) -> bool {
    target == "/"
        || path
            .strip_prefix(target)
            .is_some_and(|r| r.starts_with('/'))
}

impl Mounts {
    pub(super) fn hugetlbfs_of(&self, path: &str) -> Option<u64> {
        self.hugetlbfs
            .iter()
            .filter(|(t, _)| under(path, t))
            .max_by_key(|(t, _)| t.len())
            .map(|(_, s)| *s)
    }
    pub(super) fn on_dax(&self, path: &str) -> bool {
        self.dax.iter().any(|t| under(path, t))
    }
    pub(super) fn tmpfs_of(&self, path: &str) -> Option<bool> {
        self.tmpfs
            .iter()
            .filter(|(t, _)| under(path, t))
            .max_by_key(|(t, _)| t.len())
            .map(|(_, h)| *h)
    }
}

/// Which object a mapping belongs to, if it is one hugeshm reports.
pub(super) fn classify(pid: u32, m: &MapsEntry, mounts: &Mounts) -> Option<(Key, SegmentKind)> {
    let path = m.pathname.as_deref()?;
    let file_key = Key::File(m.dev_major, m.dev_minor, m.inode);
    if let Some(hex) = path.strip_prefix("/SYSV") {
        if hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some((Key::Sysv(m.inode), SegmentKind::Sysv));
        }
    }
    if path == "/anon_hugepage" {
        return Some(if m.perms.shared {
            (file_key, SegmentKind::Anon)
        } else {
            (Key::Private(pid, m.start), SegmentKind::PrivateHugetlb)
        });
    }
    if !m.perms.shared {
        if mounts.hugetlbfs_of(path).is_some() {
            return Some((Key::Private(pid, m.start), SegmentKind::PrivateHugetlb));
        }
        return None;
    }
    if path.starts_with("/memfd:") {
        return Some((file_key, SegmentKind::Memfd));
    }
    if path == "/dev/zero" && m.deleted {
        return Some((file_key, SegmentKind::Anon));
    }
    if mounts.hugetlbfs_of(path).is_some() {
        return Some((file_key, SegmentKind::Hugetlbfs));
    }
    if dax::device_dax_name(path).is_some() || mounts.on_dax(path) {
        return Some((file_key, SegmentKind::Dax));
    }
    if mounts.tmpfs_of(path).is_some() {
        return Some((file_key, SegmentKind::Posix));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_parse::size::MIB;

    #[test]
    fn a_file_object_is_as_long_as_its_furthest_mapping() {
        // DPDK --single-file-segments: one memfd, 32 mappings of 2 MiB.
        let key = Key::File(0, 1, 25924);
        let mut o = Obj::new(SegmentKind::Memfd, Some("/memfd:seg_2".into()));
        for i in 0..32u64 {
            let line = format!(
                "{:x}-{:x} rw-s {:08x} 00:01 25924 /memfd:seg_2 (deleted)",
                0x1180200000 + i * 2 * MIB,
                0x1180400000 + i * 2 * MIB,
                i * 2 * MIB
            );
            let m = hugeshm_parse::maps::parse_line("maps", 1, &line).unwrap();
            o.add_mapping(&key, 42, &m);
        }
        assert_eq!(o.size, 64 * MIB);
        assert_eq!(o.maps[&42].len(), 32);
        // A private mapping at an offset is only its own length.
        let m = hugeshm_parse::maps::parse_line(
            "maps",
            1,
            "7f0000000000-7f0000200000 rw-p 00400000 00:0f 77 /dev/hugepages/x",
        )
        .unwrap();
        let mut p = Obj::new(SegmentKind::PrivateHugetlb, None);
        p.add_mapping(&Key::Private(42, m.start), 42, &m);
        assert_eq!(p.size, 2 * MIB);
    }
}
