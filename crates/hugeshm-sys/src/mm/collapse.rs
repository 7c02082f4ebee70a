//! `MADV_COLLAPSE` on another process's memory: `pidfd_open` and
//! `process_madvise` (Linux 6.1+). The kernel copies each whole 2 MiB block
//! of shmem (a SysV segment, shared anonymous memory, a tmpfs file) into
//! one transparent huge page in place and takes the old page tables away
//! from every process that maps it.
//!
//! The call counts the bytes of the leading ranges that were advised, not
//! the blocks collapsed, stops at the first range that fails and loses that
//! range's `errno` when an earlier one succeeded: so
//! [`collapse_block`] gives one 2 MiB block per call, and the caller reads
//! the result back from `/proc/PID/smaps`.

use crate::SysError;
use std::os::fd::{AsRawFd, OwnedFd};

/// A process, by a pidfd: a process that exits and whose pid is reused is
/// never the one the calls reach.
#[derive(Debug)]
pub struct PidFd {
    fd: OwnedFd,
    pid: u32,
}

impl PidFd {
    /// Opens `pidfd_open(pid)`: `ESRCH` when no such process.
    pub fn open(pid: u32) -> Result<PidFd, SysError> {
        let call = || format!("pidfd_open(pid={pid})");
        let p = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| SysError::invalid(call(), "not a process id"))?;
        let fd =
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).map_err(|e| {
                SysError::Os {
                    call: call(),
                    errno: e.raw_os_error(),
                }
            })?;
        Ok(PidFd { fd, pid })
    }

    /// The process id it was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// `process_madvise(pidfd, [addr, len), MADV_COLLAPSE)`: collapses the
/// whole 2 MiB blocks of one range of the process's memory (one block is
/// what callers pass, see the module's text). `Ok` when the kernel took
/// the whole range; the errors the kernel gives (`EINVAL`: not eligible,
/// or a block with no page at all; `EAGAIN`: a page locked or pinned for a
/// moment; `ENOMEM`: no free 2 MiB page; `EBUSY`: the process's memory
/// cgroup is full; `EPERM`: no `CAP_SYS_NICE`; `EACCES`: not allowed to
/// read the process's memory) are [`SysError::Os`].
pub fn collapse_block(target: &PidFd, addr: u64, len: u64) -> Result<(), SysError> {
    let call = || {
        format!(
            "process_madvise(pid={}, addr={addr:#x}, len={len}, MADV_COLLAPSE)",
            target.pid
        )
    };
    let iov = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: usize::try_from(len).map_err(|_| SysError::invalid(call(), "too long"))?,
    };
    // SAFETY: the iovec is one valid element on this stack that the kernel
    // only reads; its base is an address in the *target's* memory, which
    // the kernel looks up in that process and never dereferences here.
    // The pidfd is open for the whole call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            target.fd.as_raw_fd(),
            &iov as *const libc::iovec,
            1usize,
            libc::MADV_COLLAPSE,
            0u32,
        )
    };
    if rc < 0 {
        return Err(SysError::last_os(call()));
    }
    Ok(())
}

impl super::mapping::Mapping {
    /// `madvise(MADV_COLLAPSE)` (Linux 6.1+) of `offset..offset + n` of this
    /// mapping: this process's own memory, so no capability is needed. The
    /// errors are [`collapse_block`]'s (`EINVAL` too on a kernel without the
    /// advice). Threads may collapse disjoint blocks at once.
    pub fn collapse_range(&self, offset: usize, n: usize) -> Result<(), SysError> {
        let call = || {
            format!(
                "madvise(addr={:#x}, len={n}, MADV_COLLAPSE)",
                self.addr() + offset
            )
        };
        super::mapping::check_range(call, offset, n, self.len())?;
        let p = self.addr() + offset;
        if p % crate::page::base_page_size() != 0 {
            return Err(SysError::invalid(call(), "address is not page-aligned"));
        }
        loop {
            // SAFETY: a checked, page-aligned range of a live mapping owned
            // by self; MADV_COLLAPSE moves the pages into a huge page and
            // never changes what they hold.
            let rc = unsafe { libc::madvise(p as *mut libc::c_void, n, libc::MADV_COLLAPSE) };
            if rc == 0 {
                return self.intact("MADV_COLLAPSE");
            }
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if errno != libc::EINTR {
                return Err(SysError::Os {
                    call: call(),
                    errno,
                });
            }
        }
    }
}
