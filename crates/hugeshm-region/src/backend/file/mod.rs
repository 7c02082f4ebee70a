//! The `file` backend: `hugetlbfs` and `posix` regions, a file
//! `hugeshm.<name>` on a hugetlbfs mount of the page size or on tmpfs
//! (`/dev/shm`). Created unnamed (`O_TMPFILE`), share-locked, sized and
//! then linked in place, so nobody sees the name without a live holder's
//! lock; every holder keeps a shared `flock` for as long as it maps the
//! file. `dax` regions are files on a DAX file system (persistent memory),
//! allocated whole before they are mapped and mapped `MAP_SYNC`.
//!
//! - `mod.rs`: the backend's operations ([`BackendOps`]), the file a
//!   region holds ([`RegionFile`]) and an inspected one ([`Found`]);
//!   remove and list;
//! - `create.rs`: a new region file: unnamed, locked, sized, linked, mapped;
//! - `dax.rs`: DAX files (the staging directory with the DAX flag,
//!   allocation, `MAP_SYNC`) and regions on a device-dax;
//! - `find.rs`: the paths a name may have, inspecting what is there, the
//!   walk that lists region files;
//! - `open.rs`: opening and mapping a region file to attach it;
//! - `dir.rs`: the directory's file system, its free space, `NoSpace`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use hugeshm_probe::Probe;

use super::devdax;
use super::{foreign_handle, BackendOps, Handle, Inspected, Made, Opened, Place, Spec};
use crate::error::RegionError;
use crate::holders::Holders;
use crate::inspect::RegionInfo;
use crate::model::{Expect, Trust};

mod create;
mod dax;
mod dir;
mod find;
mod open;

pub(crate) use dir::{dir_hugetlbfs_page_size, out_of_space};
use find::{candidate_paths, inspect_path};
pub(crate) use open::{map_opened, open_path};

/// The `file` backend's operations ([`BackendOps`]).
pub(crate) struct File;

/// Its one instance.
pub(crate) static FILE: File = File;

/// The file of a region this process holds; `fd` holds a shared `flock`.
#[derive(Debug)]
pub(crate) struct RegionFile {
    /// Its path (the directory, for an unnamed file).
    pub path: PathBuf,
    fd: OwnedFd,
    /// Whether `path` names the file (named regions, until destroyed).
    pub linked: bool,
    /// A device-dax's alignment: the region is the device's, from offset
    /// 0, and destroying it clears its header instead of unlinking.
    pub device_align: Option<u64>,
}

impl RegionFile {
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn destroy(&mut self) -> Result<(), RegionError> {
        if !self.linked {
            return Ok(());
        }
        if let Some(align) = self.device_align {
            devdax::clear_head(self.fd.as_fd(), align)?;
            self.linked = false;
            return Ok(());
        }
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(RegionError::io(self.path.display().to_string(), e))
            }
            _ => {
                self.linked = false;
                Ok(())
            }
        }
    }
}

/// An inspected region file.
#[derive(Debug)]
pub(crate) struct Found {
    path: PathBuf,
    /// Open read-only; holds `LOCK_EX` when `exclusive`.
    _fd: OwnedFd,
    exclusive: bool,
    dev: u64,
    ino: u64,
    /// A device-dax's alignment (its header is cleared, not unlinked).
    device_align: Option<u64>,
}

impl BackendOps for File {
    fn create(&self, spec: &Spec<'_>) -> Result<Made, RegionError> {
        create::create(spec)
    }

    fn open(
        &self,
        place: &Place<'_>,
        holders: &Holders<'_>,
    ) -> Result<Option<Opened>, RegionError> {
        let paths = candidate_paths(place, holders.probe());
        match paths.iter().find(|p| p.exists()) {
            Some(p) => open_path(p, place.name, place.backend, holders.probe()).map(Some),
            None => Ok(None),
        }
    }

    fn map(&self, opened: Opened, exp: &Expect) -> Result<(Made, Option<u64>), RegionError> {
        map_opened(opened, exp)
    }

    fn inspect(
        &self,
        place: &Place<'_>,
        holders: &Holders<'_>,
    ) -> Result<Vec<Inspected>, RegionError> {
        let mut out = Vec::new();
        for p in candidate_paths(place, holders.probe()) {
            if let Some(i) =
                inspect_path(Some(place.name), place.backend, &p, holders, &place.trust)?
            {
                out.push(i);
            }
        }
        Ok(out)
    }

    fn remove(&self, found: Inspected) -> Result<(), RegionError> {
        let Handle::File(Found {
            path,
            _fd: fd,
            exclusive,
            dev,
            ino,
            device_align,
        }) = found.handle
        else {
            return Err(foreign_handle("file"));
        };
        if !exclusive {
            return Err(super::in_use(&found.info, None));
        }
        // A device's region goes with its header (the lock is held).
        if let Some(align) = device_align {
            return devdax::clear_head(fd.as_fd(), align);
        }
        // Still the file we locked? (The lock is held across the unlink: an
        // attacher that opened it meanwhile waits, then sees the name gone
        // or pointing elsewhere.)
        match std::fs::symlink_metadata(&path) {
            Ok(md) if md.dev() == dev && md.ino() == ino => {
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(RegionError::io(path.display().to_string(), e))
                    }
                    _ => {}
                }
                drop(fd);
                Ok(())
            }
            Ok(_) => Err(RegionError::AlreadyExists {
                name: found.info.name.clone(),
                backend: found.info.backend,
                object: path.display().to_string(),
                holders: Vec::new(),
                state: None,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RegionError::io(path.display().to_string(), e)),
        }
    }

    fn list(&self, holders: &Holders<'_>, trust: &Trust) -> Vec<RegionInfo> {
        find::list(holders, trust)
    }

    fn looked(&self, place: &Place<'_>, probe: &Probe) -> String {
        candidate_paths(place, probe)
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
