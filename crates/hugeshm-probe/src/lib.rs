//! The live reader: reads the kernel's files under a `/proc` root and a `/sys`
//! root and hands their text to `hugeshm-parse`.
//!
//! Both roots are parameters, so every command runs the same on the real host
//! and on a captured fixture tree:
//!
//! ```no_run
//! use hugeshm_probe::{Probe, Roots};
//! let probe = Probe::new(Roots::from_env());
//! let host = probe.host();
//! for pool in &host.pools {
//!     println!("{} B pages: {} free", pool.page_size_bytes, pool.free);
//! }
//! for problem in &host.problems {
//!     eprintln!("could not read {}: {}", problem.path, problem.reason);
//! }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cgroup;
mod file_dax;
mod host;
pub mod jvm;
mod kubepods;
mod maps;
pub mod mariadb;
mod named_file;
pub mod option_files;
mod persisted;
mod pmem;
pub mod postgres;
mod process;
mod read;
mod run_records;
mod sysv_maps;
mod users;

pub use cgroup::{HugetlbCgroup, HugetlbCgroupLevel, HugetlbCgroupSize};
pub use file_dax::{FileDax, FileDaxReader, SysFileDax};
pub use host::{DemoteSize, HostSnapshot, NodeInfo, NodePool, Sysctls, ThpState};
pub use kubepods::{Kubepods, KubepodsSize};
pub use maps::{MapsRead, MapsSource, MAPS_ENV};
pub use named_file::{read_named, NamedFile, NamedFileError};
pub use persisted::{Persisted, PersistedValue};
pub use pmem::{DaxDevice, MemoryTier, Namespace, PmemSnapshot};
pub use process::{
    dev_major, dev_minor, FsUsage, ListedFile, MountFile, MountListing, PidFiles, ProcessList,
    MAX_MOUNT_ENTRIES, MAX_PASSED_OVER, PAGEMAP_FULL_READ_BYTES, PAGEMAP_SAMPLE_WINDOWS,
};
pub use read::{Problem, ProblemKind, ReadError};
pub use run_records::RunRecordFile;
pub use sysv_maps::{SysvAttachments, SysvMapping};
pub use users::Users;

use std::path::{Path, PathBuf};

/// Environment variable naming the `/proc` root (default `/proc`).
pub const PROC_ROOT_ENV: &str = "HUGESHM_PROC_ROOT";
/// Environment variable naming the `/sys` root (default `/sys`).
pub const SYS_ROOT_ENV: &str = "HUGESHM_SYS_ROOT";

/// Environment variable naming the root under which mounts are browsed (default `/`).
pub const FS_ROOT_ENV: &str = "HUGESHM_FS_ROOT";

/// Where `/proc` and `/sys` are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The `/proc` root.
    pub proc: PathBuf,
    /// The `/sys` root.
    pub sys: PathBuf,
    /// The file-system root under which mounts listed in `/proc/mounts` are
    /// browsed (`/`; a fixture's `fs/`).
    pub fs: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
            fs: PathBuf::from("/"),
        }
    }
}

impl Roots {
    /// Roots from `HUGESHM_PROC_ROOT` / `HUGESHM_SYS_ROOT`, else `/proc` and `/sys`.
    pub fn from_env() -> Self {
        let get = |k: &str, d: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(d))
        };
        Roots {
            proc: get(PROC_ROOT_ENV, "/proc"),
            sys: get(SYS_ROOT_ENV, "/sys"),
            fs: get(FS_ROOT_ENV, "/"),
        }
    }

    /// A fixture tree holding `proc/` and `sys/`.
    pub fn fixture(dir: &Path) -> Self {
        Roots {
            proc: dir.join("proc"),
            sys: dir.join("sys"),
            fs: dir.join("fs"),
        }
    }

    /// Whether these are the real `/proc` and `/sys` (so pids are live processes).
    pub fn is_live(&self) -> bool {
        self.proc == Path::new("/proc")
            && self.sys == Path::new("/sys")
            && self.fs == Path::new("/")
    }
}

/// A reader over one pair of roots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// The roots read.
    pub roots: Roots,
    /// How the mappings of processes are read (see [`Probe::maps_read`]).
    pub maps: MapsSource,
    /// What reads a `dax=inode` file's own DAX state (see
    /// [`Probe::with_file_dax`]).
    file_dax: file_dax::ReaderSlot,
}

impl Probe {
    /// A reader over `roots`; maps are read as [`MAPS_ENV`] says (`auto`
    /// when it is unset or not one of `auto`, `text`, `query`: the binary
    /// checks the value and refuses a wrong one).
    pub fn new(roots: Roots) -> Self {
        Probe {
            roots,
            maps: MapsSource::from_env().unwrap_or_default(),
            file_dax: file_dax::ReaderSlot::default(),
        }
    }

    /// This reader, reading maps the way `maps` says.
    pub fn with_maps(self, maps: MapsSource) -> Self {
        Probe { maps, ..self }
    }

    /// This reader, reading a mapped file's own DAX state (on a `dax=inode`
    /// mount) with `reader`: a system call this crate does not make. Without
    /// one, that state is unknown.
    pub fn with_file_dax(self, reader: std::sync::Arc<dyn FileDaxReader>) -> Self {
        Probe {
            file_dax: file_dax::ReaderSlot(Some(reader)),
            ..self
        }
    }

    /// The reader of a file's own DAX state, if this probe was given one.
    pub fn file_dax_reader(&self) -> Option<&dyn FileDaxReader> {
        self.file_dax.0.as_deref()
    }

    /// Path of a file under the `/proc` root (`rel` without the leading `/proc/`).
    pub fn proc_path(&self, rel: &str) -> PathBuf {
        self.roots.proc.join(rel)
    }

    /// Path of a file under the `/sys` root (`rel` without the leading `/sys/`).
    pub fn sys_path(&self, rel: &str) -> PathBuf {
        self.roots.sys.join(rel)
    }
}
