//! The crash interlock: what is behind a region's name, who holds it, and
//! how a region that nobody holds is reclaimed.
//!
//! ## Who holds a region
//!
//! * **sysv**: `shm_nattch > 0`, or a `/proc/PID/maps` line of the
//!   segment (`/SYSV<key>`, inode = shmid).
//! * **hugetlbfs, posix**: every [`Region`](crate::Region) holds a shared
//!   `flock` on the file for as long as it lives, the creator from before
//!   the file has a name (it is created unnamed with `O_TMPFILE`, locked,
//!   then linked in place). A probe's `LOCK_EX|LOCK_NB` fails while anyone
//!   holds it: that works across pid namespaces and needs no `/proc` scan.
//!   `/proc/PID/maps` (device and inode) names the pids.
//! * **memfd**: processes that map the memfd (device and inode from the
//!   [record](crate::memfd_record)), and the record's process while its
//!   descriptor still is that memfd.
//! * Any backend: a region whose creation has not finished (header
//!   `initializing`, or not written yet) is held while its creator runs
//!   (pid and start time; for a SysV segment without a header, `shm_cpid`).
//!
//! ## What `create` does when the name exists
//!
//! | found | default | `Reclaim::Reuse` | `Reclaim::Recreate` |
//! |---|---|---|---|
//! | held by a live process | `AlreadyExists` naming the pids | same | same |
//! | not a hugeshm region, damaged header, another name's SysV key | `NotOurs` | same | same |
//! | header of a newer layout | `NewerLayout` | same | same |
//! | `ready`, nobody holds it | `Orphaned` | attach, keep contents | destroy, create |
//! | `initializing` / no header, creator dead | `Orphaned` (crashed) | `Incomplete` | destroy, create |
//! | memfd record, nobody holds the memfd | `Orphaned` (stale) | `Stale` | replace the record, create |
//!
//! Creation claims the name atomically before it reserves memory
//! (`shmget(IPC_CREAT|IPC_EXCL)`, `linkat` of the locked `O_TMPFILE`,
//! `linkat` of the memfd record), so of many concurrent creators exactly
//! one wins and the others see a live holder: `AlreadyExists`.
//!
//! Reclaiming re-checks just before it removes anything (`shm_nattch == 0`
//! from `IPC_STAT`; the probe's exclusive `flock` is held across the
//! `unlink`; the memfd record is removed only if it is unchanged), so a
//! process that attaches meanwhile is not robbed of its region except in a
//! window of a few instructions for SysV, where the kernel offers no lock.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hugeshm_probe::{dev_major, dev_minor, Probe, Roots};
use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::error::RegionError;
use crate::header::{self, liveness, Decoded, Liveness, RegionHeader, USED_BYTES};
use crate::locate::NamedObject;
use crate::memfd_record::{self, MemfdRecord, MEMFD_RECORD_DIR, MEMFD_RECORD_PREFIX};
use crate::naming::{sysv_key, OBJECT_PREFIX};
use crate::sys::{self, ShmFlags, SysError};
use crate::types::Backend;

/// What is behind a region's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegionState {
    /// Created and verified (header `ready`).
    Ready,
    /// Being created by a live process.
    Initializing,
    /// Creation never finished and the creator is gone: it crashed (or was
    /// killed) mid-creation. Can only be recreated or removed.
    Crashed,
    /// A memfd record whose memfd nobody holds any more: the memory is
    /// gone.
    Stale,
    /// Not a hugeshm region.
    Foreign,
    /// A hugeshm region of another name whose SysV key is the same.
    Collision,
    /// A hugeshm region with a newer header layout.
    Newer,
    /// hugeshm's magic, but a header that does not add up.
    Damaged,
}

impl RegionState {
    /// `ready`, `initializing`, `crashed`, `stale`, `foreign`, `collision`,
    /// `newer`, `damaged`.
    pub fn as_str(self) -> &'static str {
        match self {
            RegionState::Ready => "ready",
            RegionState::Initializing => "initializing",
            RegionState::Crashed => "crashed",
            RegionState::Stale => "stale",
            RegionState::Foreign => "foreign",
            RegionState::Collision => "collision",
            RegionState::Newer => "newer",
            RegionState::Damaged => "damaged",
        }
    }

    /// Whether hugeshm may reclaim or remove an object in this state (when
    /// nobody holds it).
    pub fn is_reclaimable(self) -> bool {
        matches!(
            self,
            RegionState::Ready | RegionState::Crashed | RegionState::Stale | RegionState::Newer
        )
    }
}

impl std::fmt::Display for RegionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named region as found on the host, without attaching it read-write:
/// the data model of `hugeshm ls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RegionInfo {
    /// The region's name.
    pub name: String,
    /// Its backend.
    pub backend: Backend,
    /// The kernel object (or memfd record).
    pub object: NamedObject,
    /// What is there.
    pub state: RegionState,
    /// The header, when it could be read and is valid.
    pub header: Option<RegionHeader>,
    /// Why the state is what it is, for `foreign`, `collision`, `newer`,
    /// `damaged` (and a few odd cases).
    pub detail: Option<String>,
    /// Whether a live process holds it (see the [module docs](self)).
    pub held: bool,
    /// Pids that map it (or create it), ascending.
    pub holders: Vec<u32>,
    /// SysV attachment count.
    pub nattch: Option<u64>,
    /// The creator's pid, when known.
    pub creator_pid: Option<u32>,
    /// Whether the creator runs.
    pub creator: Option<Liveness>,
    /// The header's layout version (also for a `newer` one).
    pub layout_version: Option<u32>,
}

impl RegionInfo {
    /// Exists, nobody holds it, and it is hugeshm's: what a crashed or
    /// departed owner leaves behind.
    pub fn is_orphaned(&self) -> bool {
        !self.held
            && matches!(
                self.state,
                RegionState::Ready | RegionState::Crashed | RegionState::Stale
            )
    }
}

// ---------------------------------------------------------------------------
// Holders from /proc/PID/maps
// ---------------------------------------------------------------------------

/// Every process's shared-memory mappings, from one pass over
/// `/proc/*/maps` (processes whose maps cannot be read are skipped), made
/// on first use.
#[derive(Debug, Default)]
pub(crate) struct Holders {
    cell: std::cell::OnceCell<Scanned>,
}

#[derive(Debug, Default)]
struct Scanned {
    shm: HashMap<u64, Vec<u32>>,
    files: HashMap<(u32, u32, u64), Vec<u32>>,
}

impl Scanned {
    fn scan() -> Scanned {
        let probe = Probe::new(Roots::default());
        let mut h = Scanned::default();
        let Ok(list) = probe.processes() else {
            return h;
        };
        for pid in list.pids {
            let Ok(maps) = probe.pid(pid).maps() else {
                continue;
            };
            for e in maps {
                if e.inode == 0 {
                    continue;
                }
                let list = if e
                    .pathname
                    .as_deref()
                    .is_some_and(|p| p.starts_with("/SYSV"))
                {
                    h.shm.entry(e.inode).or_default()
                } else {
                    h.files
                        .entry((e.dev_major, e.dev_minor, e.inode))
                        .or_default()
                };
                if list.last() != Some(&pid) {
                    list.push(pid);
                }
            }
        }
        h
    }
}

impl Holders {
    /// Scans `/proc` when first asked.
    pub(crate) fn lazy() -> Holders {
        Holders::default()
    }

    fn get(&self) -> &Scanned {
        self.cell.get_or_init(Scanned::scan)
    }

    /// Pids that map SysV segment `shmid`.
    pub(crate) fn shm(&self, shmid: i32) -> Vec<u32> {
        self.get()
            .shm
            .get(&(shmid as u64))
            .cloned()
            .unwrap_or_default()
    }

    /// Pids that map the file `dev`/`ino`.
    pub(crate) fn file(&self, dev: (u32, u32), ino: u64) -> Vec<u32> {
        self.get()
            .files
            .get(&(dev.0, dev.1, ino))
            .cloned()
            .unwrap_or_default()
    }
}

fn dev_of(md_dev: u64) -> (u32, u32) {
    (dev_major(md_dev), dev_minor(md_dev))
}

// ---------------------------------------------------------------------------
// Inspection
// ---------------------------------------------------------------------------

/// What reclaiming an inspected region needs.
#[derive(Debug)]
pub(crate) enum Handle {
    Sysv {
        shmid: i32,
    },
    File {
        path: PathBuf,
        /// Open read-only; holds `LOCK_EX` when `exclusive`.
        _fd: OwnedFd,
        exclusive: bool,
        dev: u64,
        ino: u64,
    },
    Memfd {
        record_path: PathBuf,
        record: MemfdRecord,
    },
}

/// A region found by name, with what reclaiming it needs.
#[derive(Debug)]
pub(crate) struct Inspected {
    pub info: RegionInfo,
    pub handle: Handle,
}

pub(crate) fn permission(what: String, source: Option<SysError>) -> RegionError {
    RegionError::Permission {
        what,
        fix: "run as the user that created the region (or root), or create it with a mode \
              that grants this user access (e.g. mode 0660 and a shared group)"
            .to_owned(),
        source,
    }
}

fn errno_is(e: &SysError, errnos: &[i32]) -> bool {
    e.errno().is_some_and(|n| errnos.contains(&n))
}

/// State, header, detail and creator from the header bytes.
struct Classified {
    version: Option<u32>,
    state: RegionState,
    header: Option<RegionHeader>,
    detail: Option<String>,
    creator_pid: Option<u32>,
    creator: Option<Liveness>,
}

/// `unwritten_creator`: for a header not written yet, who is creating the
/// object and whether it runs (SysV `shm_cpid`; files: a lock holder).
fn classify(
    decoded: Decoded,
    expect_name: Option<&str>,
    unwritten_creator: (Option<u32>, Liveness),
) -> Classified {
    let plain = |state, detail: String| Classified {
        version: None,
        state,
        header: None,
        detail: Some(detail),
        creator_pid: None,
        creator: None,
    };
    match decoded {
        Decoded::Unwritten => {
            let (pid, live) = unwritten_creator;
            Classified {
                version: None,
                state: if live.maybe_alive() {
                    RegionState::Initializing
                } else {
                    RegionState::Crashed
                },
                header: None,
                detail: Some("header not written".to_owned()),
                creator_pid: pid,
                creator: Some(live),
            }
        }
        Decoded::Foreign { magic } => plain(
            RegionState::Foreign,
            format!("no hugeshm header (first bytes {magic})"),
        ),
        Decoded::Newer { version } => Classified {
            version: Some(version),
            ..plain(
                RegionState::Newer,
                format!(
                    "header layout version {version}, newer than {}",
                    header::LAYOUT_VERSION
                ),
            )
        },
        Decoded::Damaged(why) => plain(RegionState::Damaged, format!("damaged header: {why}")),
        Decoded::Valid(h) => {
            let live = h.creator_liveness();
            let pid = Some(h.creator_pid);
            if let Some(want) = expect_name {
                if h.name.as_deref() != Some(want) {
                    let other = h.name.clone().unwrap_or_default();
                    return Classified {
                        version: Some(h.layout_version),
                        state: RegionState::Collision,
                        detail: Some(format!(
                            "it holds hugeshm region {other:?}, not {want:?} (both names hash to \
                             SysV key {:#010x}); pick another name",
                            sysv_key(want) as u32
                        )),
                        header: Some(h),
                        creator_pid: pid,
                        creator: Some(live),
                    };
                }
            }
            let state = match h.state {
                header::HeaderState::Ready => RegionState::Ready,
                header::HeaderState::Initializing if live.maybe_alive() => {
                    RegionState::Initializing
                }
                header::HeaderState::Initializing => RegionState::Crashed,
            };
            Classified {
                version: Some(h.layout_version),
                state,
                header: Some(h),
                detail: None,
                creator_pid: pid,
                creator: Some(live),
            }
        }
    }
}

fn info_from(
    name: &str,
    backend: Backend,
    object: NamedObject,
    c: Classified,
    mut holders: Vec<u32>,
    other_evidence: bool,
    nattch: Option<u64>,
) -> RegionInfo {
    if c.state == RegionState::Initializing {
        if let Some(p) = c.creator_pid.filter(|p| *p != 0) {
            holders.push(p);
        }
    }
    holders.sort_unstable();
    holders.dedup();
    let held = other_evidence || !holders.is_empty() || c.state == RegionState::Initializing;
    // A region's own backend, when the header knows it (a hugetlbfs
    // region that fell back to /dev/shm is still a hugetlbfs region).
    let backend = c.header.as_ref().map(|h| h.backend).unwrap_or(backend);
    RegionInfo {
        name: name.to_owned(),
        backend,
        object,
        state: c.state,
        header: c.header,
        detail: c.detail,
        held,
        holders,
        nattch,
        creator_pid: c.creator_pid,
        creator: c.creator,
        layout_version: c.version,
    }
}

/// The SysV segment of region `name`; `None` if the key has none.
pub(crate) fn inspect_sysv(
    name: &str,
    holders: &Holders,
) -> Result<Option<Inspected>, RegionError> {
    let key = sysv_key(name);
    let flags = ShmFlags {
        mode: 0,
        ..ShmFlags::default()
    };
    let shmid = match sys::shm_get(key, 0, flags) {
        Ok(id) => id,
        Err(e) if errno_is(&e, &[libc::ENOENT]) => return Ok(None),
        Err(e) if errno_is(&e, &[libc::EACCES, libc::EPERM]) => {
            return Err(permission(
                format!(
                    "open SysV segment key {:#010x} (region {name:?})",
                    key as u32
                ),
                Some(e),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    inspect_shmid(shmid, key, Some(name), holders).map(Some)
}

fn inspect_shmid(
    shmid: i32,
    key: i32,
    expect_name: Option<&str>,
    holders: &Holders,
) -> Result<Inspected, RegionError> {
    let object_text = format!("SysV key {:#010x}, shmid {shmid}", key as u32);
    let stat = sys::shm_stat(shmid).map_err(|e| {
        if errno_is(&e, &[libc::EACCES, libc::EPERM]) {
            permission(format!("inspect {object_text}"), Some(e))
        } else {
            e.into()
        }
    })?;
    let mut buf = [0u8; USED_BYTES];
    let peeked = if stat.size >= USED_BYTES as u64 {
        sys::shm_peek(shmid, &mut buf, true).map_err(|e| {
            if errno_is(&e, &[libc::EACCES, libc::EPERM]) {
                permission(format!("read the header of {object_text}"), Some(e))
            } else {
                e.into()
            }
        })?
    } else {
        false
    };
    let decoded = if peeked {
        header::decode(&buf)
    } else {
        Decoded::Unwritten
    };
    let cpid = u32::try_from(stat.cpid).ok().filter(|p| *p != 0);
    let cpid_live = cpid.map(|p| liveness(p, None)).unwrap_or(Liveness::Unknown);
    let c = classify(decoded, expect_name, (cpid, cpid_live));
    let name = expect_name
        .map(str::to_owned)
        .or_else(|| c.header.as_ref().and_then(|h| h.name.clone()))
        .unwrap_or_else(|| format!("key-{:08x}", key as u32));
    let object = NamedObject::Sysv {
        key,
        shmid,
        size_bytes: stat.size,
        nattch: stat.nattch,
    };
    let info = info_from(
        &name,
        Backend::Sysv,
        object,
        c,
        holders.shm(shmid),
        stat.nattch > 0,
        Some(stat.nattch),
    );
    Ok(Inspected {
        info,
        handle: Handle::Sysv { shmid },
    })
}

/// Reads up to [`USED_BYTES`] from the start of a file without changing it
/// (a hole reads as zeros and allocates nothing).
pub(crate) fn read_head(
    fd: std::os::fd::BorrowedFd<'_>,
    what: &Path,
) -> Result<Vec<u8>, RegionError> {
    let mut buf = vec![0u8; USED_BYTES];
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::pread(fd, &mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(RegionError::io(what.display().to_string(), e.into())),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// The file of a `hugetlbfs` or `posix` region; `None` if there is none.
/// `name = None` takes the name from the header (or the file name).
pub(crate) fn inspect_file(
    name: Option<&str>,
    backend: Backend,
    path: &Path,
    holders: &Holders,
) -> Result<Option<Inspected>, RegionError> {
    let fd = match rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e @ (rustix::io::Errno::ACCESS | rustix::io::Errno::PERM)) => {
            return Err(permission(
                format!("open {}", path.display()),
                Some(SysError::Os {
                    call: format!("open({}, O_RDONLY)", path.display()),
                    errno: e.raw_os_error(),
                }),
            ))
        }
        Err(e) => return Err(RegionError::io(path.display().to_string(), e.into())),
    };
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| RegionError::io(path.display().to_string(), e.into()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(None);
    }
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
    let dev = dev_of(st.st_dev as u64);
    #[allow(clippy::unnecessary_cast)]
    let ino = st.st_ino as u64;
    let name = name.map(str::to_owned).unwrap_or(file_name);
    let object = NamedObject::File {
        path: path.display().to_string(),
        size_bytes: st.st_size as u64,
    };
    let info = info_from(
        &name,
        backend,
        object,
        c,
        holders.file(dev, ino),
        !exclusive,
        None,
    );
    Ok(Some(Inspected {
        info,
        handle: Handle::File {
            path: path.to_owned(),
            _fd: fd,
            exclusive,
            #[allow(clippy::unnecessary_cast)]
            dev: st.st_dev as u64,
            ino,
        },
    }))
}

fn fd_is(path: &Path, rec: &MemfdRecord) -> bool {
    std::fs::metadata(path)
        .map(|md| dev_of(md.dev()) == rec.dev && md.ino() == rec.ino)
        .unwrap_or(false)
}

/// Opens the memfd a record describes through `/proc/PID/fd/N` of a
/// process holding it: the record's process first, then every process
/// that maps it. `Ok(None)` when nobody holds it.
pub(crate) fn open_memfd(
    rec: &MemfdRecord,
    holders: &Holders,
    flags: OFlags,
) -> Result<Option<(OwnedFd, PathBuf)>, RegionError> {
    let open = |p: &Path| -> Result<Option<OwnedFd>, RegionError> {
        match rustix::fs::open(p, flags | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd)
                    .map_err(|e| RegionError::io(p.display().to_string(), e.into()))?;
                #[allow(clippy::unnecessary_cast)]
                let same = dev_of(st.st_dev as u64) == rec.dev && st.st_ino as u64 == rec.ino;
                Ok(same.then_some(fd))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e @ (rustix::io::Errno::ACCESS | rustix::io::Errno::PERM)) => Err(permission(
                format!("open the memfd through {}", p.display()),
                Some(SysError::Os {
                    call: format!("open({})", p.display()),
                    errno: e.raw_os_error(),
                }),
            )),
            Err(e) => Err(RegionError::io(p.display().to_string(), e.into())),
        }
    };
    if liveness(rec.pid, Some(rec.start_ticks)) == Liveness::Alive {
        let p = rec.fd_path();
        if let Some(fd) = open(&p)? {
            return Ok(Some((fd, p)));
        }
    }
    for pid in holders.file(rec.dev, rec.ino) {
        let dir = PathBuf::from(format!("/proc/{pid}/fd"));
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in rd.filter_map(|e| e.ok()) {
            let p = entry.path();
            if fd_is(&p, rec) {
                if let Some(fd) = open(&p)? {
                    return Ok(Some((fd, p)));
                }
            }
        }
    }
    Ok(None)
}

/// The memfd region `name` from its record; `None` if there is no record.
pub(crate) fn inspect_memfd(
    name: &str,
    record_path: &Path,
    holders: &Holders,
) -> Result<Option<Inspected>, RegionError> {
    let Some(rec) = memfd_record::read(record_path)? else {
        return Ok(None);
    };
    let mut pids = holders.file(rec.dev, rec.ino);
    let creator = liveness(rec.pid, Some(rec.start_ticks));
    let creator_holds = creator == Liveness::Alive && fd_is(&rec.fd_path(), &rec);
    if creator_holds {
        pids.push(rec.pid);
    }
    let object = NamedObject::Memfd {
        record: record_path.display().to_string(),
        pid: rec.pid,
        fd: rec.fd,
        size_bytes: rec.size_bytes,
    };
    let c = match open_memfd(&rec, holders, OFlags::RDONLY)? {
        Some((fd, p)) => {
            let head = read_head(fd.as_fd(), &p)?;
            let mut c = classify(header::decode(&head), Some(name), (Some(rec.pid), creator));
            if let Some(h) = &c.header {
                if h.generation != rec.generation {
                    c.state = RegionState::Damaged;
                    c.detail = Some(format!(
                        "the memfd's header has generation {:016x}, the record {:016x}",
                        h.generation, rec.generation
                    ));
                }
            }
            c
        }
        None if pids.is_empty() => Classified {
            version: None,
            state: RegionState::Stale,
            header: None,
            detail: Some(format!(
                "pid {} ({}) no longer holds the memfd and nobody else does",
                rec.pid,
                match creator {
                    Liveness::Alive => "alive",
                    Liveness::Dead => "exited",
                    Liveness::Unknown => "unknown",
                }
            )),
            creator_pid: Some(rec.pid),
            creator: Some(creator),
        },
        None => Classified {
            version: None,
            state: RegionState::Ready,
            header: None,
            detail: Some("mapped, but no descriptor of it found to read the header".to_owned()),
            creator_pid: Some(rec.pid),
            creator: Some(creator),
        },
    };
    let info = info_from(name, Backend::Memfd, object, c, pids, false, None);
    Ok(Some(Inspected {
        info,
        handle: Handle::Memfd {
            record_path: record_path.to_owned(),
            record: rec,
        },
    }))
}

// ---------------------------------------------------------------------------
// Reclaim
// ---------------------------------------------------------------------------

fn in_use(info: &RegionInfo, nattch: Option<u64>) -> RegionError {
    RegionError::InUse {
        name: info.name.clone(),
        backend: info.backend,
        object: info.object.to_string(),
        pids: info.holders.clone(),
        nattch,
    }
}

/// Removes an inspected region nobody holds, re-checking first. An object
/// that vanished meanwhile is not an error; one that was replaced is
/// `AlreadyExists` (without holders: the caller looks again).
pub(crate) fn remove_unheld(ins: Inspected) -> Result<(), RegionError> {
    let Inspected { info, handle } = ins;
    if info.held {
        return Err(in_use(&info, info.nattch));
    }
    if !info.state.is_reclaimable() && info.state != RegionState::Initializing {
        return Err(RegionError::NotOurs {
            object: info.object.to_string(),
            reason: info.detail.clone().unwrap_or_default(),
        });
    }
    let gone = |e: &SysError| errno_is(e, &[libc::EINVAL, libc::EIDRM]);
    match handle {
        Handle::Sysv { shmid } => {
            let st = match sys::shm_stat(shmid) {
                Ok(st) => st,
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            if st.nattch > 0 {
                return Err(in_use(&info, Some(st.nattch)));
            }
            match sys::shm_remove(shmid) {
                Ok(()) => Ok(()),
                Err(e) if gone(&e) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        Handle::File {
            path,
            _fd: fd,
            exclusive,
            dev,
            ino,
        } => {
            if !exclusive {
                return Err(in_use(&info, None));
            }
            // Still the file we locked? (The lock is held across the
            // unlink: an attacher that opened it meanwhile waits, then sees
            // the name gone or pointing elsewhere.)
            match std::fs::symlink_metadata(&path) {
                Ok(md) if md.dev() == dev && md.ino() == ino => {
                    std::fs::remove_file(&path)
                        .or_else(|e| {
                            if e.kind() == std::io::ErrorKind::NotFound {
                                Ok(())
                            } else {
                                Err(e)
                            }
                        })
                        .map_err(|e| RegionError::io(path.display().to_string(), e))?;
                    drop(fd);
                    Ok(())
                }
                Ok(_) => Err(RegionError::AlreadyExists {
                    name: info.name.clone(),
                    backend: info.backend,
                    object: path.display().to_string(),
                    holders: Vec::new(),
                    state: None,
                }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(RegionError::io(path.display().to_string(), e)),
            }
        }
        Handle::Memfd {
            record_path,
            record,
        } => {
            memfd_record::remove_if(&record_path, record.generation)?;
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------
// Listing
// ---------------------------------------------------------------------------

fn hugeshm_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(OBJECT_PREFIX) && n.len() > OBJECT_PREFIX.len())
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Every hugeshm region on the host: SysV segments with a hugeshm header
/// (each segment with resident memory is attached read-only for a moment
/// to read its first bytes; segments this user cannot read are skipped),
/// `hugeshm.*` files in `/dev/shm` and on every hugetlbfs mount, and memfd
/// records. Includes orphans (state `crashed`, `stale`, or `ready` with
/// `held == false`). Sorted by name, then backend.
pub fn list_regions() -> Result<Vec<RegionInfo>, RegionError> {
    let holders = Holders::lazy();
    let probe = Probe::new(Roots::default());
    let mut out = Vec::new();

    let shm_text = std::fs::read_to_string("/proc/sysvipc/shm")
        .map_err(|e| RegionError::io("/proc/sysvipc/shm", e))?;
    let segments = hugeshm_parse::sysvipc_shm::parse(&shm_text).map_err(|e| {
        RegionError::io(
            "/proc/sysvipc/shm",
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        )
    })?;
    for seg in segments {
        // Named regions only; a region's header page is always resident.
        if seg.key == 0 || seg.rss_bytes == Some(0) || seg.size_bytes < USED_BYTES as u64 {
            continue;
        }
        let mut buf = [0u8; USED_BYTES];
        // Never fault in memory of another user's segment just to look.
        let own = seg.uid == rustix::process::geteuid().as_raw();
        if !matches!(sys::shm_peek(seg.shmid, &mut buf, own), Ok(true)) {
            continue;
        }
        let name = match header::decode(&buf) {
            Decoded::Valid(h) => match h.name {
                Some(n) => n,
                None => continue,
            },
            Decoded::Newer { .. } | Decoded::Damaged(_) => format!("key-{:08x}", seg.key as u32),
            Decoded::Unwritten | Decoded::Foreign { .. } => continue,
        };
        let expect = (sysv_key(&name) == seg.key).then_some(name.as_str());
        if let Ok(mut ins) = inspect_shmid(seg.shmid, seg.key, expect, &holders) {
            if expect.is_none() && ins.info.state == RegionState::Ready {
                ins.info.state = RegionState::Collision;
                ins.info.detail = Some(format!(
                    "hugeshm region {name:?} under key {:#010x}, which is not its key",
                    seg.key as u32
                ));
            }
            out.push(ins.info);
        }
    }

    let host = probe.host();
    let mut dirs: Vec<(PathBuf, Backend)> = vec![(PathBuf::from("/dev/shm"), Backend::Posix)];
    for m in host.mounts.iter().filter(|m| m.is_hugetlbfs()) {
        dirs.push((PathBuf::from(&m.target), Backend::Hugetlbfs));
    }
    for (dir, backend) in dirs {
        for path in hugeshm_files(&dir) {
            if let Ok(Some(ins)) = inspect_file(None, backend, &path, &holders) {
                out.push(ins.info);
            }
        }
    }

    if let Ok(rd) = std::fs::read_dir(MEMFD_RECORD_DIR) {
        let mut records: Vec<(String, PathBuf)> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let n = e
                    .file_name()
                    .to_str()?
                    .strip_prefix(MEMFD_RECORD_PREFIX)?
                    .to_owned();
                Some((n, e.path()))
            })
            .collect();
        records.sort();
        for (name, path) in records {
            match inspect_memfd(&name, &path, &holders) {
                Ok(Some(ins)) => out.push(ins.info),
                Ok(None) => {}
                Err(RegionError::NotOurs { object, reason }) => out.push(RegionInfo {
                    name: name.clone(),
                    backend: Backend::Memfd,
                    object: NamedObject::File {
                        path: object,
                        size_bytes: 0,
                    },
                    state: RegionState::Foreign,
                    header: None,
                    detail: Some(reason),
                    held: false,
                    holders: Vec::new(),
                    nattch: None,
                    creator_pid: None,
                    creator: None,
                    layout_version: None,
                }),
                Err(_) => {}
            }
        }
    }
    out.sort_by(|a, b| (&a.name, a.backend.as_str()).cmp(&(&b.name, b.backend.as_str())));
    Ok(out)
}
