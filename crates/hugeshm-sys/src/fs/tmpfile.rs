//! Unnamed files: `O_TMPFILE` and the `linkat` that names one.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use crate::SysError;

/// `open(dir, O_TMPFILE|O_RDWR|O_CLOEXEC, mode)`: an unnamed file in `dir`
/// (tmpfs and hugetlbfs support it) that vanishes with its last reference
/// unless [`link_tmpfile`] gives it a name.
pub fn open_tmpfile(dir: &std::path::Path, mode: u32) -> Result<OwnedFd, SysError> {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_bits_truncate(mode),
    )
    .map_err(|e| {
        SysError::os(
            format!("open({}, O_TMPFILE|O_RDWR, mode={mode:#o})", dir.display()),
            e,
        )
    })
}

/// Gives a file opened with [`open_tmpfile`] the name `path`:
/// `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, path, AT_SYMLINK_FOLLOW)`.
/// Atomic and exclusive: `Ok(false)` when `path` exists already.
pub fn link_tmpfile(fd: BorrowedFd<'_>, path: &std::path::Path) -> Result<bool, SysError> {
    let from = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match rustix::fs::linkat(
        rustix::fs::CWD,
        from.as_str(),
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::SYMLINK_FOLLOW,
    ) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(e) => Err(SysError::os(
            format!("linkat({from}, {}, AT_SYMLINK_FOLLOW)", path.display()),
            e,
        )),
    }
}
