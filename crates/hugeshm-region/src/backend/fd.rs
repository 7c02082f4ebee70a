//! What the backends on a file descriptor share (`file`, `devdax` and `memfd`): the
//! shared lock every holder keeps, device and inode, owner and mode,
//! mapping an opened region file, and the unlink that undoes a half-made
//! name.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hugeshm_probe::{dev_major, dev_minor};
use hugeshm_sys::{self as sys, Mapping, PMD_SHARE_ALIGN};
use rustix::fs::FlockOperation;

use crate::error::RegionError;
use crate::header::Liveness;
use crate::model::{Expect, Owner};

/// How long an attacher waits for a reclaimer's exclusive lock on a file.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Device (major, minor) and inode of an open file (as `/proc/PID/maps`
/// shows them).
pub(crate) fn dev_ino(fd: BorrowedFd<'_>, what: &str) -> Result<((u32, u32), u64), RegionError> {
    let st = rustix::fs::fstat(fd).map_err(|e| RegionError::io(what, e.into()))?;
    #[allow(clippy::unnecessary_cast)]
    let dev = st.st_dev as u64;
    #[allow(clippy::unnecessary_cast)]
    Ok(((dev_major(dev), dev_minor(dev)), st.st_ino as u64))
}

/// A file's owner and permission bits.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn owner_of(st: &rustix::fs::Stat) -> Owner {
    Owner {
        uid: st.st_uid as u32,
        mode: st.st_mode as u32 & 0o777,
    }
}

/// Takes a shared lock on a region file, waiting out a reclaimer's brief
/// exclusive one.
pub(crate) fn lock_shared(fd: BorrowedFd<'_>, what: &str) -> Result<(), RegionError> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        if sys::flock(fd, FlockOperation::NonBlockingLockShared)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RegionError::Unsupported(format!(
                "{what}: another process has held an exclusive lock on it for {} s (a reclaim \
                 in progress?); retry",
                LOCK_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// For a region file whose header is not written yet: whether someone
/// (its creator) still holds a lock on it. Drops this process's own
/// shared lock to ask, so only for an attach that is about to fail.
pub(crate) fn unwritten_creator(fd: BorrowedFd<'_>) -> (Option<u32>, Liveness) {
    let _ = sys::flock(fd, FlockOperation::Unlock);
    let alone = matches!(
        sys::flock(fd, FlockOperation::NonBlockingLockExclusive),
        Ok(true)
    );
    (
        None,
        if alone {
            Liveness::Dead
        } else {
            Liveness::Alive
        },
    )
}

/// Maps an opened, locked and checked region file of `size` bytes (1 GiB
/// aligned for page-table sharing when it is hugetlb below 1 GiB pages and
/// at least 1 GiB long). Returns the mapping and the hugetlb page size the
/// kernel serves it with (`None`: not hugetlb).
pub(crate) fn map_region_file(
    fd: &OwnedFd,
    size: u64,
    exp: &Expect,
    device_align: Option<u64>,
) -> Result<(Mapping, Option<u64>), RegionError> {
    let hugetlb_page = sys::hugetlbfs_page_size(fd.as_fd()).map(|p| p as u64);
    let len = usize::try_from(size).map_err(|_| RegionError::InvalidSize {
        requested_bytes: size,
        reason: "does not fit in usize".to_owned(),
        fix: None,
    })?;
    let align = (exp.pmd_sharing
        && hugetlb_page.is_some_and(|p| p < PMD_SHARE_ALIGN as u64)
        && size >= PMD_SHARE_ALIGN as u64)
        .then_some(PMD_SHARE_ALIGN);
    // A dax region: MAP_SYNC where the file system can (its creator's
    // policy decided whether it had to), at the 2 MiB alignment PMD faults
    // need when its size allows.
    if let Some(a) = device_align {
        // A device-dax region: always MAP_SYNC, at the device's alignment
        // (the kernel refuses any other).
        let a = usize::try_from(a).ok();
        return Ok((
            sys::MapOptions::new(len).sync().align(a).map(fd.as_fd())?,
            None,
        ));
    }
    if exp.backend == Some(crate::model::Backend::Dax) {
        let align = (size % crate::pool::DAX_PMD == 0).then_some(crate::pool::DAX_PMD as usize);
        return match sys::MapOptions::new(len)
            .sync()
            .align(align)
            .map(fd.as_fd())
        {
            Ok(m) => Ok((m, None)),
            Err(e) if matches!(e.errno(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) => Ok((
                sys::MapOptions::new(len).align(align).map(fd.as_fd())?,
                None,
            )),
            Err(e) => Err(e.into()),
        };
    }
    // Base pages (a tmpfs file, a memfd) of at least 2 MiB: 2 MiB-aligned,
    // so that each block can be one 2 MiB page (Region::collapse).
    let block = crate::pool::block_align(size).filter(|_| hugetlb_page.is_none());
    let map = sys::MapOptions::new(len)
        .align(align.or(block))
        .map(fd.as_fd())?;
    Ok((map, hugetlb_page))
}

/// Unlinks a file on drop unless disarmed; a failed unlink goes to the
/// `log` facade (it runs while another error is on its way out).
pub(crate) struct UndoUnlink(pub(crate) Option<PathBuf>);

impl UndoUnlink {
    /// Keeps the file.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for UndoUnlink {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = std::fs::remove_file(&p) {
                log::warn!("cleanup: unlink {}: {e}", p.display());
            }
        }
    }
}

/// A region file or memfd opened for attach, share-locked.
pub(crate) struct OpenFd {
    /// The descriptor.
    pub fd: OwnedFd,
    /// The path it was opened by (a memfd: its record).
    pub path: PathBuf,
    /// The host reader of the attach (a memfd's last-holder check scans
    /// its `/proc`).
    pub probe: hugeshm_probe::Probe,
}
