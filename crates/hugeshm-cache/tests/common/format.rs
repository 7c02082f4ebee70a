//! The cache's format in shared memory as another process attached to the
//! region sees it (the crate's `layout` module is private to it): the
//! offsets and bits that the hostile tests write, as the crate docs state
//! them. `the_format_is_the_one_the_tests_write` (hostile.rs) checks them
//! against a live cache; a test that writes the wrong place fails on the
//! error it expects.

use hugeshm_cache::Layout;

/// Control block fields: offsets from the start of the region's data.
pub mod control {
    /// `u64` `"HSHMCACH"`.
    pub const MAGIC: usize = 0;
    /// `u32` block size.
    pub const BLOCK_SIZE: usize = 12;
    /// `u64` buffers.
    pub const BUFFERS: usize = 16;
    /// `u64` hash buckets.
    pub const BUCKETS: usize = 24;
    /// `u32` partitions.
    pub const PARTITIONS: usize = 32;
    /// `u64` blocks in the data file.
    pub const DATA_BLOCKS: usize = 40;
    /// `u32` mode: 0 classic, 1 direct.
    pub const MODE: usize = 48;
    /// `u32` block regions (0: the blocks are in this one).
    pub const PARTS: usize = 52;
}

/// Descriptor fields: offsets from the start of a descriptor.
pub mod desc {
    /// `u64` state word.
    pub const STATE: usize = 0;
    /// `u64` block number.
    pub const TAG: usize = 8;
}

/// The state word's fields.
pub mod state {
    /// The pin count's mask (bits 0-15).
    pub const REF_MASK: u64 = 0xFFFF;
    /// The header spinlock.
    pub const LOCKED: u64 = 1 << 40;
    /// In the hash table under its tag.
    pub const TAG_VALID: u64 = 1 << 41;
    /// The block's bytes are there.
    pub const VALID: u64 = 1 << 42;
    /// Newer than the data file.
    pub const DIRTY: u64 = 1 << 43;
    /// Being read in.
    pub const IO_IN_PROGRESS: u64 = 1 << 44;
    /// Content lock held by a writer.
    pub const EXCLUSIVE: u64 = 1 << 45;
    /// One shared holder of the content lock (the count in bits 46-63).
    pub const SHARE_ONE: u64 = 1 << 46;
}

/// Writer bit of a partition or stripe lock word (readers count below it).
pub const WRITER: u32 = 1 << 31;

/// Offset of buffer `i`'s descriptor (16 bytes each).
pub fn desc(l: &Layout, i: usize) -> usize {
    l.descs_at + i * 16
}

/// Offset of buffer `i`'s chain link (`u32`: the next buffer + 1).
pub fn link(l: &Layout, i: usize) -> usize {
    l.links_at + i * 4
}

/// Offset of bucket `b`'s head (`u32`: the first buffer + 1).
pub fn bucket(l: &Layout, b: usize) -> usize {
    l.buckets_at + b * 4
}

/// Offset of partition `p`'s lock word (one per 64-byte line).
pub fn partition_lock(l: &Layout, p: usize) -> usize {
    l.partitions_at + (p & (l.partitions - 1)) * 64
}

/// Offset of block `blk`'s stripe lock word (direct mode: 1024 stripes,
/// one per 64-byte line).
pub fn stripe_lock(l: &Layout, blk: u64) -> usize {
    l.stripes_at + (blk % 1024) as usize * 64
}
