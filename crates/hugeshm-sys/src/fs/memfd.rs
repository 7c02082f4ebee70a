//! memfd: `memfd_create` and the seals that fix a memfd's size.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use hugeshm_parse::size::format_exact;
use rustix::fs::MemfdFlags;

use crate::page::{huge_page_log2, HUGE_SHIFT};
use crate::SysError;

/// `memfd_create(name, MFD_CLOEXEC [| MFD_HUGETLB | size bits])`.
///
/// With a huge page size the file lives on the internal hugetlbfs mount and
/// its length (see [`set_len`](crate::set_len)) must be a multiple of that size.
pub fn memfd_create(name: &str, huge_page_size: Option<u64>) -> Result<OwnedFd, SysError> {
    let call = || {
        let mut s = format!("memfd_create(name={name:?}, MFD_CLOEXEC");
        if let Some(h) = huge_page_size {
            s.push_str("|MFD_HUGETLB|");
            s.push_str(&format_exact(h));
        }
        s.push(')');
        s
    };
    // Sealing allowed, so that its size can be sealed (see [`seal_size`]).
    let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    if let Some(size) = huge_page_size {
        let log2 = huge_page_log2(&call(), size)?;
        flags |= MemfdFlags::HUGETLB | MemfdFlags::from_bits_retain(log2 << HUGE_SHIFT);
    }
    rustix::fs::memfd_create(name, flags).map_err(|e| SysError::os(call(), e))
}

/// `fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)`:
/// fixes a memfd's size for good, so that no process that opens it (as
/// `/proc/PID/fd/N`) can truncate it under the others, who would get
/// SIGBUS past the new end.
pub fn seal_size(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    use rustix::fs::SealFlags;
    rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL).map_err(
        |e| {
            SysError::os(
                format!(
                    "fcntl(fd={}, F_ADD_SEALS, F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL)",
                    fd.as_raw_fd()
                ),
                e,
            )
        },
    )
}

/// The seals of a memfd (`F_GET_SEALS`): whether its size is sealed
/// (`F_SEAL_SHRINK` and `F_SEAL_GROW`).
pub fn size_sealed(fd: BorrowedFd<'_>) -> Result<bool, SysError> {
    use rustix::fs::SealFlags;
    let seals = rustix::fs::fcntl_get_seals(fd)
        .map_err(|e| SysError::os(format!("fcntl(fd={}, F_GET_SEALS)", fd.as_raw_fd()), e))?;
    Ok(seals.contains(SealFlags::SHRINK | SealFlags::GROW))
}
