//! `PROCMAP_QUERY` (Linux 6.11): the `ioctl` on an open `/proc/PID/maps`
//! that returns one mapping (VMA) as binary fields, so a scan can step
//! over a process's mappings without the kernel formatting a text line
//! for each, and can ask for the name of only the mappings it keeps.
//!
//! Which mappings to ask for, and what to do on a kernel without the
//! call, is the caller's decision (hugeshm-probe); this is the call.

use crate::SysError;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `struct procmap_query` of `include/uapi/linux/fs.h` (6.11), 104 bytes.
/// A later kernel takes this size as is (it copies what the caller gives
/// and zero-fills the rest).
#[repr(C)]
#[derive(Debug, Default)]
struct RawQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

const _: () = assert!(std::mem::size_of::<RawQuery>() == 104);

/// `_IOWR(PROCFS_IOCTL_MAGIC = 'f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<RawQuery>() as libc::c_ulong) << 16) | (0x66 << 8) | 17;

const VMA_READABLE: u64 = 1 << 0;
const VMA_WRITABLE: u64 = 1 << 1;
const VMA_EXECUTABLE: u64 = 1 << 2;
const VMA_SHARED: u64 = 1 << 3;
const COVERING_OR_NEXT_VMA: u64 = 1 << 4;
const FILE_BACKED_VMA: u64 = 1 << 5;

/// Longest name the kernel returns: `d_path` into a `PATH_MAX` buffer.
const NAME_MAX_BYTES: usize = 4096;

/// What to ask `PROCMAP_QUERY` for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VmaQuery {
    /// The address asked about.
    pub addr: u64,
    /// The mapping that covers `addr`, or else the first one above it
    /// (`PROCMAP_QUERY_COVERING_OR_NEXT_VMA`); without it, only the one
    /// that covers `addr`.
    pub covering_or_next: bool,
    /// Only mappings of a file (`PROCMAP_QUERY_FILE_BACKED_VMA`): shared
    /// anonymous memory, SysV segments and memfds are files too.
    pub file_backed: bool,
    /// Only shared mappings (`PROCMAP_QUERY_VMA_SHARED`: `VM_MAYSHARE`,
    /// the `s` of the maps text).
    pub shared: bool,
    /// Return the name (the path, with ` (deleted)` as in the maps text,
    /// or the kernel's `[name]`).
    pub name: bool,
}

/// One mapping as `PROCMAP_QUERY` reports it: the fields of a maps line,
/// plus the page size backing it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Vma {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// Shared (`VM_MAYSHARE`).
    pub shared: bool,
    /// The page size of the mapping (the huge page size for hugetlb).
    pub page_size: u64,
    /// Offset into the file, in bytes.
    pub offset: u64,
    /// Inode of the file (0 for anonymous memory).
    pub inode: u64,
    /// Device major of the file's file system.
    pub dev_major: u32,
    /// Device minor.
    pub dev_minor: u32,
    /// The name, when asked for and the mapping has one (bytes as the
    /// kernel gives them: a path may hold any byte but NUL).
    pub name: Option<Vec<u8>>,
}

/// Asks the kernel for one mapping of the process whose `/proc/PID/maps`
/// is open as `maps`. `Ok(None)`: no mapping matches (past the last one).
///
/// Errors worth telling apart (by [`SysError::errno`]): `ENOTTY` or
/// `EINVAL` where the kernel (before 6.11) or the file (not procfs) lacks
/// the call; `ESRCH` for a process without an address space (a kernel
/// thread, or one that has exited since `maps` was opened).
pub fn procmap_query(maps: BorrowedFd<'_>, q: VmaQuery) -> Result<Option<Vma>, SysError> {
    let mut name = if q.name {
        vec![0u8; NAME_MAX_BYTES]
    } else {
        Vec::new()
    };
    let mut raw = RawQuery {
        size: std::mem::size_of::<RawQuery>() as u64,
        query_flags: if q.covering_or_next {
            COVERING_OR_NEXT_VMA
        } else {
            0
        } | if q.file_backed { FILE_BACKED_VMA } else { 0 }
            | if q.shared { VMA_SHARED } else { 0 },
        query_addr: q.addr,
        vma_name_size: name.len() as u32,
        // The kernel wants both or neither (EINVAL otherwise).
        vma_name_addr: if name.is_empty() {
            0
        } else {
            name.as_mut_ptr() as u64
        },
        ..Default::default()
    };
    // SAFETY: `raw` is a live, writable `struct procmap_query` of the size
    // it declares in `size`; `vma_name_addr` points at `name`, which is
    // `vma_name_size` writable bytes (or the size is 0 and the kernel
    // writes no name); the build id is not asked for (size 0, address 0).
    // The kernel writes only into these two buffers, which outlive the call.
    let rc = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY, &mut raw as *mut RawQuery) };
    if rc < 0 {
        let err = SysError::last_os(format!(
            "ioctl(fd={}, PROCMAP_QUERY, addr={:#x})",
            maps.as_raw_fd(),
            q.addr
        ));
        return match err.errno() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(err),
        };
    }
    let name = if q.name && raw.vma_name_size > 0 {
        // vma_name_size counts the terminating NUL.
        name.truncate(raw.vma_name_size.saturating_sub(1) as usize);
        Some(name)
    } else {
        None
    };
    Ok(Some(Vma {
        start: raw.vma_start,
        end: raw.vma_end,
        read: raw.vma_flags & VMA_READABLE != 0,
        write: raw.vma_flags & VMA_WRITABLE != 0,
        exec: raw.vma_flags & VMA_EXECUTABLE != 0,
        shared: raw.vma_flags & VMA_SHARED != 0,
        page_size: raw.vma_page_size,
        offset: raw.vma_offset,
        inode: raw.inode,
        dev_major: raw.dev_major,
        dev_minor: raw.dev_minor,
        name,
    }))
}

/// Whether the running kernel answers `PROCMAP_QUERY` (Linux 6.11+),
/// asked once on this process's own `/proc/self/maps`.
pub fn procmap_query_supported() -> bool {
    std::fs::File::open("/proc/self/maps").is_ok_and(|f| {
        let q = VmaQuery {
            covering_or_next: true,
            ..Default::default()
        };
        procmap_query(std::os::fd::AsFd::as_fd(&f), q).is_ok()
    })
}

/// `PROC_SUPER_MAGIC`: `statfs.f_type` of procfs.
const PROC_SUPER_MAGIC: u64 = 0x9fa0;

/// Whether `path` is on procfs (`statfs`): a `/proc` root that is the
/// kernel's, not a captured copy of its files.
pub fn is_procfs(path: &std::path::Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|st| st.f_type as u64 == PROC_SUPER_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procfs_is_told_apart() {
        assert!(is_procfs(std::path::Path::new("/proc")));
        assert!(is_procfs(std::path::Path::new("/proc/self")));
        assert!(!is_procfs(std::path::Path::new("/")));
        assert!(!is_procfs(std::path::Path::new("/nonexistent-hugeshm")));
    }

    #[test]
    fn ioctl_number() {
        // The value in the kernel's uapi header on x86_64 and arm64.
        assert_eq!(PROCMAP_QUERY, 0xc068_6611);
    }

    /// This process's own mappings, by ioctl and by the maps text: every
    /// file-backed line is found, with the same fields and name.
    #[test]
    fn matches_own_maps_text() {
        let f = std::fs::File::open("/proc/self/maps").unwrap();
        let m = crate::MapOptions::new(2 << 20).shared().map_anon().unwrap();
        m.populate_write_range(0, m.len()).unwrap();
        let first = procmap_query(
            std::os::fd::AsFd::as_fd(&f),
            VmaQuery {
                covering_or_next: true,
                file_backed: true,
                name: true,
                ..Default::default()
            },
        );
        let first = match first {
            Err(e) if matches!(e.errno(), Some(libc::ENOTTY | libc::EINVAL)) => {
                // Past libtest's capture, so that a log shows it (the
                // testkit's skip is above this crate; the ioctl is in
                // Linux 6.11 and later, an allowed lack).
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!("SKIP procmap::tests::matches_own_maps_text: PROCMAP_QUERY not supported here ({e})\n").as_bytes(),
                );
                return;
            }
            r => r.unwrap(),
        };
        assert!(first.is_some(), "a process maps at least its executable");
        let mut got = Vec::new();
        let mut addr = 0;
        while let Some(v) = procmap_query(
            std::os::fd::AsFd::as_fd(&f),
            VmaQuery {
                addr,
                covering_or_next: true,
                file_backed: true,
                name: true,
                ..Default::default()
            },
        )
        .unwrap()
        {
            assert!(v.end > v.start && v.start >= addr);
            addr = v.end;
            got.push(v);
        }
        // The shared anonymous mapping is a file (/dev/zero (deleted)),
        // shared, 4 KiB pages.
        let at = m.as_ptr() as u64;
        let shm = got.iter().find(|v| v.start <= at && at < v.end).unwrap();
        assert!(shm.shared && shm.read && shm.write && !shm.exec);
        assert_eq!(shm.page_size, 4096);
        assert_eq!(shm.name.as_deref(), Some(&b"/dev/zero (deleted)"[..]));
        // The text line of the same mapping (other test threads may map
        // and unmap meanwhile, but not this mapping).
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let shm_line = text
            .lines()
            .find(|l| l.starts_with(&format!("{:x}-", shm.start)))
            .unwrap();
        assert!(shm_line.contains(" rw-s "), "{shm_line}");
        assert!(shm_line.ends_with("/dev/zero (deleted)"), "{shm_line}");
        assert!(
            shm_line.contains(&format!(
                " {:02x}:{:02x} {} ",
                shm.dev_major, shm.dev_minor, shm.inode
            )),
            "{shm_line} vs {shm:?}"
        );
        // Only mapping-covering-addr (no next): an address below every
        // mapping finds nothing.
        assert_eq!(
            procmap_query(std::os::fd::AsFd::as_fd(&f), VmaQuery::default()).unwrap(),
            None
        );
        m.release().unwrap();
    }
}
