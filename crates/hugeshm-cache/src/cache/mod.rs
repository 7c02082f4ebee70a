//! [`Cache`]: one process's handle on the shared buffer cache, and the
//! guards that pin a block. One `impl Cache` in a room per concern:
//!
//! - here: the handle (its fields and what it tells), [`Mode`], [`Stats`],
//!   and the handle's calls into [`crate::lock`] with its lock timeout;
//! - [`open`]: create (lay a cache out) and open (check one another
//!   process made); every handle is made by `Cache::handle` there;
//! - [`table`]: the hash table: chains walked without a lock, a buffer
//!   taken out of its chain, the partition locks;
//! - [`replacement`]: pinning a block: the buffer that holds it, or a
//!   victim of the clock sweep claimed, retagged and filled;
//! - [`io`]: the data file: open, map (direct mode), read a block in,
//!   write one back, checkpoint;
//! - [`guard`]: [`ReadGuard`] and [`WriteGuard`] over a [`Block`];
//! - [`lookups`]: the hot path: [`Lookups`], the optimistic read and the
//!   prefetch hints.
//!
//! Which lock comes before which, what each guards and why a lookup
//! without a lock is right: the protocol in [`crate::lock`]'s docs, one
//! place for all the rooms.

mod guard;
mod io;
mod lookups;
mod open;
mod replacement;
mod table;

use std::cell::Cell;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

use hugeshm_region::Region;
use hugeshm_sys::Mapping;
use serde::{Deserialize, Serialize};

use crate::error::CacheError;
use crate::layout::{desc, Layout};
use crate::lock::{self, lock_header};

pub use guard::{Block, ReadGuard, WriteGuard};
pub use io::create_data_file;
pub use lookups::{Lookups, Prefetch, OPTIMISTIC_TRIES};

/// Default block size: 8 KiB, PostgreSQL's and Oracle's usual block.
pub const DEFAULT_BLOCK_SIZE: usize = 8192;

/// How a cache reads the blocks of its data file; chosen at
/// [`Cache::create_with`], kept in the control block, the same for every
/// process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every block a process reads or writes is copied into a buffer
    /// first (`pread`), as a database treats any file system.
    #[default]
    Classic,
    /// The directly mapped buffer cache: every process maps the whole
    /// data file (`MAP_SHARED`) and reads a block that is in no buffer in
    /// place, through the mapping, copying nothing; on a DAX file system
    /// the mapping is the persistent memory itself (without DAX it is the
    /// page cache). A block to be *written* is copied into a buffer and
    /// written back with `pwrite` as in the classic mode, so a write never
    /// changes the file under a reader; readers find a block that is in a
    /// buffer there (it may be newer than the file).
    Direct,
}

impl Mode {
    /// Its name, lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Classic => "classic",
            Mode::Direct => "direct",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one process did through its [`Cache`] handle (process-local
/// counters: shared counters would be one more contended cache line).
///
/// Logical reads are `hits + misses + direct_reads`; physical reads (a
/// block copied in from the data file) are `misses`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Stats {
    /// Blocks found in a buffer (logical reads that needed no I/O).
    pub hits: u64,
    /// Blocks copied into a buffer from the data file (`pread`; in the
    /// direct mode, a copy out of the mapping for a write): physical reads.
    pub misses: u64,
    /// Blocks read in place through the data file's mapping (direct mode):
    /// logical reads that copied nothing.
    #[serde(default)]
    pub direct_reads: u64,
    /// Bytes copied into buffers by the physical reads.
    #[serde(default)]
    pub bytes_copied: u64,
    /// Dirty blocks written to the data file (`pwrite`), at eviction or
    /// checkpoint.
    pub writes: u64,
    /// Buffers taken from another block by the clock sweep.
    pub evictions: u64,
    /// Of the hits, those [`Cache::read_with`] read without a pin or lock
    /// (its version check passed).
    #[serde(default)]
    pub optimistic: u64,
    /// Optimistic attempts of [`Cache::read_with`] that failed: a writer,
    /// a retag or the header lock found at the block, before or after `f`
    /// ran (then tried again, or read under a pin).
    #[serde(default)]
    pub optimistic_retries: u64,
}

impl Stats {
    /// Adds another process's counters.
    pub fn add(&mut self, o: &Stats) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.direct_reads += o.direct_reads;
        self.bytes_copied += o.bytes_copied;
        self.writes += o.writes;
        self.evictions += o.evictions;
        self.optimistic += o.optimistic;
        self.optimistic_retries += o.optimistic_retries;
    }

    /// Blocks read or written, wherever they were found.
    pub fn logical_reads(&self) -> u64 {
        self.hits + self.misses + self.direct_reads
    }

    /// Blocks copied in from the data file.
    pub fn physical_reads(&self) -> u64 {
        self.misses
    }

    /// `hits / (hits + misses)`, 0 when nothing was read.
    pub fn hit_ratio(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

/// One process's handle on a buffer cache that lives in a [`Region`]; see
/// the [crate docs](crate) for the layout and the protocol.
///
/// A handle is used by one thread (`!Sync`); every process (or thread)
/// opens its own over its own mapping of the region.
#[derive(Debug)]
pub struct Cache {
    region: Region,
    /// The regions of the blocks, when they are not in `region`
    /// ([`Layout::parts`]).
    parts: Vec<Region>,
    layout: Layout,
    data_blocks: u64,
    file: File,
    path: PathBuf,
    stats: Cell<Stats>,
    /// The data file's mapping, in the direct mode.
    direct: Option<Direct>,
    /// How long a wait for a lock or flag in shared memory may last
    /// ([`set_lock_timeout`](Cache::set_lock_timeout)).
    lock_timeout: Duration,
}

/// This process's shared mapping of the whole data file (direct mode).
#[derive(Debug)]
struct Direct {
    map: Mapping,
    dax: Option<bool>,
}

impl Cache {
    /// The layout (block size, buffers, offsets).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How blocks are read.
    pub fn mode(&self) -> Mode {
        if self.direct.is_some() {
            Mode::Direct
        } else {
            Mode::Classic
        }
    }

    /// In the direct mode, whether the kernel says the data file is served
    /// by DAX (`statx`'s `STATX_ATTR_DAX`): `Some(false)` means the mapping
    /// is the page cache. `None` in the classic mode, or where the kernel
    /// does not report it.
    pub fn data_is_dax(&self) -> Option<bool> {
        self.direct.as_ref().and_then(|d| d.dax)
    }

    /// In the direct mode, the address and length of this process's
    /// mapping of the data file (for `/proc/self/smaps` and pagemap).
    pub fn data_mapping(&self) -> Option<(usize, usize)> {
        self.direct.as_ref().map(|d| (d.map.addr(), d.map.len()))
    }

    /// Blocks in the data file.
    pub fn data_blocks(&self) -> u64 {
        self.data_blocks
    }

    /// How long this handle waits for a lock or flag in shared memory (a
    /// partition or stripe lock, a buffer's header spinlock, pin or
    /// content lock, another process's read-in) before the operation gives
    /// up with [`CacheError::LockTimeout`]:
    /// [`DEFAULT_LOCK_TIMEOUT`](crate::DEFAULT_LOCK_TIMEOUT) unless
    /// [`set_lock_timeout`](Cache::set_lock_timeout) changed it.
    pub fn lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    /// Sets [`lock_timeout`](Cache::lock_timeout): longer for a server
    /// whose processes hold guards for long (a guard held past it makes
    /// other processes' waits for that block fail), shorter to find a
    /// dead lock holder sooner. `Duration::MAX` waits forever, as a cache
    /// whose every attacher is trusted and alive may.
    pub fn set_lock_timeout(&mut self, limit: Duration) {
        self.lock_timeout = limit;
    }

    /// This handle's counters so far.
    pub fn stats(&self) -> Stats {
        self.stats.get()
    }

    /// Zeroes this handle's counters.
    pub fn reset_stats(&self) {
        self.stats.set(Stats::default());
    }

    /// The region (for its page size, name, verification).
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Gives the region back (the cache in it stays for other processes).
    /// With parts, they are closed (their blocks stay): see
    /// [`into_regions`](Cache::into_regions).
    pub fn into_region(self) -> Region {
        self.region
    }

    /// Gives the control region and the parts back.
    pub fn into_regions(self) -> (Region, Vec<Region>) {
        (self.region, self.parts)
    }

    /// The regions of the blocks (empty: they are in [`region`](Cache::region)).
    pub fn parts(&self) -> &[Region] {
        &self.parts
    }

    /// The region holding buffer `i`'s block, at [`Layout::block`].
    #[inline]
    fn block_region(&self, i: usize) -> &Region {
        if self.parts.is_empty() {
            &self.region
        } else {
            &self.parts[self.layout.part_of(i)]
        }
    }

    #[inline]
    fn count(&self, f: impl FnOnce(&mut Stats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    #[inline(always)]
    fn state(&self, i: usize) -> Result<&AtomicU64, CacheError> {
        Ok(self.region.atomic_u64(self.layout.desc(i) + desc::STATE)?)
    }

    #[inline(always)]
    fn tag(&self, i: usize) -> Result<&AtomicU64, CacheError> {
        Ok(self.region.atomic_u64(self.layout.desc(i) + desc::TAG)?)
    }

    #[inline(always)]
    fn partition(&self, b: usize) -> Result<&AtomicU32, CacheError> {
        Ok(self.region.atomic_u32(self.layout.partition_lock(b))?)
    }

    /// Pins the buffer of state `st`, which holds block `blk`
    /// ([`lock::pin`], bounded by the lock timeout).
    #[inline(always)]
    fn pin(&self, st: &AtomicU64, bump: bool, blk: u64) -> Result<(), CacheError> {
        lock::pin(st, bump, blk, self.lock_timeout)
    }

    #[inline(always)]
    fn unpin(&self, st: &AtomicU64) -> Result<(), CacheError> {
        lock::unpin(st, self.lock_timeout)
    }

    /// Waits while another process reads the block in: true when the
    /// buffer holds it, false when that read failed.
    #[inline(always)]
    fn wait_valid(&self, st: &AtomicU64) -> Result<bool, CacheError> {
        lock::wait_valid(st, self.lock_timeout)
    }

    /// The state word's header lock (bounded by the lock timeout).
    #[inline(always)]
    fn lock_header(&self, st: &AtomicU64) -> Result<u64, CacheError> {
        lock_header(st, self.lock_timeout)
    }

    #[inline(always)]
    fn check_block(&self, blk: u64) -> Result<(), CacheError> {
        if blk >= self.data_blocks {
            return Err(CacheError::BlockOutOfRange {
                block: blk,
                blocks: self.data_blocks,
            });
        }
        Ok(())
    }
}
