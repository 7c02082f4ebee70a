//! The `file` backend: `hugetlbfs` and `posix` regions, a file
//! `hugeshm.<name>` on a hugetlbfs mount of the page size or on tmpfs
//! (`/dev/shm`). Created unnamed (`O_TMPFILE`), share-locked, sized and
//! then linked in place, so nobody sees the name without a live holder's
//! lock; every holder keeps a shared `flock` for as long as it maps the
//! file. `dax` regions are files on a DAX file system (persistent memory),
//! allocated whole before they are mapped and mapped `MAP_SYNC`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use hugeshm_fix::Fix;
use hugeshm_parse::mounts::Mount;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{dev_major, dev_minor, Probe};
use hugeshm_sys::{self as sys, FileKind, OpenCheck, SysError};
use rustix::fs::{FlockOperation, Mode, OFlags};

use super::devdax::{self, DevDax};
use super::fd::{self, owner_of, OpenFd, UndoUnlink};
use super::{
    foreign_handle, BackendOps, Handle, Inspected, Made, Object, Opened, OpenedInner, Place, Spec,
};
use crate::checked_open;
use crate::error::RegionError;
use crate::header::{self, Decoded, Liveness};
use crate::holders::Holders;
use crate::inspect::{classify, info_from, read_head, Classified, RegionInfo};
use crate::model::{Backend, Expect, NamedObject, Owner, PrefaultMethod};
use crate::naming::{object_file_name, DEFAULT_POSIX_DIR, OBJECT_PREFIX};
use crate::pool::{self, Backing, ThpMode};
use hugeshm_parse::mounts::mount_of;

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// `statfs.f_type` of hugetlbfs.
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// Pre-fault threads from which a tmpfs region's pages are allocated by
/// the pre-fault rather than by one `fallocate`.
const FAULT_ALLOCATES_FROM_THREADS: usize = 2;

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

/// A unique name for an anonymous file region on a file system without
/// `O_TMPFILE` (unlinked right after it is opened).
fn temp_file_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "hugeshm.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn statfs_type(path: &Path) -> Result<(u64, u64), RegionError> {
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
fn check_dir(dir: &Path, huge: Option<u64>) -> Result<&'static str, RegionError> {
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
fn fs_free_bytes(dir: &Path) -> Result<Option<u64>, RegionError> {
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

fn no_space(mounts: &[Mount], path: &Path, fstype: &str, needed: u64, free: u64) -> RegionError {
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

/// The paths a region of this name may have.
fn candidate_paths(place: &Place<'_>, probe: &Probe) -> Vec<PathBuf> {
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
fn device_at(path: &Path, probe: &Probe) -> Result<DevDax, RegionError> {
    devdax::resolve(path, probe)?.ok_or_else(|| RegionError::UnsuitableDirectory {
        path: path.display().to_string(),
        reason: "not a device-dax".to_owned(),
    })
}

/// Inspects the region a device-dax holds; `None` when it holds none (or,
/// with `name`, another name's). Listing (`name = None`) skips devices
/// this process cannot open.
fn inspect_device(
    name: Option<&str>,
    path: &Path,
    holders: &Holders<'_>,
) -> Result<Option<Inspected>, RegionError> {
    let dev = device_at(path, holders.probe())?;
    let fd = match devdax::open(path) {
        Ok(fd) => fd,
        Err(_) if name.is_none() => return Ok(None),
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
    let exclusive = sys::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive)?;
    let head = devdax::read_head(fd.as_fd(), dev.align_bytes)?;
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
    let owner = devdax::owner(&head, &st);
    let size_bytes = devdax::object_size(&head, dev.size_bytes);
    let open = OpenObject {
        path: path.to_owned(),
        fd,
        st,
        exclusive,
        device_align: Some(dev.align_bytes),
    };
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
/// None` takes the name from the header (or the file name).
fn inspect_path(
    name: Option<&str>,
    backend: Backend,
    path: &Path,
    holders: &Holders<'_>,
) -> Result<Option<Inspected>, RegionError> {
    if backend == Backend::Dax && devdax::is_device_node(path) {
        return inspect_device(name, path, holders);
    }
    let Some(file) = checked_open::open_checked(path, OpenCheck::read())? else {
        return Ok(None);
    };
    let (fd, st) = file.into_parts();
    let exclusive = sys::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive)?;
    let head = read_head(fd.as_fd(), path)?;
    let decoded = header::decode(&head);
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(OBJECT_PREFIX))
        .unwrap_or("")
        .to_owned();
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
    let name = name.map(str::to_owned).unwrap_or(file_name);
    let owner = owner_of(&st);
    #[allow(clippy::unnecessary_cast)]
    let size_bytes = st.st_size as u64;
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
        #[allow(clippy::unnecessary_cast)]
        let (dev, ino) = (self.st.st_dev as u64, self.st.st_ino as u64);
        let object = NamedObject::File {
            path: self.path.display().to_string(),
            size_bytes,
        };
        let mut info = info_from(
            name,
            backend,
            object,
            c,
            holders.file((dev_major(dev), dev_minor(dev)), ino),
            !self.exclusive,
            None,
        );
        info.owner = Some(owner);
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

/// Where a `dax` region's file is created on a `dax=inode` mount. A file
/// there is DAX only with its own flag (`FS_XFLAG_DAX`), and Linux (ext4
/// and xfs) applies a flag set on a file only when its inode is next read
/// from disk, which a file held open from its creation on never is (seen
/// on 6.1: `statx` says DAX only after the last close and a new open). A
/// new file takes the flag of its directory at once, so the file is made
/// (`O_TMPFILE`) in a staging directory with the flag, `.hugeshm.dax-PID-N`
/// in the region's directory, and linked under its name there; the staging
/// directory goes as soon as the file is open.
struct DaxStaging(PathBuf);

impl Drop for DaxStaging {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.0) {
            log::warn!("cleanup: removing {}: {e}", self.0.display());
        }
    }
}

/// Name prefix of the staging directories, `.hugeshm.dax-PID-N`.
const DAX_STAGING_PREFIX: &str = ".hugeshm.dax-";

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
fn dax_staging(dir: &Path) -> Result<Option<DaxStaging>, RegionError> {
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
fn map_dax(
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
fn create_on_device(spec: &Spec<'_>, dev: &DevDax) -> Result<Made, RegionError> {
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

impl BackendOps for File {
    fn create(&self, spec: &Spec<'_>) -> Result<Made, RegionError> {
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
            if let Some(i) = inspect_path(Some(place.name), place.backend, &p, holders)? {
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

    fn list(&self, holders: &Holders<'_>) -> Vec<RegionInfo> {
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
                    inspect_path(None, backend, &e.path, holders)
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
            if let Ok(Some(ins)) = inspect_device(None, &d.path, holders) {
                out.push(ins.info);
            }
        }
        out
    }

    fn looked(&self, place: &Place<'_>, probe: &Probe) -> String {
        candidate_paths(place, probe)
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
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
