//! Finding region files: the paths a name may have, inspecting the file
//! (or device-dax) there without attaching it (an exclusive `flock` tells
//! whether anyone holds it), and the walk that lists every region file.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hugeshm_probe::{dev_major, dev_minor, Probe};
use hugeshm_sys::{self as sys, FileKind, OpenCheck};
use rustix::fs::FlockOperation;

use super::dax::DAX_STAGING_PREFIX;
use super::dir::kernel_page_size;
use super::Found;
use crate::backend::devdax::{self, DevDax};
use crate::backend::fd::owner_of;
use crate::backend::{Handle, Inspected, Place};
use crate::checked_open;
use crate::error::RegionError;
use crate::header::{self, Decoded, Liveness};
use crate::holders::Holders;
use crate::inspect::{classify, info_from, read_head, Classified, RegionInfo};
use crate::model::{Backend, NamedObject, Owner, Trust};
use crate::naming::{object_file_name, DEFAULT_POSIX_DIR, OBJECT_PREFIX};

/// The paths a region of this name may have.
pub(super) fn candidate_paths(place: &Place<'_>, probe: &Probe) -> Vec<PathBuf> {
    let file = object_file_name(place.name);
    if let Some(d) = place.directory {
        if place.backend == Backend::Dax && devdax::is_char_device(d) {
            // The device itself (a link root gave resolved here): the
            // device checks below do not follow links.
            return vec![std::fs::canonicalize(d).unwrap_or_else(|_| d.to_owned())];
        }
        return vec![d.join(&file)];
    }
    let shm = Path::new(DEFAULT_POSIX_DIR).join(&file);
    match place.backend {
        Backend::Dax => probe
            .mounts()
            .unwrap_or_default()
            .iter()
            .filter(|m| m.may_dax())
            .map(|m| Path::new(&m.target).join(&file))
            // Devices whose header carries the name.
            .chain(
                devdax::all(probe)
                    .into_iter()
                    .filter(|d| device_name(d).as_deref() == Some(place.name))
                    .map(|d| d.path),
            )
            .collect(),
        Backend::Hugetlbfs => {
            let mut out: Vec<PathBuf> = probe
                .mounts()
                .unwrap_or_default()
                .iter()
                .filter(|m| m.is_hugetlbfs())
                .map(|m| Path::new(&m.target).join(&file))
                .collect();
            // A `try` fall-back to base pages lives in /dev/shm.
            out.push(shm);
            out
        }
        _ => vec![shm],
    }
}

/// The name of the region a device holds (`None`: free, unreadable, or
/// no hugeshm header).
fn device_name(d: &DevDax) -> Option<String> {
    let fd = devdax::open(&d.path).ok()?;
    match header::decode(&devdax::read_head(fd.as_fd(), d.align_bytes).ok()?) {
        Decoded::Valid(h) => h.name,
        _ => None,
    }
}

/// The device-dax at `path` (after `resolve`), for a backend that found a
/// character device there.
pub(super) fn device_at(path: &Path, probe: &Probe) -> Result<DevDax, RegionError> {
    devdax::resolve(path, probe)?.ok_or_else(|| RegionError::UnsuitableDirectory {
        path: path.display().to_string(),
        reason: "not a device-dax".to_owned(),
    })
}

/// Inspects the region a device-dax holds; `None` when it holds none (or,
/// with `name`, another name's). Listing (`name = None`) skips devices
/// this process cannot open. A device node whose owner `trust` refuses is
/// `untrusted`, its header unread, under the device's name.
fn inspect_device(
    name: Option<&str>,
    path: &Path,
    holders: &Holders<'_>,
    trust: &Trust,
) -> Result<Option<Inspected>, RegionError> {
    let dev = device_at(path, holders.probe())?;
    let fd = match devdax::open(path) {
        Ok(fd) => fd,
        Err(_) if name.is_none() => return Ok(None),
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
    let node_owner = owner_of(&st);
    let mut open = OpenObject {
        path: path.to_owned(),
        fd,
        st,
        exclusive: false,
        device_align: Some(dev.align_bytes),
    };
    if let Some(reason) = trust.refuses(node_owner) {
        let name = name.unwrap_or(&dev.name);
        let page = Some(dev.align_bytes);
        return Ok(Some(open.untrusted(
            name,
            Backend::Dax,
            dev.size_bytes,
            node_owner,
            reason,
            page,
            holders,
        )));
    }
    open.exclusive = sys::flock(open.fd.as_fd(), FlockOperation::NonBlockingLockExclusive)?;
    let head = devdax::read_head(open.fd.as_fd(), dev.align_bytes)?;
    let decoded = header::decode(&head);
    let region_name = match &decoded {
        Decoded::Unwritten => return Ok(None),
        Decoded::Valid(h) => h.name.clone().unwrap_or_default(),
        _ => dev.name.clone(),
    };
    if name.is_some_and(|n| n != region_name) {
        return Ok(None);
    }
    let c = classify(decoded, name, (None, Liveness::Unknown));
    let owner = devdax::owner(&head, &open.st);
    let size_bytes = devdax::object_size(&head, dev.size_bytes);
    Ok(Some(open.inspected(
        &region_name,
        Backend::Dax,
        size_bytes,
        c,
        owner,
        holders,
    )))
}

/// Inspects the region file at `path`; `None` if there is none. `name =
/// None` takes the name from the header (or the file name). A file whose
/// owner `trust` refuses is `untrusted`: neither locked nor read, with
/// the page size of its file system.
pub(super) fn inspect_path(
    name: Option<&str>,
    backend: Backend,
    path: &Path,
    holders: &Holders<'_>,
    trust: &Trust,
) -> Result<Option<Inspected>, RegionError> {
    if backend == Backend::Dax && devdax::is_device_node(path) {
        return inspect_device(name, path, holders, trust);
    }
    let Some(file) = checked_open::open_checked(path, OpenCheck::read())? else {
        return Ok(None);
    };
    let (fd, st) = file.into_parts();
    let owner = owner_of(&st);
    #[allow(clippy::unnecessary_cast)]
    let size_bytes = st.st_size as u64;
    if let Some(reason) = trust.refuses(owner) {
        let name = name
            .map(str::to_owned)
            .unwrap_or_else(|| file_name_of(path));
        let mounts = holders.probe().mounts().unwrap_or_default();
        let page = kernel_page_size(fd.as_fd(), path, &mounts);
        let open = OpenObject {
            path: path.to_owned(),
            fd,
            st,
            exclusive: false,
            device_align: None,
        };
        return Ok(Some(open.untrusted(
            &name, backend, size_bytes, owner, reason, page, holders,
        )));
    }
    let exclusive = sys::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive)?;
    let head = read_head(fd.as_fd(), path)?;
    let decoded = header::decode(&head);
    // No header yet: being created if someone holds the lock.
    let unwritten = (
        None,
        if exclusive {
            Liveness::Dead
        } else {
            Liveness::Alive
        },
    );
    let c = classify(decoded, name, unwritten);
    let name = name
        .map(str::to_owned)
        .unwrap_or_else(|| file_name_of(path));
    let open = OpenObject {
        path: path.to_owned(),
        fd,
        st,
        exclusive,
        device_align: None,
    };
    Ok(Some(
        open.inspected(&name, backend, size_bytes, c, owner, holders),
    ))
}

/// The region name in a region file's name (`hugeshm.NAME`).
fn file_name_of(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(OBJECT_PREFIX))
        .unwrap_or("")
        .to_owned()
}

/// A region file or device-dax an inspection opened (locked exclusive
/// when `exclusive`: nobody holds it), with its `fstat`.
struct OpenObject {
    path: PathBuf,
    fd: OwnedFd,
    st: rustix::fs::Stat,
    exclusive: bool,
    device_align: Option<u64>,
}

impl OpenObject {
    /// What was found: the region's info (holders by device and inode)
    /// and the handle that keeps the object open and locked.
    fn inspected(
        self,
        name: &str,
        backend: Backend,
        size_bytes: u64,
        c: Classified,
        owner: Owner,
        holders: &Holders<'_>,
    ) -> Inspected {
        let exclusive = self.exclusive;
        self.with_info(size_bytes, holders, |object, pids| {
            let mut info = info_from(name, backend, object, c, pids, !exclusive, None);
            info.owner = Some(owner);
            info
        })
    }

    /// What was found of an object whose owner the caller does not trust
    /// (`reason`): state `untrusted`, the page size `page` of its file
    /// system, its header unread.
    #[allow(clippy::too_many_arguments)]
    fn untrusted(
        self,
        name: &str,
        backend: Backend,
        size_bytes: u64,
        owner: Owner,
        reason: String,
        page: Option<u64>,
        holders: &Holders<'_>,
    ) -> Inspected {
        self.with_info(size_bytes, holders, |object, pids| {
            let detail = format!(
                "{reason}; hugeshm does not read the header of another user's file (whoever may \
                 write a file may write its header)"
            );
            RegionInfo::untrusted(name, backend, object, owner, detail, pids, None, None, page)
        })
    }

    /// The info `make` builds from the object and the pids that map it
    /// (by device and inode), with the handle that keeps the object open.
    fn with_info(
        self,
        size_bytes: u64,
        holders: &Holders<'_>,
        make: impl FnOnce(NamedObject, Vec<u32>) -> RegionInfo,
    ) -> Inspected {
        #[allow(clippy::unnecessary_cast)]
        let (dev, ino) = (self.st.st_dev as u64, self.st.st_ino as u64);
        let object = NamedObject::File {
            path: self.path.display().to_string(),
            size_bytes,
        };
        let info = make(object, holders.file((dev_major(dev), dev_minor(dev)), ino));
        Inspected {
            info,
            handle: Handle::File(Found {
                path: self.path,
                _fd: self.fd,
                exclusive: self.exclusive,
                dev,
                ino,
                device_align: self.device_align,
            }),
        }
    }
}

/// How deep [`hugeshm_files`] looks below a mount's root for regions made
/// with a directory of their own (`--dir /dev/shm/db1/x` is depth 2).
const LIST_DEPTH: usize = 3;

/// An entry [`hugeshm_files`] found: its path and, from `lstat` (the
/// directory entry, never opened), its kind and owner.
struct Entry {
    path: PathBuf,
    kind: FileKind,
    owner: Owner,
}

/// The region files (`hugeshm.*`) in `dir` and in its subdirectories on
/// the same file system, down to [`LIST_DEPTH`] levels (symbolic links
/// are not followed; another mount below is listed as its own root or
/// not at all), sorted. Entries that are not regular files (a FIFO, a
/// link someone planted) come too, with their kind, for the caller to
/// list without opening them.
fn hugeshm_files(dir: &Path) -> Vec<Entry> {
    let dev = |p: &Path| std::fs::symlink_metadata(p).ok().map(|m| m.dev());
    let Some(root_dev) = dev(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut dirs = vec![(dir.to_owned(), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.filter_map(|e| e.ok()) {
            let (Ok(kind), Some(n)) = (e.file_type(), e.file_name().to_str().map(str::to_owned))
            else {
                continue;
            };
            if kind.is_dir() {
                let path = e.path();
                if depth < LIST_DEPTH
                    && !n.starts_with(DAX_STAGING_PREFIX)
                    && dev(&path) == Some(root_dev)
                {
                    dirs.push((path, depth + 1));
                }
            } else if n.starts_with(OBJECT_PREFIX) && n.len() > OBJECT_PREFIX.len() {
                // DirEntry::metadata is lstat: the entry itself.
                let Ok(md) = e.metadata() else {
                    continue;
                };
                out.push(Entry {
                    path: e.path(),
                    kind: FileKind::of_mode(md.mode()),
                    owner: Owner {
                        uid: md.uid(),
                        mode: md.mode() & 0o777,
                    },
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Every region file (and device-dax region) on the host: the file
/// backend's [`BackendOps::list`](crate::backend::BackendOps::list); the
/// header of one whose owner `trust` refuses is not read.
pub(super) fn list(holders: &Holders<'_>, trust: &Trust) -> Vec<RegionInfo> {
    let mut dirs: Vec<(PathBuf, Backend)> =
        vec![(PathBuf::from(DEFAULT_POSIX_DIR), Backend::Posix)];
    for m in holders.probe().mounts().unwrap_or_default() {
        if m.is_hugetlbfs() {
            dirs.push((PathBuf::from(&m.target), Backend::Hugetlbfs));
        } else if m.may_dax() {
            dirs.push((PathBuf::from(&m.target), Backend::Dax));
        }
    }
    let mut out = Vec::new();
    for (dir, backend) in dirs {
        for e in hugeshm_files(&dir) {
            let name = e
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(OBJECT_PREFIX))
                .unwrap_or("")
                .to_owned();
            let device = backend == Backend::Dax && e.kind == FileKind::CharDevice;
            // Listed as found, never opened: a FIFO would hang the
            // open, a link would be followed to someone else's file.
            let found = if e.kind == FileKind::Regular || device {
                inspect_path(None, backend, &e.path, holders, trust)
            } else {
                Err(checked_open::not_a_region_file(
                    e.path.display().to_string(),
                    e.kind,
                    e.owner.uid,
                    &FileKind::Regular.to_string(),
                ))
            };
            match found {
                Ok(Some(ins)) => out.push(ins.info),
                Ok(None) => {}
                Err(RegionError::NotOurs { object, reason }) => {
                    let owner = (!device).then_some(e.owner);
                    out.push(RegionInfo::foreign(name, backend, object, reason, owner));
                }
                Err(_) => {}
            }
        }
    }
    for d in devdax::all(holders.probe()) {
        if let Ok(Some(ins)) = inspect_device(None, &d.path, holders, trust) {
            out.push(ins.info);
        }
    }
    out
}
