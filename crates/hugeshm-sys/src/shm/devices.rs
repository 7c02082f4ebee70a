//! The devices of the kernel's own mounts that hold System V segments.
//!
//! A SysV segment is a file of an internal mount no process can see: the
//! shmem mount for base pages, one internal hugetlbfs mount per huge page
//! size for `SHM_HUGETLB`. In `/proc/PID/maps` it is named
//! `/SYSV<key> (deleted)` with that mount's device and the shmid as its
//! inode, but any user can make a file with that name and inode on a tmpfs
//! of their own (a user namespace mounts one) and map it. The device is
//! what they cannot choose: it is the internal mount's.
//!
//! The same internal mounts hold memfds (`memfd_create`, with
//! `MFD_HUGETLB` for a huge page size), so one empty memfd per size,
//! made and closed at once, tells each device: no page is reserved, no
//! privilege or memlock limit is needed, nothing is left behind.

use crate::fs::memfd_create;
use crate::SysError;

/// The devices (major, minor) of the kernel's internal mounts that hold
/// SysV segments of base pages (first) and of each of `huge_page_sizes`
/// the kernel offers. A size the kernel refuses (no such pool) is left
/// out; an error is returned only when not even the shmem mount's device
/// can be learnt.
pub fn sysv_devices(huge_page_sizes: &[u64]) -> Result<Vec<(u32, u32)>, SysError> {
    let device = |huge: Option<u64>| -> Result<(u32, u32), SysError> {
        let fd = memfd_create("hugeshm-sysv-device", huge)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| SysError::os("fstat(memfd)".to_owned(), e))?;
        Ok((
            rustix::fs::major(st.st_dev as u64),
            rustix::fs::minor(st.st_dev as u64),
        ))
    };
    let mut devices = vec![device(None)?];
    for &size in huge_page_sizes {
        if let Ok(d) = device(Some(size)) {
            if !devices.contains(&d) {
                devices.push(d);
            }
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::{shm_attach, shm_get, shm_remove, ShmFlags, IPC_PRIVATE};

    /// The device of this process's mapping at `addr`, from its maps.
    fn mapped_device(addr: usize) -> (u32, u32) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| {
                let start = l.split('-').next().unwrap();
                usize::from_str_radix(start, 16).unwrap() == addr
            })
            .unwrap_or_else(|| panic!("no mapping at {addr:#x} in\n{maps}"));
        let dev = line.split_whitespace().nth(3).unwrap();
        let (ma, mi) = dev.split_once(':').unwrap();
        (
            u32::from_str_radix(ma, 16).unwrap(),
            u32::from_str_radix(mi, 16).unwrap(),
        )
    }

    #[test]
    fn a_real_segment_is_on_the_first_device() {
        let devices = sysv_devices(&[]).unwrap();
        assert_eq!(devices.len(), 1);
        let id = shm_get(IPC_PRIVATE, 4096, ShmFlags::create_new(None)).unwrap();
        let m = shm_attach(id);
        shm_remove(id).unwrap();
        let m = m.unwrap();
        assert_eq!(mapped_device(m.addr()), devices[0]);
        // A file of a tmpfs of ours is not: its device is that tmpfs's.
        let f = std::env::temp_dir();
        let dev = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(f).unwrap().dev()
        };
        let d = (rustix::fs::major(dev), rustix::fs::minor(dev));
        assert_ne!(d, devices[0]);
    }

    #[test]
    fn each_huge_page_size_has_its_own_device() {
        let sizes: Vec<u64> = std::fs::read_dir("/sys/kernel/mm/hugepages")
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let n = e.file_name().into_string().ok()?;
                        let kb: u64 = n
                            .strip_prefix("hugepages-")?
                            .strip_suffix("kB")?
                            .parse()
                            .ok()?;
                        Some(kb << 10)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let devices = sysv_devices(&sizes).unwrap();
        assert_eq!(devices.len(), 1 + sizes.len(), "{devices:?} for {sizes:?}");
    }
}
