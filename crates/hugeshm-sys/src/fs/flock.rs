//! Advisory whole-file locks: `flock`.

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::SysError;

/// `flock(fd, op)`, retried on `EINTR`; `Ok(false)` when a non-blocking
/// request would block.
pub fn flock(fd: BorrowedFd<'_>, op: rustix::fs::FlockOperation) -> Result<bool, SysError> {
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(true),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
            Err(e) => {
                return Err(SysError::os(
                    format!("flock(fd={}, {op:?})", fd.as_raw_fd()),
                    e,
                ))
            }
        }
    }
}
