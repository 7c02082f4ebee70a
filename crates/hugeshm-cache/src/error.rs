//! What can go wrong, with the numbers.

use std::path::PathBuf;

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
    /// ([`state::REF_MASK`](crate::layout::state::REF_MASK)): guards of
    /// one block held at once, over all processes.
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
}
