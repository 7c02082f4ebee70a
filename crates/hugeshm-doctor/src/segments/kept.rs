//! The hugeshm regions made to be kept that nobody attaches now: a SysV
//! segment left by `hugeshm create` (without `--hold`) is waiting for its
//! server, not abandoned. Only a reader of region headers can tell
//! (hugeshm-region's listing, [`KeptRegions::find`]); the scan takes them
//! as [`KeptRegions`]; [`kept_unattached`] is their
//! finding, in place of the `orphan` warning. Root's segments that the
//! caller (another user: the exporter's dynamic user) may not read are
//! handed over too: [`unattached_unreadable`] is theirs, an info, not the
//! `orphan` warning, since only root can tell a kept one from one left
//! behind and root's objects are no other user's doing.

use super::sample::key_text;
use super::Segment;
use crate::finding::{Finding, Severity};
use hugeshm_fix::{Fix, Renderer};
use std::collections::BTreeMap;

/// The SysV segments that hold a hugeshm region made to be kept (its
/// header's `kept` flag) and that nobody holds, as the caller found them
/// among the regions it trusts: its own, as `hugeshm ls` lists them
/// (`hugeshm_region::list_regions_on`, `RegionInfo::is_kept_unattached`).
/// Such a segment with no process attached is the info `kept-unattached`;
/// any other is an `orphan`. The default knows none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptRegions {
    /// shmid -> (key, the region's name, its page size from its header).
    sysv: BTreeMap<u64, (i32, String, Option<u64>)>,
    /// Root's segments the caller may not read: shmid -> key.
    unreadable: BTreeMap<u64, i32>,
}

impl KeptRegions {
    /// The SysV regions made to be kept that nobody holds, as `hugeshm ls`
    /// finds them over `probe` (`RegionInfo::is_kept_unattached`): only
    /// the caller's own and root's have their header read (another user's
    /// segment is listed `untrusted`, never kept), and only on the live
    /// host. Root's segments the caller may not read (`unreadable`: the
    /// exporter's dynamic user) go with them. None where the regions cannot
    /// be listed. SysV only: no listing of /dev/shm (what other users
    /// create there).
    pub fn find(probe: &hugeshm_probe::Probe) -> KeptRegions {
        use hugeshm_region::{NamedObject, RegionState};
        let mut kept = KeptRegions::default();
        for r in hugeshm_region::list_sysv_regions_on(probe).unwrap_or_default() {
            let NamedObject::Sysv { key, shmid, .. } = &r.object else {
                continue;
            };
            if r.is_kept_unattached() {
                let page = r.header.as_ref().map(|h| h.page_size_bytes);
                kept.add_sysv(*shmid, *key, r.name.as_str(), page);
            } else if r.state == RegionState::Unreadable {
                kept.add_unreadable_sysv(*shmid, *key);
            }
        }
        kept
    }

    /// Adds SysV segment `shmid`, of key `key`, which holds the kept region
    /// `name`, made on pages of `page_size_bytes` (its header's, verified
    /// when it was made; `None` unknown). A negative shmid (none the kernel
    /// gives) is ignored.
    pub(crate) fn add_sysv(
        &mut self,
        shmid: i32,
        key: i32,
        name: impl Into<String>,
        page_size_bytes: Option<u64>,
    ) {
        if let Ok(id) = u64::try_from(shmid) {
            self.sysv.insert(id, (key, name.into(), page_size_bytes));
        }
    }

    /// Adds SysV segment `shmid`, of key `key`, root's (owner and creator
    /// uid 0), whose header the caller may not read (mode 0600: `IPC_STAT`
    /// and `shmat` refused): with no process attached it is the info
    /// `unattached-unreadable`, not the warning `orphan`. A negative shmid
    /// is ignored.
    pub(crate) fn add_unreadable_sysv(&mut self, shmid: i32, key: i32) {
        if let Ok(id) = u64::try_from(shmid) {
            self.unreadable.insert(id, key);
        }
    }

    /// Whether `seg` is root's segment the caller may not read (the same
    /// shmid and key).
    pub(super) fn is_unreadable(&self, seg: &Segment) -> bool {
        seg.kind == super::SegmentKind::Sysv
            && seg
                .id
                .and_then(|id| self.unreadable.get(&id))
                .is_some_and(|key| seg.key.as_deref() == Some(key_text(*key).as_str()))
    }

    /// The region `seg` holds, where it is one of them: a SysV segment of
    /// the same shmid and key (a shmid the kernel gave to another segment
    /// since the caller looked is not).
    pub(super) fn region_of(&self, seg: &Segment) -> Option<&str> {
        self.entry_of(seg).map(|(name, _)| name)
    }

    /// The page size the header of the region `seg` holds gives, where it
    /// is one of them: what `segments` shows while no process is attached
    /// to read it from.
    pub(super) fn page_size_of(&self, seg: &Segment) -> Option<u64> {
        self.entry_of(seg).and_then(|(_, page)| page)
    }

    fn entry_of(&self, seg: &Segment) -> Option<(&str, Option<u64>)> {
        if seg.kind != super::SegmentKind::Sysv {
            return None;
        }
        let (key, name, page) = self.sysv.get(&seg.id?)?;
        (seg.key.as_deref() == Some(key_text(*key).as_str())).then_some((name.as_str(), *page))
    }
}

/// `kept-unattached`: `seg` (of `size`, its [`Segment::label`] `label`)
/// holds the kept region `name`, and no process is attached to it.
pub(super) fn kept_unattached(seg: &Segment, name: &str, label: &str, size: &str) -> Finding {
    let backend = "sysv";
    let rm = Fix::Remove {
        name: name.to_owned(),
        backend: backend.to_owned(),
        dir: None,
    };
    Finding::new(
        Severity::Info,
        "kept-unattached",
        format!(
            "region {name} (backend {backend}; {label}, {size}, key {}) was made to be kept by pid {} and has no process attached now: normal until a server attaches it; its memory stays allocated until it is removed",
            seg.key.as_deref().unwrap_or("?"),
            seg.creator_text()
        ),
        Some(format!(
            "{}   # only when no server will attach it again",
            rm.render(Renderer::Cli)
        )),
    )
}

/// `unattached-unreadable`: `seg` (of `size`, its label `label`) is root's,
/// no process is attached to it, and the caller may not read its header.
pub(super) fn unattached_unreadable(seg: &Segment, label: &str, size: &str) -> Finding {
    Finding::new(
        Severity::Info,
        "unattached-unreadable",
        format!(
            "{label} ({size}, key {}, created by pid {}) is root's and has no process attached; its header is root's to read (mode {}), so whether it is a hugeshm region made to be kept or one left behind only root can tell",
            seg.key.as_deref().unwrap_or("?"),
            seg.creator_text(),
            seg.mode
                .map(|m| format!("{:04o}", m & 0o777))
                .unwrap_or_else(|| "?".into())
        ),
        Some("hugeshm ls   # as root: kept is normal, orphaned was left behind".to_owned()),
    )
}
