//! Opening a path a local user may have planted something at: a region
//! file in `/dev/shm` or on a hugetlbfs or DAX mount, a memfd record, a
//! device-dax, a memfd through `/proc/PID/fd/N`. Every such open goes
//! through hugeshm-sys's [`OpenCheck`] (no link followed, no FIFO or lease
//! waited on, the kind checked with `fstat` after the open); what is not
//! a file hugeshm opens there is [`RegionError::NotOurs`], named with its
//! owner and never read.

use std::path::Path;

use hugeshm_sys::{CheckedFile, FileKind, OpenCheck, SysError};

use crate::error::RegionError;

/// Opens `path` the checked way. `Ok(None)` when nothing is
/// there; another kind of file than `how` accepts is
/// [`RegionError::NotOurs`] naming it and its owner (nothing read from it);
/// no permission is [`RegionError::Permission`] with its fix.
pub(crate) fn open_checked(
    path: &Path,
    how: OpenCheck,
) -> Result<Option<CheckedFile>, RegionError> {
    match how.open(path) {
        Ok(f) => Ok(Some(f)),
        Err(SysError::WrongFileType {
            path,
            found,
            uid,
            expected,
        }) => Err(not_a_region_file(path, found, uid, &expected)),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
        Err(e) if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) => Err(
            RegionError::permission(format!("open {}", path.display()), Some(e)),
        ),
        Err(e) => Err(RegionError::Sys(e)),
    }
}

/// What is at a region's path is not a file hugeshm opens there (found by
/// `lstat` or `fstat`; never read).
pub(crate) fn not_a_region_file(
    path: String,
    found: FileKind,
    uid: u32,
    expected: &str,
) -> RegionError {
    RegionError::NotOurs {
        object: path,
        reason: format!("{found} owned by uid {uid}, not {expected} (not opened)"),
    }
}
