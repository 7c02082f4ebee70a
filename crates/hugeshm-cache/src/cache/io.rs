//! The data file: opening and mapping it, reading a block in, writing a
//! dirty one back (stripe lock, then content lock: [`crate::lock`]), the
//! checkpoint.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Cache, Direct};
use crate::error::{Bound, CacheError};
use crate::layout::state::{DIRTY, VALID};
use crate::lock::{self, try_write_lock, unlock_header, write_lock, write_unlock, STRIPE};

/// Maps the whole data file shared, at a 2 MiB-aligned address (so a DAX
/// file system can serve it with 2 MiB faults).
pub(super) fn map_data(
    file: &File,
    path: &Path,
    blocks: u64,
    block_size: usize,
) -> Result<Direct, CacheError> {
    let len = usize::try_from(blocks * block_size as u64).map_err(|_| {
        CacheError::Config(format!(
            "the data file {} is too large to map",
            path.display()
        ))
    })?;
    let map = hugeshm_sys::MapOptions::new(len)
        .align(2 << 20)
        .map(file.as_fd())?;
    let dax = hugeshm_sys::is_dax_file(file.as_fd())?;
    Ok(Direct { map, dax })
}

/// Opens the data file; with its length, from `fstat` of what was opened
/// (a regular file: the length of anything else says nothing).
pub(super) fn open_data(path: &Path) -> Result<(File, u64), CacheError> {
    let io = |op, source| CacheError::Io {
        op,
        path: path.to_owned(),
        block: 0,
        offset: 0,
        bytes: 0,
        source,
    };
    // Through the checked open: it often lives in /var/tmp, so a link
    // there is not followed and a FIFO is refused, never waited on; the
    // length is fstat's of what was opened (a regular file).
    let file = hugeshm_sys::OpenCheck::read_write()
        .open(path)
        .map_err(|e| io("open", e.into()))?;
    let len = file.size();
    Ok((File::from(file.into_fd()), len))
}

/// Creates a new data file (mode 0600; an existing name, a symlink
/// included, is an error: `O_EXCL`) of `blocks` blocks of `block_size`
/// bytes, each filled by `init(block, bytes)`.
pub fn create_data_file(
    path: &Path,
    blocks: u64,
    block_size: usize,
    mut init: impl FnMut(u64, &mut [u8]),
) -> Result<(), CacheError> {
    let io = |op, block: u64, source| CacheError::Io {
        op,
        path: path.to_owned(),
        block,
        offset: block * block_size as u64,
        bytes: block_size,
        source,
    };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io("create", 0, e))?;
    let mut buf = vec![0u8; block_size];
    for b in 0..blocks {
        buf.fill(0);
        init(b, &mut buf);
        f.write_all_at(&buf, b * block_size as u64)
            .map_err(|e| io("pwrite", b, e))?;
    }
    f.sync_data().map_err(|e| io("fsync", 0, e))
}

impl Cache {
    fn io_error(&self, op: &'static str, blk: u64, source: std::io::Error) -> CacheError {
        CacheError::Io {
            op,
            path: self.path.clone(),
            block: blk,
            offset: blk.saturating_mul(self.layout.block_size as u64),
            bytes: self.layout.block_size,
            source,
        }
    }

    /// Writes pinned buffer `i` to the data file if it is dirty: under its
    /// content lock (shared, so no writer changes it meanwhile), `DIRTY`
    /// cleared before the copy (a writer after the copy sets it again).
    /// In the direct mode the block's stripe lock is taken exclusive
    /// first, so no process is reading the block in place while the file
    /// changes: `wait` false gives up (false, still dirty) when a reader
    /// holds it.
    pub(super) fn flush(&self, i: usize, wait: bool) -> Result<bool, CacheError> {
        let stripe = match &self.direct {
            Some(_) => {
                // Pinned by this process: the tag cannot change.
                let blk = self.tag_checked(i)?;
                let l = self.region.atomic_u32(self.layout.stripe_lock(blk))?;
                if wait {
                    write_lock(l, self.lock_timeout, STRIPE)?;
                } else if !try_write_lock(l) {
                    return Ok(false);
                }
                Some(l)
            }
            None => None,
        };
        let r = self.flush_locked(i);
        if let Some(l) = stripe {
            write_unlock(l);
        }
        r
    }

    fn flush_locked(&self, i: usize) -> Result<bool, CacheError> {
        let st = self.state(i)?;
        lock::lock_content(st, false, self.lock_timeout)?;
        let r = self.write_back(i, st);
        let unlocked = lock::unlock_content(st, false, self.lock_timeout);
        let written = r?;
        unlocked?;
        if written {
            self.count(|s| s.writes += 1);
        }
        Ok(written)
    }

    /// [`flush_locked`](Cache::flush_locked) under the content lock:
    /// `DIRTY` cleared, the block copied and written at its tag's offset
    /// (a tag beyond the data file is an error, the buffer left dirty).
    fn write_back(&self, i: usize, st: &AtomicU64) -> Result<bool, CacheError> {
        let s = self.lock_header(st)?;
        if s & DIRTY == 0 || s & VALID == 0 {
            unlock_header(st, s);
            return Ok(false);
        }
        let blk = match self.tag_checked(i) {
            Ok(b) => b,
            Err(e) => {
                unlock_header(st, s);
                return Err(e);
            }
        };
        unlock_header(st, s & !DIRTY);
        let mut buf = vec![0u8; self.layout.block_size];
        let r = self
            .block_region(i)
            .load_words(self.layout.block(i), &mut buf)
            .map_err(CacheError::from)
            .and_then(|()| {
                self.file
                    .write_all_at(&buf, blk * self.layout.block_size as u64)
                    .map_err(|e| self.io_error("pwrite", blk, e))
            });
        if r.is_err() {
            // Dirty again: a failed write-back loses nothing (unless the
            // header stays held past the lock timeout).
            if let Ok(s) = self.lock_header(st) {
                unlock_header(st, s | DIRTY);
            }
        }
        r.map(|()| true)
    }

    /// The block buffer `i` holds, checked against the data file: a
    /// descriptor's tag is any number another attacher wrote, never an
    /// offset to read or write at before this check.
    fn tag_checked(&self, i: usize) -> Result<u64, CacheError> {
        let blk = self.tag(i)?.load(Ordering::Relaxed);
        if blk >= self.data_blocks {
            return Err(CacheError::Corrupt {
                field: "tag",
                buffer: Some(i),
                found: blk,
                bound: Bound::Within {
                    min: 0,
                    max: self.data_blocks - 1,
                },
                known: "the data file's length",
            });
        }
        Ok(blk)
    }

    /// Reads block `blk` into buffer `v` (pinned by this process, flagged
    /// `IO_IN_PROGRESS`).
    pub(super) fn read_in(&self, v: usize, blk: u64) -> Result<(), CacheError> {
        let mut buf = vec![0u8; self.layout.block_size];
        let at = blk * self.layout.block_size as u64;
        match &self.direct {
            // The block is in no buffer, so no write-back changes it now.
            Some(d) => d.map.load_words(at as usize, &mut buf)?,
            None => self
                .file
                .read_exact_at(&mut buf, at)
                .map_err(|e| self.io_error("pread", blk, e))?,
        }
        self.block_region(v)
            .store_words(self.layout.block(v), &buf)?;
        Ok(())
    }

    /// Writes every dirty buffer to the data file, then `fdatasync`s it.
    /// Runs beside other processes' work; returns the blocks written. In
    /// the direct mode it waits for in-place readers of each block it
    /// writes: do not call it while holding a guard.
    pub fn checkpoint(&self) -> Result<u64, CacheError> {
        let mut written = 0;
        for i in 0..self.layout.buffers {
            let st = self.state(i)?;
            let s = st.load(Ordering::Acquire);
            if s & (DIRTY | VALID) != DIRTY | VALID {
                continue;
            }
            self.pin(st, false, self.tag(i)?.load(Ordering::Relaxed))?;
            let r = self.flush(i, true);
            let u = self.unpin(st);
            if r? {
                written += 1;
            }
            u?;
        }
        self.file
            .sync_data()
            .map_err(|e| self.io_error("fdatasync", 0, e))?;
        Ok(written)
    }
}
