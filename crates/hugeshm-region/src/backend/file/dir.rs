//! The directory a region file goes to: which file system it is on
//! (`statfs`: hugetlbfs of the page size, or tmpfs), the space left on it,
//! and the error with the numbers when there is too little.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use hugeshm_fix::Fix;
use hugeshm_parse::mounts::{mount_of, Mount};
use hugeshm_parse::size::format_bytes;

use crate::error::RegionError;

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// `statfs.f_type` of hugetlbfs.
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// A unique name for an anonymous file region on a file system without
/// `O_TMPFILE` (unlinked right after it is opened).
pub(super) fn temp_file_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "hugeshm.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub(super) fn statfs_type(path: &Path) -> Result<(u64, u64), RegionError> {
    let st = rustix::fs::statfs(path)
        .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as u64 & 0xffff_ffff;
    #[allow(clippy::unnecessary_cast)]
    let bsize = st.f_bsize as u64;
    Ok((f_type, bsize))
}

/// The page size of a directory on hugetlbfs, `None` elsewhere.
pub(crate) fn dir_hugetlbfs_page_size(dir: &Path) -> Result<Option<u64>, RegionError> {
    let (t, bsize) = statfs_type(dir)?;
    Ok((t == HUGETLBFS_MAGIC).then_some(bsize))
}

/// Checks that `dir` is hugetlbfs (for huge pages) or tmpfs; returns the
/// file system name.
pub(super) fn check_dir(dir: &Path, huge: Option<u64>) -> Result<&'static str, RegionError> {
    let (t, bsize) = statfs_type(dir)?;
    let bad = |reason: String| RegionError::UnsuitableDirectory {
        path: dir.display().to_string(),
        reason,
    };
    match huge {
        Some(page) if t == HUGETLBFS_MAGIC && bsize == page => Ok("hugetlbfs"),
        Some(page) => Err(bad(format!(
            "not a hugetlbfs mount of {} pages",
            format_bytes(page)
        ))),
        None if t == TMPFS_MAGIC => Ok("tmpfs"),
        None => Err(bad(
            "not on tmpfs (posix regions live on tmpfs, e.g. /dev/shm)".to_owned(),
        )),
    }
}

/// Free bytes on a size-limited file system (`None` when it has no limit:
/// tmpfs `size=0`, hugetlbfs without `size=`).
pub(super) fn fs_free_bytes(dir: &Path) -> Result<Option<u64>, RegionError> {
    let st = rustix::fs::statvfs(dir)
        .map_err(|e| RegionError::io(dir.display().to_string(), e.into()))?;
    if st.f_blocks == 0 || st.f_blocks == u64::MAX {
        return Ok(None);
    }
    let unit = if st.f_frsize > 0 {
        st.f_frsize
    } else {
        st.f_bsize
    };
    Ok(Some(st.f_bavail.saturating_mul(unit)))
}

/// A tmpfs region whose pre-fault ran out of space: the file system as it
/// is now, with the numbers and the fix.
pub(crate) fn out_of_space(mounts: &[Mount], dir: &Path, needed: u64) -> RegionError {
    let free = fs_free_bytes(dir).ok().flatten().unwrap_or(0);
    no_space(mounts, dir, "tmpfs", needed, free)
}

pub(super) fn no_space(
    mounts: &[Mount],
    path: &Path,
    fstype: &str,
    needed: u64,
    free: u64,
) -> RegionError {
    let mount = mount_of(mounts, path)
        .map(|m| m.target.clone())
        .unwrap_or_else(|| path.display().to_string());
    RegionError::NoSpace {
        path: path.display().to_string(),
        fstype: fstype.to_owned(),
        needed_bytes: needed,
        free_bytes: free,
        fix: Box::new(if fstype == "dax" {
            Fix::GrowDax {
                mount,
                missing_bytes: needed.saturating_sub(free),
            }
        } else {
            Fix::GrowFilesystem {
                mount,
                missing_bytes: needed.saturating_sub(free),
            }
        }),
    }
}

/// The page size the kernel backs the open file `fd` (at `path`) with,
/// from its file system alone, never from its header: a hugetlbfs mount's
/// page size; the base page on a tmpfs mounted without `huge=` (or
/// `huge=never`); `None` where each fault decides (a tmpfs that may use
/// transparent huge pages, a DAX file system) or it cannot be read.
pub(super) fn kernel_page_size(
    fd: std::os::fd::BorrowedFd<'_>,
    path: &Path,
    mounts: &[Mount],
) -> Option<u64> {
    let st = rustix::fs::fstatfs(fd).ok()?;
    #[allow(clippy::unnecessary_cast)]
    let (f_type, bsize) = (st.f_type as u64 & 0xffff_ffff, st.f_bsize as u64);
    match f_type {
        HUGETLBFS_MAGIC => Some(bsize),
        TMPFS_MAGIC => matches!(
            mount_of(mounts, path).map(|m| m.option("huge")),
            Some(None | Some("never"))
        )
        .then(|| hugeshm_sys::base_page_size() as u64),
        _ => None,
    }
}
