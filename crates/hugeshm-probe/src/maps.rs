//! How a scan reads the mappings of processes: the text of
//! `/proc/PID/maps`, or the `PROCMAP_QUERY` ioctl on it (Linux 6.11),
//! which steps over the mappings of files only and names only those that
//! can be shared memory or huge pages, so the kernel formats no text.
//!
//! Both give the same [`MapsEntry`] list for a process (the candidates of
//! [`maps::parse_candidates`]); a captured `/proc` (a fixture tree) and a
//! kernel before 6.11 have only the text.

use crate::read::{io_error, read_parse_reused, ReadError};
use crate::{PidFiles, Probe};
use hugeshm_parse::maps::{self, MapsEntry, Perms};
use hugeshm_sys::{SysError, Vma, VmaQuery};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd};

/// Environment variable choosing how maps are read: `text`, `query`, or
/// `auto` (the default: the ioctl where the kernel has it, else text).
pub const MAPS_ENV: &str = "HUGESHM_MAPS";

/// How a [`Probe`] is asked to read the mappings of processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MapsSource {
    /// `PROCMAP_QUERY` where the `/proc` root is procfs and the kernel
    /// answers it, else the text.
    #[default]
    Auto,
    /// Always the text of `/proc/PID/maps` (how it was read before 6.11).
    Text,
    /// Always the ioctl: a process it fails on is reported unreadable.
    Query,
}

impl MapsSource {
    /// `auto`, `text` or `query`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(MapsSource::Auto),
            "text" => Some(MapsSource::Text),
            "query" => Some(MapsSource::Query),
            _ => None,
        }
    }

    /// From [`MAPS_ENV`]; unset or empty is `auto`. The error names the
    /// value and the ones allowed.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(MAPS_ENV) {
            Err(_) => Ok(MapsSource::Auto),
            Ok(v) if v.is_empty() => Ok(MapsSource::Auto),
            Ok(v) => MapsSource::parse(&v)
                .ok_or_else(|| format!("{MAPS_ENV}={v:?}: expected auto, text or query")),
        }
    }
}

/// How maps are read, once [`MapsSource::Auto`] is decided
/// ([`Probe::maps_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MapsRead {
    /// The text of `/proc/PID/maps`.
    Text,
    /// The `PROCMAP_QUERY` ioctl.
    Query,
}

impl MapsRead {
    /// `text` or `query`.
    pub fn as_str(self) -> &'static str {
        match self {
            MapsRead::Text => "text",
            MapsRead::Query => "query",
        }
    }
}

/// The next mapping of a file at or above `addr`, without its name.
fn next_file_vma(fd: BorrowedFd<'_>, addr: u64) -> Result<Option<Vma>, SysError> {
    hugeshm_sys::procmap_query(
        fd,
        VmaQuery {
            addr,
            covering_or_next: true,
            file_backed: true,
            ..Default::default()
        },
    )
}

/// Calls `each` for every mapping of a file of the process whose maps
/// file is `fd`, in address order; returns how many there were. A
/// process without an address space (a kernel thread; one that exited
/// meanwhile) has none, as its maps text is empty.
fn walk(fd: BorrowedFd<'_>, mut each: impl FnMut(Vma)) -> Result<u64, SysError> {
    let (mut addr, mut n) = (0, 0);
    loop {
        match next_file_vma(fd, addr) {
            Ok(Some(v)) => {
                addr = v.end;
                n += 1;
                each(v);
            }
            Ok(None) => return Ok(n),
            Err(e) if e.errno() == Some(libc::ESRCH) => return Ok(n),
            Err(e) => return Err(e),
        }
    }
}

/// The candidate mappings of one process by ioctl: every mapping of a
/// file is looked at; those that are shared or on a device with major 0
/// are asked for again with their name, and kept as the text would keep
/// them ([`maps::is_candidate`]).
fn query_candidates(fd: BorrowedFd<'_>) -> Result<Vec<MapsEntry>, SysError> {
    let mut out = Vec::new();
    let mut failed = None;
    walk(fd, |v| {
        if failed.is_some() || !(v.shared || v.dev_major == 0) {
            return;
        }
        let named = hugeshm_sys::procmap_query(
            fd,
            VmaQuery {
                addr: v.start,
                name: true,
                ..Default::default()
            },
        );
        let named = match named {
            // Unmapped between the two calls: as if the walk had come later.
            Ok(None) => return,
            Err(e) if e.errno() == Some(libc::ESRCH) => return,
            Err(e) => {
                failed = Some(e);
                return;
            }
            Ok(Some(n)) => n,
        };
        let name = named.name.as_deref().map(String::from_utf8_lossy);
        let e = maps::entry_from_fields(
            named.start,
            named.end,
            Perms::new(named.read, named.write, named.exec, named.shared),
            named.offset,
            (named.dev_major, named.dev_minor),
            named.inode,
            name.as_deref(),
        );
        if maps::is_candidate(&e) {
            out.push(e);
        }
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

impl PidFiles {
    /// The mappings of `/proc/PID/maps` that can be shared memory or huge
    /// pages ([`maps::parse_candidates`]), read the way `how` says: what a
    /// segment scan needs.
    pub fn maps_candidates(&self, how: MapsRead) -> Result<Vec<MapsEntry>, ReadError> {
        let path = self.dir.join("maps");
        match how {
            MapsRead::Text => read_parse_reused(&path, maps::parse_candidates),
            MapsRead::Query => {
                let p = || path.display().to_string();
                let file = std::fs::File::open(&path).map_err(|e| io_error(p(), e))?;
                query_candidates(file.as_fd()).map_err(|e| io_error(p(), e.into()))
            }
        }
    }
}

impl Probe {
    /// How this probe reads maps: [`MapsSource::Auto`] is the ioctl where
    /// the `/proc` root is procfs and the kernel answers it, else the text.
    pub fn maps_read(&self) -> MapsRead {
        match self.maps {
            MapsSource::Text => MapsRead::Text,
            MapsSource::Query => MapsRead::Query,
            MapsSource::Auto => {
                if hugeshm_sys::is_procfs(&self.roots.proc)
                    && hugeshm_sys::procmap_query_supported()
                {
                    MapsRead::Query
                } else {
                    MapsRead::Text
                }
            }
        }
    }

    /// Steps over the mappings of files of every listed process once by
    /// `PROCMAP_QUERY`, asking for no name: the floor of the ioctl way of
    /// reading maps (`hugeshm bench scan` shows it beside the text read).
    /// Returns the processes walked and the mappings seen; a process that
    /// vanished, cannot be opened or refuses the call is skipped.
    pub fn walk_every_maps(&self, pids: &[u32]) -> (u64, u64) {
        let mut path = self.roots.proc.clone();
        let (mut n, mut vmas) = (0u64, 0u64);
        for &pid in pids {
            path.push(pid.to_string());
            path.push("maps");
            if let Ok(f) = std::fs::File::open(&path) {
                if let Ok(k) = walk(f.as_fd(), |_| {}) {
                    n += 1;
                    vmas += k;
                }
            }
            path.pop();
            path.pop();
        }
        (n, vmas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names() {
        for s in ["auto", "text", "query"] {
            let m = MapsSource::parse(s).unwrap();
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(MapsSource::parse("ioctl"), None);
    }
}
