//! A file's length and blocks: `ftruncate`, `fallocate`.

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::SysError;

/// `ftruncate(fd, len)`: sets the size of a memfd, hugetlbfs or `/dev/shm`
/// file.
pub fn set_len(fd: BorrowedFd<'_>, len: u64) -> Result<(), SysError> {
    rustix::fs::ftruncate(fd, len)
        .map_err(|e| SysError::os(format!("ftruncate(fd={}, len={len})", fd.as_raw_fd()), e))
}

/// `fallocate(fd, 0, 0, len)`: allocates every block of a file now, so that
/// a full tmpfs is `ENOSPC` here instead of SIGBUS at first touch.
pub fn fallocate(fd: BorrowedFd<'_>, len: u64) -> Result<(), SysError> {
    rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, len).map_err(|e| {
        SysError::os(
            format!(
                "fallocate(fd={}, mode=0, offset=0, len={len})",
                fd.as_raw_fd()
            ),
            e,
        )
    })
}
