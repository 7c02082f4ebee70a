//! Creating a region file, in phases: the directory checked and its free
//! space; the file made unnamed (`O_TMPFILE`) in its directory, or with
//! `O_CREAT|O_EXCL` where the file system has no `O_TMPFILE`
//! ([`NewFile::open_unnamed`]); share-locked and sized before it is linked
//! under its name ([`NewFile::claim`]); then mapped ([`NewFile::map`]:
//! DAX, hugetlbfs, or tmpfs with its blocks allocated first or by the
//! pre-fault, [`fault_allocates`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

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
    let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
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
        if free < plan.size_bytes {
            return Err(no_space(
                &spec.host.mounts,
                &dir,
                fstype,
                plan.size_bytes,
                free,
            ));
        }
    }
    let file = NewFile {
        spec,
        path: spec.name.map(|n| dir.join(object_file_name(n))),
        dir,
        fstype,
    };
    // Unnamed (O_TMPFILE) and locked before it gets its name: nobody
    // ever sees the name without a live holder's lock. Kernels without
    // O_TMPFILE on this file system fall back to O_CREAT|O_EXCL on the
    // name, then the lock.
    let inode_dax = dax && mount_of(&spec.host.mounts, &file.dir).is_some_and(|m| m.is_dax_inode());
    let staging = if inode_dax {
        dax_staging(&file.dir)?
    } else {
        None
    };
    let tmp_dir = staging
        .as_ref()
        .map_or(file.dir.as_path(), |s| s.0.as_path());
    let (fd, linked_by_open) = file.open_unnamed(tmp_dir)?;
    drop(staging);
    let undo = file.claim(&fd, linked_by_open)?;
    crate::testhook::checkpoint("name-claimed");
    let mem = file.map(fd.as_fd(), inode_dax)?;
    undo.disarm();
    let linked = file.path.is_some();
    Ok(Made {
        mem,
        object: Object::File(RegionFile {
            path: file.path.unwrap_or(file.dir),
            fd,
            linked,
            device_align: None,
        }),
    })
}

/// A region file being made: its directory (on a file system of
/// `fstype`: `hugetlbfs`, `tmpfs` or `dax`) and, for a named region, its
/// path.
struct NewFile<'a> {
    spec: &'a Spec<'a>,
    dir: PathBuf,
    path: Option<PathBuf>,
    fstype: &'static str,
}

impl NewFile<'_> {
    /// The file made, not yet named (`O_TMPFILE` in `tmp_dir`: the
    /// directory, or a DAX staging directory in it); where the file
    /// system has no `O_TMPFILE`, made with `O_CREAT|O_EXCL` on its name
    /// (then it is linked already: `true`) or, unnamed, on a temporary
    /// name unlinked at once.
    fn open_unnamed(&self, tmp_dir: &Path) -> Result<(OwnedFd, bool), RegionError> {
        let (spec, dir, path) = (self.spec, &self.dir, &self.path);
        match sys::open_tmpfile(tmp_dir, spec.mode) {
            Ok(fd) => Ok((fd, false)),
            Err(e)
                if matches!(
                    e.errno(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
                ) =>
            {
                let target = path.clone().unwrap_or_else(|| dir.join(temp_file_name()));
                let fd = sys::create_new(&target, spec.mode).map_err(|e| {
                    match e.errno().map(rustix::io::Errno::from_raw_os_error) {
                        Some(rustix::io::Errno::EXIST) => self.exists(target.display().to_string()),
                        Some(en @ (rustix::io::Errno::ACCESS | rustix::io::Errno::PERM)) => {
                            denied(&target, dir, self.fstype, e.call().to_owned(), en)
                        }
                        _ => RegionError::Sys(e),
                    }
                })?;
                if path.is_none() {
                    std::fs::remove_file(&target)
                        .map_err(|e| RegionError::io(target.display().to_string(), e))?;
                }
                Ok((fd, path.is_some()))
            }
            Err(e) if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                let target = path.clone().unwrap_or_else(|| dir.clone());
                Err(denied(
                    &target,
                    dir,
                    self.fstype,
                    e.call().to_owned(),
                    rustix::io::Errno::from_raw_os_error(e.errno().unwrap_or(libc::EACCES)),
                ))
            }
            Err(e) => Err(RegionError::Sys(e)),
        }
    }

    /// The file given its mode, share-locked, sized, then linked under its
    /// name (a name taken meanwhile is `AlreadyExists`). The name is
    /// unlinked again if the region is not made after all (the
    /// [`UndoUnlink`] returned, to disarm once it is).
    fn claim(&self, fd: &OwnedFd, linked_by_open: bool) -> Result<UndoUnlink, RegionError> {
        let path = &self.path;
        let mut undo = UndoUnlink(if linked_by_open { path.clone() } else { None });
        let io = |e: rustix::io::Errno| RegionError::io(self.dir.display().to_string(), e.into());
        rustix::fs::fchmod(fd, Mode::from_bits_truncate(self.spec.mode)).map_err(io)?;
        sys::flock(fd.as_fd(), FlockOperation::LockShared)?;
        sys::set_len(fd.as_fd(), self.spec.plan.size_bytes)?;
        if let (Some(p), false) = (path, linked_by_open) {
            if !sys::link_tmpfile(fd.as_fd(), p)? {
                return Err(self.exists(p.display().to_string()));
            }
            undo = UndoUnlink(Some(p.clone()));
        }
        Ok(undo)
    }

    /// Maps the file: DAX ([`map_dax`]), hugetlbfs (the kernel's ENOMEM a
    /// pool shortfall), or tmpfs, its blocks allocated now unless the
    /// pre-fault allocates them ([`fault_allocates`]).
    fn map(&self, fd: BorrowedFd<'_>, inode_dax: bool) -> Result<sys::Mapping, RegionError> {
        let (spec, plan) = (self.spec, self.spec.plan);
        let size = plan.size_bytes;
        let len = size as usize;
        if plan.backing == Backing::Dax {
            return map_dax(spec, fd, len, &self.dir, self.path.as_deref(), inode_dax);
        }
        if self.fstype == "hugetlbfs" {
            let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
            return sys::MapOptions::new(len)
                .align(spec.align)
                .map(fd)
                .map_err(|e| pool::map_refused(spec.probe, e, huge, size));
        }
        let target = self.path.clone().unwrap_or_else(|| self.dir.clone());
        if !fault_allocates(spec.method, spec.threads, plan.backing) {
            sys::fallocate(fd, size).map_err(|e| match e.errno() {
                Some(libc::ENOSPC) => {
                    let free = fs_free_bytes(&self.dir).ok().flatten().unwrap_or(0);
                    no_space(&spec.host.mounts, &target, self.fstype, size, free)
                }
                _ => RegionError::Sys(e),
            })?;
        }
        let map = sys::MapOptions::new(len).align(spec.align).map(fd)?;
        if matches!(plan.backing, Backing::Thp(_)) {
            map.advise_hugepage()?;
        }
        Ok(map)
    }

    /// The name is another region's now.
    fn exists(&self, object: String) -> RegionError {
        RegionError::AlreadyExists {
            name: self.spec.name.unwrap_or_default().to_owned(),
            backend: self.spec.backend,
            object,
            holders: Vec::new(),
            state: None,
        }
    }
}

/// Whether a tmpfs region's blocks are allocated by the pre-fault
/// (`method` with `threads`) rather than by `fallocate` first.
///
/// Where the pre-fault is MADV_POPULATE_WRITE, a full tmpfs is
/// an error there (turned into NoSpace by create), never SIGBUS,
/// so the pages may be allocated by the faulting threads, in
/// parallel. That wins from 2 threads: one thread's fallocate
/// allocates tmpfs pages at about 4 GB/s here, one faulting
/// thread at about 1.7 GB/s, but tmpfs serializes fallocate on
/// the inode and the mapping pass comes on top (2 GiB on 2
/// threads, six alternating runs on a quiet host: ready in
/// 0.62-0.83 s allocated by the faults, 0.78-0.95 s with
/// fallocate first). Otherwise (fewer threads, no pre-fault, or one
/// that touches) blocks are allocated now, so a full tmpfs is
/// ENOSPC here, not SIGBUS on first touch. (With huge=advise
/// fallocate would allocate base pages anyway.)
fn fault_allocates(method: PrefaultMethod, threads: usize, backing: Backing) -> bool {
    method == PrefaultMethod::PopulateWrite
        && (threads >= FAULT_ALLOCATES_FROM_THREADS || backing == Backing::Thp(ThpMode::Advise))
}

/// Creating `target` in `dir` (on `fstype`) refused by the kernel: the
/// fix is to own the hugetlbfs mount, or to make the directory writable.
fn denied(
    target: &Path,
    dir: &Path,
    fstype: &str,
    call: String,
    e: rustix::io::Errno,
) -> RegionError {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_blocks_are_allocated_by_the_pre_fault_only_when_it_can_say_enospc() {
        use PrefaultMethod::{PopulateWrite, Touch};
        let base = Backing::Base;
        assert!(fault_allocates(PopulateWrite, 2, base));
        assert!(fault_allocates(PopulateWrite, 8, base));
        assert!(!fault_allocates(PopulateWrite, 1, base));
        // huge=advise: fallocate would allocate base pages.
        assert!(fault_allocates(
            PopulateWrite,
            1,
            Backing::Thp(ThpMode::Advise)
        ));
        assert!(!fault_allocates(
            PopulateWrite,
            1,
            Backing::Thp(ThpMode::Always)
        ));
        // A pre-fault that touches would be SIGBUS on a full tmpfs.
        for method in [Touch, PrefaultMethod::None] {
            assert!(!fault_allocates(method, 8, base), "{method:?}");
        }
    }

    #[test]
    fn a_refused_create_names_the_directory_to_fix() {
        let fix = |fstype| match denied(
            Path::new("/mnt/h/hugeshm.db"),
            Path::new("/mnt/h"),
            fstype,
            "openat".to_owned(),
            rustix::io::Errno::ACCESS,
        ) {
            RegionError::Permission { what, fix, source } => {
                assert_eq!(what, "create /mnt/h/hugeshm.db");
                assert_eq!(source.and_then(|s| s.errno()), Some(libc::EACCES));
                *fix
            }
            e => panic!("{e}"),
        };
        assert!(matches!(fix("hugetlbfs"), Fix::HugetlbfsOwner { dir, .. } if dir == "/mnt/h"));
        assert!(matches!(fix("tmpfs"), Fix::MakeWritable { path } if path == "/mnt/h"));
    }
}
