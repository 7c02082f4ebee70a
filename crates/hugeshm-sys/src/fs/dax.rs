//! DAX: whether the kernel serves a file by DAX (`statx`), and a file's
//! own DAX flag (`FS_XFLAG_DAX`).

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::SysError;

/// Whether the kernel serves the open file `fd` by DAX (its pages are the
/// device's memory, no page cache): `statx`'s `STATX_ATTR_DAX`. `None`
/// where the kernel does not report the attribute (before 5.8).
pub fn is_dax_file(fd: BorrowedFd<'_>) -> Result<Option<bool>, SysError> {
    let st = rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .map_err(|e| SysError::os(format!("statx(fd={}, AT_EMPTY_PATH)", fd.as_raw_fd()), e))?;
    let dax = rustix::fs::StatxAttributes::DAX;
    Ok(st
        .stx_attributes_mask
        .contains(dax)
        .then_some(st.stx_attributes.contains(dax)))
}

/// `statx(path)` (symbolic links followed, so `/proc/PID/map_files/…`
/// reaches the mapped file): whether the kernel serves the file by DAX,
/// as [`is_dax_file`] does for an open file.
pub fn is_dax_path(path: &std::path::Path) -> Result<Option<bool>, SysError> {
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .map_err(|e| SysError::os(format!("statx({})", path.display()), e))?;
    let dax = rustix::fs::StatxAttributes::DAX;
    Ok(st
        .stx_attributes_mask
        .contains(dax)
        .then_some(st.stx_attributes.contains(dax)))
}

/// `struct fsxattr` of `<linux/fs.h>`, what `FS_IOC_FSGETXATTR` reads and
/// `FS_IOC_FSSETXATTR` writes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// `FS_XFLAG_DAX`: the file's own DAX flag (`chattr +x`, `xfs_io -c
/// 'chattr +x'`), what a `dax=inode` mount (ext4, xfs) reads.
const FS_XFLAG_DAX: u32 = 0x0000_8000;
const FS_IOC_FSGETXATTR: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<FsXattr>(b'X', 31);
const FS_IOC_FSSETXATTR: rustix::ioctl::Opcode = rustix::ioctl::opcode::write::<FsXattr>(b'X', 32);

fn fs_xattr(fd: BorrowedFd<'_>) -> Result<FsXattr, SysError> {
    // SAFETY: FS_IOC_FSGETXATTR writes one `struct fsxattr`, which FsXattr
    // is (repr(C), 28 bytes, every bit pattern valid).
    unsafe {
        rustix::ioctl::ioctl(
            fd,
            rustix::ioctl::Getter::<FS_IOC_FSGETXATTR, FsXattr>::new(),
        )
    }
    .map_err(|e| {
        SysError::os(
            format!("ioctl(fd={}, FS_IOC_FSGETXATTR)", fd.as_raw_fd()),
            e,
        )
    })
}

/// Whether the file or directory `fd` has its own DAX flag
/// (`FS_XFLAG_DAX`, `FS_IOC_FSGETXATTR`). On a `dax=inode` mount a file is
/// DAX when it has the flag *as the kernel loads its inode*: a change
/// applies when the inode is next read from disk, and a new file takes
/// its directory's flag.
pub fn dax_flag(fd: BorrowedFd<'_>) -> Result<bool, SysError> {
    Ok(fs_xattr(fd)?.xflags & FS_XFLAG_DAX != 0)
}

/// Sets or clears the DAX flag of `fd` (`FS_IOC_FSSETXATTR`, the other
/// flags kept).
pub fn set_dax_flag(fd: BorrowedFd<'_>, on: bool) -> Result<(), SysError> {
    let mut x = fs_xattr(fd)?;
    if on {
        x.xflags |= FS_XFLAG_DAX;
    } else {
        x.xflags &= !FS_XFLAG_DAX;
    }
    // SAFETY: FS_IOC_FSSETXATTR reads one `struct fsxattr`, which FsXattr is.
    unsafe {
        rustix::ioctl::ioctl(
            fd,
            rustix::ioctl::Setter::<FS_IOC_FSSETXATTR, FsXattr>::new(x),
        )
    }
    .map_err(|e| {
        SysError::os(
            format!(
                "ioctl(fd={}, FS_IOC_FSSETXATTR, FS_XFLAG_DAX={on})",
                fd.as_raw_fd()
            ),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn fsxattr_opcodes_are_the_kernels() {
        // <linux/fs.h>: _IOR('X', 31, struct fsxattr), _IOW('X', 32, ...).
        assert_eq!(std::mem::size_of::<FsXattr>(), 28);
        assert_eq!(FS_IOC_FSGETXATTR as u64, 0x801c_581f);
        assert_eq!(FS_IOC_FSSETXATTR as u64, 0x401c_5820);
    }

    #[test]
    fn dax_flag_and_statx_of_a_page_cache_file() {
        // The target directory: ext4 (or another file system with
        // FS_IOC_FSGETXATTR), not DAX.
        let dir = std::env::temp_dir();
        let path = dir.join(format!("hugeshm-sys-daxflag-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let flag = dax_flag(f.as_fd());
        let by_path = is_dax_path(&path);
        let by_fd = is_dax_file(f.as_fd());
        std::fs::remove_file(&path).unwrap();
        match flag {
            Ok(on) => assert!(!on),
            // tmpfs before 6.x has no FS_IOC_FSGETXATTR.
            Err(e) => assert_eq!(e.errno(), Some(libc::ENOTTY), "{e}"),
        }
        assert_eq!(by_path.unwrap(), by_fd.unwrap());
        assert!(is_dax_path(&dir.join("no-such-file-hugeshm")).is_err());
    }
}
