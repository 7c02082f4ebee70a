//! The hot path: [`Lookups`], with the optimistic read
//! ([`Cache::read_with`]) and the prefetch hints ([`Cache::prefetch`]).
//! Why an optimistic read that passes its check read one version of the
//! block: [`crate::lock`]. Keep the code of a hit small and its slow paths
//! out of line (`#[cold]`, `#[inline(never)]`): see the crate docs'
//! "Prefetching lookups".

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::table::Tables;
use super::Cache;
use crate::error::CacheError;
use crate::layout::{state, Layout};

use state::{EXCLUSIVE, LOCKED, MAX_USAGE, TAG_VALID, VALID};

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

/// A cache's lookup path with its arrays checked once
/// ([`Cache::lookups`]): hints and optimistic reads for a loop over many
/// blocks. Borrows the cache; take one per loop, not per block. Its hits
/// are counted here and added to the cache's [`Stats`](super::Stats) when it drops.
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

impl Cache {
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
