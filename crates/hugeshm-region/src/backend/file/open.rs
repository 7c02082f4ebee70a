//! Opening a region file (or device-dax) to attach it: opened without
//! following links, share-locked, checked to be the file the name still
//! gives, its header read; then mapped.

use std::os::fd::AsFd;
use std::path::Path;

use hugeshm_probe::Probe;
use hugeshm_sys::{FileKind, OpenCheck};

use super::find::device_at;
use super::RegionFile;
use crate::backend::devdax;
use crate::backend::fd::{self, owner_of, OpenFd};
use crate::backend::{foreign_handle, Made, Object, Opened, OpenedInner};
use crate::checked_open;
use crate::error::RegionError;
use crate::header::{self, Decoded, Liveness};
use crate::inspect::read_head;
use crate::model::{Backend, Expect, Owner};

/// Opens, locks and reads the header of the region file at `path`
/// (`backend` for messages). A reclaim that replaced the file between open
/// and lock is retried.
pub(crate) fn open_path(
    path: &Path,
    name: &str,
    backend: Backend,
    probe: &Probe,
) -> Result<Opened, RegionError> {
    if backend == Backend::Dax && devdax::is_device_node(path) {
        return open_device(path, probe);
    }
    // A memfd through /proc/PID/fd/N: a magic link, followed; anything
    // else is the region file itself, never a link to one.
    let via_proc = path.starts_with("/proc");
    let how = if via_proc {
        OpenCheck::read_write().follow_proc_link()
    } else {
        OpenCheck::read_write()
    };
    let mut tries = 0;
    let (fd, st) = loop {
        let fd = checked_open::open_checked(path, how)?
            .ok_or_else(|| RegionError::NotFound {
                name: name.to_owned(),
                backend,
                looked: path.display().to_string(),
            })?
            .into_fd();
        fd::lock_shared(fd.as_fd(), &path.display().to_string())?;
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
        // A reclaim may have replaced the file between open and lock.
        let same = rustix::fs::lstat(path)
            .map(|now| now.st_ino == st.st_ino && now.st_dev == st.st_dev)
            .unwrap_or(false);
        tries += 1;
        if same || via_proc {
            break (fd, st);
        }
        if tries >= 3 {
            return Err(RegionError::NotFound {
                name: name.to_owned(),
                backend,
                looked: format!("{} (replaced while attaching)", path.display()),
            });
        }
    };
    let head = read_head(fd.as_fd(), path)?;
    let creator = match header::decode(&head) {
        Decoded::Unwritten => fd::unwritten_creator(fd.as_fd()),
        _ => (None, Liveness::Unknown),
    };
    Ok(Opened {
        object_text: path.display().to_string(),
        size: st.st_size as u64,
        head,
        creator,
        generation: None,
        owner: if via_proc {
            // A memfd (always mode 0777) reached through /proc/PID/fd/N:
            // that link, not the mode, decides who may open it (the same
            // uid, or ptrace rights).
            Owner {
                mode: 0o600,
                ..owner_of(&st)
            }
        } else {
            owner_of(&st)
        },
        inner: OpenedInner::Fd(OpenFd {
            fd,
            path: path.to_owned(),
            probe: probe.clone(),
        }),
    })
}

/// Opens, share-locks and reads the header of a device-dax region: its
/// size is the header's (when the device holds it), its owner the
/// header's creator (see `devdax::owner`).
fn open_device(path: &Path, probe: &Probe) -> Result<Opened, RegionError> {
    let dev = device_at(path, probe)?;
    let fd = devdax::open(path)?;
    fd::lock_shared(fd.as_fd(), &path.display().to_string())?;
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
    let head = devdax::read_head(fd.as_fd(), dev.align_bytes)?;
    let creator = match header::decode(&head) {
        Decoded::Unwritten => fd::unwritten_creator(fd.as_fd()),
        _ => (None, Liveness::Unknown),
    };
    Ok(Opened {
        object_text: path.display().to_string(),
        size: devdax::object_size(&head, dev.size_bytes),
        owner: devdax::owner(&head, &st),
        head,
        creator,
        generation: None,
        inner: OpenedInner::Fd(OpenFd {
            fd,
            path: path.to_owned(),
            probe: probe.clone(),
        }),
    })
}

/// Maps an opened region file: `path` is what names it.
pub(crate) fn map_opened(opened: Opened, exp: &Expect) -> Result<(Made, Option<u64>), RegionError> {
    let OpenedInner::Fd(OpenFd { fd, path, probe }) = opened.inner else {
        return Err(foreign_handle("file"));
    };
    // What was opened decides (not the path, which may name something
    // else by now).
    let is_device =
        rustix::fs::fstat(&fd).is_ok_and(|st| FileKind::of(&st) == FileKind::CharDevice);
    let device_align = if is_device {
        Some(device_at(&path, &probe)?.align_bytes)
    } else {
        None
    };
    let (mem, page) = fd::map_region_file(&fd, opened.size, exp, device_align)?;
    Ok((
        Made {
            mem,
            object: Object::File(RegionFile {
                path,
                fd,
                linked: true,
                device_align,
            }),
        },
        page,
    ))
}
