//! Per-process files and the files on shared-memory mounts.

use crate::read::{io_error, read_parse, read_parse_reused, read_plain, ReadError};
use crate::Probe;
use hugeshm_parse::maps::MapsEntry;
use hugeshm_parse::numa_maps::NumaMapsEntry;
use hugeshm_parse::pid_limits::PidLimits;
use hugeshm_parse::pid_status::PidStatus;
use hugeshm_parse::smaps::SmapsEntry;
use hugeshm_parse::{maps, numa_maps, pagemap, pid_limits, pid_status, smaps};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::{DirEntryExt, FileExt};
use std::path::PathBuf;

/// Mappings up to this size have all of their pagemap read by
/// [`PidFiles::pagemap_tally`] (2 MiB of pagemap per GiB).
pub const PAGEMAP_FULL_READ_BYTES: u64 = 1 << 30;
/// Windows [`PidFiles::pagemap_tally`] reads from a larger mapping.
pub const PAGEMAP_SAMPLE_WINDOWS: u64 = 512;

/// The files of one process under the `/proc` root.
#[derive(Debug, Clone)]
pub struct PidFiles {
    /// The pid.
    pub pid: u32,
    pub(crate) dir: PathBuf,
}

impl PidFiles {
    /// `/proc/PID/status`.
    pub fn status(&self) -> Result<PidStatus, ReadError> {
        read_parse_reused(&self.dir.join("status"), pid_status::parse)
    }
    /// `/proc/PID/limits`.
    pub fn limits(&self) -> Result<PidLimits, ReadError> {
        read_parse(&self.dir.join("limits"), pid_limits::parse)
    }
    /// `/proc/PID/maps`.
    pub fn maps(&self) -> Result<Vec<MapsEntry>, ReadError> {
        read_parse(&self.dir.join("maps"), maps::parse)
    }
    /// `/proc/PID/smaps`.
    pub fn smaps(&self) -> Result<Vec<SmapsEntry>, ReadError> {
        read_parse(&self.dir.join("smaps"), smaps::parse)
    }
    /// The size of the file mapped at `start..end` (`stat` of
    /// `/proc/PID/map_files/START-END`, which needs `CAP_SYS_ADMIN` or
    /// `CAP_CHECKPOINT_RESTORE`; absent from captured trees): the whole
    /// object's length, where the mappings may show only pieces of it.
    /// Nothing is opened. `None` where it cannot be read or is not a
    /// regular file (a device-dax character device).
    pub fn mapped_file_size(&self, start: u64, end: u64) -> Option<u64> {
        let path = self.dir.join(format!("map_files/{start:x}-{end:x}"));
        let meta = std::fs::metadata(path).ok()?;
        meta.is_file().then_some(meta.len())
    }
    /// `/proc/PID/numa_maps` (absent on kernels without NUMA).
    pub fn numa_maps(&self) -> Result<Vec<NumaMapsEntry>, ReadError> {
        read_parse(&self.dir.join("numa_maps"), numa_maps::parse)
    }
    /// The `/proc/PID/pagemap` words of `pages` virtual 4 KiB pages from
    /// address `start` (one positioned read; frames read as zero without
    /// `CAP_SYS_ADMIN`). A file that ends before them (a fixture cut
    /// short) is malformed.
    pub fn pagemap(&self, start: u64, pages: usize) -> Result<Vec<pagemap::Entry>, ReadError> {
        let path = self.dir.join("pagemap");
        let p = path.display().to_string();
        let file = std::fs::File::open(&path).map_err(|e| io_error(p.clone(), e))?;
        let mut buf = vec![0u8; pages.saturating_mul(pagemap::ENTRY_BYTES)];
        let at = (start / 4096).saturating_mul(pagemap::ENTRY_BYTES as u64);
        match file.read_exact_at(&mut buf, at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ReadError::Parse(hugeshm_parse::ParseError::file(
                    &p,
                    format!(
                        "ends before the {} bytes at offset {at} (address {start:#x}, {pages} pages)",
                        buf.len()
                    ),
                )))
            }
            Err(e) => return Err(io_error(p, e)),
        }
        pagemap::parse(&p, &buf).map_err(ReadError::Parse)
    }

    /// Judges the 2 MiB windows of the mapping `start..end` (file offset
    /// `file_offset` at `start`) from its pagemap: read whole up to
    /// [`PAGEMAP_FULL_READ_BYTES`], else [`PAGEMAP_SAMPLE_WINDOWS`] windows
    /// spread over it. Returns the tally and whether it covers every page.
    pub fn pagemap_tally(
        &self,
        start: u64,
        end: u64,
        file_offset: u64,
    ) -> Result<(pagemap::Tally, bool), ReadError> {
        const M2: u64 = 2 << 20;
        let size = end.saturating_sub(start);
        if size <= PAGEMAP_FULL_READ_BYTES {
            let e = self.pagemap(start, (size / 4096) as usize)?;
            return Ok((pagemap::tally(&e, start, file_offset), true));
        }
        let first = start.div_ceil(M2) * M2;
        let windows = end.saturating_sub(first) / M2;
        let step = windows.div_ceil(PAGEMAP_SAMPLE_WINDOWS).max(1);
        let mut t = pagemap::Tally::default();
        let mut w = 0;
        while w < windows {
            let at = first + w * M2;
            let e = self.pagemap(at, pagemap::PMD_PAGES)?;
            t += pagemap::tally(&e, at, file_offset + (at - start));
            w += step;
        }
        Ok((t, false))
    }
}

/// The pids found under the `/proc` root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessList {
    /// Pids, ascending.
    pub pids: Vec<u32>,
}

/// A file found on a hugetlbfs or tmpfs mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MountFile {
    /// Its path as the host sees it (not prefixed by a fixture root).
    pub path: String,
    /// Its size (`st_size`).
    pub size_bytes: u64,
    /// Bytes allocated (`st_blocks` × 512): resident pages on hugetlbfs and tmpfs.
    pub allocated_bytes: u64,
    /// Owner uid.
    pub uid: u32,
    /// Mode bits.
    pub mode: u32,
    /// Device number (as `major:minor`, the form /proc/PID/maps uses).
    pub dev: (u32, u32),
    /// Inode.
    pub inode: u64,
}

impl Probe {
    /// The processes under the `/proc` root.
    pub fn processes(&self) -> Result<ProcessList, ReadError> {
        let rd = std::fs::read_dir(&self.roots.proc)
            .map_err(|e| io_error(self.roots.proc.display().to_string(), e))?;
        let mut pids: Vec<u32> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        Ok(ProcessList { pids })
    }

    /// `read(files of pid)` for every pid, on up to `threads` threads (each
    /// a contiguous share of `pids`; 0 = the CPUs this process may use,
    /// at most 4), in the order of `pids`. For scans that read one or two
    /// files of thousands of processes: the kernel formats those files on
    /// the reading CPU, so the work spreads over the cores.
    pub fn read_each<T: Send>(
        &self,
        pids: &[u32],
        threads: usize,
        read: impl Fn(&PidFiles) -> T + Sync,
    ) -> Vec<(u32, T)> {
        let threads = match threads {
            0 => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(4),
            n => n,
        }
        .clamp(1, pids.len().max(1));
        // Below this many processes a thread costs more than it saves.
        if threads == 1 || pids.len() < 64 {
            return pids.iter().map(|&p| (p, read(&self.pid(p)))).collect();
        }
        let read = &read;
        let chunk = pids.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let handles: Vec<_> = pids
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .map(|&p| (p, read(&self.pid(p))))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| match h.join() {
                    Ok(v) => v,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        })
    }

    /// Reads every listed process's `maps` once into one reused buffer,
    /// parsing nothing: the floor for any scan that must look at every
    /// process (`hugeshm bench scan` compares the `segments` scan with it).
    /// Returns the processes read and the bytes read; a process that
    /// vanished or cannot be read is skipped.
    pub fn read_every_maps(&self, pids: &[u32]) -> (u64, u64) {
        let mut buf = Vec::with_capacity(64 << 10);
        let mut path = self.roots.proc.clone();
        let (mut n, mut bytes) = (0u64, 0u64);
        for &pid in pids {
            path.push(pid.to_string());
            path.push("maps");
            buf.clear();
            if let Ok(k) = read_plain(&path, &mut buf) {
                n += 1;
                bytes += k as u64;
            }
            path.pop();
            path.pop();
        }
        (n, bytes)
    }

    /// The files of one process.
    pub fn pid(&self, pid: u32) -> PidFiles {
        PidFiles {
            pid,
            dir: self.roots.proc.join(pid.to_string()),
        }
    }

    /// The files under mount point `target` (its own device only, not
    /// following links), sorted by path, streamed from the directories
    /// without holding what is not kept: `listed` sees each file as its
    /// directory lists it (name, inode, no `stat` yet) and says whether to
    /// look at it; `keep` sees each looked-at file whole and says whether
    /// to keep it. What anyone can create there costs a `stat` at most, and
    /// the listing stops after [`MAX_PASSED_OVER`] entries not kept or
    /// [`MAX_MOUNT_ENTRIES`] in all ([`MountListing::cut_short`], with the
    /// file system's own counts).
    pub fn mount_files(
        &self,
        target: &str,
        listed: &mut dyn FnMut(&ListedFile<'_>) -> bool,
        keep: &mut dyn FnMut(&MountFile) -> bool,
    ) -> Result<MountListing, ReadError> {
        let base = self.roots.fs.join(target.trim_start_matches('/'));
        let top = std::fs::metadata(&base).map_err(|e| io_error(base.display().to_string(), e))?;
        let top_dev = (dev_major(top.dev()), dev_minor(top.dev()));
        let mut out = Vec::new();
        let mut cut_short = false;
        let mut entries = 0u64;
        let mut passed_over = 0u64;
        let mut stack = vec![base.clone()];
        'walk: while let Some(dir) = stack.pop() {
            let rd = match std::fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) => return Err(io_error(dir.display().to_string(), e)),
            };
            for entry in rd.filter_map(|e| e.ok()) {
                if entries >= MAX_MOUNT_ENTRIES || passed_over >= MAX_PASSED_OVER {
                    cut_short = true;
                    break 'walk;
                }
                entries += 1;
                // Counted back where the entry is kept or walked into.
                passed_over += 1;
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if !is_dir
                    && !listed(&ListedFile {
                        name: &entry.file_name(),
                        dev: top_dev,
                        inode: entry.ino(),
                    })
                {
                    continue;
                }
                // fstatat on the directory, not following a link.
                let Ok(md) = entry.metadata() else {
                    continue;
                };
                if md.dev() != top.dev() {
                    continue;
                }
                if md.is_dir() {
                    passed_over -= 1;
                    stack.push(entry.path());
                } else if md.is_file() {
                    let rel = entry
                        .path()
                        .strip_prefix(&self.roots.fs)
                        .map(|p| p.to_path_buf())
                        .unwrap_or(entry.path());
                    let f = MountFile {
                        path: format!("/{}", rel.display()).replace("//", "/"),
                        size_bytes: md.size(),
                        allocated_bytes: md.blocks().saturating_mul(512),
                        uid: md.uid(),
                        mode: md.mode(),
                        dev: top_dev,
                        inode: md.ino(),
                    };
                    if keep(&f) {
                        passed_over -= 1;
                        out.push(f);
                    }
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(MountListing {
            files: out,
            entries,
            passed_over,
            usage: if cut_short {
                rustix::fs::statvfs(&base).ok().map(|st| FsUsage {
                    used_bytes: st
                        .f_blocks
                        .saturating_sub(st.f_bfree)
                        .saturating_mul(st.f_frsize),
                    used_inodes: st.f_files.saturating_sub(st.f_ffree),
                })
            } else {
                None
            },
            cut_short,
        })
    }
}

/// The most directory entries [`Probe::mount_files`] reads under one
/// mount, kept or not.
pub const MAX_MOUNT_ENTRIES: u64 = 65_536;

/// The most entries [`Probe::mount_files`] passes over under one mount
/// (neither kept nor a directory: in `/dev/shm`, empty files and records
/// nobody maps): what anyone can create there bounds the scan's time by
/// this, not by their number (8,192 entries: a few milliseconds).
pub const MAX_PASSED_OVER: u64 = 8_192;

/// What [`Probe::mount_files`] found under a mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MountListing {
    /// The files kept, sorted by path.
    pub files: Vec<MountFile>,
    /// Directory entries read (files, directories and what else is there).
    pub entries: u64,
    /// Of those, the ones neither kept nor walked into.
    pub passed_over: u64,
    /// Whether the listing stopped at [`MAX_MOUNT_ENTRIES`] or
    /// [`MAX_PASSED_OVER`]: entries past them were not seen.
    pub cut_short: bool,
    /// Where it was cut short, what the file system says it holds in all.
    pub usage: Option<FsUsage>,
}

/// A file system's use, from `statvfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FsUsage {
    /// Bytes in use (blocks less free blocks).
    pub used_bytes: u64,
    /// Inodes in use.
    pub used_inodes: u64,
}

/// A file on a mount as its directory lists it, before any `stat`.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ListedFile<'a> {
    /// Its name in its directory.
    pub name: &'a std::ffi::OsStr,
    /// The mount's device (as `major:minor`).
    pub dev: (u32, u32),
    /// Its inode (`d_ino`).
    pub inode: u64,
}

/// Linux's `major()` of a `dev_t`.
pub fn dev_major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32
}

/// Linux's `minor()` of a `dev_t`.
pub fn dev_minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0xff)) as u32
}
