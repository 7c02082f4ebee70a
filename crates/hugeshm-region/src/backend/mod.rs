//! The backends: one module per kind of kernel object a region can be,
//! each owning everything about its object behind one trait,
//! [`BackendOps`] (found for a [`Backend`] by [`ops`]): **create** (claim
//! the name, reserve the memory, map it), **open** for attach (find it,
//! read its header bytes) and **map** once the header is checked,
//! **inspect** (state and holders without attaching), **remove** (an
//! object nobody holds), **list** (every region of the backend on the
//! host) and **destroy** (of a region this process holds, through
//! [`Object`]).
//!
//! | module | backends | object |
//! |---|---|---|
//! | [`sysv`] | `sysv` | System V segment, key from the name |
//! | [`file`] | `hugetlbfs`, `posix`, `dax` | a file on hugetlbfs, tmpfs or a DAX file system; for `dax` also a device-dax ([`devdax`]) |
//! | [`memfd`] | `memfd` | a memfd and its record in `/dev/shm` |
//! | [`anon`] | `anon` | shared anonymous memory |
//!
//! What the backends decide is policy-free: which header to accept, what to
//! do with an orphan and how to pre-fault are `attach`'s and `create`'s.

pub(crate) mod anon;
pub(crate) mod devdax;
mod fd;
pub(crate) mod file;
pub(crate) mod memfd;
pub(crate) mod sysv;

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use hugeshm_probe::{HostSnapshot, Probe};
use hugeshm_sys::Mapping;

use crate::error::RegionError;
use crate::header::{Liveness, RegionHeader};
use crate::holders::Holders;
use crate::inspect::RegionInfo;
use crate::model::{Backend, Expect, Owner, PrefaultMethod, Trust};
use crate::pool::Plan;

/// What `create` asks a backend for.
pub(crate) struct Spec<'a> {
    /// The name (`None`: anonymous).
    pub name: Option<&'a str>,
    /// The backend asked for.
    pub backend: Backend,
    /// Page size, size, backing, directory.
    pub plan: &'a Plan,
    /// Permission bits.
    pub mode: u32,
    /// The address alignment for page-table sharing, when it applies.
    pub align: Option<usize>,
    /// How the region will be pre-faulted.
    pub method: PrefaultMethod,
    /// With how many threads.
    pub threads: usize,
    /// The header that will be written (creator, generation).
    pub header: &'a RegionHeader,
    /// `only`, `try` or `off`: for `dax`, whether `MAP_SYNC` is required,
    /// tried, or not asked for.
    pub policy: crate::model::Policy,
    /// The host the plan was made from.
    pub host: &'a HostSnapshot,
    /// The reader of that host (for a fresh look after a refusal).
    pub probe: &'a Probe,
}

/// Where a named region is looked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    /// The name.
    pub name: &'a str,
    /// The backend.
    pub backend: Backend,
    /// The directory a file backend was told to use.
    pub directory: Option<&'a Path>,
    /// Whether to map for page-table sharing (1 GiB-aligned) where it
    /// applies.
    pub pmd_sharing: bool,
    /// Whose objects the caller accepts.
    pub trust: Trust,
}

/// A mapped region object: what a [`Region`](crate::Region) is made of.
pub(crate) struct Made {
    /// The mapping.
    pub mem: Mapping,
    /// The kernel object behind it.
    pub object: Object,
}

/// An object opened for attach, its header bytes read but not checked.
pub(crate) struct Opened {
    /// The object, for messages.
    pub object_text: String,
    /// Its size in bytes.
    pub size: u64,
    /// The first header bytes.
    pub head: Vec<u8>,
    /// For a header not written yet: who is creating it, and whether that
    /// process runs.
    pub creator: (Option<u32>, Liveness),
    /// The generation a memfd record promises the header has.
    pub generation: Option<u64>,
    /// Who owns the object (a memfd: its record, checked against the
    /// process holding the memfd), and its mode.
    pub owner: Owner,
    /// What the backend needs to map it.
    pub(crate) inner: OpenedInner,
}

/// The backend-specific half of [`Opened`].
pub(crate) enum OpenedInner {
    /// A SysV segment, attached already (its header is read from memory).
    Sysv(Box<Made>),
    /// A region file or memfd, open and share-locked.
    Fd(fd::OpenFd),
}

/// The kernel object behind a region this process holds.
#[derive(Debug)]
pub(crate) enum Object {
    /// A System V segment.
    Sysv(sysv::Segment),
    /// A hugetlbfs or tmpfs file.
    File(file::RegionFile),
    /// A memfd.
    Memfd(memfd::MemfdObject),
    /// Shared anonymous memory.
    Anon,
}

impl Object {
    /// Removes the object's name (SysV `IPC_RMID`, unlink, the memfd
    /// record); the memory goes with the last mapping. An object someone
    /// else removed already is not an error.
    pub(crate) fn destroy(&mut self) -> Result<(), RegionError> {
        match self {
            Object::Sysv(s) => s.destroy(),
            Object::File(f) => f.destroy(),
            Object::Memfd(m) => m.destroy(),
            Object::Anon => Ok(()),
        }
    }

    /// The object, for messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Object::Sysv(s) => s.describe(),
            Object::File(f) => f.path.display().to_string(),
            Object::Memfd(m) => m.describe(),
            Object::Anon => "anonymous mapping".to_owned(),
        }
    }

    /// The descriptor of a file or memfd region.
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Object::File(f) => Some(f.fd()),
            Object::Memfd(m) => Some(m.fd()),
            _ => None,
        }
    }

    /// The path another process can open.
    pub(crate) fn path(&self) -> Option<PathBuf> {
        match self {
            Object::File(f) => f.linked.then(|| f.path.clone()),
            Object::Memfd(m) => Some(m.proc_path()),
            _ => None,
        }
    }

    /// SysV shmid and key.
    pub(crate) fn sysv(&self) -> Option<(i32, i32)> {
        match self {
            Object::Sysv(s) => Some((s.shmid, s.key)),
            _ => None,
        }
    }

    /// The record of a named memfd region.
    pub(crate) fn memfd_record(&self) -> Option<&Path> {
        match self {
            Object::Memfd(m) => m.record_path(),
            _ => None,
        }
    }

    /// Bytes the kernel has allocated to the object, whoever faulted them
    /// (`st_blocks` of its file: a file or memfd's own, a SysV segment's
    /// through `/proc/self/map_files`, which needs CAP_SYS_ADMIN); `None`
    /// where that cannot be read.
    pub(crate) fn allocated_bytes(&self, mem: &Mapping) -> Option<u64> {
        let st = match self {
            // A device-dax region is the device's memory, all of it there.
            Object::File(f) if f.device_align.is_some() => return Some(mem.len() as u64),
            Object::Sysv(_) => {
                let link = format!(
                    "/proc/self/map_files/{:x}-{:x}",
                    mem.addr(),
                    mem.addr() + mem.len()
                );
                rustix::fs::stat(link.as_str()).ok()?
            }
            other => rustix::fs::fstat(other.fd()?).ok()?,
        };
        #[allow(clippy::unnecessary_cast)]
        Some(st.st_blocks as u64 * 512)
    }

    /// Device and inode of a file or memfd region.
    pub(crate) fn dev_ino(&self) -> Option<((u32, u32), u64)> {
        self.fd().and_then(|fd| fd::dev_ino(fd, "region").ok())
    }
}

/// A region found by name, with what removing it needs.
#[derive(Debug)]
pub(crate) struct Inspected {
    /// What was found.
    pub info: RegionInfo,
    /// The backend's handle on it.
    pub(crate) handle: Handle,
}

/// A backend's handle on an inspected object.
#[derive(Debug)]
pub(crate) enum Handle {
    /// A SysV segment.
    Sysv(sysv::Found),
    /// A region file (open, maybe exclusively locked).
    File(file::Found),
    /// A memfd record.
    Memfd(memfd::Found),
}

/// The operations on one kind of region object (`sysv`, `file`, `memfd`,
/// `anon`): what create, attach, remove and the listing ask of a backend.
/// One static instance per module; [`ops`] picks it for a [`Backend`].
pub(crate) trait BackendOps: Sync {
    /// Claims the name, creates the object, reserves the memory and maps
    /// it. The header is not written yet.
    fn create(&self, spec: &Spec<'_>) -> Result<Made, RegionError>;
    /// Finds and opens the object of `place` and reads its header bytes;
    /// `None` when there is none.
    fn open(&self, place: &Place<'_>, holders: &Holders<'_>)
        -> Result<Option<Opened>, RegionError>;
    /// Maps an opened object whose header was checked; also returns the
    /// hugetlb page size the kernel serves it with (`None`: not hugetlb).
    fn map(&self, opened: Opened, exp: &Expect) -> Result<(Made, Option<u64>), RegionError>;
    /// Every object that carries the name, inspected.
    fn inspect(
        &self,
        place: &Place<'_>,
        holders: &Holders<'_>,
    ) -> Result<Vec<Inspected>, RegionError>;
    /// Removes an inspected object nobody holds, re-checking first.
    fn remove(&self, found: Inspected) -> Result<(), RegionError>;
    /// Every region of this kind on the host; the header of one whose
    /// owner `trust` refuses is not read (state `untrusted`).
    fn list(&self, holders: &Holders<'_>, trust: &Trust) -> Vec<RegionInfo>;
    /// Where objects of `place` are looked for (for "not found").
    fn looked(&self, place: &Place<'_>, probe: &Probe) -> String;
}

/// The operations of a backend (`file` serves `hugetlbfs`, `posix` and
/// `dax`).
pub(crate) fn ops(backend: Backend) -> &'static dyn BackendOps {
    match backend {
        Backend::Sysv => &sysv::SYSV,
        Backend::Memfd => &memfd::MEMFD,
        Backend::Hugetlbfs | Backend::Posix | Backend::Dax => &file::FILE,
        Backend::Anon => &anon::ANON,
    }
}

/// The backends whose regions can be listed, in listing order.
pub(crate) fn listable() -> [&'static dyn BackendOps; 3] {
    [sysv_ops(), &file::FILE, &memfd::MEMFD]
}

/// The SysV backend's operations.
pub(crate) fn sysv_ops() -> &'static dyn BackendOps {
    &sysv::SYSV
}

/// Removes an inspected region nobody holds, re-checking first (by its
/// backend). An object that vanished meanwhile is not an error; one that was
/// replaced is `AlreadyExists` (without holders: the caller looks again).
pub(crate) fn remove_unheld(found: Inspected) -> Result<(), RegionError> {
    let info = &found.info;
    if info.held {
        return Err(in_use(info, info.nattch));
    }
    if !info.state.is_reclaimable() && info.state != crate::model::RegionState::Initializing {
        return Err(RegionError::NotOurs {
            object: info.object.to_string(),
            reason: info.detail.clone().unwrap_or_default(),
        });
    }
    let ops: &dyn BackendOps = match found.handle {
        Handle::Sysv(_) => &sysv::SYSV,
        Handle::File(_) => &file::FILE,
        Handle::Memfd(_) => &memfd::MEMFD,
    };
    ops.remove(found)
}

/// The inspected object is not the backend's own (an internal mix-up).
fn foreign_handle(backend: &str) -> RegionError {
    RegionError::Unsupported(format!(
        "internal: the {backend} backend was handed another backend's object"
    ))
}

/// The region is held: removing it is refused, naming the holders.
fn in_use(info: &RegionInfo, nattch: Option<u64>) -> RegionError {
    RegionError::InUse {
        name: info.name.clone(),
        backend: info.backend,
        object: info.object.to_string(),
        pids: info.holders.clone(),
        nattch,
    }
}
