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

/// A block: what one `MADV_COLLAPSE` makes one 2 MiB page of, and the
/// alignment (to its offset in the object) a mapping needs for it.
pub const COLLAPSE_BLOCK: usize = 2 << 20;

/// How often [`Mapping::collapse_blocks`] tries a block found busy.
const TRIES: u32 = 3;

/// What [`Mapping::collapse_blocks`] did.
#[derive(Debug, Default)]
pub struct BlocksCollapsed {
    /// Whole blocks of the mapping.
    pub blocks: u64,
    /// Blocks now one 2 MiB page each (or found so).
    pub collapsed: u64,
    /// `EINVAL`: mostly blocks no process has touched yet (nothing to
    /// move), or not eligible.
    pub refused: u64,
    /// `EAGAIN` after every try: pages locked or pinned.
    pub busy: u64,
    /// The first few blocks left as they were: offset and error.
    pub examples: Vec<(usize, SysError)>,
    /// The error that stopped it (`ENOMEM`: no free 2 MiB page; `EBUSY`:
    /// the memory cgroup is full; ...); what was done before stays.
    pub stopped: Option<SysError>,
}

impl super::mapping::Mapping {
    /// [`collapse_range`](Self::collapse_range) of each whole
    /// [`COLLAPSE_BLOCK`] of this mapping (which must start 2 MiB from its
    /// offset in the object for any to succeed), in order: `EAGAIN` is tried
    /// again a few times 10 ms apart, `EINVAL` and a lasting `EAGAIN` are
    /// counted and passed over, any other error stops it.
    pub fn collapse_blocks(&self) -> BlocksCollapsed {
        let mut r = BlocksCollapsed {
            blocks: (self.len() / COLLAPSE_BLOCK) as u64,
            ..BlocksCollapsed::default()
        };
        for b in 0..self.len() / COLLAPSE_BLOCK {
            let mut tries = 1;
            let result = loop {
                match self.collapse_range(b * COLLAPSE_BLOCK, COLLAPSE_BLOCK) {
                    Err(e) if e.errno() == Some(libc::EAGAIN) && tries < TRIES => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    other => break other,
                }
            };
            let e = match result {
                Ok(()) => {
                    r.collapsed += 1;
                    continue;
                }
                Err(e) => e,
            };
            match e.errno() {
                Some(libc::EINVAL) => r.refused += 1,
                Some(libc::EAGAIN) => r.busy += 1,
                _ => {
                    r.stopped = Some(e);
                    break;
                }
            }
            if r.examples.len() < 3 {
                r.examples.push((b * COLLAPSE_BLOCK, e));
            }
        }
        r
    }

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
            let e = SysError::last_os(call());
            if e.errno() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}
