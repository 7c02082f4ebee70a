//! Creating a region file: unnamed (`O_TMPFILE`) in its directory, or
//! with `O_CREAT|O_EXCL` where the file system has no `O_TMPFILE`;
//! share-locked and sized before it is linked under its name; then mapped
//! (DAX, hugetlbfs, or tmpfs with its blocks allocated first or by the
//! pre-fault).

use std::os::fd::AsFd;
use std::path::Path;

use hugeshm_fix::Fix;
use hugeshm_parse::mounts::mount_of;
use hugeshm_sys::{self as sys, SysError};
use rustix::fs::{FlockOperation, Mode};

use super::dax::{create_on_device, dax_staging, map_dax};
use super::dir::{check_dir, fs_free_bytes, no_space, temp_file_name};
use super::find::device_at;
use super::RegionFile;
use crate::backend::devdax;
use crate::backend::fd::UndoUnlink;
use crate::backend::{Made, Object, Spec};
use crate::error::RegionError;
use crate::model::PrefaultMethod;
use crate::naming::object_file_name;
use crate::pool::{self, Backing, ThpMode};

/// Pre-fault threads from which a tmpfs region's pages are allocated by
/// the pre-fault rather than by one `fallocate`.
const FAULT_ALLOCATES_FROM_THREADS: usize = 2;

/// Creates the file of a region for `spec` and maps it (the `file`
/// backend's [`BackendOps::create`](crate::backend::BackendOps::create)).
pub(super) fn create(spec: &Spec<'_>) -> Result<Made, RegionError> {
    let plan = spec.plan;
    let size = plan.size_bytes;
    let len = size as usize;
    let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
    let exists = |object: String| RegionError::AlreadyExists {
        name: spec.name.unwrap_or_default().to_owned(),
        backend: spec.backend,
        object,
        holders: Vec::new(),
        state: None,
    };
    let dir = plan.dir.clone().ok_or_else(|| {
        RegionError::Unsupported("internal: a file plan without a directory".into())
    })?;
    let dax = plan.backing == Backing::Dax;
    if dax && devdax::is_char_device(&dir) {
        return create_on_device(spec, &device_at(&dir, spec.probe)?);
    }
    // A dax plan's directory is on a DAX mount (checked by the plan).
    let fstype = if dax { "dax" } else { check_dir(&dir, huge)? };
    // Space on the file system, before creating anything.
    if let Some(free) = fs_free_bytes(&dir)? {
        if free < size {
            return Err(no_space(&spec.host.mounts, &dir, fstype, size, free));
        }
    }
    let path = spec.name.map(|n| dir.join(object_file_name(n)));
    let denied = |target: &Path, call: String, e: rustix::io::Errno| {
        let uid = rustix::process::geteuid().as_raw();
        RegionError::Permission {
            what: format!("create {}", target.display()),
            fix: Box::new(if fstype == "hugetlbfs" {
                Fix::HugetlbfsOwner {
                    dir: dir.display().to_string(),
                    uid,
                    gid: rustix::process::getegid().as_raw(),
                }
            } else {
                Fix::MakeWritable {
                    path: dir.display().to_string(),
                }
            }),
            source: Some(SysError::Os {
                call,
                errno: e.raw_os_error(),
            }),
        }
    };
    // Unnamed (O_TMPFILE) and locked before it gets its name: nobody
    // ever sees the name without a live holder's lock. Kernels without
    // O_TMPFILE on this file system fall back to O_CREAT|O_EXCL on the
    // name, then the lock.
    let inode_dax = dax && mount_of(&spec.host.mounts, &dir).is_some_and(|m| m.is_dax_inode());
    let staging = if inode_dax { dax_staging(&dir)? } else { None };
    let tmp_dir = staging.as_ref().map_or(dir.as_path(), |s| s.0.as_path());
    let (fd, linked_by_open) = match sys::open_tmpfile(tmp_dir, spec.mode) {
        Ok(fd) => (fd, false),
        Err(e)
            if matches!(
                e.errno(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
            ) =>
        {
            let target = path.clone().unwrap_or_else(|| dir.join(temp_file_name()));
            let fd = sys::create_new(&target, spec.mode).map_err(|e| {
                match e.errno().map(rustix::io::Errno::from_raw_os_error) {
                    Some(rustix::io::Errno::EXIST) => exists(target.display().to_string()),
                    Some(en @ (rustix::io::Errno::ACCESS | rustix::io::Errno::PERM)) => {
                        denied(&target, e.call().to_owned(), en)
                    }
                    _ => RegionError::Sys(e),
                }
            })?;
            if path.is_none() {
                std::fs::remove_file(&target)
                    .map_err(|e| RegionError::io(target.display().to_string(), e))?;
            }
            (fd, path.is_some())
        }
        Err(e) if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) => {
            let target = path.clone().unwrap_or_else(|| dir.clone());
            return Err(denied(
                &target,
                e.call().to_owned(),
                rustix::io::Errno::from_raw_os_error(e.errno().unwrap_or(libc::EACCES)),
            ));
        }
        Err(e) => return Err(RegionError::Sys(e)),
    };
    drop(staging);
    let mut undo = UndoUnlink(if linked_by_open { path.clone() } else { None });
    let io = |e: rustix::io::Errno| RegionError::io(dir.display().to_string(), e.into());
    rustix::fs::fchmod(&fd, Mode::from_bits_truncate(spec.mode)).map_err(io)?;
    sys::flock(fd.as_fd(), FlockOperation::LockShared)?;
    sys::set_len(fd.as_fd(), size)?;
    if let (Some(p), false) = (&path, linked_by_open) {
        if !sys::link_tmpfile(fd.as_fd(), p)? {
            return Err(exists(p.display().to_string()));
        }
        undo = UndoUnlink(Some(p.clone()));
    }
    crate::testhook::checkpoint("name-claimed");
    let mem = if dax {
        map_dax(spec, fd.as_fd(), len, &dir, path.as_deref(), inode_dax)?
    } else if fstype == "hugetlbfs" {
        sys::MapOptions::new(len)
            .align(spec.align)
            .map(fd.as_fd())
            .map_err(|e| pool::map_refused(spec.probe, e, huge, size))?
    } else {
        // Where the pre-fault is MADV_POPULATE_WRITE, a full tmpfs is
        // an error there (turned into NoSpace by create), never SIGBUS,
        // so the pages may be allocated by the faulting threads, in
        // parallel. That wins from 2 threads: one thread's fallocate
        // allocates tmpfs pages at about 4 GB/s here, one faulting
        // thread at about 1.7 GB/s, but tmpfs serializes fallocate on
        // the inode and the mapping pass comes on top (2 GiB on 2
        // threads, six alternating runs on a quiet host: ready in
        // 0.62-0.83 s allocated by the faults, 0.78-0.95 s with
        // fallocate first). Otherwise (fewer threads, no pre-fault, or one
        // that touches) blocks are allocated now, so a full tmpfs is
        // ENOSPC here, not SIGBUS on first touch. (With huge=advise
        // fallocate would allocate base pages anyway.)
        let fault_allocates = spec.method == PrefaultMethod::PopulateWrite
            && (spec.threads >= FAULT_ALLOCATES_FROM_THREADS
                || plan.backing == Backing::Thp(ThpMode::Advise));
        let target = path.clone().unwrap_or_else(|| dir.clone());
        if !fault_allocates {
            sys::fallocate(fd.as_fd(), size).map_err(|e| match e.errno() {
                Some(libc::ENOSPC) => {
                    let free = fs_free_bytes(&dir).ok().flatten().unwrap_or(0);
                    no_space(&spec.host.mounts, &target, fstype, size, free)
                }
                _ => RegionError::Sys(e),
            })?;
        }
        let map = sys::MapOptions::new(len).map(fd.as_fd())?;
        if matches!(plan.backing, Backing::Thp(_)) {
            map.advise_hugepage()?;
        }
        map
    };
    undo.disarm();
    let linked = path.is_some();
    Ok(Made {
        mem,
        object: Object::File(RegionFile {
            path: path.unwrap_or(dir),
            fd,
            linked,
            device_align: None,
        }),
    })
}
