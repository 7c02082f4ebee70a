//! The guards: [`ReadGuard`] and [`WriteGuard`] over a [`Block`], which is
//! a pinned, content-locked buffer or (direct mode) the block in place,
//! its stripe lock held. The hit path's pin and lock in one swap, and
//! what a guard's drop releases: [`crate::lock`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use hugeshm_region::Region;
use hugeshm_sys::Mapping;

use super::Cache;
use crate::error::CacheError;
use crate::lock::{self, read_unlock};

impl Cache {
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

    /// Pins block `blk` and takes its content lock exclusive; the buffer
    /// is marked dirty when the guard drops.
    #[inline(always)]
    pub fn write(&self, blk: u64) -> Result<WriteGuard<'_>, CacheError> {
        Ok(WriteGuard(self.guard(blk, true)?))
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
