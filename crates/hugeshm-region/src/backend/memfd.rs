//! The `memfd` backend: a `memfd_create` file (`MFD_HUGETLB` for huge
//! pages), found by name through its record `/dev/shm/hugeshm-memfd.<name>`
//! (see `hugeshm_region::memfd_record`), opened by others through
//! `/proc/PID/fd/N` of a process that holds it. The memory lives while
//! some process holds the memfd; the last holder to close it removes the
//! record.
//!
//! A `fork`ed child inherits the region's descriptor, and with it the
//! parent's open file description and its shared `flock`. Dropping the
//! region in the child must not touch that lock (an exclusive probe on the
//! shared description would turn the parent's shared lock exclusive): the
//! last-holder check opens the memfd anew, closes the region's descriptor
//! and probes the lock on the new description only.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hugeshm_probe::{dev_major, dev_minor, Probe};
use hugeshm_sys::{self as sys, OpenCheck};
use rustix::fs::FlockOperation;

use super::fd::{self, OpenFd, UndoUnlink};
use super::{
    foreign_handle, BackendOps, Handle, Inspected, Made, Object, Opened, OpenedInner, Place, Spec,
};
use crate::checked_open;
use crate::error::RegionError;
use crate::header::{self, liveness, Liveness};
use crate::holders::Holders;
use crate::inspect::{classify, info_from, read_head, Classified, RegionInfo};
use crate::memfd_record::{
    self, memfd_record_path, MemfdRecord, MEMFD_RECORD_DIR, MEMFD_RECORD_PREFIX,
};
use crate::model::{Backend, Expect, NamedObject, Owner, RegionState, Trust};
use crate::naming::object_file_name;
use crate::pool::{self, Backing};

/// The `memfd` backend's operations ([`BackendOps`]).
pub(crate) struct Memfd;

/// Its one instance.
pub(crate) static MEMFD: Memfd = Memfd;

/// The record of a memfd region this process holds.
#[derive(Debug, Clone)]
struct RecordRef {
    path: PathBuf,
    generation: u64,
    dev: (u32, u32),
    ino: u64,
    /// Whose `/proc` the last-holder check scans.
    probe: Probe,
}

/// The memfd of a region this process holds (its descriptor holds a
/// shared `flock`), and, for a named region, its record.
#[derive(Debug)]
pub(crate) struct MemfdObject {
    fd: Option<OwnedFd>,
    record: Option<RecordRef>,
}

impl MemfdObject {
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd
            .as_ref()
            .expect("the descriptor lives as long as the object")
            .as_fd()
    }

    /// `/proc/PID/fd/N`: how another process opens it while this one runs.
    pub(crate) fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.fd().as_raw_fd()
        ))
    }

    pub(crate) fn record_path(&self) -> Option<&Path> {
        self.record.as_ref().map(|r| r.path.as_path())
    }

    pub(crate) fn describe(&self) -> String {
        match &self.record {
            Some(r) => format!("memfd record {}", r.path.display()),
            None => format!("memfd fd {}", self.fd().as_raw_fd()),
        }
    }

    /// Removes the record now (destroy).
    pub(crate) fn destroy(&mut self) -> Result<(), RegionError> {
        if let Some(r) = self.record.take() {
            memfd_record::remove_if(&r.path, r.generation)?;
        }
        Ok(())
    }
}

impl Drop for MemfdObject {
    /// Runs after the region is unmapped: if no other holder is left (no
    /// other lock on the memfd, no other process mapping it), the memfd
    /// dies with this descriptor, and so does its record.
    fn drop(&mut self) {
        let Some(r) = self.record.take() else {
            return;
        };
        let Some(fd) = self.fd.take() else {
            return;
        };
        // A description of our own (never the one a fork shares), then let
        // go of the region's descriptor and its lock.
        let probe_fd = OpenCheck::read()
            .follow_proc_link()
            .open(Path::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())));
        drop(fd);
        let Ok(probe_fd) = probe_fd else {
            return;
        };
        if !matches!(
            sys::flock(probe_fd.as_fd(), FlockOperation::NonBlockingLockExclusive),
            Ok(true)
        ) {
            return;
        }
        let me = std::process::id();
        if Holders::lazy(&r.probe)
            .file(r.dev, r.ino)
            .into_iter()
            .any(|p| p != me)
        {
            return;
        }
        if let Err(e) = memfd_record::remove_if(&r.path, r.generation) {
            log::warn!("removing the memfd record: {e}");
        }
    }
}

/// An inspected memfd record.
#[derive(Debug)]
pub(crate) struct Found {
    record_path: PathBuf,
    record: MemfdRecord,
}

/// Reads a record whose file is owned by the uid it names.
fn read_record(path: &Path) -> Result<Option<(MemfdRecord, Owner)>, RegionError> {
    let Some((rec, owner)) = memfd_record::read(path)? else {
        return Ok(None);
    };
    if owner.uid != rec.uid {
        return Err(RegionError::NotOurs {
            object: path.display().to_string(),
            reason: format!(
                "the record names uid {}, but its file is owned by uid {}",
                rec.uid, owner.uid
            ),
        });
    }
    Ok(Some((rec, owner)))
}

fn dev_of(md_dev: u64) -> (u32, u32) {
    (dev_major(md_dev), dev_minor(md_dev))
}

fn fd_is(path: &Path, rec: &MemfdRecord) -> bool {
    std::fs::metadata(path)
        .map(|md| dev_of(md.dev()) == rec.dev && md.ino() == rec.ino)
        .unwrap_or(false)
}

/// Opens the memfd a record describes through `/proc/PID/fd/N` of a
/// process holding it: the record's process first, then every process
/// that maps it. `Ok(None)` when nobody holds it.
fn open_memfd(
    rec: &MemfdRecord,
    holders: &Holders<'_>,
    how: OpenCheck,
) -> Result<Option<(OwnedFd, PathBuf)>, RegionError> {
    let how = how.follow_proc_link();
    let open = |p: &Path| -> Result<Option<OwnedFd>, RegionError> {
        // The process behind /proc/PID/fd/N must belong to the uid the
        // record names.
        if let Some(proc_dir) = p.parent().and_then(Path::parent) {
            if let Ok(md) = std::fs::metadata(proc_dir) {
                if md.uid() != rec.uid {
                    return Err(RegionError::NotOurs {
                        object: p.display().to_string(),
                        reason: format!(
                            "the record names uid {}, but the process holding the memfd runs as uid {}",
                            rec.uid,
                            md.uid()
                        ),
                    });
                }
            }
        }
        // The descriptor may be anything its process opened (a FIFO the
        // record's author made, whose open would wait for a writer): the
        // checked open does not wait, and takes a regular file only.
        match checked_open::open_checked(p, how)? {
            Some(f) => {
                let (fd, st) = f.into_parts();
                #[allow(clippy::unnecessary_cast)]
                let same = dev_of(st.st_dev as u64) == rec.dev && st.st_ino as u64 == rec.ino;
                Ok(same.then_some(fd))
            }
            None => Ok(None),
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

/// An owner no trust accepts, for an info without one.
const UNKNOWN: Owner = Owner {
    uid: u32::MAX,
    mode: 0o777,
};

/// The record of memfd region `name` at `path` as its directory entry
/// shows it, when it is a regular file whose owner `trust` refuses: state
/// `untrusted`, never opened or read. (Another kind of file is `foreign`,
/// from the checked open, which does not read it either.)
fn untrusted_record(name: &str, path: &Path, trust: &Trust) -> Option<RegionInfo> {
    let md = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_file())?;
    let owner = Owner {
        uid: md.uid(),
        mode: md.mode() & 0o777,
    };
    let reason = trust.refuses(owner)?;
    let object = NamedObject::File {
        path: path.display().to_string(),
        size_bytes: md.len(),
    };
    let detail = format!(
        "{reason}; hugeshm does not read another user's memfd record, nor the memfd it names"
    );
    Some(RegionInfo::untrusted(
        name,
        Backend::Memfd,
        object,
        owner,
        detail,
        Vec::new(),
        None,
        None,
        None,
    ))
}

/// The memfd region `name` from its record; `None` if there is no record.
fn inspect_record(
    name: &str,
    record_path: &Path,
    holders: &Holders<'_>,
) -> Result<Option<Inspected>, RegionError> {
    let Some((rec, owner)) = read_record(record_path)? else {
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
    let c = match open_memfd(&rec, holders, OpenCheck::read())? {
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
    let mut info = info_from(name, Backend::Memfd, object, c, pids, false, None);
    info.owner = Some(owner);
    Ok(Some(Inspected {
        info,
        handle: Handle::Memfd(Found {
            record_path: record_path.to_owned(),
            record: rec,
        }),
    }))
}

impl BackendOps for Memfd {
    fn create(&self, spec: &Spec<'_>) -> Result<Made, RegionError> {
        let plan = spec.plan;
        let size = plan.size_bytes;
        let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
        let label = match spec.name {
            Some(n) => object_file_name(n),
            None => "hugeshm".to_owned(),
        };
        let fd = sys::memfd_create(&label, huge)?;
        sys::flock(fd.as_fd(), FlockOperation::LockShared)?;
        sys::set_len(fd.as_fd(), size)?;
        // No process that opens it later can cut it short under the others.
        sys::seal_size(fd.as_fd())?;
        let (dev, ino) = fd::dev_ino(fd.as_fd(), &label)?;
        let mut undo = UndoUnlink(None);
        let record = match spec.name {
            Some(n) => {
                let path = memfd_record_path(n);
                let rec = MemfdRecord {
                    pid: std::process::id(),
                    start_ticks: spec.header.creator_start_ticks,
                    fd: fd.as_raw_fd(),
                    dev,
                    ino,
                    generation: spec.header.generation,
                    uid: spec.header.creator_uid,
                    size_bytes: size,
                };
                if !memfd_record::publish(&path, &rec, spec.mode)? {
                    return Err(RegionError::AlreadyExists {
                        name: n.to_owned(),
                        backend: Backend::Memfd,
                        object: path.display().to_string(),
                        holders: Vec::new(),
                        state: None,
                    });
                }
                undo = UndoUnlink(Some(path.clone()));
                crate::testhook::checkpoint("name-claimed");
                Some(RecordRef {
                    path,
                    generation: spec.header.generation,
                    dev,
                    ino,
                    probe: spec.probe.clone(),
                })
            }
            None => None,
        };
        let mem = sys::MapOptions::new(size as usize)
            .align(spec.align)
            .map(fd.as_fd())
            .map_err(|e| pool::map_refused(spec.probe, e, huge, size))?;
        undo.disarm();
        Ok(Made {
            mem,
            object: Object::Memfd(MemfdObject {
                fd: Some(fd),
                record,
            }),
        })
    }

    fn open(
        &self,
        place: &Place<'_>,
        holders: &Holders<'_>,
    ) -> Result<Option<Opened>, RegionError> {
        let record_path = memfd_record_path(place.name);
        let Some((rec, owner)) = read_record(&record_path)? else {
            return Ok(None);
        };
        // Another user's record is refused before anything else is said
        // about it.
        RegionError::check_trust(
            &place.trust,
            owner,
            &record_path.display().to_string(),
            place.name,
            Backend::Memfd,
        )?;
        let Some((fd, fd_path)) = open_memfd(&rec, holders, OpenCheck::read_write())? else {
            return Err(RegionError::Stale {
                name: place.name.to_owned(),
                record: record_path.display().to_string(),
                creator_pid: rec.pid,
            });
        };
        let object = format!(
            "memfd record {} ({})",
            record_path.display(),
            fd_path.display()
        );
        fd::lock_shared(fd.as_fd(), &object)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| RegionError::io(&object, e.into()))?;
        let head = read_head(fd.as_fd(), &fd_path)?;
        let creator = match header::decode(&head) {
            header::Decoded::Unwritten => fd::unwritten_creator(fd.as_fd()),
            _ => (None, Liveness::Unknown),
        };
        Ok(Some(Opened {
            object_text: object,
            size: st.st_size as u64,
            head,
            creator,
            generation: Some(rec.generation),
            owner,
            inner: OpenedInner::Fd(OpenFd {
                fd,
                path: record_path,
                probe: holders.probe().clone(),
            }),
        }))
    }

    fn map(&self, opened: Opened, exp: &Expect) -> Result<(Made, Option<u64>), RegionError> {
        let generation = opened.generation;
        let OpenedInner::Fd(OpenFd { fd, path, probe }) = opened.inner else {
            return Err(foreign_handle("memfd"));
        };
        let (mem, page) = fd::map_region_file(&fd, opened.size, exp, None)?;
        let (dev, ino) = fd::dev_ino(fd.as_fd(), &opened.object_text)?;
        let record = generation.map(|generation| RecordRef {
            path,
            generation,
            dev,
            ino,
            probe,
        });
        Ok((
            Made {
                mem,
                object: Object::Memfd(MemfdObject {
                    fd: Some(fd),
                    record,
                }),
            },
            page,
        ))
    }

    fn inspect(
        &self,
        place: &Place<'_>,
        holders: &Holders<'_>,
    ) -> Result<Vec<Inspected>, RegionError> {
        Ok(
            inspect_record(place.name, &memfd_record_path(place.name), holders)?
                .into_iter()
                .collect(),
        )
    }

    fn remove(&self, found: Inspected) -> Result<(), RegionError> {
        let Handle::Memfd(Found {
            record_path,
            record,
        }) = found.handle
        else {
            return Err(foreign_handle("memfd"));
        };
        memfd_record::remove_if(&record_path, record.generation)?;
        Ok(())
    }

    fn list(&self, holders: &Holders<'_>, trust: &Trust) -> Vec<RegionInfo> {
        let Ok(rd) = std::fs::read_dir(MEMFD_RECORD_DIR) else {
            return Vec::new();
        };
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
        let mut out = Vec::new();
        for (name, path) in records {
            // Another user's record is neither opened nor read: its owner
            // from the directory entry (a record in the sticky /dev/shm is
            // replaced only by its owner), checked again after the open.
            if let Some(info) = untrusted_record(&name, &path, trust) {
                out.push(info);
                continue;
            }
            match inspect_record(&name, &path, holders) {
                Ok(Some(ins)) if trust.refuses(ins.info.owner.unwrap_or(UNKNOWN)).is_some() => {
                    out.extend(untrusted_record(&name, &path, trust));
                }
                Ok(Some(ins)) => out.push(ins.info),
                Ok(None) => {}
                Err(RegionError::NotOurs { object, reason }) => out.push(RegionInfo::foreign(
                    name.clone(),
                    Backend::Memfd,
                    object,
                    reason,
                    None,
                )),
                Err(_) => {}
            }
        }
        out
    }

    fn looked(&self, place: &Place<'_>, _: &Probe) -> String {
        memfd_record_path(place.name).display().to_string()
    }
}
