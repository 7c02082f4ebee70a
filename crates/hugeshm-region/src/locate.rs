//! Finding named regions again: inspect, attach (with expectations), list
//! attached processes, remove.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hugeshm_probe::{Probe, Roots};
use serde::{Deserialize, Serialize};

use crate::error::RegionError;
use crate::interlock::{self, Holders, Inspected, RegionInfo, RegionState};
use crate::memfd_record::memfd_record_path;
use crate::naming::{object_file_name, validate_name, DEFAULT_POSIX_DIR};
use crate::region::{Expect, Region};
use crate::report::AttachReport;
use crate::sys;
use crate::types::Backend;

/// A kernel object that holds a named region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[non_exhaustive]
pub enum NamedObject {
    /// A System V segment.
    Sysv {
        /// Its key.
        key: i32,
        /// Its shmid.
        shmid: i32,
        /// Its size.
        size_bytes: u64,
        /// Current attachments.
        nattch: u64,
    },
    /// A file on hugetlbfs or tmpfs.
    File {
        /// Its path.
        path: String,
        /// Its size.
        size_bytes: u64,
    },
    /// The record of a memfd region (see [`memfd_record`](crate::memfd_record)).
    Memfd {
        /// The record file.
        record: String,
        /// The process the record names.
        pid: u32,
        /// Its descriptor of the memfd.
        fd: i32,
        /// Region size.
        size_bytes: u64,
    },
}

impl std::fmt::Display for NamedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamedObject::Sysv { key, shmid, .. } => {
                write!(f, "SysV key {:#010x}, shmid {shmid}", *key as u32)
            }
            NamedObject::File { path, .. } => f.write_str(path),
            NamedObject::Memfd {
                record, pid, fd, ..
            } => write!(f, "memfd record {record} (pid {pid}, fd {fd})"),
        }
    }
}

/// Where a named region lives, and what an attacher expects of it.
///
/// ```no_run
/// use hugeshm_region::{Backend, Locator};
/// # fn main() -> Result<(), hugeshm_region::RegionError> {
/// // Attach from any process; refuse unless it is 1 GiB on 2 MiB pages.
/// let (region, report) = Locator::new("sga", Backend::Sysv)
///     .expect_size(1 << 30)
///     .expect_page_size(2 << 20)
///     .attach_with_report()?;
/// println!("created by pid {} at {:#x}", report.header.creator_pid, report.address);
/// region.close()?;
/// // Remove it once nobody holds it.
/// for obj in Locator::new("sga", Backend::Sysv).remove()? {
///     println!("removed {obj}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locator {
    name: String,
    backend: Backend,
    directory: Option<PathBuf>,
    expect_size: Option<u64>,
    expect_page_size: Option<u64>,
    pmd_sharing: bool,
}

impl Locator {
    /// The region `name` of `backend`.
    pub fn new(name: &str, backend: Backend) -> Self {
        Locator {
            name: name.to_owned(),
            backend,
            directory: None,
            expect_size: None,
            expect_page_size: None,
            pmd_sharing: true,
        }
    }

    /// Looks only in this directory (file backends), as the builder's
    /// [`directory`](crate::RegionBuilder::directory).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.directory = Some(dir.into());
        self
    }

    /// Attach refuses a region whose size differs (the size it was created
    /// with, or the size asked for then, or that rounded up to its page
    /// size): [`RegionError::HeaderMismatch`] with both numbers.
    pub fn expect_size(mut self, bytes: u64) -> Self {
        self.expect_size = Some(bytes);
        self
    }

    /// Attach refuses a region on other pages.
    pub fn expect_page_size(mut self, bytes: u64) -> Self {
        self.expect_page_size = Some(bytes);
        self
    }

    /// Map hugetlb regions of 1 GiB or more at a 1 GiB-aligned address so
    /// page tables are shared (default true; see
    /// [`sys::PMD_SHARE_ALIGN`](crate::sys::PMD_SHARE_ALIGN)).
    pub fn pmd_sharing(mut self, on: bool) -> Self {
        self.pmd_sharing = on;
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub(crate) fn expectations(&self) -> Expect {
        Expect {
            name: Some(self.name.clone()),
            backend: Some(self.backend),
            size: self.expect_size,
            page_size: self.expect_page_size,
            pmd_sharing: self.pmd_sharing,
        }
    }

    /// The file paths a region of this name may have.
    fn candidate_paths(&self) -> Vec<PathBuf> {
        let file = object_file_name(&self.name);
        if let Some(d) = &self.directory {
            return vec![d.join(&file)];
        }
        match self.backend {
            Backend::Posix => vec![Path::new(DEFAULT_POSIX_DIR).join(&file)],
            Backend::Hugetlbfs => {
                let host = Probe::new(Roots::default()).host();
                let mut out: Vec<PathBuf> = host
                    .mounts
                    .iter()
                    .filter(|m| m.is_hugetlbfs())
                    .map(|m| Path::new(&m.target).join(&file))
                    .collect();
                // A `try` fall-back to base pages lives in /dev/shm.
                out.push(Path::new(DEFAULT_POSIX_DIR).join(&file));
                out
            }
            _ => Vec::new(),
        }
    }

    fn anon_backend(&self) -> RegionError {
        RegionError::Unsupported(format!(
            "{} regions cannot be found by name: anon memory is shared with fork()ed \
             children only",
            self.backend
        ))
    }

    fn not_found(&self, looked: String) -> RegionError {
        RegionError::NotFound {
            name: self.name.clone(),
            backend: self.backend,
            looked,
        }
    }

    fn looked(&self) -> String {
        match self.backend {
            Backend::Sysv => format!(
                "SysV key {:#010x}",
                crate::naming::sysv_key(&self.name) as u32
            ),
            Backend::Memfd => memfd_record_path(&self.name).display().to_string(),
            _ => self
                .candidate_paths()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Every object that carries the name (more than one only when files
    /// of the name sit on several hugetlbfs mounts), inspected.
    pub(crate) fn inspect_all(&self, holders: &Holders) -> Result<Vec<Inspected>, RegionError> {
        validate_name(&self.name)?;
        match self.backend {
            Backend::Sysv => Ok(interlock::inspect_sysv(&self.name, holders)?
                .into_iter()
                .collect()),
            Backend::Hugetlbfs | Backend::Posix => {
                let mut out = Vec::new();
                for p in self.candidate_paths() {
                    if let Some(i) =
                        interlock::inspect_file(Some(&self.name), self.backend, &p, holders)?
                    {
                        out.push(i);
                    }
                }
                Ok(out)
            }
            Backend::Memfd => {
                Ok(
                    interlock::inspect_memfd(&self.name, &memfd_record_path(&self.name), holders)?
                        .into_iter()
                        .collect(),
                )
            }
            Backend::Anon => Err(self.anon_backend()),
        }
    }

    /// The region as found (state, header, holders) without attaching it
    /// read-write; [`RegionError::NotFound`] if there is none.
    pub fn inspect(&self) -> Result<RegionInfo, RegionError> {
        let holders = Holders::lazy();
        self.inspect_all(&holders)?
            .into_iter()
            .next()
            .map(|i| i.info)
            .ok_or_else(|| self.not_found(self.looked()))
    }

    /// The objects holding the region.
    pub fn locate(&self) -> Result<Vec<NamedObject>, RegionError> {
        let holders = Holders::lazy();
        let found: Vec<NamedObject> = self
            .inspect_all(&holders)?
            .into_iter()
            .map(|i| i.info.object)
            .collect();
        if found.is_empty() {
            return Err(self.not_found(self.looked()));
        }
        Ok(found)
    }

    /// Pids that have `obj` mapped (from every `/proc/PID/maps`; processes
    /// in other pid namespaces are not visible).
    pub fn attached_pids(&self, obj: &NamedObject) -> Result<Vec<u32>, RegionError> {
        let holders = Holders::lazy();
        Ok(match obj {
            NamedObject::Sysv { shmid, .. } => holders.shm(*shmid),
            NamedObject::File { path, .. } => {
                use std::os::unix::fs::MetadataExt;
                let md = std::fs::metadata(path).map_err(|e| RegionError::io(path, e))?;
                holders.file(
                    (
                        hugeshm_probe::dev_major(md.dev()),
                        hugeshm_probe::dev_minor(md.dev()),
                    ),
                    md.ino(),
                )
            }
            NamedObject::Memfd { .. } => {
                let i = self
                    .inspect_all(&holders)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| self.not_found(self.looked()))?;
                i.info.holders
            }
        })
    }

    /// Attaches the region read-write: finds it, checks its header (magic,
    /// layout version, state `ready`, name, backend, size and page size
    /// against the object and against the expectations) and maps it (1
    /// GiB-aligned for page-table sharing when it is hugetlb and 1 GiB or
    /// more).
    pub fn attach(&self) -> Result<Region, RegionError> {
        validate_name(&self.name)?;
        let exp = self.expectations();
        match self.backend {
            Backend::Sysv => {
                let key = crate::naming::sysv_key(&self.name);
                let flags = sys::ShmFlags {
                    mode: 0,
                    ..sys::ShmFlags::default()
                };
                let shmid = match sys::shm_get(key, 0, flags) {
                    Ok(id) => id,
                    Err(e) if e.errno() == Some(libc::ENOENT) => {
                        return Err(self.not_found(self.looked()))
                    }
                    Err(e) if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                        return Err(interlock::permission(
                            format!(
                                "attach SysV segment key {:#010x} (region {:?})",
                                key as u32, self.name
                            ),
                            Some(e),
                        ))
                    }
                    Err(e) => return Err(e.into()),
                };
                Region::attach_sysv(shmid, &exp)
            }
            Backend::Hugetlbfs | Backend::Posix => {
                let paths = self.candidate_paths();
                let Some(p) = paths.iter().find(|p| p.exists()) else {
                    return Err(self.not_found(self.looked()));
                };
                Region::attach_file(p, self.backend, &exp)
            }
            Backend::Memfd => {
                Region::attach_memfd(&self.name, &memfd_record_path(&self.name), &exp)
                    .and_then(|r| r.ok_or_else(|| self.not_found(self.looked())))
            }
            Backend::Anon => Err(self.anon_backend()),
        }
    }

    /// [`attach`](Locator::attach), then what it found: header, the page
    /// size `/proc/self/smaps` shows, the processes attached, the address
    /// and whether it can share page tables.
    pub fn attach_with_report(&self) -> Result<(Region, AttachReport), RegionError> {
        let t0 = Instant::now();
        let region = self.attach()?;
        let attach_seconds = t0.elapsed().as_secs_f64();
        let v = region.verify()?;
        let holders = Holders::lazy();
        let (holders_list, nattch) = match region.shmid() {
            Some(id) => (holders.shm(id), sys::shm_stat(id).ok().map(|s| s.nattch)),
            None => match region.dev_ino() {
                Some((dev, ino)) => (holders.file(dev, ino), None),
                None => (vec![std::process::id()], None),
            },
        };
        let h = region.header().clone();
        let report = AttachReport {
            name: region.name().map(str::to_owned),
            backend: region.backend(),
            object: region.object_text(),
            creator: h.creator_liveness(),
            size_bytes: region.len() as u64,
            data_offset: region.data_offset() as u64,
            data_bytes: region.data_len() as u64,
            page_size_bytes: h.page_size_bytes,
            verified_page_size_bytes: v.page_size_bytes,
            hugetlb: v.hugetlb,
            resident_bytes: v.resident_bytes,
            holders: holders_list,
            nattch,
            pid: std::process::id(),
            address: region.addr() as u64,
            aligned_for_pmd_sharing: region.aligned_for_pmd_sharing(),
            pmd_shareable_bytes: region.pmd_shareable_bytes(),
            attach_seconds,
            shmid: region.shmid(),
            sysv_key: region.sysv_key(),
            path: region.path().map(|p| p.display().to_string()),
            state: RegionState::Ready,
            header: h,
        };
        Ok((region, report))
    }

    /// Removes the region, refusing while any process holds it (SysV
    /// `nattch`, a file's lock or any `/proc/PID/maps` mapping it, a memfd's
    /// holders), naming the pids, and refusing objects that are not
    /// hugeshm regions. A memfd region's record is removed once nobody
    /// holds the memfd (the memory is already gone then). Returns what was
    /// removed.
    pub fn remove(&self) -> Result<Vec<NamedObject>, RegionError> {
        let holders = Holders::lazy();
        let found = self.inspect_all(&holders)?;
        if found.is_empty() {
            return Err(self.not_found(self.looked()));
        }
        for i in &found {
            let info = &i.info;
            match info.state {
                RegionState::Foreign | RegionState::Damaged | RegionState::Collision => {
                    return Err(RegionError::NotOurs {
                        object: info.object.to_string(),
                        reason: info.detail.clone().unwrap_or_default(),
                    })
                }
                _ if info.held => {
                    return Err(RegionError::InUse {
                        name: self.name.clone(),
                        backend: self.backend,
                        object: info.object.to_string(),
                        pids: info.holders.clone(),
                        nattch: info.nattch,
                    })
                }
                _ => {}
            }
        }
        let mut removed = Vec::new();
        for i in found {
            let obj = i.info.object.clone();
            interlock::remove_unheld(i)?;
            removed.push(obj);
        }
        Ok(removed)
    }
}

/// Removes the named region `name` of `backend` (default locations),
/// refusing while processes hold it; see [`Locator::remove`].
pub fn remove(name: &str, backend: Backend) -> Result<Vec<NamedObject>, RegionError> {
    Locator::new(name, backend).remove()
}
