//! [`Cache`]: one process's handle on the shared buffer cache, and the
//! guards that pin a block.

use std::cell::Cell;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use hugeshm_region::Region;
use hugeshm_sys::Mapping;
use serde::{Deserialize, Serialize};

use crate::error::{Bound, CacheError};
use crate::layout::{
    control, desc, state, Layout, DESC_BYTES, MAGIC, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, VERSION,
};
use crate::lock::{
    self, lock_header, read_lock, read_unlock, try_lock_header, try_write_lock, unlock_header,
    write_lock, write_unlock, Wait, DEFAULT_LOCK_TIMEOUT,
};
use crate::validate::{self, Known};

use state::{DIRTY, EXCLUSIVE, IO_IN_PROGRESS, LOCKED, MAX_USAGE, REF_ONE, TAG_VALID, VALID};

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

/// A step of [`Cache::prefetch`]: which lines of a lookup to start
/// loading. A caller that knows its next blocks names each one a few
/// operations ahead with `Bucket`, then `Descriptor`, then `Row`, each
/// step once the lines of the step before have had time to arrive; the
/// lookups of several blocks then wait for memory together instead of one
/// after the other (what the CPU does by itself for a plain array, whose
/// next address depends on no load, and cannot do through a lookup's
/// chain of dependent loads and the instructions of its pin and lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// The hash bucket's line.
    Bucket,
    /// The descriptor of the first buffer in the bucket's chain.
    Descriptor,
    /// The row of the block in the buffer that holds it (walking the
    /// chain's descriptors, which the step before loaded), or, in the
    /// direct mode, in the data file's mapping when no buffer holds it.
    Row,
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

/// The hash table's arrays and the descriptors in the region, checked
/// once ([`Cache::tables`]). Links and heads are buffer index + 1 (0: none),
/// relaxed loads: a caller that needs ordering loads through these with
/// its own.
struct Tables<'a> {
    heads: &'a [AtomicU32],
    /// Two words a buffer: state, tag ([`DESC_BYTES`] = 16).
    descs: &'a [AtomicU64],
    links: &'a [AtomicU32],
}

const _: () = assert!(DESC_BYTES == 16 && desc::STATE == 0 && desc::TAG == 8);

impl Tables<'_> {
    /// The first link of bucket `b`'s chain.
    #[inline(always)]
    fn head(&self, b: usize) -> u32 {
        self.heads.get(b).map_or(0, |h| h.load(Ordering::Acquire))
    }

    /// The buffer a link names, if any (a stale link beyond the buffers
    /// names none).
    #[inline(always)]
    fn buffer(&self, link: u32) -> Option<usize> {
        let i = (link as usize).checked_sub(1)?;
        (i < self.links.len()).then_some(i)
    }

    /// The link after buffer `i` in its chain.
    #[inline(always)]
    fn next(&self, i: usize) -> u32 {
        self.links.get(i).map_or(0, |n| n.load(Ordering::Acquire))
    }

    /// The buffer holding block `blk`, if any: bucket `b`'s chain, walked
    /// with acquire loads (a chain may change under it; the walk stops
    /// after as many steps as there are buffers, so a cycle a concurrent
    /// relink makes ends, and at a link beyond the buffers).
    #[inline(always)]
    fn lookup(&self, b: usize, blk: u64) -> Option<usize> {
        let mut link = self.head(b);
        for _ in 0..=self.links.len() {
            let i = self.buffer(link)?;
            if self.tag(i) == blk {
                return Some(i);
            }
            link = self.next(i);
        }
        None
    }

    /// The block buffer `i` holds (when its state says it holds one).
    #[inline(always)]
    fn tag(&self, i: usize) -> u64 {
        self.descs
            .get(2 * i + 1)
            .map_or(u64::MAX, |t| t.load(Ordering::Relaxed))
    }
}

/// A cache's lookup path with its arrays checked once
/// ([`Cache::lookups`]): hints and optimistic reads for a loop over many
/// blocks. Borrows the cache; take one per loop, not per block. Its hits
/// are counted here and added to the cache's [`Stats`] when it drops.
pub struct Lookups<'a> {
    cache: &'a Cache,
    t: Tables<'a>,
    /// The block area, when the blocks are in the cache's own region.
    blocks: Option<&'a [AtomicU64]>,
    layout: Layout,
    hits: Cell<u64>,
    retries: Cell<u64>,
}

impl Drop for Lookups<'_> {
    fn drop(&mut self) {
        let (hits, retries) = (self.hits.get(), self.retries.get());
        self.cache.count(|s| {
            s.hits += hits;
            s.optimistic += hits;
            s.optimistic_retries += retries;
        });
    }
}

impl Lookups<'_> {
    /// Buffer `i`'s block, as words.
    #[inline(always)]
    fn words(&self, i: usize) -> Result<&[AtomicU64], CacheError> {
        let n = self.layout.block_size / 8;
        match self.blocks.and_then(|b| b.get(i * n..(i + 1) * n)) {
            Some(w) => Ok(w),
            None => Ok(self
                .cache
                .block_region(i)
                .atomic_u64s(self.layout.block(i), n)?),
        }
    }

    /// Starts loading what a later read or write of block `blk` at byte
    /// `offset` will touch, one [`Prefetch`] step at a time; see
    /// [`Cache::prefetch`].
    #[inline(always)]
    pub fn prefetch(&self, blk: u64, offset: usize, write: bool, step: Prefetch) {
        if blk >= self.cache.data_blocks {
            return;
        }
        let (l, t, region) = (&self.layout, &self.t, &self.cache.region);
        let b = l.bucket_of(blk);
        if step == Prefetch::Bucket {
            region.prefetch(l.bucket(b), false);
            return;
        }
        let mut link = t.head(b);
        if step == Prefetch::Descriptor {
            if let Some(i) = t.buffer(link) {
                // A read ([`read_with`](Cache::read_with)) only loads the
                // descriptor; a write swaps it.
                region.prefetch(l.desc(i), write);
            }
            return;
        }
        // The chains are short (twice as many buckets as buffers): two
        // steps find most blocks without waiting on a line the step before
        // did not load.
        for _ in 0..2 {
            let Some(i) = t.buffer(link) else {
                break;
            };
            if t.tag(i) == blk {
                self.cache
                    .block_region(i)
                    .prefetch(l.block(i) + offset.min(l.block_size - 1), write);
                return;
            }
            link = t.next(i);
            if let Some(n) = t.buffer(link) {
                region.prefetch(l.desc(n), write);
            }
        }
        if let Some(d) = &self.cache.direct {
            let at = blk as usize * l.block_size + offset.min(l.block_size - 1);
            d.map.prefetch(at, false);
        }
    }

    /// Calls `f` on block `blk`'s words without a lock on a hit; see
    /// [`Cache::read_with`].
    #[inline(always)]
    pub fn read_with<T>(
        &self,
        blk: u64,
        mut f: impl FnMut(&[AtomicU64]) -> T,
    ) -> Result<T, CacheError> {
        self.cache.check_block(blk)?;
        if self.cache.direct.is_none() {
            for _ in 0..OPTIMISTIC_TRIES {
                match self.try_optimistic(blk, &mut f)? {
                    Attempt::Read(v) => return Ok(v),
                    Attempt::Changed => {
                        self.retries.set(self.retries.get() + 1);
                        std::hint::spin_loop();
                    }
                    Attempt::Absent => break,
                }
            }
        }
        self.read_pinned(blk, f)
    }

    /// [`read_with`](Lookups::read_with)'s way when the optimistic one
    /// fails: under a pin and the content lock. Out of the hit path's
    /// line: its code inlined there (the whole pin, lock and read-in)
    /// made the loop around a hit slower.
    #[cold]
    #[inline(never)]
    fn read_pinned<T>(
        &self,
        blk: u64,
        mut f: impl FnMut(&[AtomicU64]) -> T,
    ) -> Result<T, CacheError> {
        let g = self.cache.read(blk)?;
        Ok(f(g.words()?))
    }

    /// One optimistic attempt of [`read_with`](Lookups::read_with). A
    /// seqlock reader:
    ///
    /// 1. `s1` = the state, loaded with acquire: it must be `TAG_VALID |
    ///    VALID` with no `EXCLUSIVE` and no `LOCKED`. The acquire makes
    ///    every store to the block before the release that made this state
    ///    (a writer's unlock, the end of a read-in) visible to the loads of
    ///    `f`. (The tag the lookup matched may have changed since: the
    ///    check in 3 finds it.)
    /// 2. `f` loads the block's words, relaxed.
    /// 3. An acquire fence, then `s2` = the state and the tag again.
    ///    Every store to the block's bytes (a writer's, a read-in's) comes
    ///    after a release fence that follows a change of the state's
    ///    stable part: a writer sets `EXCLUSIVE`, then fences; a retag
    ///    raises the version, then fences, then reads the block in. If any
    ///    load of `f` read such a store, that fence synchronizes with ours,
    ///    so `s2` is that change or later in the state's order: `EXCLUSIVE`
    ///    set, or the version a writer's release or a retag raised. Equal
    ///    stable parts ([`state::STABLE`]) therefore mean `f` read only
    ///    bytes of the version `s1` saw (short of exactly 2^20 versions in
    ///    between). Likewise a retag's tag store follows a release fence,
    ///    so a tag that went away (before `s1` or after) shows as a tag
    ///    other than `blk` or a version other than `s1`'s, and one that
    ///    went away and came back shows in `s2`.
    ///
    /// Pins, shares, usage and `DIRTY` may change beside it without
    /// failing it: other readers, and write-backs, change no byte.
    #[inline(always)]
    fn try_optimistic<T>(
        &self,
        blk: u64,
        f: &mut impl FnMut(&[AtomicU64]) -> T,
    ) -> Result<Attempt<T>, CacheError> {
        let Some(i) = self.t.lookup(self.layout.bucket_of(blk), blk) else {
            return Ok(Attempt::Absent);
        };
        let st = &self.t.descs[2 * i];
        let s1 = st.load(Ordering::Acquire);
        // One test on the hit path: a valid block, no writer, no header
        // lock.
        if s1 & (TAG_VALID | VALID | EXCLUSIVE | LOCKED) != TAG_VALID | VALID {
            return Ok(match s1 & (TAG_VALID | VALID) == TAG_VALID | VALID {
                true => Attempt::Changed,
                false => Attempt::Absent,
            });
        }
        let v = f(self.words(i)?);
        fence(Ordering::Acquire);
        let s2 = st.load(Ordering::Relaxed);
        if ((s1 ^ s2) & state::STABLE != 0) | (self.t.tag(i) != blk) {
            return Ok(Attempt::Changed);
        }
        let u = state::usage(s2);
        if u < MAX_USAGE && s2 & LOCKED == 0 {
            // Once; a failure (another process changed the word) is left.
            let _ = st.compare_exchange(
                s2,
                state::with_usage(s2, u + 1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        self.hits.set(self.hits.get() + 1);
        Ok(Attempt::Read(v))
    }
}

/// Maps the whole data file shared, at a 2 MiB-aligned address (so a DAX
/// file system can serve it with 2 MiB faults).
fn map_data(
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
fn open_data(path: &Path) -> Result<(File, u64), CacheError> {
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
    /// Lays a new, empty cache out in `region` (which this process just
    /// created; its data must be zero or unused) over the data file at
    /// `data` (its length a multiple of `block_size`), with as many
    /// buffers as fit. Other processes [`open`](Cache::open) it after this
    /// returns.
    pub fn create(region: Region, data: &Path, block_size: usize) -> Result<Cache, CacheError> {
        Cache::create_sized(region, data, block_size, None)
    }

    /// [`create`](Cache::create) with `buffers` buffers (`None`: as many
    /// as fit), for a region larger than the cache (rounded up to a 1 GiB
    /// page, say).
    pub fn create_sized(
        region: Region,
        data: &Path,
        block_size: usize,
        buffers: Option<usize>,
    ) -> Result<Cache, CacheError> {
        Cache::create_with(region, data, block_size, buffers, Mode::Classic)
    }

    /// [`create_sized`](Cache::create_sized) in `mode`: [`Mode::Direct`]
    /// maps the data file (every process that opens the cache does too).
    pub fn create_with(
        region: Region,
        data: &Path,
        block_size: usize,
        buffers: Option<usize>,
        mode: Mode,
    ) -> Result<Cache, CacheError> {
        Cache::create_split(region, Vec::new(), data, block_size, buffers, mode)
    }

    /// [`create_with`](Cache::create_with) with the blocks spread over
    /// `parts` (one region per NUMA node, say, from
    /// `RegionBuilder::create_per_node`; buffer `i`'s block is in part
    /// `i mod parts.len()`); `region` keeps the control block, locks,
    /// hash table and descriptors. Other processes attach every region and
    /// [`open_split`](Cache::open_split) them in the same order. `None`
    /// buffers: as many as the control region and the smallest part hold.
    /// No parts: the blocks are in `region`, as [`create_with`](Cache::create_with).
    ///
    /// ```no_run
    /// use hugeshm_cache::{Cache, Mode, DEFAULT_BLOCK_SIZE};
    /// use hugeshm_region::{Backend, PageSize, RegionBuilder};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let data = std::path::Path::new("/var/tmp/example.data");
    /// let (control, _) = RegionBuilder::new(64 << 20).name("sga").backend(Backend::Sysv).create()?;
    /// // sga-buffers.node0, sga-buffers.node1, ...: each bound to its node.
    /// let parts = RegionBuilder::new(8 << 30)
    ///     .name("sga-buffers")
    ///     .backend(Backend::Sysv)
    ///     .page_size(PageSize::HUGE_2M)
    ///     .create_per_node()?;
    /// let parts = parts.into_iter().map(|(p, _)| p.region).collect();
    /// let cache = Cache::create_split(control, parts, data, DEFAULT_BLOCK_SIZE, None, Mode::Classic)?;
    /// # Ok(()) }
    /// ```
    pub fn create_split(
        region: Region,
        parts: Vec<Region>,
        data: &Path,
        block_size: usize,
        buffers: Option<usize>,
        mode: Mode,
    ) -> Result<Cache, CacheError> {
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) || !block_size.is_power_of_two()
        {
            return Err(CacheError::Config(format!(
                "block size {block_size} must be a power of two from {MIN_BLOCK_SIZE} to \
                 {MAX_BLOCK_SIZE} bytes"
            )));
        }
        if parts.len() > u32::MAX as usize {
            return Err(CacheError::Config(format!("{} parts", parts.len())));
        }
        let k = parts.len();
        let smallest = parts.iter().map(Region::data_len).min().unwrap_or(0);
        let needed = |n: usize| {
            let l = Layout::split(block_size, n, k);
            l.total > region.data_len() || l.part_bytes() > smallest
        };
        let fit = if k == 0 {
            Layout::fitting(block_size, region.data_len())
        } else {
            Layout::fitting_split(block_size, region.data_len(), k, smallest)
        };
        let layout = match buffers {
            Some(n) if k > 0 && needed(n) => {
                let l = Layout::split(block_size, n, k);
                return Err(CacheError::Config(format!(
                    "{n} buffers of {block_size} bytes over {k} parts need {} bytes of control                      region and {} bytes in each part; the control region has {}, the smallest                      part {smallest}",
                    l.total,
                    l.part_bytes(),
                    region.data_len()
                )));
            }
            Some(n) if k > 0 => Layout::split(block_size, n, k),
            Some(n) if Layout::new(block_size, n).total > region.data_len() => {
                return Err(CacheError::Config(format!(
                    "{n} buffers of {block_size} bytes need {} bytes; the region has {}",
                    Layout::new(block_size, n).total,
                    region.data_len()
                )))
            }
            Some(n) => Layout::new(block_size, n),
            None => fit,
        };
        if layout.buffers == 0 {
            return Err(CacheError::Config(format!(
                "a region with {} data bytes holds no {block_size}-byte buffer (it needs at least {})",
                region.data_len(),
                Layout::new(block_size, 1).total
            )));
        }
        let (file, len) = open_data(data)?;
        let data_blocks = len / block_size as u64;
        if data_blocks == 0 || len % block_size as u64 != 0 {
            return Err(CacheError::Config(format!(
                "the data file {} is {len} bytes: not a whole, non-zero number of {block_size}-byte blocks",
                data.display()
            )));
        }
        let direct = match mode {
            Mode::Direct => Some(map_data(&file, data, data_blocks, block_size)?),
            Mode::Classic => None,
        };
        let r = &region;
        r.atomic_u64(control::MAGIC)?
            .store(MAGIC, Ordering::Relaxed);
        r.atomic_u32(control::MODE)?
            .store(u32::from(mode == Mode::Direct), Ordering::Relaxed);
        r.atomic_u32(control::PARTS)?
            .store(k as u32, Ordering::Relaxed);
        r.atomic_u32(control::VERSION)?
            .store(VERSION, Ordering::Relaxed);
        r.atomic_u32(control::BLOCK_SIZE)?
            .store(block_size as u32, Ordering::Relaxed);
        r.atomic_u64(control::BUFFERS)?
            .store(layout.buffers as u64, Ordering::Relaxed);
        r.atomic_u64(control::BUCKETS)?
            .store(layout.buckets as u64, Ordering::Relaxed);
        r.atomic_u32(control::PARTITIONS)?
            .store(layout.partitions as u32, Ordering::Relaxed);
        r.atomic_u64(control::DATA_BLOCKS)?
            .store(data_blocks, Ordering::Relaxed);
        r.atomic_u64(control::CLOCK_HAND)?
            .store(0, Ordering::Relaxed);
        for p in 0..layout.partitions {
            r.atomic_u32(layout.partition_lock(p))?
                .store(0, Ordering::Relaxed);
        }
        for st in 0..crate::layout::STRIPES {
            r.atomic_u32(layout.stripe_lock(st as u64))?
                .store(0, Ordering::Relaxed);
        }
        for b in 0..layout.buckets {
            r.atomic_u32(layout.bucket(b))?.store(0, Ordering::Relaxed);
        }
        for i in 0..layout.buffers {
            let d = layout.desc(i);
            r.atomic_u64(d + desc::STATE)?.store(0, Ordering::Relaxed);
            r.atomic_u64(d + desc::TAG)?
                .store(u64::MAX, Ordering::Relaxed);
            r.atomic_u32(layout.link(i))?.store(0, Ordering::Relaxed);
        }
        // Publish: everything above happens-before a READY seen as 1.
        r.atomic_u32(control::READY)?.store(1, Ordering::Release);
        Ok(Cache {
            region,
            parts,
            layout,
            data_blocks,
            file,
            path: data.to_owned(),
            stats: Cell::new(Stats::default()),
            direct,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        })
    }

    /// Opens the cache another process laid out in `region` (attached by
    /// name, or inherited over `fork`), over the same data file.
    pub fn open(region: Region, data: &Path) -> Result<Cache, CacheError> {
        Cache::open_split(region, Vec::new(), data)
    }

    /// Opens a cache made by [`create_split`](Cache::create_split): the
    /// control region and the parts in the creator's order.
    pub fn open_split(
        region: Region,
        parts: Vec<Region>,
        data: &Path,
    ) -> Result<Cache, CacheError> {
        // Every number below is checked against what this process knows
        // before it is used (validate.rs): any attacher may have written
        // the control block.
        let ctl = validate::read_control(&region)?;
        let (file, file_len) = open_data(data)?;
        let known = Known {
            region_bytes: region.data_len(),
            parts: parts.len(),
            smallest_part: parts.iter().map(Region::data_len).min().unwrap_or(0),
            file_len,
        };
        let ok = validate::check(&ctl, &known)?;
        let (layout, data_blocks) = (ok.layout, ok.data_blocks);
        let direct = match ok.direct {
            true => Some(map_data(&file, data, data_blocks, layout.block_size)?),
            false => None,
        };
        Ok(Cache {
            region,
            parts,
            layout,
            data_blocks,
            file,
            path: data.to_owned(),
            stats: Cell::new(Stats::default()),
            direct,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        })
    }

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
    /// up with [`CacheError::LockTimeout`]: [`DEFAULT_LOCK_TIMEOUT`] unless
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

    /// The bucket heads, descriptors and chain links as slices, each
    /// range-checked once: the hot paths index them (one bounds check per
    /// word, no `Result` per word).
    #[inline(always)]
    fn tables(&self) -> Result<Tables<'_>, CacheError> {
        let l = &self.layout;
        Ok(Tables {
            heads: self.region.atomic_u32s(l.buckets_at, l.buckets)?,
            descs: self
                .region
                .atomic_u64s(l.descs_at, l.buffers * DESC_BYTES / 8)?,
            links: self.region.atomic_u32s(l.links_at, l.buffers)?,
        })
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

    /// The buffer holding `blk` in bucket `b`'s chain. With the partition
    /// lock held (shared or exclusive) the answer is right; without it, a
    /// hint to check after pinning (the walk may stray into a chain being
    /// changed; it stops after as many steps as there are buffers).
    #[inline(always)]
    fn lookup(&self, b: usize, blk: u64) -> Result<Option<usize>, CacheError> {
        Ok(self.tables()?.lookup(b, blk))
    }

    /// Removes buffer `v` from bucket `b`'s chain (partition lock held
    /// exclusive). Under that lock a chain is whole; a link beyond the
    /// buffers, or a chain longer than the buffers (a loop), is one
    /// another attacher wrote: an error, after at most as many steps as
    /// there are buffers.
    fn unlink(&self, b: usize, v: usize) -> Result<(), CacheError> {
        let t = self.tables()?;
        let n = t.links.len();
        let target = v as u32 + 1;
        let after = t.next(v);
        let Some(mut at) = t.heads.get(b) else {
            return Ok(());
        };
        let mut from = None;
        for _ in 0..=n {
            let link = at.load(Ordering::Relaxed);
            if link == target {
                at.store(after, Ordering::Release);
                return Ok(());
            }
            if link == 0 {
                return Ok(());
            }
            let Some(i) = t.buffer(link) else {
                return Err(CacheError::Corrupt {
                    field: if from.is_some() {
                        "chain link"
                    } else {
                        "bucket head"
                    },
                    buffer: from,
                    found: link.into(),
                    bound: Bound::Within {
                        min: 0,
                        max: n as u64,
                    },
                    known: "the buffers",
                });
            };
            from = Some(i);
            at = &t.links[i];
        }
        Err(CacheError::Corrupt {
            field: "chain length",
            buffer: None,
            found: n as u64 + 1,
            bound: Bound::Within {
                min: 0,
                max: n as u64,
            },
            known: "the buffers (the chain loops)",
        })
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

    /// A buffer no one has pinned, with usage count 0, pinned for the
    /// caller (clock sweep).
    fn victim(&self) -> Result<usize, CacheError> {
        let hand = self.region.atomic_u64(control::CLOCK_HAND)?;
        let n = self.layout.buffers;
        let sweeps = (MAX_USAGE as usize + 1) * 4;
        for _ in 0..n * sweeps {
            let i = (hand.fetch_add(1, Ordering::Relaxed) % n as u64) as usize;
            let st = self.state(i)?;
            if state::refs(st.load(Ordering::Relaxed)) != 0 {
                continue;
            }
            // A header held by another process is passed like a pinned
            // buffer: the sweep never waits on one word.
            let Some(s) = try_lock_header(st) else {
                continue;
            };
            if state::refs(s) == 0 {
                let u = state::usage(s);
                if u > 0 {
                    unlock_header(st, state::with_usage(s, u - 1));
                } else {
                    unlock_header(st, s + REF_ONE);
                    return Ok(i);
                }
            } else {
                unlock_header(st, s);
            }
        }
        Err(CacheError::NoFreeBuffer { buffers: n, sweeps })
    }

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
    fn flush(&self, i: usize, wait: bool) -> Result<bool, CacheError> {
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
    fn read_in(&self, v: usize, blk: u64) -> Result<(), CacheError> {
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

    fn lock_partitions(&self, a: usize, b: Option<usize>) -> Result<Locked<'_>, CacheError> {
        let pa = a & (self.layout.partitions - 1);
        let pb = b.map(|b| b & (self.layout.partitions - 1));
        let (first, second) = match pb {
            Some(pb) if pb != pa => (pa.min(pb), Some(pa.max(pb))),
            _ => (pa, None),
        };
        let l1 = self.partition(first)?;
        let l2 = second.map(|p| self.partition(p)).transpose()?;
        write_lock(l1, self.lock_timeout, PARTITION)?;
        let mut held = Locked([Some(l1), None]);
        if let Some(l) = l2 {
            // On a timeout, `held` lets go of the first.
            write_lock(l, self.lock_timeout, PARTITION)?;
            held.0[1] = Some(l);
        }
        Ok(held)
    }

    /// Fast path, no partition lock: walks bucket `b`'s chain, pins what
    /// it names, then checks that the pinned buffer still holds `blk` (a
    /// pin keeps it from being retagged; a retag holds the header lock, so
    /// the pin lands before it, and the retag gives up, or after it).
    /// `None` when that finds nothing (the block may still be there: look
    /// again under the partition lock).
    #[inline(always)]
    fn find_pinned(&self, b: usize, blk: u64) -> Result<Option<usize>, CacheError> {
        if let Some(i) = self.lookup(b, blk)? {
            let st = self.state(i)?;
            self.pin(st, true, blk)?;
            let s = st.load(Ordering::Acquire);
            if s & TAG_VALID == 0 || self.tag(i)?.load(Ordering::Relaxed) != blk {
                self.unpin(st)?;
            } else if self.settle(st)? {
                self.count(|s| s.hits += 1);
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// After pinning `st`: waits while another process reads the block
    /// in. True: the block is there, pinned. False: that read-in failed;
    /// unpinned. An error (the wait timed out): unpinned.
    fn settle(&self, st: &AtomicU64) -> Result<bool, CacheError> {
        let r = match self.wait_valid(st) {
            Ok(true) => return Ok(true),
            r => r,
        };
        let u = self.unpin(st);
        r?;
        u.map(|()| false)
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

    /// A read in the direct mode: the buffer that holds `blk` (pinned) if
    /// one does, else `None` with `blk`'s stripe lock held shared, so no
    /// write-back changes the block in the file until it is released.
    fn pin_or_stripe(&self, blk: u64) -> Result<Result<usize, &AtomicU32>, CacheError> {
        self.check_block(blk)?;
        let b = self.layout.bucket_of(blk);
        if let Some(i) = self.find_pinned(b, blk)? {
            return Ok(Ok(i));
        }
        let stripe = self.region.atomic_u32(self.layout.stripe_lock(blk))?;
        let plock = self.partition(b)?;
        let t = self.lock_timeout;
        let mut again = Wait::new(t, RETRIES);
        loop {
            read_lock(stripe, t, STRIPE)?;
            // What the table says now holds until the stripe is released: a
            // block leaves the table only after its write-back, which needs
            // the stripe exclusive.
            if let Err(e) = read_lock(plock, t, PARTITION) {
                read_unlock(stripe);
                return Err(e);
            }
            let found = self.lookup(b, blk);
            let Ok(Some(i)) = found else {
                read_unlock(plock);
                if let Err(e) = found {
                    read_unlock(stripe);
                    return Err(e);
                }
                self.count(|s| s.direct_reads += 1);
                return Ok(Err(stripe));
            };
            let st = self
                .state(i)
                .and_then(|st| self.pin(st, true, blk).map(|()| st));
            read_unlock(plock);
            read_unlock(stripe);
            let st = st?;
            if self.settle(st)? {
                self.count(|s| s.hits += 1);
                return Ok(Ok(i));
            }
            again.pause(st.load(Ordering::Relaxed))?;
        }
    }

    /// Pins the buffer holding `blk`, reading it in on a miss.
    #[inline(always)]
    fn pin_block(&self, blk: u64) -> Result<usize, CacheError> {
        self.check_block(blk)?;
        let b = self.layout.bucket_of(blk);
        if let Some(i) = self.find_pinned(b, blk)? {
            return Ok(i);
        }
        self.pin_block_locked(b, blk)
    }

    /// [`pin_block`](Cache::pin_block) after the lookup without the
    /// partition lock found nothing: look again under it, else read in.
    /// Each round that finds the table changed under it starts again, for
    /// at most the lock timeout.
    #[inline(never)]
    fn pin_block_locked(&self, b: usize, blk: u64) -> Result<usize, CacheError> {
        let plock = self.partition(b)?;
        // Dirty victims passed because their block is being read in place.
        let mut passed = 0usize;
        let mut again = Wait::new(self.lock_timeout, RETRIES);
        loop {
            read_lock(plock, self.lock_timeout, PARTITION)?;
            let found = self.lookup(b, blk);
            if let Ok(Some(i)) = found {
                let st = self
                    .state(i)
                    .and_then(|st| self.pin(st, true, blk).map(|()| st));
                read_unlock(plock);
                let st = st?;
                if self.settle(st)? {
                    self.count(|s| s.hits += 1);
                    return Ok(i);
                }
                again.pause(st.load(Ordering::Relaxed))?;
                continue;
            }
            read_unlock(plock);
            found?;

            // A miss: take a victim, clean it, retag it.
            let v = self.victim()?;
            let vst = self.state(v)?;
            let claim = self.claim(v, vst, b, blk, &mut passed);
            if !matches!(claim, Ok(Claim::Retagged)) {
                // The victim goes back (a failed unpin after an error is
                // the lesser news).
                let u = self.unpin(vst);
                if claim.is_ok() {
                    u?;
                }
            }
            match claim? {
                Claim::Retagged => return self.fill(v, vst, b, blk),
                Claim::Found(i) => {
                    let st = self.state(i)?;
                    if self.settle(st)? {
                        self.count(|s| s.hits += 1);
                        return Ok(i);
                    }
                }
                Claim::Again => {}
            }
            again.pause(vst.load(Ordering::Relaxed))?;
        }
    }

    /// Moves victim `v` (pinned by this process, state `vst`) to block
    /// `blk`'s chain (bucket `b`), flagged `IO_IN_PROGRESS`; or finds that
    /// another process read `blk` in meanwhile (pinned), or that the
    /// victim changed (try again). The victim stays pinned on every
    /// return, an error included: the caller lets go of it unless it was
    /// retagged.
    fn claim(
        &self,
        v: usize,
        vst: &AtomicU64,
        b: usize,
        blk: u64,
        passed: &mut usize,
    ) -> Result<Claim, CacheError> {
        let s = vst.load(Ordering::Acquire);
        if s & DIRTY != 0 {
            self.flush(v, false)?;
        }
        let old = if s & TAG_VALID != 0 {
            Some(self.layout.bucket_of(self.tag(v)?.load(Ordering::Relaxed)))
        } else {
            None
        };
        let locked = self.lock_partitions(b, old)?;
        let t = self.tables()?;
        // Another process may have read the block in meanwhile.
        if let Some(i) = t.lookup(b, blk) {
            self.pin(self.state(i)?, true, blk)?;
            return Ok(Claim::Found(i));
        }
        let s = self.lock_header(vst)?;
        if state::refs(s) != 1 || s & DIRTY != 0 {
            // Pinned or dirtied by someone else since the sweep, or
            // (direct mode) not written back: its block is being read
            // in place.
            unlock_header(vst, s);
            drop(locked);
            if self.direct.is_some() && s & DIRTY != 0 {
                *passed += 1;
                if *passed > self.layout.buffers * 64 + 1024 {
                    return Err(CacheError::WriteBackBlocked {
                        buffers: self.layout.buffers,
                        passed: *passed,
                    });
                }
                std::thread::yield_now();
            }
            return Ok(Claim::Again);
        }
        if let Some(ob) = old {
            if let Err(e) = self.unlink(ob, v) {
                unlock_header(vst, s);
                return Err(e);
            }
            self.count(|s| s.evictions += 1);
        }
        // An optimistic reader that sees this tag sees the version
        // below raised (or a later state) when it reloads the state
        // after its acquire fence (see `read_with`).
        fence(Ordering::Release);
        t.descs[2 * v + 1].store(blk, Ordering::Relaxed);
        let head = &t.heads[b];
        t.links[v].store(head.load(Ordering::Relaxed), Ordering::Relaxed);
        head.store(v as u32 + 1, Ordering::Release);
        // A new version: an optimistic reader of the old block that
        // copied any byte of the new one fails its check.
        let fresh = state::with_usage(REF_ONE, 1)
            | TAG_VALID
            | IO_IN_PROGRESS
            | (state::bump_version(s) & state::VERSION_MASK);
        unlock_header(vst, fresh);
        // The block's bytes are stored after the version is (seqlock
        // writer: release fence between the two).
        fence(Ordering::Release);
        drop(locked);
        Ok(Claim::Retagged)
    }

    /// Reads block `blk` into victim `v`, which [`claim`](Cache::claim)
    /// retagged: `VALID` once read; a failed read takes it out of the
    /// table again and lets go of it.
    fn fill(&self, v: usize, vst: &AtomicU64, b: usize, blk: u64) -> Result<usize, CacheError> {
        if let Err(e) = self.read_in(v, blk) {
            // The read's error is the news; the buffer is taken back out
            // as far as the locks allow (a chain another attacher broke
            // keeps it).
            if let Ok(locked) = self.lock_partitions(b, None) {
                let _ = self.unlink(b, v);
                if let Ok(s) = self.lock_header(vst) {
                    unlock_header(vst, state::bump_version(s) & !(TAG_VALID | IO_IN_PROGRESS));
                }
                drop(locked);
            }
            let _ = self.unpin(vst);
            return Err(e);
        }
        let s = self.lock_header(vst)?;
        unlock_header(vst, (s | VALID) & !IO_IN_PROGRESS);
        let bs = self.layout.block_size as u64;
        self.count(|s| {
            s.misses += 1;
            s.bytes_copied += bs;
        });
        Ok(v)
    }

    #[inline(always)]
    fn guard(&self, blk: u64, exclusive: bool) -> Result<Block<'_>, CacheError> {
        let i = if exclusive || self.direct.is_none() {
            if let Some(i) = self.pin_and_lock(blk, exclusive)? {
                return Ok(Block {
                    cache: self,
                    mem: self.block_region(i),
                    block: blk,
                    at: self.layout.block(i),
                    held: Held::Buffer {
                        state: self.state(i)?,
                        exclusive,
                    },
                });
            }
            self.pin_block(blk)?
        } else {
            match self.pin_or_stripe(blk)? {
                Ok(i) => i,
                Err(stripe) => {
                    return Ok(Block {
                        cache: self,
                        mem: &self.region,
                        block: blk,
                        at: blk as usize * self.layout.block_size,
                        held: Held::InPlace(stripe),
                    })
                }
            }
        };
        let st = self.state(i)?;
        if let Err(e) = lock::lock_content(st, exclusive, self.lock_timeout) {
            let _ = self.unpin(st);
            return Err(e);
        }
        Ok(Block {
            cache: self,
            mem: self.block_region(i),
            block: blk,
            at: self.layout.block(i),
            held: Held::Buffer {
                state: st,
                exclusive,
            },
        })
    }

    /// The hit path: pins the buffer that holds `blk` and takes its
    /// content lock (`exclusive` or shared) with one compare-and-swap of
    /// its state word, when the walk without the partition lock finds it
    /// valid. The swap succeeds only on the state seen with the tag; the
    /// tag is checked again once pinned (a buffer may have been retagged
    /// and come back to the same state word meanwhile). `None`: not found
    /// this way (being read in, or not there): take the slow path.
    #[inline(always)]
    fn pin_and_lock(&self, blk: u64, exclusive: bool) -> Result<Option<usize>, CacheError> {
        self.check_block(blk)?;
        let Some(i) = self.lookup(self.layout.bucket_of(blk), blk)? else {
            return Ok(None);
        };
        let (st, tag) = (self.state(i)?, self.tag(i)?);
        if lock::pin_and_lock(st, tag, blk, exclusive, self.lock_timeout)? {
            self.count(|s| s.hits += 1);
            return Ok(Some(i));
        }
        Ok(None)
    }

    /// Starts loading what a later [`read`](Cache::read) or
    /// [`write`](Cache::write) of block `blk` at byte `offset` will touch,
    /// one [`Prefetch`] step at a time, and returns at once. A hint: it
    /// takes no lock and no pin, follows links with plain loads that may
    /// be stale (so it may load the wrong lines, never anything outside
    /// the region), and does nothing for a block beyond the data file.
    /// `write` asks for the row's line exclusive.
    ///
    /// One call: [`Lookups::prefetch`] does the same without checking the
    /// region's arrays each time.
    #[inline(always)]
    pub fn prefetch(&self, blk: u64, offset: usize, write: bool, step: Prefetch) {
        if let Ok(lk) = self.lookups() {
            lk.prefetch(blk, offset, write, step);
        }
    }

    /// Pins block `blk` and takes its content lock shared: other readers
    /// may hold it too, writers wait. In the direct mode a block that is
    /// in no buffer is read in place through the mapping of the data file
    /// instead (nothing copied): its stripe lock is held shared, which
    /// keeps write-backs of that block (not writers to a buffer) waiting.
    /// For a short look at a block (a row, a few words),
    /// [`read_with`](Cache::read_with) costs less: no lock on a hit.
    #[inline(always)]
    pub fn read(&self, blk: u64) -> Result<ReadGuard<'_>, CacheError> {
        Ok(ReadGuard(self.guard(blk, false)?))
    }

    /// Runs `f` over the words of block `blk` and returns what it
    /// returned: the read a server uses for a short look at a block (a
    /// row, a key, a few words copied out). On a hit it takes no lock and
    /// no pin and writes nothing to shared memory (an optimistic, version-
    /// checked read): it notes the buffer's state, runs `f`, and checks
    /// that the state's write version and flags did not change and the
    /// buffer still holds `blk`; if they did (a writer or an eviction was
    /// at the block meanwhile) it runs `f` again, and after
    /// [`OPTIMISTIC_TRIES`] failed attempts reads under a pin and the
    /// content lock shared, as [`read`](Cache::read) does, so a block
    /// written all the time is read all the same. A miss, a block being
    /// read in, and the direct mode take that pinned path at once.
    ///
    /// `f` may see torn data, half of one write and half of another, on
    /// an attempt that then fails the check: it must only load and compute
    /// or copy (no panic, no unbounded loop, nothing done outside that
    /// depends on what it read), since it may run several times; only the
    /// result of the attempt that passed the check is returned. The words
    /// are atomics, loaded with [`Ordering::Relaxed`] (no data race).
    /// Anything longer (a walk that follows what it reads, I/O) takes a
    /// [`read`](Cache::read) guard.
    ///
    /// ```no_run
    /// # use hugeshm_cache::Cache;
    /// # use std::sync::atomic::Ordering;
    /// # fn f(cache: &Cache) -> Result<(), hugeshm_cache::CacheError> {
    /// // The sum of the 8 words of the row at word 64 of block 7.
    /// let sum: u64 = cache.read_with(7, |w| {
    ///     w[64..72].iter().map(|x| x.load(Ordering::Relaxed)).fold(0, u64::wrapping_add)
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// The usage count of a block read this way goes up by a
    /// compare-and-swap only while it is below its maximum (and is not
    /// retried when it fails), so a block read all the time is written to
    /// only when the clock sweep has lowered it.
    ///
    /// One call: [`Lookups::read_with`] does the same without checking
    /// the region's arrays each time.
    #[inline(always)]
    pub fn read_with<T>(
        &self,
        blk: u64,
        f: impl FnMut(&[AtomicU64]) -> T,
    ) -> Result<T, CacheError> {
        self.lookups()?.read_with(blk, f)
    }

    /// The region's hash table, descriptors and (when they are in this
    /// region) blocks, each range-checked once, for a run of
    /// [`Lookups::prefetch`] and [`Lookups::read_with`] calls: a loop
    /// that looks up millions of blocks takes one at its start. Checking
    /// the arrays at every call (three range checks, a reload of the
    /// layout through `&self`) halved the transactions per second of
    /// `bench oltp` over an 8 GiB cache: the hit path waits on memory, and
    /// the extra instructions kept fewer lookups in flight.
    #[inline(always)]
    pub fn lookups(&self) -> Result<Lookups<'_>, CacheError> {
        let l = self.layout;
        let t = self.tables()?;
        let blocks = match l.parts {
            0 => Some(
                self.region
                    .atomic_u64s(l.blocks_at, l.buffers * (l.block_size / 8))?,
            ),
            _ => None,
        };
        Ok(Lookups {
            cache: self,
            t,
            blocks,
            layout: l,
            hits: Cell::new(0),
            retries: Cell::new(0),
        })
    }

    /// Pins block `blk` and takes its content lock exclusive; the buffer
    /// is marked dirty when the guard drops.
    #[inline(always)]
    pub fn write(&self, blk: u64) -> Result<WriteGuard<'_>, CacheError> {
        Ok(WriteGuard(self.guard(blk, true)?))
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

/// The partition locks' name in a [`CacheError::LockTimeout`].
const PARTITION: &str = "partition lock";
/// The stripe locks' name in a [`CacheError::LockTimeout`].
const STRIPE: &str = "stripe lock";
/// A lookup that keeps finding the table changed, in a
/// [`CacheError::LockTimeout`].
const RETRIES: &str = "lookup (the block's buffer kept changing or failing to read in)";

/// What [`Cache::claim`] did with a victim.
enum Claim {
    /// Moved to the block's chain, `IO_IN_PROGRESS`: read it in.
    Retagged,
    /// Another process had read the block in: this buffer, pinned.
    Found(usize),
    /// The victim changed: take another.
    Again,
}

/// Optimistic attempts [`Cache::read_with`] makes before it pins.
pub const OPTIMISTIC_TRIES: u32 = 4;

/// What one optimistic attempt found.
enum Attempt<T> {
    /// Read, and checked.
    Read(T),
    /// A writer or a retag was at the block: try again.
    Changed,
    /// Not in a valid buffer (a miss, or being read in): pin.
    Absent,
}

/// Partition locks held exclusive; released on drop.
struct Locked<'a>([Option<&'a AtomicU32>; 2]);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        for l in self.0.iter().rev().flatten() {
            write_unlock(l);
        }
    }
}

/// What a [`Block`] holds.
#[derive(Debug)]
enum Held<'a> {
    /// A buffer: pinned, content lock held.
    Buffer {
        state: &'a AtomicU64,
        exclusive: bool,
    },
    /// The block in place in the data file's mapping (direct mode), its
    /// stripe lock held shared.
    InPlace(&'a AtomicU32),
}

/// A pinned, content-locked block, or (direct mode) a block read in place
/// from the mapped data file: what both guards read through (`Deref`).
/// Word reads and copies, never a plain reference into shared memory.
#[derive(Debug)]
pub struct Block<'a> {
    cache: &'a Cache,
    /// The region of the buffer (unused in place).
    mem: &'a Region,
    block: u64,
    /// Offset in the region (a buffer) or in the data file's mapping.
    at: usize,
    held: Held<'a>,
}

impl Block<'_> {
    /// The block number.
    pub fn block(&self) -> u64 {
        self.block
    }

    /// Whether this view is the data file itself, through its mapping
    /// (direct mode, nothing copied), rather than a buffer.
    pub fn in_place(&self) -> bool {
        matches!(self.held, Held::InPlace(_))
    }

    /// The mapping of the data file, for an in-place view.
    #[inline(always)]
    fn mapped(&self) -> Option<&Mapping> {
        match self.held {
            Held::InPlace(_) => self.cache.direct.as_ref().map(|d| &d.map),
            Held::Buffer { .. } => None,
        }
    }

    /// The 8-byte word `word` of the block.
    pub fn read_u64(&self, word: usize) -> Result<u64, CacheError> {
        Ok(self.word(word)?.load(Ordering::Relaxed))
    }

    /// The block as 8-byte atomic words (checked once; for loops over a
    /// row). Reads are relaxed loads; a [`WriteGuard`] may store.
    #[inline(always)]
    pub fn words(&self) -> Result<&[AtomicU64], CacheError> {
        let n = self.cache.layout.block_size / 8;
        Ok(match self.mapped() {
            Some(m) => m.atomic_u64s(self.at, n)?,
            None => self.mem.atomic_u64s(self.at, n)?,
        })
    }

    /// Copies `buf.len()` bytes at `offset` of the block (both multiples
    /// of 8).
    pub fn read_into(&self, offset: usize, buf: &mut [u8]) -> Result<(), CacheError> {
        self.check(offset, buf.len())?;
        match self.mapped() {
            Some(m) => m.load_words(self.at + offset, buf)?,
            None => self.mem.load_words(self.at + offset, buf)?,
        }
        Ok(())
    }

    fn word(&self, word: usize) -> Result<&AtomicU64, CacheError> {
        let words = self.cache.layout.block_size / 8;
        if word >= words {
            return Err(CacheError::Config(format!(
                "word {word} is beyond the block's {words} words"
            )));
        }
        Ok(match self.mapped() {
            Some(m) => m.atomic_u64(self.at + word * 8)?,
            None => self.mem.atomic_u64(self.at + word * 8)?,
        })
    }

    fn check(&self, offset: usize, n: usize) -> Result<(), CacheError> {
        match offset.checked_add(n) {
            Some(e) if e <= self.cache.layout.block_size => Ok(()),
            _ => Err(CacheError::Config(format!(
                "range {offset}+{n} is beyond the {}-byte block",
                self.cache.layout.block_size
            ))),
        }
    }
}

/// A block pinned for reading (content lock shared); unpinned on drop.
/// Reads through [`Block`].
#[derive(Debug)]
pub struct ReadGuard<'a>(Block<'a>);

impl<'a> std::ops::Deref for ReadGuard<'a> {
    type Target = Block<'a>;
    fn deref(&self) -> &Block<'a> {
        &self.0
    }
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        match self.0.held {
            // A release that times out (a header lock held past the lock
            // timeout, by a dead process or another attacher) leaves the
            // pin: a drop cannot fail, and that buffer is lost anyway.
            Held::Buffer { state, exclusive } => {
                let _ = lock::release(state, exclusive, self.0.cache.lock_timeout);
            }
            Held::InPlace(stripe) => read_unlock(stripe),
        }
    }
}

/// A block pinned for writing (content lock exclusive); marked dirty and
/// unpinned on drop. Reads through [`Block`].
#[derive(Debug)]
pub struct WriteGuard<'a>(Block<'a>);

impl<'a> std::ops::Deref for WriteGuard<'a> {
    type Target = Block<'a>;
    fn deref(&self) -> &Block<'a> {
        &self.0
    }
}

impl WriteGuard<'_> {
    /// Sets the 8-byte word `word` of the block.
    pub fn write_u64(&self, word: usize, value: u64) -> Result<(), CacheError> {
        self.0.word(word)?.store(value, Ordering::Relaxed);
        Ok(())
    }

    /// Copies `data` into the block at `offset` (both multiples of 8).
    pub fn write_from(&self, offset: usize, data: &[u8]) -> Result<(), CacheError> {
        self.0.check(offset, data.len())?;
        Ok(self.0.mem.store_words(self.0.at + offset, data)?)
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        // A write guard always holds a buffer (`Cache::write`).
        if let Held::Buffer { state, exclusive } = self.0.held {
            // As a read guard's: a timed-out release leaves the pin.
            let _ = lock::release(state, exclusive, self.0.cache.lock_timeout);
        }
    }
}
