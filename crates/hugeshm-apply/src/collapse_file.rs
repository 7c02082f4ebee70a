//! `hugeshm collapse --path FILE`: a file of a tmpfs (a /dev/shm file, a
//! server's own tmpfs) moved onto 2 MiB pages in place, whether or not a
//! process maps it now: hugeshm maps it itself, 2 MiB-aligned, asks
//! `MADV_COLLAPSE` of each block and unmaps it. The file's pages become 2
//! MiB pages of the page cache, which every process that maps it aligned
//! then maps by PMD on its next access.
//!
//! The file is opened without following a link and without blocking
//! (`O_NOFOLLOW | O_NONBLOCK`) and must be a regular file on a tmpfs; a
//! block that holds no page is refused by the kernel and left as it is (a
//! sparse file does not grow by its holes), a partly filled one is filled
//! with zeros, which the memory check counts.

use crate::collapse::{mappers, Mapper, NotCollapsed};
use hugeshm_doctor::collapse::{host_refusal, Refusal, BLOCK};
use hugeshm_probe::Probe;
use hugeshm_sys::{MapOptions, OpenCheck, SysError};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// `statfs.f_type` of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// What `collapse --path` did.
#[derive(Debug, Clone, Serialize)]
pub struct FileCollapse {
    /// The file as given, or `sysv SHMID`.
    pub object: String,
    /// Its owner.
    pub owner_uid: u32,
    /// Its size.
    pub size_bytes: u64,
    /// The bytes it had in memory before (`st_blocks`).
    pub allocated_bytes: u64,
    /// Whole 2 MiB blocks.
    pub blocks: u64,
    /// Blocks now one 2 MiB page each.
    pub collapsed: u64,
    /// Blocks left as they were.
    pub not_collapsed: NotCollapsed,
    /// Seconds the calls took.
    pub seconds: f64,
    /// Every process that maps the file, after.
    pub mappers: Vec<Mapper>,
}

/// Why `collapse --path` did not run (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum FileCollapseError {
    /// The kernel or `shmem_enabled` refuses every collapse.
    #[error("{}", .0.message())]
    Host(Refusal),
    /// The file could not be opened as a regular file (missing, a link, a
    /// FIFO, another kind).
    #[error("{0}")]
    Open(SysError),
    /// Not on a tmpfs: only shared memory the kernel keeps in shmem can
    /// be collapsed.
    #[error(
        "{path} is not on a tmpfs: only shmem (a tmpfs file such as /dev/shm's, SysV, shared \
         anonymous memory) can be moved onto 2 MiB pages in place"
    )]
    NotTmpfs {
        /// The file.
        path: String,
    },
    /// Smaller than one 2 MiB block.
    #[error("{path} is {size} bytes: less than one 2 MiB block, nothing to collapse")]
    TooSmall {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
    },
    /// The zeros its partly filled blocks would take do not fit.
    #[error(
        "collapsing {path} may need {need} bytes (the holes of its partly filled blocks are \
         filled with zeros, and each block is copied before its pages are freed), and \
         {available} are available"
    )]
    Memory {
        /// The file.
        path: String,
        /// What it may need.
        need: u64,
        /// `MemAvailable`.
        available: u64,
    },
    /// Another user's file or SysV segment: never mapped.
    #[error(
        "{object} belongs to uid {uid}: hugeshm maps only root's and its own files and \
         segments; collapse the process that maps it (--pid)"
    )]
    Foreign {
        /// The file, or `sysv SHMID`.
        object: String,
        /// Its owner.
        uid: u32,
    },
    /// On hugetlb pages already.
    #[error("{object} is on {page_size}-byte hugetlb pages already: nothing to collapse")]
    Hugetlb {
        /// `sysv SHMID`.
        object: String,
        /// Its page size.
        page_size: u64,
    },
    /// A system call failed (mapping it, no free 2 MiB page: `ENOMEM`).
    #[error("{0}")]
    Sys(SysError),
}

impl FileCollapseError {
    /// What to do about it, where a setting refuses it.
    pub fn fix(&self) -> Option<hugeshm_fix::Fix> {
        match self {
            FileCollapseError::Host(r) => r.fix(),
            _ => None,
        }
    }
}

/// Collapses the tmpfs file at `path` (see the module's text), on the host
/// `probe` reads.
// stat's field types differ between architectures.
#[allow(clippy::unnecessary_cast)]
pub fn collapse_file(probe: &Probe, path: &Path) -> Result<FileCollapse, FileCollapseError> {
    let host = probe.host();
    if let Some(r) = host_refusal(&host) {
        return Err(FileCollapseError::Host(r));
    }
    let shown = path.display().to_string();
    let file = OpenCheck::read_write()
        .open(path)
        .map_err(FileCollapseError::Open)?;
    // Another user's file: never mapped (as a SysV segment is not).
    if ![0, rustix::process::geteuid().as_raw()].contains(&file.uid()) {
        return Err(FileCollapseError::Foreign {
            object: shown,
            uid: file.uid(),
        });
    }
    let on_tmpfs = rustix::fs::fstatfs(&file).is_ok_and(|s| s.f_type as u64 == TMPFS_MAGIC);
    if !on_tmpfs {
        return Err(FileCollapseError::NotTmpfs { path: shown });
    }
    let st = file.stat();
    let size = st.st_size as u64;
    let allocated = (st.st_blocks as u64).saturating_mul(512);
    let blocks = size / BLOCK;
    if blocks == 0 {
        return Err(FileCollapseError::TooSmall { path: shown, size });
    }
    // The most the holes of partly filled blocks can take, and one block
    // being copied.
    let need = (blocks * BLOCK).saturating_sub(allocated) + BLOCK;
    if let Some(available) = host.meminfo.as_ref().and_then(|m| m.mem_available_bytes) {
        if need > available {
            return Err(FileCollapseError::Memory {
                path: shown,
                need,
                available,
            });
        }
    }
    let map = MapOptions::new((blocks * BLOCK) as usize)
        .shared()
        .align(Some(BLOCK as usize))
        .map(&file)
        .map_err(FileCollapseError::Sys)?;
    let (collapsed, not, seconds) = collapse_blocks(&map)?;
    drop(map);
    let dev = (
        rustix::fs::major(st.st_dev as u64),
        rustix::fs::minor(st.st_dev as u64),
    );
    Ok(FileCollapse {
        object: shown,
        owner_uid: file.uid(),
        size_bytes: size,
        allocated_bytes: allocated,
        blocks,
        collapsed,
        not_collapsed: not,
        seconds,
        mappers: mappers(probe, &[(dev, st.st_ino as u64)]),
    })
}

/// [`Mapping::collapse_blocks`](hugeshm_sys::Mapping::collapse_blocks)
/// of `map` (this process's own mapping, 2 MiB-aligned): the blocks
/// collapsed, the others by cause, the seconds it took; an error that
/// stops it ends the run.
fn collapse_blocks(
    map: &hugeshm_sys::Mapping,
) -> Result<(u64, NotCollapsed, f64), FileCollapseError> {
    let t = Instant::now();
    let r = map.collapse_blocks();
    if let Some(e) = r.stopped {
        return Err(FileCollapseError::Sys(e));
    }
    let not = NotCollapsed {
        refused: r.refused,
        busy: r.busy,
        examples: r
            .examples
            .iter()
            .map(|(at, e)| (*at as u64, e.to_string()))
            .collect(),
    };
    Ok((r.collapsed, not, t.elapsed().as_secs_f64()))
}

/// Collapses SysV segment `shmid` whether or not a process has it attached
/// (a region made to be kept that waits for its server): attached here
/// 2 MiB-aligned for the call, each block with a page collapsed, detached.
/// Only a segment of root's or of the caller's (owner and creator), on
/// base pages: another user's segment is never attached.
pub fn collapse_sysv(probe: &Probe, shmid: i32) -> Result<FileCollapse, FileCollapseError> {
    let host = probe.host();
    if let Some(r) = host_refusal(&host) {
        return Err(FileCollapseError::Host(r));
    }
    let object = format!("sysv {shmid}");
    let st = hugeshm_sys::shm_stat(shmid).map_err(FileCollapseError::Open)?;
    let me = rustix::process::geteuid().as_raw();
    if ![0, me].contains(&st.uid) || ![0, me].contains(&st.cuid) {
        return Err(FileCollapseError::Foreign {
            object,
            uid: st.uid,
        });
    }
    if st.size < BLOCK {
        return Err(FileCollapseError::TooSmall {
            path: object,
            size: st.size,
        });
    }
    let map = hugeshm_sys::shm_attach_placed(shmid, Some(BLOCK as usize))
        .map_err(FileCollapseError::Sys)?;
    if map.page_size() > hugeshm_sys::base_page_size() {
        return Err(FileCollapseError::Hugetlb {
            object,
            page_size: map.page_size() as u64,
        });
    }
    let (dev, inode) = probe
        .pid(std::process::id())
        .maps()
        .ok()
        .and_then(|maps| {
            let m = maps.into_iter().find(|m| m.start == map.addr() as u64)?;
            Some(((m.dev_major, m.dev_minor), m.inode))
        })
        .unwrap_or(((0, 0), 0));
    let (collapsed, not, seconds) = collapse_blocks(&map)?;
    let blocks = (map.len() / BLOCK as usize) as u64;
    drop(map);
    Ok(FileCollapse {
        object,
        owner_uid: st.uid,
        size_bytes: st.size,
        allocated_bytes: host
            .shm
            .iter()
            .find(|s| s.shmid == shmid)
            .and_then(|s| s.rss_bytes)
            .unwrap_or(0),
        blocks,
        collapsed,
        not_collapsed: not,
        seconds,
        mappers: mappers(probe, &[(dev, inode)]),
    })
}
