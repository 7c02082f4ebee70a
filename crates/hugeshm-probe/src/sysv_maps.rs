//! Which mappings named like a System V attachment really are one.
//!
//! The kernel names a SysV attachment `/SYSV<key as 8 hex digits>
//! (deleted)` in `/proc/PID/maps`, with the device of its internal mount
//! and the shmid as the inode. A name and an inode are not proof: a user
//! who mounts a tmpfs in a user namespace can make a file of that name
//! with the inode of root's segment, map it and unmount the tmpfs lazily;
//! another can attach a real segment of an IPC namespace of their own
//! whose shmid and key are those of root's. A mapping is taken for an
//! attachment of the reader's segment only when what the user cannot
//! choose agrees:
//!
//! - the device is the kernel's internal mount's (live host: learnt by
//!   `hugeshm_sys::sysv_devices`; a fixture tree has none to check, and
//!   where the kernel would not say one page size's device, a mapping on
//!   an unknown device is left to the checks below);
//! - the process is in the reader's IPC namespace (`/proc/PID/ns/ipc`);
//!   an attachment in another one is a segment of that namespace, never
//!   the reader's of the same shmid;
//! - `/proc/sysvipc/shm` has the shmid, with the key of the name (or key 0:
//!   removed, or `IPC_PRIVATE`) and a nonzero `nattch`: the kernel's count
//!   of attachments is not contradicted by maps.

use std::collections::HashMap;

use hugeshm_parse::maps::MapsEntry;
use hugeshm_parse::sysvipc_shm::ShmSegment;

use crate::Probe;

/// What a mapping named like a SysV attachment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SysvMapping {
    /// An attachment of segment `shmid` of the reader's IPC namespace.
    Here(u64),
    /// An attachment of segment `shmid` of another IPC namespace (a
    /// container's), by the inode number of that namespace.
    Elsewhere {
        /// The namespace's inode (`ipc:[N]`).
        ipc_ns: u64,
        /// The segment's id in that namespace.
        shmid: u64,
    },
    /// Named like one, but not an attachment the kernel vouches for.
    LookAlike,
}

/// What tells real SysV attachments from look-alikes: the kernel's devices,
/// the reader's IPC namespace and `/proc/sysvipc/shm` (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct SysvAttachments {
    /// The kernel's SysV devices, and whether every page size's is there
    /// (one the kernel would not say leaves a mapping on an unknown device
    /// to the other checks rather than make a real attachment a look-alike).
    devices: Option<(Vec<(u32, u32)>, bool)>,
    /// shmid → (key, nattch); `None` where the table could not be read.
    table: Option<HashMap<u64, (u32, u64)>>,
    own_ns: Option<u64>,
}

/// The key a SysV attachment's name says: `/SYSV0052e2c1` → `0x0052e2c1`.
fn named_key(path: &str) -> Option<u32> {
    let hex = path.strip_prefix("/SYSV")?;
    if hex.len() != 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// `ipc:[4026531839]` → 4026531839.
fn ns_inode(link: &str) -> Option<u64> {
    link.strip_prefix("ipc:[")?.strip_suffix(']')?.parse().ok()
}

impl Probe {
    /// The checks of [`SysvAttachments::of`] for this probe's host: on a
    /// live kernel its internal mounts' devices, for every root the
    /// reader's IPC namespace and `shm`, the segments of
    /// `/proc/sysvipc/shm` (`None` where it could not be read: that check
    /// is then skipped).
    pub fn sysv_attachments(&self, shm: Option<&[ShmSegment]>) -> SysvAttachments {
        let devices = if hugeshm_sys::is_procfs(&self.roots.proc) {
            let sizes: Vec<u64> = crate::host::size_dirs(&self.sys_path("kernel/mm/hugepages"))
                .unwrap_or_default()
                .into_iter()
                .map(|(size, _)| size)
                .collect();
            hugeshm_sys::sysv_devices(&sizes).ok().map(|d| {
                let complete = d.len() == sizes.len() + 1;
                (d, complete)
            })
        } else {
            None
        };
        SysvAttachments {
            devices,
            table: shm.map(|segs| {
                segs.iter()
                    .map(|s| (s.shmid as u64, (s.key as u32, s.nattch)))
                    .collect()
            }),
            own_ns: self.ipc_namespace("self"),
        }
    }

    fn ipc_namespace(&self, pid: &str) -> Option<u64> {
        let link = std::fs::read_link(self.proc_path(&format!("{pid}/ns/ipc"))).ok()?;
        ns_inode(link.to_str()?)
    }
}

impl SysvAttachments {
    /// What mapping `m` of process `pid` is, if it is named like a SysV
    /// attachment (`None`: it is not).
    pub fn of(&self, probe: &Probe, pid: u32, m: &MapsEntry) -> Option<SysvMapping> {
        let key = named_key(m.pathname.as_deref()?)?;
        Some(self.judge(m, key, || probe.ipc_namespace(&pid.to_string())))
    }

    fn judge(&self, m: &MapsEntry, key: u32, ns_of: impl FnOnce() -> Option<u64>) -> SysvMapping {
        if !m.deleted {
            return SysvMapping::LookAlike;
        }
        if let Some((devices, complete)) = &self.devices {
            if *complete && !devices.contains(&(m.dev_major, m.dev_minor)) {
                return SysvMapping::LookAlike;
            }
        }
        let shmid = m.inode;
        if let (Some(own), Some(theirs)) = (self.own_ns, ns_of()) {
            if own != theirs {
                return SysvMapping::Elsewhere {
                    ipc_ns: theirs,
                    shmid,
                };
            }
        }
        match &self.table {
            None => SysvMapping::Here(shmid),
            Some(t) => match t.get(&shmid) {
                Some(&(k, nattch)) if nattch > 0 && (k == key || k == 0) => {
                    SysvMapping::Here(shmid)
                }
                _ => SysvMapping::LookAlike,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &str) -> MapsEntry {
        hugeshm_parse::maps::parse(line).unwrap().remove(0)
    }

    fn checks(devices: Option<Vec<(u32, u32)>>, own_ns: Option<u64>) -> SysvAttachments {
        SysvAttachments {
            devices: devices.map(|d| (d, true)),
            // shmid 12: key 0x076b7da9, attached twice; 13: nobody attached;
            // 14: removed (key 0), still attached.
            table: Some(
                [(12, (0x076b7da9, 2)), (13, (0x1234, 0)), (14, (0, 1))]
                    .into_iter()
                    .collect(),
            ),
            own_ns,
        }
    }

    const AT: &str = "7f0000000000-7f0000200000 rw-s 00000000";

    #[test]
    fn only_what_the_kernel_vouches_for_is_an_attachment() {
        let c = checks(Some(vec![(0, 1), (0, 17)]), Some(4026531839));
        let same_ns = || Some(4026531839);
        let judge = |line: &str| {
            let m = entry(&format!("{AT} {line}"));
            let key = named_key(m.pathname.as_deref().unwrap()).unwrap();
            c.judge(&m, key, same_ns)
        };
        assert_eq!(
            judge("00:01 12 /SYSV076b7da9 (deleted)"),
            SysvMapping::Here(12)
        );
        assert_eq!(
            judge("00:11 12 /SYSV076b7da9 (deleted)"),
            SysvMapping::Here(12)
        );
        // A user's tmpfs file of the same name and inode: another device.
        assert_eq!(
            judge("00:2f 12 /SYSV076b7da9 (deleted)"),
            SysvMapping::LookAlike
        );
        // Not deleted: a file someone can still open by its name.
        assert_eq!(judge("00:01 12 /SYSV076b7da9"), SysvMapping::LookAlike);
        // Another key than the segment's; a shmid nobody attached; none at all.
        assert_eq!(
            judge("00:01 12 /SYSV076b7daa (deleted)"),
            SysvMapping::LookAlike
        );
        assert_eq!(
            judge("00:01 13 /SYSV00001234 (deleted)"),
            SysvMapping::LookAlike
        );
        assert_eq!(
            judge("00:01 99 /SYSV00001234 (deleted)"),
            SysvMapping::LookAlike
        );
        // Removed (its key is 0 now) and still attached: the name keeps the old key.
        assert_eq!(
            judge("00:01 14 /SYSV0000abcd (deleted)"),
            SysvMapping::Here(14)
        );
        // A real attachment in another IPC namespace is that namespace's segment.
        let m = entry(&format!("{AT} 00:01 12 /SYSV076b7da9 (deleted)"));
        assert_eq!(
            c.judge(&m, 0x076b7da9, || Some(4026532999)),
            SysvMapping::Elsewhere {
                ipc_ns: 4026532999,
                shmid: 12
            }
        );
        // A namespace that cannot be read: the table decides.
        assert_eq!(c.judge(&m, 0x076b7da9, || None), SysvMapping::Here(12));
    }

    #[test]
    fn a_device_the_kernel_would_not_say_is_left_to_the_other_checks() {
        // The 1 GiB pool's device unknown (its memfd refused): a mapping on
        // another device is judged by the table, not called a look-alike.
        let mut c = checks(Some(vec![(0, 1), (0, 17)]), None);
        if let Some((_, complete)) = c.devices.as_mut() {
            *complete = false;
        }
        let m = entry(&format!("{AT} 00:12 12 /SYSV076b7da9 (deleted)"));
        assert_eq!(c.judge(&m, 0x076b7da9, || None), SysvMapping::Here(12));
        let m = entry(&format!("{AT} 00:12 13 /SYSV00001234 (deleted)"));
        assert_eq!(c.judge(&m, 0x1234, || None), SysvMapping::LookAlike);
    }

    #[test]
    fn a_fixture_tree_checks_what_it_has() {
        // No devices to compare (not a live kernel), no namespace: the name's
        // suffix and the table still decide.
        let c = checks(None, None);
        let m = entry(&format!("{AT} 00:2f 12 /SYSV076b7da9 (deleted)"));
        assert_eq!(c.judge(&m, 0x076b7da9, || None), SysvMapping::Here(12));
        let m = entry(&format!("{AT} 00:2f 13 /SYSV00001234 (deleted)"));
        assert_eq!(c.judge(&m, 0x1234, || None), SysvMapping::LookAlike);
        let none = SysvAttachments::default();
        assert_eq!(none.judge(&m, 0x1234, || None), SysvMapping::Here(13));
    }

    #[test]
    fn names_and_namespaces_are_read_strictly() {
        assert_eq!(named_key("/SYSV0052e2c1"), Some(0x0052e2c1));
        for bad in [
            "/SYSV0052e2c",
            "/SYSV0052e2c1x",
            "/SYSVnothex0",
            "SYSV0052e2c1",
            "/SYSV+052e2c1",
        ] {
            assert_eq!(named_key(bad), None, "{bad}");
        }
        assert_eq!(ns_inode("ipc:[4026531839]"), Some(4026531839));
        assert_eq!(ns_inode("net:[4026531839]"), None);
    }
}
