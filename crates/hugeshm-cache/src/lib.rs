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
//! ## The public API
//!
//! - **Make or join a cache**: [`Cache::create`],
//!   [`create_sized`](Cache::create_sized),
//!   [`create_with`](Cache::create_with) (in a [`Mode`]),
//!   [`create_split`](Cache::create_split) (the blocks over per-node
//!   regions); [`Cache::open`], [`open_split`](Cache::open_split);
//!   [`create_data_file`], [`DEFAULT_BLOCK_SIZE`].
//! - **Size the region first**: [`Layout::new`]`(block_size,
//!   buffers).total`, [`Layout::fitting`]; with parts [`Layout::split`],
//!   [`Layout::fitting_split`], [`Layout::part_bytes`].
//! - **Read and write a block**: [`Cache::read`] → [`ReadGuard`],
//!   [`Cache::write`] → [`WriteGuard`], both reading through [`Block`]
//!   (word accesses and copies, never references);
//!   [`Cache::read_with`], a short look with no lock on a hit
//!   ([`OPTIMISTIC_TRIES`]).
//! - **Loops over many blocks**: [`Cache::lookups`] → [`Lookups`]
//!   (`prefetch`, `read_with`); [`Cache::prefetch`] with [`Prefetch`]
//!   steps.
//! - **Make the data file current**: [`Cache::checkpoint`].
//! - **How long to wait** for a lock another process holds:
//!   [`Cache::set_lock_timeout`], [`DEFAULT_LOCK_TIMEOUT`].
//! - **What a handle is and did**: [`Cache::layout`], [`mode`](Cache::mode),
//!   [`data_is_dax`](Cache::data_is_dax),
//!   [`data_mapping`](Cache::data_mapping),
//!   [`data_blocks`](Cache::data_blocks), [`region`](Cache::region),
//!   [`parts`](Cache::parts), [`into_region`](Cache::into_region),
//!   [`into_regions`](Cache::into_regions); [`Cache::stats`] ([`Stats`]),
//!   [`reset_stats`](Cache::reset_stats).
//! - **Errors**: [`CacheError`] (with [`Bound`]).
//!
//! The rest is the crate's own. For those who change it: the format in
//! shared memory is in `layout.rs`; the lock protocol (the order of the
//! locks, the hit and the miss, optimistic reads, bounded waits, the
//! invariants) in the docs of `lock.rs`, beside the locks; what `open`
//! checks in `validate.rs`; `cache/mod.rs` lists the handle's rooms.
//!
//! ## Numbers read from shared memory
//!
//! Any process attached to the region may write any of it (how the
//! locks bound every wait for a word it holds: `lock.rs`). At
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
//! there. An in-place reader holds the block's stripe lock shared until
//! its guard drops, and a write-back of that block waits for it (so a
//! reader never sees a half-written block): holding in-place read guards
//! never stalls another process's miss (its sweep passes to another
//! victim), but [`Cache::checkpoint`] waits for them.
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
