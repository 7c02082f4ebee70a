//! Finding named regions again: attach, list attached processes, remove.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hugeshm_probe::{dev_major, dev_minor, Probe, Roots};
use serde::{Deserialize, Serialize};

use crate::error::RegionError;
use crate::naming::{object_file_name, sysv_key, validate_name, DEFAULT_POSIX_DIR};
use crate::region::Region;
use crate::sys::{self, ShmFlags};
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
}

impl std::fmt::Display for NamedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamedObject::Sysv { key, shmid, .. } => {
                write!(f, "SysV key {:#010x}, shmid {shmid}", *key as u32)
            }
            NamedObject::File { path, .. } => f.write_str(path),
        }
    }
}

/// Where a named region lives: name, backend and (for file backends)
/// optionally the directory the builder was given.
///
/// ```no_run
/// use hugeshm_region::{Backend, Locator};
/// # fn main() -> Result<(), hugeshm_region::RegionError> {
/// let removed = Locator::new("sga", Backend::Sysv).remove()?;
/// for obj in removed {
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
}

impl Locator {
    /// The region `name` of `backend`.
    pub fn new(name: &str, backend: Backend) -> Self {
        Locator {
            name: name.to_owned(),
            backend,
            directory: None,
        }
    }

    /// Looks only in this directory (file backends), as the builder's
    /// [`directory`](crate::RegionBuilder::directory).
    pub fn directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.directory = Some(dir.into());
        self
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

    fn unnamed_backend(&self) -> RegionError {
        RegionError::Unsupported(format!(
            "{} regions cannot be found by name: a memfd is shared by passing its fd \
             (or opening /proc/PID/fd/N of a process holding it) and vanishes with the \
             last holder; anon memory is shared with fork()ed children only",
            self.backend
        ))
    }

    /// The objects holding the region (more than one only when files of the
    /// same name sit on several hugetlbfs mounts).
    pub fn locate(&self) -> Result<Vec<NamedObject>, RegionError> {
        validate_name(&self.name)?;
        match self.backend {
            Backend::Sysv => {
                let key = sysv_key(&self.name);
                let flags = ShmFlags {
                    mode: 0,
                    ..ShmFlags::default()
                };
                match sys::shm_get(key, 0, flags) {
                    Ok(shmid) => {
                        let st = sys::shm_stat(shmid)?;
                        Ok(vec![NamedObject::Sysv {
                            key,
                            shmid,
                            size_bytes: st.size,
                            nattch: st.nattch,
                        }])
                    }
                    Err(e) if e.errno() == Some(libc::ENOENT) => Err(RegionError::NotFound {
                        name: self.name.clone(),
                        backend: self.backend,
                        looked: format!("SysV key {:#010x}", key as u32),
                    }),
                    Err(e) => Err(e.into()),
                }
            }
            Backend::Hugetlbfs | Backend::Posix => {
                let paths = self.candidate_paths();
                let found: Vec<NamedObject> = paths
                    .iter()
                    .filter_map(|p| {
                        let md = std::fs::symlink_metadata(p).ok()?;
                        md.is_file().then(|| NamedObject::File {
                            path: p.display().to_string(),
                            size_bytes: md.len(),
                        })
                    })
                    .collect();
                if found.is_empty() {
                    let looked: Vec<String> =
                        paths.iter().map(|p| p.display().to_string()).collect();
                    return Err(RegionError::NotFound {
                        name: self.name.clone(),
                        backend: self.backend,
                        looked: looked.join(", "),
                    });
                }
                Ok(found)
            }
            _ => Err(self.unnamed_backend()),
        }
    }

    /// Pids that have `obj` mapped (from every `/proc/PID/maps`; processes
    /// in other pid namespaces are not visible).
    pub fn attached_pids(&self, obj: &NamedObject) -> Result<Vec<u32>, RegionError> {
        let probe = Probe::new(Roots::default());
        let matches: Box<dyn Fn(&hugeshm_parse::maps::MapsEntry) -> bool> = match obj {
            NamedObject::Sysv { shmid, .. } => {
                let id = *shmid as u64;
                Box::new(move |e| {
                    e.inode == id
                        && e.pathname
                            .as_deref()
                            .is_some_and(|p| p.starts_with("/SYSV"))
                })
            }
            NamedObject::File { path, .. } => {
                let md = std::fs::metadata(path).map_err(|e| RegionError::io(path, e))?;
                let (maj, min, ino) = (dev_major(md.dev()), dev_minor(md.dev()), md.ino());
                Box::new(move |e| e.inode == ino && e.dev_major == maj && e.dev_minor == min)
            }
        };
        let mut pids = Vec::new();
        for pid in probe.processes()?.pids {
            // Processes come and go, and some maps are unreadable: skip them.
            if let Ok(maps) = probe.pid(pid).maps() {
                if maps.iter().any(&matches) {
                    pids.push(pid);
                }
            }
        }
        Ok(pids)
    }

    /// Attaches the region read-write.
    pub fn attach(&self) -> Result<Region, RegionError> {
        let objs = self.locate()?;
        match &objs[0] {
            NamedObject::Sysv { shmid, .. } => {
                Ok(Region::attach_shmid(*shmid)?.labelled(&self.name, self.backend))
            }
            NamedObject::File { path, .. } => {
                Ok(Region::attach_path(path)?.labelled(&self.name, self.backend))
            }
        }
    }

    /// Removes the region, refusing while any process has it attached
    /// (SysV `nattch`, or any `/proc/PID/maps` mapping the file), naming
    /// the pids. Returns what was removed.
    pub fn remove(&self) -> Result<Vec<NamedObject>, RegionError> {
        let objs = self.locate()?;
        for obj in &objs {
            let pids = self.attached_pids(obj)?;
            let nattch = match obj {
                NamedObject::Sysv { nattch, .. } => Some(*nattch),
                NamedObject::File { .. } => None,
            };
            if !pids.is_empty() || nattch.is_some_and(|n| n > 0) {
                return Err(RegionError::InUse {
                    name: self.name.clone(),
                    backend: self.backend,
                    object: obj.to_string(),
                    pids,
                    nattch,
                });
            }
        }
        for obj in &objs {
            match obj {
                NamedObject::Sysv { shmid, .. } => sys::shm_remove(*shmid)?,
                NamedObject::File { path, .. } => {
                    std::fs::remove_file(path).map_err(|e| RegionError::io(path, e))?
                }
            }
        }
        Ok(objs)
    }
}

/// Removes the named region `name` of `backend` (default locations),
/// refusing while processes are attached; see [`Locator::remove`].
pub fn remove(name: &str, backend: Backend) -> Result<Vec<NamedObject>, RegionError> {
    Locator::new(name, backend).remove()
}
