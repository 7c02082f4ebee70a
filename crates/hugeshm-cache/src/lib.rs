//! # hugeshm-cache
//!
//! A shared buffer cache in one hugeshm [`Region`](hugeshm_region::Region)
//! (or with its blocks spread over several, one per NUMA node:
//! [`Cache::create_split`]):
//! what PostgreSQL calls `shared_buffers` and Oracle the SGA's database
//! buffers. Fixed-size blocks of a data file are cached in the region; any
//! number of processes (forked, or attached by name) read and write them
//! at once; a miss reads the block with `pread`, a dirty block is written
//! back with `pwrite` when its buffer is taken for another block and at
//! [`Cache::checkpoint`]. Meant as code a server author can start from.
//!
//! ```no_run
//! use hugeshm_cache::{create_data_file, Cache, DEFAULT_BLOCK_SIZE};
//! use hugeshm_region::{Backend, RegionBuilder};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let data = std::path::Path::new("/var/tmp/example.data");
//! create_data_file(data, 1024, DEFAULT_BLOCK_SIZE, |blk, b| b[..8].copy_from_slice(&blk.to_le_bytes()))?;
//! let (region, _) = RegionBuilder::new(1 << 20).backend(Backend::Posix).name("example-cache").create()?;
//! let cache = Cache::create(region, data, DEFAULT_BLOCK_SIZE)?;
//! // Another process: Cache::open(Region::attach("example-cache", Backend::Posix)?, data)?
//! {
//!     let w = cache.write(7)?;          // pinned, content lock exclusive
//!     w.write_u64(1, w.read_u64(1)? + 1)?;
//! }                                     // marked dirty, unlocked, unpinned
//! assert_eq!(cache.read(7)?.read_u64(0)?, 7);
//! // A short read with no lock or pin on a hit (checked, retried if a
//! // writer was there): what a server uses to look at a row.
//! let w1 = cache.read_with(7, |w| w[1].load(std::sync::atomic::Ordering::Relaxed))?;
//! assert_eq!(w1, 1);
//! cache.checkpoint()?;                  // dirty blocks to the file, fdatasync
//! cache.into_region().destroy()?;
//! # Ok(()) }
//! ```
//!
//! ## Layout in shared memory
//!
//! Everything is at fixed offsets from the start of the region's data
//! ([`Layout`]); nothing in shared memory is a pointer, so every process
//! may map the region at a different address. Links are buffer indexes + 1
//! (0 = none).
//!
//! | offset | what |
//! |---|---|
//! | 0 | control block (4 KiB): magic `HSHMCACH`, version, block size, buffers, buckets, partitions, data-file blocks, `ready`; the clock hand on its own cache line |
//! | 4096 | partition locks: one reader-writer lock word per 64-byte line, up to 1024 |
//! | `stripes_at` | stripe locks of the direct mode, as many as partitions, one per line: block `b` has stripe `b mod partitions` |
//! | `buckets_at` | hash bucket heads, `u32` each (a power of two, ≥ 2 × buffers, so chains are short) |
//! | `descs_at` | buffer descriptors, 16 bytes each (four to a line, dense so they stay in the CPU's caches): `state` (u64, with the content lock), `tag` (block number, u64) |
//! | `links_at` | chain links, `u32` each: the next buffer in the hash chain |
//! | `blocks_at` | the blocks, `block_size` each, aligned to the block size |
//!
//! With parts ([`Cache::create_split`], `control::PARTS` = k), the region
//! ends after the descriptors and buffer `i`'s block is block `i / k` of
//! part `i mod k`: per-node regions (`RegionBuilder::create_per_node`)
//! give every node an equal share of the buffers, and the clock sweep,
//! moving over the descriptors in order, takes victims from every node in
//! turn. Only the blocks move; the hash table, descriptors and locks stay
//! in the control region.
//!
//! The state word packs the pin count (bits 0–15: at most 65,535 pins on
//! one buffer, all processes together; one more is
//! [`CacheError::TooManyPins`], never a wrap), the usage count (16–19, at
//! most 5), the write version (20–39), the flags `LOCKED` (the
//! descriptor's spinlock), `TAG_VALID` (the buffer is in the hash table
//! under `tag`), `VALID` (the block's bytes are there), `DIRTY`,
//! `IO_IN_PROGRESS` (40–44), and the content lock: `EXCLUSIVE` (45) and the
//! count of shared holders (46–63) (`layout::state`). Pin and content
//! lock in one word let a hit pin and lock with one compare-and-swap, and
//! unlock and unpin with another. The version goes up (wrapping in its 20
//! bits) whenever a writer releases the content lock and whenever the
//! buffer is given another block, in the same atomic step as the rest of
//! that change: an optimistic reader compares it (layout version 6; a
//! cache of an older layout is refused with its version).
//!
//! ## Lock protocol
//!
//! Four kinds of lock, all atomics in the region, always taken in this
//! order (never the other way round):
//!
//! 1. **Partition lock** of a hash bucket (reader-writer word): exclusive
//!    to insert or remove a buffer in a chain, shared for a lookup that
//!    must be sure. A miss that moves a buffer from one block to another
//!    takes both partitions, lower index first.
//! 2. **Pin** (the pin count, changed by compare-and-swap while `LOCKED`
//!    is clear): a pinned buffer is never given another block; a pin also
//!    raises the usage count. A lookup first walks the chain *without* the
//!    partition lock, pins the buffer it finds and then checks that it
//!    still holds the block and `TAG_VALID` (a retag happens under the
//!    header lock and only to a buffer pinned once, so the pin either lands
//!    first and the retag gives up, or lands after and the check fails).
//!    When that finds nothing, the lookup is done again under the
//!    partition lock shared, pinning before the lock is released.
//! 3. **Content lock** (`EXCLUSIVE` and the shared count in the state
//!    word), only while pinned: [`Cache::read`] takes it shared,
//!    [`Cache::write`] exclusive; a write-back copies the block under it
//!    shared. Like a pin, it changes by compare-and-swap while `LOCKED` is
//!    clear. The hit path takes pin and lock in one swap: it walks the
//!    chain without the partition lock, reads the state and checks
//!    `TAG_VALID`, `VALID` and the tag, and swaps that state for one with
//!    a pin more and the lock taken (waiting, unpinned, while the lock is
//!    held against it); once pinned it reads the tag again, since a buffer
//!    retagged twice may come back to the same state word, and lets go if
//!    it changed. A guard's drop releases lock and pin in one swap, a
//!    writer's setting `DIRTY` in the same step. A buffer being read in
//!    (or not found this way) takes the path below: pin, wait for
//!    `VALID`, then the lock.
//! 4. **Header spinlock** (`LOCKED` bit of the state): held for a few
//!    instructions to change flags or tag, or to check that a victim is
//!    pinned by nobody else. Nothing else is taken while it is held.
//!
//! ### Every wait is bounded
//!
//! A waiter spins 64 times, then yields the CPU; from its first yield it
//! looks at the clock, and after the handle's lock timeout
//! ([`Cache::set_lock_timeout`], [`DEFAULT_LOCK_TIMEOUT`] 10 s) the
//! operation returns [`CacheError::LockTimeout`] naming what it waited
//! for (partition lock, stripe lock, buffer header lock, content lock,
//! another process's read-in) and the word as last seen, having undone
//! what it held. That covers every loop on a shared word: the lock words,
//! pins and content locks (a compare-and-swap that keeps failing looks at
//! the clock every 1,024 failures), the wait for `IO_IN_PROGRESS` to end,
//! and a miss that keeps finding the table changed under it. The clock
//! sweep does not wait at all: a buffer whose header lock is held is
//! passed like a pinned one. An uncontended acquire and an optimistic
//! read never read the clock. The words record no holder (no bit is free
//! in the state word, and a pid read from shared memory is itself any
//! number an attacher wrote), so there is no liveness check: a holder
//! that died is found by the timeout. A guard's drop cannot fail: a
//! release that times out leaves the pin (that buffer is lost anyway).
//!
//! ### Numbers read from shared memory
//!
//! Any process attached to the region may write any of it. At
//! [`Cache::open`] every field of the control block is checked against
//! what the opener knows by itself (`validate.rs`), before anything is
//! mapped or read with it: `PARTS` equals the parts given; `BLOCK_SIZE` is
//! a power of two from 64 bytes to 1 GiB; `BUFFERS` is at least 1 and at
//! most what the region (and each part) holds at that block size, so the
//! layout recomputed from them fits the region and no offset overflows;
//! `BUCKETS` and `PARTITIONS` equal that layout's; `DATA_BLOCKS` is at
//! least 1 and at most the data file's length (`fstat` of the opened,
//! regular file) in blocks, so the direct mode never maps, and the classic
//! mode never reads, past the file's end; `MODE` is 0 or 1. A field out of
//! range is [`CacheError::Corrupt`] with its name, the value and the
//! bound. At run time the opener's own numbers bound everything: a block
//! number a caller asks for is checked against `DATA_BLOCKS` as it was
//! checked at open; bucket, partition and stripe indexes are computed from
//! the block number; the clock hand is taken modulo the buffers. A chain
//! link beyond the buffers ends a lookup (a miss, which is what a stale
//! link means too), and a lookup walks at most as many links as there are
//! buffers. Under the partition lock, where a chain must be whole, a link
//! beyond the buffers or a chain that loops is [`CacheError::Corrupt`]. A
//! descriptor's block number is only compared with the one asked for,
//! except at a write-back, where it is checked against the data file
//! first (a tag beyond it is [`CacheError::Corrupt`]; nothing is written).
//! Arithmetic on a state word wraps rather than overflows.
//!
//! So another attacher can corrupt data (every byte of the region is
//! writable by it: blocks, tags that name another block, pins that keep a
//! buffer, locks it never releases) and make operations fail, but not
//! crash or hang another process, nor make it read or write outside the
//! region, the data file's mapping or the data file's blocks. (A data
//! file truncated under the direct mode is another matter: see below.)
//!
//! ## Optimistic reads
//!
//! [`Cache::read_with`] reads a block with no lock, no pin and no store to
//! shared memory on a hit (the "optimistic latch" of LeanStore and Umbra,
//! a seqlock per buffer): it walks the chain as the hit path does, loads
//! the state (acquire: `TAG_VALID | VALID`, no `EXCLUSIVE`, no `LOCKED`,
//! the tag the block), runs the caller's closure over the block's words
//! (relaxed atomic loads), then an acquire fence, and loads state and tag
//! again. The read counts when the version and the flags `TAG_VALID`,
//! `VALID`, `IO_IN_PROGRESS` and `EXCLUSIVE` are unchanged and the tag is
//! still the block (`layout::state::STABLE`); pins, shares, usage and
//! `DIRTY` may change beside it. Otherwise the closure runs again, and
//! after [`OPTIMISTIC_TRIES`] attempts the read takes a pin and the
//! content lock shared, so a block written all the time cannot starve it.
//! Why that is enough: every store to a buffer's bytes comes after a
//! release fence that follows a change of the state's stable part (a
//! writer sets `EXCLUSIVE`, then fences, writes, and releases with the
//! version raised; a retag raises the version, then fences, then reads the
//! block in; a retag fences before it stores the tag). A closure load that
//! saw such a store makes that fence synchronize with the reader's acquire
//! fence, so the second state load sees the change. The closure may see a
//! torn block on an attempt that then fails, so it must only load and
//! compute or copy; only a checked attempt's result is returned. A miss, a
//! block being read in and the direct mode take the pinned path. The
//! usage count goes up by one compare-and-swap, not retried, and only
//! while below its maximum: a block read all the time costs no store.
//!
//! A **miss**: the clock hand sweeps the descriptors; a buffer pinned by
//! nobody with usage count 0 is the victim (pinned by the sweeper under
//! its header lock), one with a higher count has it lowered and is passed.
//! A dirty victim is written back (under its content lock, `DIRTY`
//! cleared before the copy). Then the sweeper takes the partition locks,
//! looks the block up again (another process may have read it in
//! meanwhile: then it uses that buffer and lets the victim go), checks
//! under the header lock that the victim is still pinned once and clean
//! (else retries), moves it to the new chain with `TAG_VALID |
//! IO_IN_PROGRESS`, releases the partition locks and reads the block.
//! Processes that find a buffer with `IO_IN_PROGRESS` wait for `VALID`;
//! a failed read takes the buffer out of the table again and they retry.
//!
//! ## Invariants
//!
//! - A buffer is in at most one chain, the one of `bucket_of(tag)`, exactly
//!   when `TAG_VALID` is set; a block is in at most one buffer.
//! - Tag and chain links change only under the partition lock(s)
//!   exclusive and only for a buffer pinned once, by the process changing
//!   them.
//! - The bytes of a `VALID` buffer change only under its content lock
//!   exclusive; `DIRTY` is set in the same atomic step that releases that
//!   lock, so a write-back either copies the new bytes or leaves `DIRTY`
//!   set.
//! - A buffer's bytes or tag never change while its state's stable part
//!   (version and the flags above) stays the same: a writer holds
//!   `EXCLUSIVE` and raises the version when it lets go, a retag raises it
//!   before the block is read in.
//! - Every holder of a content lock, shared or exclusive, holds a pin too,
//!   so a buffer pinned by no one has its content lock free.
//! - The data file holds every block not `DIRTY` in the cache: a dirty
//!   block is written before its buffer leaves the table.
//!
//! ## Limits a server adds on top
//!
//! A process that dies while holding a lock or a pin leaves it held (as in
//! PostgreSQL, whose postmaster then resets shared memory): the others'
//! waits for it end in [`CacheError::LockTimeout`], and a server restarts
//! the cache after a crashed worker. There is no write-ahead log:
//! [`Cache::checkpoint`] makes the data file current but not atomic. Block
//! copies and word accesses go through [`Region`](hugeshm_region::Region)'s
//! bounds-checked atomic accessors, which hugeshm-sys implements; this
//! crate has no `unsafe`.
//!
//! ## Classic and direct mode
//!
//! In the classic mode ([`Mode::Classic`]) every block is read with
//! `pread` into a buffer. The direct mode ([`Mode::Direct`], Oracle's
//! "directly mapped buffer cache" for data files on persistent memory)
//! maps the whole data file shared in every process; a read of a block
//! that is in no buffer hands out the same [`Block`] view over the
//! mapping, copying nothing ([`Stats::direct_reads`]). On a file system
//! mounted `-o dax` that mapping is the device's memory; elsewhere it is
//! the page cache ([`Cache::data_is_dax`] says which).
//!
//! Writes in the direct mode go through a buffer, as in the classic mode:
//! [`Cache::write`] copies the block out of the mapping into a buffer (a
//! physical read), the writer changes the buffer, and the block goes back
//! to the file with `pwrite` at eviction or checkpoint (then `fdatasync`).
//! So the file changes only at a write-back, never under a guard, and a
//! write is as durable as in the classic mode (not byte by byte with
//! cache-line flushes: a server adds a log for that). Readers look in the
//! table first: a block in a buffer (perhaps newer than the file) is read
//! there. An in-place reader holds the block's **stripe lock** shared,
//! taken before it checks the table and kept until its guard drops; a
//! write-back takes it exclusive (so a reader never sees a half-written
//! block) before the content lock. The stripe comes first in the order of
//! locks above; a sweeper that finds a dirty victim's stripe held passes
//! to another victim rather than wait, so holding in-place read guards
//! never stalls another process's miss, but [`Cache::checkpoint`] waits.
//! Data file and mapping must keep their length (a truncated file raises
//! SIGBUS in the readers).
//!
//! The guards hand out word accesses and copies of a block, never plain
//! references, in both modes.
//!
//! ## Prefetching lookups
//!
//! On a cache far larger than the CPU caches a hit costs three memory
//! accesses that depend on each other (bucket, descriptor, row), and a
//! lookup's instructions (pin and lock included) fill the CPU's window of
//! instructions in flight before it reaches the next lookup's first
//! access, so the CPU cannot overlap them by itself as it does for a flat
//! array. A caller that knows its next
//! blocks (a batch of keys, an index scan) names each one to
//! [`Cache::prefetch`] a few operations ahead, one [`Prefetch`] step at a
//! time: the bucket, then the descriptor it names, then the row. The
//! accesses of several lookups then wait for memory together. A prefetch
//! takes no lock and reads links that may be stale: a hint, never wrong,
//! only sometimes useless. `hugeshm bench oltp`'s loop does it, and reads
//! with [`Cache::read_with`].
//!
//! A loop over many blocks takes one [`Lookups`] first
//! ([`Cache::lookups`]) and calls its `prefetch` and `read_with`: the same
//! as the cache's, with the hash table and descriptors range-checked once
//! instead of at every call. Keep the code around a hit small: the hit
//! waits on memory, and how many hits the CPU keeps in flight depends on
//! how many instructions separate them. In `bench oltp` over 8 GiB, the
//! per-call checks, hints through closures that were not inlined, and the
//! pinned fall-back inlined into the loop together held the cache at
//! 1.8-2.3x the raw loop; without them it runs at 1.1-1.3x.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cache;
mod error;
mod layout;
mod lock;
mod validate;

pub use cache::{
    create_data_file, Block, Cache, Lookups, Mode, Prefetch, ReadGuard, Stats, WriteGuard,
    DEFAULT_BLOCK_SIZE, OPTIMISTIC_TRIES,
};
pub use error::{Bound, CacheError};
pub use layout::Layout;
pub use lock::DEFAULT_LOCK_TIMEOUT;
