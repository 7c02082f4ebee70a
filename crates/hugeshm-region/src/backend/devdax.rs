//! Device-dax targets of the `dax` backend: a `/dev/daxX.Y` character
//! device (an NVDIMM namespace in `devdax` mode) holds one region, from
//! offset 0. The device has no `read`, `write` or `fallocate`: its header
//! is read, written and cleared through a mapping of its first alignment
//! unit, and the device's `align` (sysfs: 2 MiB or 1 GiB) is the page size
//! (the kernel refuses mappings not aligned to it and faults that much at
//! a time). The region's name is in its header only; a free device has an
//! all-zero header, and removing a region zeroes it again (persisted).
//!
//! Ownership: the header's creator uid says whose region it is, unless the
//! device node belongs to another user than that uid and root (then the
//! node's owner is the one that counts: whoever may write the device could
//! have written any header); the node's mode says who else may write it.
//! Every holder keeps a shared `flock` on the device node; create takes an
//! exclusive one first, so a region someone holds is never overwritten.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{dev_major, dev_minor, Probe};
use hugeshm_sys::{self as sys, FileKind, Mapping, OpenCheck};
use rustix::fs::FlockOperation;

use super::fd;
use crate::checked_open;
use crate::error::RegionError;
use crate::header::{self, Decoded, HeaderState, HEADER_BYTES, USED_BYTES};
use crate::model::Owner;
pub(crate) use crate::pool::{too_big, DevDax};

/// The alignment of a device whose sysfs lacks `align` (kernels before
/// 5.10 fault at the region's alignment, 2 MiB unless set otherwise).
const DEFAULT_ALIGN: u64 = 2 << 20;

/// Whether `path` is a character device, following links: for paths
/// root gives (`--device`, a device found in sysfs).
pub(crate) fn is_char_device(path: &Path) -> bool {
    rustix::fs::stat(path).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFCHR)
}

/// Whether `path` itself (a link not followed) is a character device: for
/// paths in a directory others can write, where a link to a device is
/// not the device.
pub(crate) fn is_device_node(path: &Path) -> bool {
    rustix::fs::lstat(path).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFCHR)
}

/// The device-dax behind `path`: `None` when `path` is no character
/// device; an error for a character device that is not device-dax (or one
/// bound to `kmem`, online as system RAM).
pub(crate) fn resolve(path: &Path, probe: &Probe) -> Result<Option<DevDax>, RegionError> {
    let st = match rustix::fs::stat(path) {
        Ok(st) => st,
        Err(_) => return Ok(None),
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return Ok(None);
    }
    #[allow(clippy::unnecessary_cast)]
    let rdev = st.st_rdev as u64;
    let sys_dir = probe.sys_path(&format!("dev/char/{}:{}", dev_major(rdev), dev_minor(rdev)));
    let unsuitable = |reason: String| RegionError::UnsuitableDirectory {
        path: path.display().to_string(),
        reason,
    };
    let subsystem = std::fs::read_link(sys_dir.join("subsystem"))
        .ok()
        .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
    let name = std::fs::canonicalize(&sys_dir)
        .ok()
        .and_then(|d| d.file_name().map(|f| f.to_string_lossy().into_owned()));
    let (Some("dax"), Some(name)) = (subsystem.as_deref(), name) else {
        return Err(unsuitable(format!(
            "a character device ({}:{}), but not device-dax: dax regions live in a directory \
             on a file system mounted -o dax, or on a /dev/daxX.Y device \
             (ndctl create-namespace --mode=devdax --align=2M)",
            dev_major(rdev),
            dev_minor(rdev)
        )));
    };
    let pmem = probe.pmem();
    let Some(d) = pmem.dax_devices.iter().find(|d| d.name == name) else {
        return Err(unsuitable(format!(
            "{name} is not listed in /sys/bus/dax/devices"
        )));
    };
    if d.is_system_ram() {
        return Err(unsuitable(format!(
            "{name} is online as system RAM (bound to kmem): give it back to device_dax \
             (daxctl reconfigure-device --mode=devdax {name}) to hold a region"
        )));
    }
    let size_bytes = d.size_bytes.unwrap_or(0);
    if size_bytes == 0 {
        return Err(unsuitable(format!("{name} has no capacity (size 0)")));
    }
    Ok(Some(DevDax {
        path: path.to_owned(),
        name,
        size_bytes,
        align_bytes: d.align_bytes.filter(|a| *a > 0).unwrap_or(DEFAULT_ALIGN),
    }))
}

/// Every device-dax of the host bound to `device_dax`, as `/dev/NAME`
/// (those whose node exists).
pub(crate) fn all(probe: &Probe) -> Vec<DevDax> {
    let mut out: Vec<DevDax> = probe
        .pmem()
        .dax_devices
        .into_iter()
        .filter(|d| !d.is_system_ram())
        .filter_map(|d| {
            let path = PathBuf::from("/dev").join(&d.name);
            is_char_device(&path).then(|| DevDax {
                path,
                size_bytes: d.size_bytes.unwrap_or(0),
                align_bytes: d.align_bytes.filter(|a| *a > 0).unwrap_or(DEFAULT_ALIGN),
                name: d.name,
            })
        })
        .filter(|d| d.size_bytes > 0)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What the first bytes of a device say about creating region `name` on
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// All zero: free.
    Free,
    /// A region of this name.
    Same,
    /// Taken: by another name's region, or by data that is no hugeshm
    /// region; why.
    Taken(String),
}

/// Reads the claim of a device's first bytes (pure).
pub(crate) fn claim(head: &[u8], name: &str, device: &Path) -> Claim {
    match header::decode(head) {
        Decoded::Unwritten => Claim::Free,
        Decoded::Valid(h) if h.name.as_deref() == Some(name) => Claim::Same,
        Decoded::Valid(h) => {
            let other = h.name.unwrap_or_default();
            Claim::Taken(format!(
                "it holds the dax region {other:?} ({}, {}, created by pid {} uid {}); remove \
                 that first (hugeshm rm {other} --backend dax) or use another device",
                format_bytes(h.size_bytes),
                h.state,
                h.creator_pid,
                h.creator_uid
            ))
        }
        Decoded::Foreign { magic } => Claim::Taken(format!(
            "its first bytes ({magic}) are not a hugeshm header: another program's data? If the \
             device is free, zero its first 4 KiB (e.g. daxio --zero --output {} --len 4096)",
            device.display()
        )),
        Decoded::Newer { version } => Claim::Taken(format!(
            "it holds a region of header layout version {version}, newer than this hugeshm"
        )),
        Decoded::Damaged(why) => Claim::Taken(format!("its header is damaged ({why})")),
    }
}

/// The region's size a device's header names, when it fits the device;
/// otherwise the device's size (attach then reports the mismatch with
/// both numbers).
pub(crate) fn object_size(head: &[u8], dev_size: u64) -> u64 {
    match header::decode(head) {
        Decoded::Valid(h) if h.size_bytes <= dev_size => h.size_bytes,
        _ => dev_size,
    }
}

/// Who owns a device's region: the header's creator, unless the node
/// belongs to a third user (neither that uid nor root); the node's mode.
pub(crate) fn owner(head: &[u8], node: &rustix::fs::Stat) -> Owner {
    let node_owner = fd::owner_of(node);
    match header::decode(head) {
        Decoded::Valid(h) if node_owner.uid == h.creator_uid || node_owner.uid == 0 => Owner {
            uid: h.creator_uid,
            mode: node_owner.mode,
        },
        _ => node_owner,
    }
}

/// Opens a device node read-write (its mapping needs it), checked: a
/// character device, not a link to one.
pub(crate) fn open(path: &Path) -> Result<OwnedFd, RegionError> {
    let how = OpenCheck::read_write().only(FileKind::CharDevice);
    match checked_open::open_checked(path, how)? {
        Some(f) => Ok(f.into_fd()),
        None => Err(RegionError::io(
            path.display().to_string(),
            std::io::Error::from_raw_os_error(libc::ENOENT),
        )),
    }
}

/// Maps the first alignment unit of a device (the smallest mapping it
/// accepts), `MAP_SYNC`.
fn map_head(fd: BorrowedFd<'_>, align: u64) -> Result<Mapping, RegionError> {
    let len = usize::try_from(align).map_err(|_| RegionError::InvalidSize {
        requested_bytes: align,
        reason: "the device's alignment does not fit in usize".to_owned(),
        fix: None,
    })?;
    Ok(sys::MapOptions::new(len).sync().align(len).map(fd)?)
}

/// The header bytes of a device.
pub(crate) fn read_head(fd: BorrowedFd<'_>, align: u64) -> Result<Vec<u8>, RegionError> {
    let m = map_head(fd, align)?;
    let mut buf = vec![0u8; USED_BYTES];
    m.read_at(0, &mut buf)?;
    m.release()?;
    Ok(buf)
}

/// Zeroes a device's header and makes that durable: the device is free.
pub(crate) fn clear_head(fd: BorrowedFd<'_>, align: u64) -> Result<(), RegionError> {
    let mut m = map_head(fd, align)?;
    m.fill_range(0, HEADER_BYTES as usize, 0)?;
    m.persist_range(0, HEADER_BYTES as usize)?;
    Ok(m.release()?)
}

/// Opens `dev` for a new region `name`: free (no header) and exclusively
/// locked (nobody holds it). Returns the descriptor, still exclusively
/// locked ([`write_claim`] lets go of that).
pub(crate) fn claim_for_create(
    dev: &DevDax,
    name: Option<&str>,
    backend: crate::model::Backend,
) -> Result<OwnedFd, RegionError> {
    let Some(name) = name else {
        return Err(RegionError::Unsupported(format!(
            "{}: a region on device-dax needs a name (its name is how it is found again)",
            dev.path.display()
        )));
    };
    let fd = open(&dev.path)?;
    let object = dev.path.display().to_string();
    let alone = sys::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive)?;
    let head = read_head(fd.as_fd(), dev.align_bytes)?;
    match claim(&head, name, &dev.path) {
        Claim::Free if alone => {}
        Claim::Free => {
            return Err(RegionError::NotOurs {
                object,
                reason: "it holds no region, but another process holds it (a create in \
                         progress?)"
                    .to_owned(),
            })
        }
        Claim::Same => {
            return Err(RegionError::AlreadyExists {
                name: name.to_owned(),
                backend,
                object,
                holders: Vec::new(),
                state: None,
            })
        }
        Claim::Taken(reason) => return Err(RegionError::NotOurs { object, reason }),
    }
    Ok(fd)
}

/// Writes the new region's header, state `initializing`, into its mapping
/// and makes it durable, while the creator still holds the device's
/// exclusive lock; then turns that lock into the shared one every holder
/// keeps. (`flock` drops a lock before it takes the new one: a creator that
/// gets the device in between finds it claimed, never free.)
pub(crate) fn write_claim(
    fd: BorrowedFd<'_>,
    mem: &mut Mapping,
    h: &header::RegionHeader,
) -> Result<(), RegionError> {
    mem.write_at(0, &header::encode(h))?;
    mem.store_u32_release(header::STATE_OFFSET, HeaderState::Initializing.word())?;
    mem.persist_range(0, HEADER_BYTES as usize)?;
    sys::flock(fd, FlockOperation::LockShared)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{encode, new_header};
    use crate::model::Backend;

    const M2: u64 = 2 << 20;

    fn head_of(name: &str, state: HeaderState) -> Vec<u8> {
        let mut h = new_header(Some(name), Backend::Dax, 32 << 20, 32 << 20, M2, 7);
        h.state = state;
        let mut b = encode(&h).to_vec();
        b[16..20].copy_from_slice(&state.word().to_le_bytes());
        b
    }

    #[test]
    fn a_device_claim_reads_its_header() {
        let dev = Path::new("/dev/dax0.0");
        assert_eq!(claim(&[0u8; USED_BYTES], "pm", dev), Claim::Free);
        assert_eq!(claim(&[], "pm", dev), Claim::Free);
        let pm = head_of("pm", HeaderState::Ready);
        assert_eq!(claim(&pm, "pm", dev), Claim::Same);
        match claim(&pm, "other", dev) {
            Claim::Taken(why) => {
                assert!(
                    why.contains("holds the dax region \"pm\" (32 MiB, ready"),
                    "{why}"
                );
                assert!(why.contains("hugeshm rm pm --backend dax"), "{why}");
            }
            c => panic!("{c:?}"),
        }
        let mut foreign = vec![0u8; USED_BYTES];
        foreign[0] = 0x7f;
        match claim(&foreign, "pm", dev) {
            Claim::Taken(why) => assert!(why.contains("not a hugeshm header"), "{why}"),
            c => panic!("{c:?}"),
        }
        let mut damaged = pm.clone();
        damaged[60] ^= 1;
        assert!(matches!(claim(&damaged, "pm", dev), Claim::Taken(w) if w.contains("damaged")));
    }

    #[test]
    fn the_object_size_is_the_headers_when_it_fits() {
        let pm = head_of("pm", HeaderState::Ready);
        assert_eq!(object_size(&pm, 110 << 20), 32 << 20);
        // A header claiming more than the device: the device's size, so
        // attach reports the mismatch.
        assert_eq!(object_size(&pm, 16 << 20), 16 << 20);
        assert_eq!(object_size(&[0u8; 8], 110 << 20), 110 << 20);
    }

    fn node(uid: u32, mode: u32) -> rustix::fs::Stat {
        let mut st = rustix::fs::stat("/").expect("stat /");
        st.st_uid = uid as _;
        st.st_mode = (libc::S_IFCHR | mode) as _;
        st
    }

    #[test]
    fn the_owner_is_the_creator_unless_a_third_user_owns_the_node() {
        let pm = head_of("pm", HeaderState::Ready);
        let creator = header::decode(&pm);
        let Decoded::Valid(h) = creator else {
            panic!("{creator:?}")
        };
        let uid = h.creator_uid;
        // Root's node (0600): the creator's region.
        assert_eq!(owner(&pm, &node(0, 0o600)), Owner { uid, mode: 0o600 });
        // The creator's own node.
        assert_eq!(owner(&pm, &node(uid, 0o660)), Owner { uid, mode: 0o660 });
        // Someone else's node: theirs, whatever the header says.
        let third = uid.wrapping_add(4242).max(1);
        assert_eq!(
            owner(&pm, &node(third, 0o600)),
            Owner {
                uid: third,
                mode: 0o600
            }
        );
        // No header: the node's owner.
        assert_eq!(
            owner(&[0u8; USED_BYTES], &node(0, 0o600)),
            Owner {
                uid: 0,
                mode: 0o600
            }
        );
    }
}
