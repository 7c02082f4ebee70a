//! Pinning a block: the buffer that holds it, or a victim of the clock
//! sweep moved to it and read in. The order of the locks a miss takes,
//! and the steps of a miss: [`crate::lock`].

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::Cache;
use crate::error::CacheError;
use crate::layout::{control, state};
use crate::lock::{
    read_lock, read_unlock, try_lock_header, unlock_header, Wait, PARTITION, STRIPE,
};

use state::{DIRTY, IO_IN_PROGRESS, MAX_USAGE, REF_ONE, TAG_VALID, VALID};

impl Cache {
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

    /// A read in the direct mode: the buffer that holds `blk` (pinned) if
    /// one does, else `None` with `blk`'s stripe lock held shared, so no
    /// write-back changes the block in the file until it is released.
    pub(super) fn pin_or_stripe(&self, blk: u64) -> Result<Result<usize, &AtomicU32>, CacheError> {
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
    pub(super) fn pin_block(&self, blk: u64) -> Result<usize, CacheError> {
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
}

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
