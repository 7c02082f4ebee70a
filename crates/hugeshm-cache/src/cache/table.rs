//! The hash table: bucket chains walked without a lock, a buffer taken
//! out of its chain, the partition locks (the protocol, and why a walk
//! without the lock is only a hint: [`crate::lock`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::Cache;
use crate::error::{Bound, CacheError};
use crate::layout::{desc, DESC_BYTES};
use crate::lock::{write_lock, write_unlock, PARTITION};

/// The hash table's arrays and the descriptors in the region, checked
/// once ([`Cache::tables`]). Links and heads are buffer index + 1 (0: none),
/// relaxed loads: a caller that needs ordering loads through these with
/// its own.
pub(super) struct Tables<'a> {
    pub(super) heads: &'a [AtomicU32],
    /// Two words a buffer: state, tag ([`DESC_BYTES`] = 16).
    pub(super) descs: &'a [AtomicU64],
    pub(super) links: &'a [AtomicU32],
}

const _: () = assert!(DESC_BYTES == 16 && desc::STATE == 0 && desc::TAG == 8);

impl Tables<'_> {
    /// The first link of bucket `b`'s chain.
    #[inline(always)]
    pub(super) fn head(&self, b: usize) -> u32 {
        self.heads.get(b).map_or(0, |h| h.load(Ordering::Acquire))
    }

    /// The buffer a link names, if any (a stale link beyond the buffers
    /// names none).
    #[inline(always)]
    pub(super) fn buffer(&self, link: u32) -> Option<usize> {
        let i = (link as usize).checked_sub(1)?;
        (i < self.links.len()).then_some(i)
    }

    /// The link after buffer `i` in its chain.
    #[inline(always)]
    pub(super) fn next(&self, i: usize) -> u32 {
        self.links.get(i).map_or(0, |n| n.load(Ordering::Acquire))
    }

    /// The buffer holding block `blk`, if any: bucket `b`'s chain, walked
    /// with acquire loads (a chain may change under it; the walk stops
    /// after as many steps as there are buffers, so a cycle a concurrent
    /// relink makes ends, and at a link beyond the buffers).
    #[inline(always)]
    pub(super) fn lookup(&self, b: usize, blk: u64) -> Option<usize> {
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
    pub(super) fn tag(&self, i: usize) -> u64 {
        self.descs
            .get(2 * i + 1)
            .map_or(u64::MAX, |t| t.load(Ordering::Relaxed))
    }
}

impl Cache {
    /// The bucket heads, descriptors and chain links as slices, each
    /// range-checked once: the hot paths index them (one bounds check per
    /// word, no `Result` per word).
    #[inline(always)]
    pub(super) fn tables(&self) -> Result<Tables<'_>, CacheError> {
        let l = &self.layout;
        Ok(Tables {
            heads: self.region.atomic_u32s(l.buckets_at, l.buckets)?,
            descs: self
                .region
                .atomic_u64s(l.descs_at, l.buffers * DESC_BYTES / 8)?,
            links: self.region.atomic_u32s(l.links_at, l.buffers)?,
        })
    }

    /// The buffer holding `blk` in bucket `b`'s chain. With the partition
    /// lock held (shared or exclusive) the answer is right; without it, a
    /// hint to check after pinning (the walk may stray into a chain being
    /// changed; it stops after as many steps as there are buffers).
    #[inline(always)]
    pub(super) fn lookup(&self, b: usize, blk: u64) -> Result<Option<usize>, CacheError> {
        Ok(self.tables()?.lookup(b, blk))
    }

    /// Removes buffer `v` from bucket `b`'s chain (partition lock held
    /// exclusive). Under that lock a chain is whole; a link beyond the
    /// buffers, or a chain longer than the buffers (a loop), is one
    /// another attacher wrote: an error, after at most as many steps as
    /// there are buffers.
    pub(super) fn unlink(&self, b: usize, v: usize) -> Result<(), CacheError> {
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

    pub(super) fn lock_partitions(
        &self,
        a: usize,
        b: Option<usize>,
    ) -> Result<Locked<'_>, CacheError> {
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
}

/// Partition locks held exclusive; released on drop.
pub(super) struct Locked<'a>([Option<&'a AtomicU32>; 2]);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        for l in self.0.iter().rev().flatten() {
            write_unlock(l);
        }
    }
}
