//! What can go wrong, with the numbers.

use std::path::PathBuf;
use std::time::Duration;

use hugeshm_region::RegionError;

/// An error of the buffer cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The region refused an access (a bug in the layout, or a region too
    /// small for it).
    #[error(transparent)]
    Region(#[from] RegionError),
    /// Mapping the data file (direct mode) or an access through that
    /// mapping failed.
    #[error("the data file's mapping: {0}")]
    Mapping(#[from] hugeshm_sys::SysError),
    /// Reading or writing the data file failed.
    #[error("{op} block {block} ({bytes} bytes at offset {offset}) of {}: {source}", path.display())]
    Io {
        /// `pread` or `pwrite` (or `open`, `fsync`).
        op: &'static str,
        /// The data file.
        path: PathBuf,
        /// The block.
        block: u64,
        /// Its offset in the file.
        offset: u64,
        /// The block size.
        bytes: usize,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A block number beyond the data file.
    #[error("block {block} is beyond the data file's {blocks} blocks")]
    BlockOutOfRange {
        /// The block asked for.
        block: u64,
        /// Blocks in the data file.
        blocks: u64,
    },
    /// Every buffer stayed pinned through a full clock sweep.
    #[error(
        "no free buffer: all {buffers} buffers stayed pinned through {sweeps} clock passes \
         (more pins held at once than buffers: make the cache larger or hold fewer pins)"
    )]
    NoFreeBuffer {
        /// Buffers in the cache.
        buffers: usize,
        /// Full passes of the clock hand tried.
        sweeps: usize,
    },
    /// A buffer already has as many pins as its state word counts
    /// (65,535, in 16 bits): guards of one block held at once, over all
    /// processes.
    #[error(
        "block {block} is pinned {pins} times already, the most one buffer counts (guards of one \
         block held at once, all processes together: drop some before taking more)"
    )]
    TooManyPins {
        /// The block.
        block: u64,
        /// Its pins.
        pins: u64,
    },
    /// Direct mode: every victim the sweep found was dirty with a block
    /// that is being read in place, so none could be written back.
    #[error(
        "no buffer could be written back: {passed} dirty victims in a row (of {buffers} buffers) \
         hold blocks that are being read in place (a process holding in-place read guards while \
         it writes: drop them first, or make the cache larger)"
    )]
    WriteBackBlocked {
        /// Buffers in the cache.
        buffers: usize,
        /// Victims passed.
        passed: usize,
    },
    /// The region is too small for even one buffer, or the options are
    /// invalid.
    #[error("invalid cache configuration: {0}")]
    Config(String),
    /// The region does not hold an initialized cache of this version.
    #[error("the region holds no buffer cache ({0})")]
    NotACache(String),
    /// A number read from shared memory (a control block field, a
    /// descriptor's block number, a chain link) is out of the range this
    /// process knows from elsewhere (the region's size, the data file's
    /// length, the layout it recomputed): another attacher wrote it, or
    /// the region holds something else. Nothing was read or written with
    /// it.
    #[error(
        "the shared cache metadata is corrupt: {field}{} is {found}, {bound} by {known} \
         (written by another process attached to the region; recreate the cache)",
        buffer.map(|i| format!(" of buffer {i}")).unwrap_or_default()
    )]
    Corrupt {
        /// The field: a control block field by its name (`DATA_BLOCKS`,
        /// `BLOCK_SIZE`, ...), `tag` (a descriptor's block number),
        /// `chain link`.
        field: &'static str,
        /// The buffer whose descriptor or link it is.
        buffer: Option<usize>,
        /// The value found.
        found: u64,
        /// What this process knows it must be.
        bound: Bound,
        /// Where the bound comes from (`the data file's length`, ...).
        known: &'static str,
    },
    /// A lock word or flag in shared memory stayed held for the whole lock
    /// timeout ([`Cache::set_lock_timeout`](crate::Cache::set_lock_timeout)):
    /// a process died or stopped holding it, held a guard that long, or
    /// another attacher wrote the word. The operation did nothing.
    #[error(
        "gave up on the {what} after {waited:?} (the lock timeout): its word stayed {word:#x} \
         (a holder that died or stopped, a guard held that long, or a word another process \
         wrote; a cache with a dead holder must be recreated)"
    )]
    LockTimeout {
        /// The lock or flag waited for (`partition lock`, `stripe lock`,
        /// `buffer header lock`, `content lock`, `read-in`, ...).
        what: &'static str,
        /// The word as last seen.
        word: u64,
        /// How long this process waited after its first spins.
        waited: Duration,
    },
}

/// The range a number read from shared memory must be in
/// ([`CacheError::Corrupt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bound {
    /// Exactly this (a field the opener recomputes).
    Exactly(u64),
    /// From `min` to `max`, both included.
    Within {
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// A power of two from `min` to `max`.
    PowerOfTwo {
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Exactly(v) => write!(f, "expected {v}"),
            Bound::Within { min, max } => write!(f, "expected {min} to {max}"),
            Bound::PowerOfTwo { min, max } => {
                write!(f, "expected a power of two from {min} to {max}")
            }
        }
    }
}
