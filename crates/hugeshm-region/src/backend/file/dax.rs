//! DAX files and devices: a file on a `dax=inode` mount made in a staging
//! directory with the DAX flag, allocated whole and made durable, mapped
//! `MAP_SYNC`; a region on a device-dax, from offset 0.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hugeshm_parse::size::format_bytes;
use hugeshm_sys as sys;
use rustix::fs::{Mode, OFlags};

use super::dir::{fs_free_bytes, no_space, statfs_type, temp_file_name};
use super::RegionFile;
use crate::backend::devdax::{self, DevDax};
use crate::backend::{Made, Object, Spec};
use crate::error::RegionError;
use crate::header::{self, Liveness};

/// Where a `dax` region's file is created on a `dax=inode` mount. A file
/// there is DAX only with its own flag (`FS_XFLAG_DAX`), and Linux (ext4
/// and xfs) applies a flag set on a file only when its inode is next read
/// from disk, which a file held open from its creation on never is (seen
/// on 6.1: `statx` says DAX only after the last close and a new open). A
/// new file takes the flag of its directory at once, so the file is made
/// (`O_TMPFILE`) in a staging directory with the flag, `.hugeshm.dax-PID-N`
/// in the region's directory, and linked under its name there; the staging
/// directory goes as soon as the file is open.
pub(super) struct DaxStaging(pub(super) PathBuf);

impl Drop for DaxStaging {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.0) {
            log::warn!("cleanup: removing {}: {e}", self.0.display());
        }
    }
}

/// Name prefix of the staging directories, `.hugeshm.dax-PID-N`.
pub(super) const DAX_STAGING_PREFIX: &str = ".hugeshm.dax-";

/// Removes the staging directories in `dir` that a creator killed between
/// making and removing one left behind: empty, owned by this user, named
/// after a process that is gone. A live process's (or a reused pid's) is
/// left alone, and so is anything else. Returns how many went.
fn sweep_dax_staging(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let me = rustix::process::geteuid().as_raw();
    let mut removed = 0;
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DAX_STAGING_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours
            && header::liveness(pid, None) == Liveness::Dead
            && std::fs::remove_dir(e.path()).is_ok()
        {
            log::info!(
                "removed {}, left by pid {pid}, which is gone",
                e.path().display()
            );
            removed += 1;
        }
    }
    removed
}

/// The staging directory for a new file in `dir` on a `dax=inode` mount;
/// `None` when `dir` has the flag itself (its new files are DAX).
pub(super) fn dax_staging(dir: &Path) -> Result<Option<DaxStaging>, RegionError> {
    let io = |p: &Path, e: rustix::io::Errno| RegionError::io(p.display().to_string(), e.into());
    let open_dir = |p: &Path, more: OFlags| {
        rustix::fs::open(
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | more,
            Mode::empty(),
        )
        .map_err(|e| io(p, e))
    };
    if sys::dax_flag(open_dir(dir, OFlags::empty())?.as_fd())? {
        return Ok(None);
    }
    sweep_dax_staging(dir);
    let path = dir.join(format!(
        "{DAX_STAGING_PREFIX}{}",
        temp_file_name().trim_start_matches("hugeshm.tmp-")
    ));
    rustix::fs::mkdir(&path, Mode::from_bits_truncate(0o700)).map_err(|e| io(&path, e))?;
    let staging = DaxStaging(path);
    // The directory just made, not a link someone put in its place.
    sys::set_dax_flag(open_dir(&staging.0, OFlags::NOFOLLOW)?.as_fd(), true)?;
    Ok(Some(staging))
}

/// Why a new file on a `dax=inode` mount is not DAX, and the fix. It was
/// made with the flag (from its directory): then the file system cannot
/// serve files by DAX at all (ext4 and xfs need blocks of the page size on
/// a device with DAX).
fn not_dax_reason(fd: BorrowedFd<'_>, dir: &Path, what: &str) -> String {
    let try_it = "or use --policy try for a plain shared mapping made durable with msync";
    if !sys::dax_flag(fd).unwrap_or(false) {
        return format!(
            "{what}: the file is not DAX on this dax=inode mount (it has no DAX flag; the kernel \
             serves it from the page cache), so it cannot be mapped MAP_SYNC; set the flag on \
             the directory so that new files are DAX (chattr +x {d} on ext4, xfs_io -c 'chattr \
             +x' {d} on xfs), mount it with -o dax=always, {try_it}",
            d = dir.display()
        );
    }
    let page = sys::base_page_size() as u64;
    let blocks = match statfs_type(dir) {
        Ok((_, bsize)) if bsize != page => format!(
            " (its blocks are {}, DAX needs {})",
            format_bytes(bsize),
            format_bytes(page)
        ),
        _ => String::new(),
    };
    format!(
        "{what}: the file is not DAX although it has the DAX flag: this file system cannot serve \
         files by DAX{blocks}, so it cannot be mapped MAP_SYNC; put a file system made with \
         mkfs.ext4 -b 4096 (or mkfs.xfs -b size=4096) on an fsdax namespace and mount it with \
         -o dax, {try_it}"
    )
}

/// Allocates a DAX file whole (a full device is `NoSpace` with the
/// numbers, never SIGBUS) and maps it at an address aligned like its page
/// size (2 MiB: PMD faults), `MAP_SYNC` unless the policy is `off`; where
/// the file system cannot, `only` fails and `try` maps it plainly (create
/// reports it).
pub(super) fn map_dax(
    spec: &Spec<'_>,
    fd: BorrowedFd<'_>,
    len: usize,
    dir: &Path,
    path: Option<&Path>,
    inode_dax: bool,
) -> Result<sys::Mapping, RegionError> {
    let size = len as u64;
    let align = Some(spec.plan.page_size as usize);
    // dax=inode: the kernel says whether the new file is DAX; where it is
    // not, `try` maps it plainly (create reports it: no MAP_SYNC).
    let not_dax = inode_dax
        && spec.policy != crate::model::Policy::Off
        && sys::is_dax_file(fd)? == Some(false);
    if not_dax {
        let what = path.unwrap_or(dir).display().to_string();
        if spec.policy == crate::model::Policy::Only {
            return Err(RegionError::Unsupported(not_dax_reason(fd, dir, &what)));
        }
    }
    sys::fallocate(fd, size).map_err(|e| match e.errno() {
        Some(libc::ENOSPC) => {
            let free = fs_free_bytes(dir).ok().flatten().unwrap_or(0);
            no_space(&spec.host.mounts, path.unwrap_or(dir), "dax", size, free)
        }
        _ => RegionError::Sys(e),
    })?;
    // The file's blocks, size and name durable now: a power loss after
    // create keeps the region (ext4 would commit them within seconds, or
    // lose them).
    let io = |e: rustix::io::Errno| RegionError::io(dir.display().to_string(), e.into());
    rustix::fs::fsync(fd).map_err(io)?;
    let d = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    rustix::fs::fsync(&d).map_err(io)?;
    if spec.policy == crate::model::Policy::Off || not_dax {
        return Ok(sys::MapOptions::new(len).align(align).map(fd)?);
    }
    match sys::MapOptions::new(len).sync().align(align).map(fd) {
        Ok(m) => Ok(m),
        Err(e) if matches!(e.errno(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)) => {
            if spec.policy == crate::model::Policy::Only {
                return Err(RegionError::Unsupported(format!(
                    "{}: the file system cannot map MAP_SYNC ({e}), so writes could not be made durable by flushing CPU caches; mount it with -o dax (dax=always) on persistent memory, or use --policy try for a plain shared mapping made durable with msync",
                    dir.display()
                )));
            }
            Ok(sys::MapOptions::new(len).align(align).map(fd)?)
        }
        Err(e) => Err(RegionError::Sys(e)),
    }
}

/// A region on a device-dax, from offset 0: the device claimed (nobody
/// holds it; free), then mapped whole and its header written (before the
/// lock turns shared), `MAP_SYNC` (the device has no file
/// system metadata to make durable, and always accepts it: `persist`
/// flushes CPU caches whatever the policy), at an address aligned like the
/// device (the kernel refuses others).
pub(super) fn create_on_device(spec: &Spec<'_>, dev: &DevDax) -> Result<Made, RegionError> {
    let size = spec.plan.size_bytes;
    if size > dev.size_bytes {
        return Err(devdax::too_big(dev, size));
    }
    let len = usize::try_from(size).map_err(|_| RegionError::InvalidSize {
        requested_bytes: size,
        reason: "does not fit in usize".to_owned(),
        fix: None,
    })?;
    let fd = devdax::claim_for_create(dev, spec.name, spec.backend)?;
    crate::testhook::checkpoint("name-claimed");
    let align = usize::try_from(dev.align_bytes).ok();
    let mut mem = sys::MapOptions::new(len)
        .sync()
        .align(align)
        .map(fd.as_fd())?;
    if let Err(e) = devdax::write_claim(fd.as_fd(), &mut mem, spec.header) {
        // Whatever part of the header got there goes again.
        if let Err(c) = devdax::clear_head(fd.as_fd(), dev.align_bytes) {
            log::warn!(
                "cleanup: clearing the header of {}: {c}",
                dev.path.display()
            );
        }
        return Err(e);
    }
    Ok(Made {
        mem,
        object: Object::File(RegionFile {
            path: dev.path.clone(),
            fd,
            linked: true,
            device_align: Some(dev.align_bytes),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_dax_staging_directories_of_gone_processes_are_swept() {
        let root = std::env::temp_dir().join(format!("hugeshm-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let dir = |n: String| {
            let p = root.join(n);
            std::fs::create_dir(&p).unwrap();
            p
        };
        let stale = dir(format!("{DAX_STAGING_PREFIX}{gone}-0"));
        let live = dir(format!("{DAX_STAGING_PREFIX}{}-3", std::process::id()));
        let full = dir(format!("{DAX_STAGING_PREFIX}{gone}-1"));
        std::fs::write(full.join("x"), b"x").unwrap();
        let other = dir(format!("{DAX_STAGING_PREFIX}x-1"));
        let user = dir(format!("hugeshm.dax-{gone}-2"));
        assert_eq!(sweep_dax_staging(&root), 1);
        assert!(!stale.exists());
        for kept in [&live, &full, &other, &user] {
            assert!(kept.exists(), "{}", kept.display());
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
