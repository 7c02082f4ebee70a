//! The lock protocol of the cache, in one place, and the locks it is made
//! of. The rules below bind the code in `cache/`, each naming the room
//! that keeps it; the functions here are the locks themselves, each one
//! atomic word in the region, which every process maps (no process-local
//! pointer, no kernel object): the reader-writer words of stripes and
//! partitions, and the locks in a buffer's state word (the header
//! spinlock, pins, the content lock, the wait for a read-in). The bits of
//! the state word are in `layout.rs` (`layout::state`).
//!
//! # The locks, in the order they are taken
//!
//! Five kinds of lock, always taken in this order (never the other way
//! round):
//!
//! 1. **Stripe lock** of a block (direct mode only; a reader-writer word,
//!    [`read_lock`], [`write_lock`]; block `b` has stripe `b mod 1024`).
//!    An in-place reader holds it shared from before it checks the table
//!    until its guard drops (`Cache::pin_or_stripe` in
//!    `cache/replacement.rs`, released by the guard in `cache/guard.rs`),
//!    so what the table said stays true meanwhile: a block leaves the
//!    table only after its write-back, and a write-back takes the stripe
//!    exclusive before the content lock (`Cache::flush`, `cache/io.rs`),
//!    so a reader never sees a half-written block. A sweeper that finds a
//!    dirty victim's stripe held passes to another victim rather than
//!    wait ([`try_write_lock`], `Cache::claim`): in-place read guards
//!    never stall another process's miss, but a checkpoint waits for
//!    them.
//! 2. **Partition lock** of a hash bucket (a reader-writer word):
//!    exclusive to insert or remove a buffer in a chain, shared for a
//!    lookup that must be sure. A miss that moves a buffer from one block
//!    to another takes both partitions, lower index first
//!    (`Cache::lock_partitions`, `cache/table.rs`).
//! 3. **Pin** (the pin count, changed by compare-and-swap while `LOCKED`
//!    is clear: [`pin`], [`unpin`]): a pinned buffer is never given
//!    another block; a pin also raises the usage count. A lookup first
//!    walks the chain *without* the partition lock, pins the buffer it
//!    finds and then checks that it still holds the block and `TAG_VALID`
//!    (`Cache::find_pinned`): a retag happens under the header lock and
//!    only to a buffer pinned once, so the pin either lands first and the
//!    retag gives up, or lands after and the check fails. When that finds
//!    nothing, the lookup is done again under the partition lock shared,
//!    pinning before the lock is released (`Cache::pin_block_locked`).
//! 4. **Content lock** (`EXCLUSIVE` and the shared count in the state
//!    word; [`lock_content`], [`unlock_content`]), only while pinned:
//!    [`Cache::read`](crate::Cache::read) takes it shared,
//!    [`Cache::write`](crate::Cache::write) exclusive; a write-back copies
//!    the block under it shared. Like a pin, it changes by
//!    compare-and-swap while `LOCKED` is clear. The hit path takes pin and
//!    lock in one swap ([`pin_and_lock`], from `cache/guard.rs`): it walks
//!    the chain without the partition lock, reads the state and checks
//!    `TAG_VALID`, `VALID` and the tag, and swaps that state for one with
//!    a pin more and the lock taken (waiting, unpinned, while the lock is
//!    held against it); once pinned it reads the tag again, since a buffer
//!    retagged twice may come back to the same state word, and lets go if
//!    it changed. A guard's drop releases lock and pin in one swap
//!    ([`release`]), a writer's setting `DIRTY` and raising the version in
//!    the same step. A buffer being read in (or not found this way) takes
//!    the slow path: pin, wait for `VALID` ([`wait_valid`]), then the
//!    lock.
//! 5. **Header spinlock** (`LOCKED` bit of the state; [`lock_header`],
//!    [`try_lock_header`], [`unlock_header`]): held for a few instructions
//!    to change flags or tag, or to check that a victim is pinned by
//!    nobody else. Nothing else is taken while it is held.
//!
//! # Every wait is bounded
//!
//! Every wait here is a [`Wait`]: a waiter spins 64 times, then yields
//! the CPU (a lock holder may be descheduled when there are more processes
//! than cores); from its first yield it looks at the clock, and after the
//! handle's lock timeout
//! ([`Cache::set_lock_timeout`](crate::Cache::set_lock_timeout),
//! [`DEFAULT_LOCK_TIMEOUT`] 10 s) the operation returns
//! [`CacheError::LockTimeout`] naming what it waited for (partition lock,
//! stripe lock, buffer header lock, content lock, another process's
//! read-in) and the word as last seen, having undone what it held. A word
//! in shared memory may be held by a process that died, or written by any
//! attacher, so no wait may be forever. That covers every loop on a
//! shared word: the lock words, pins and content locks (a compare-and-swap
//! that keeps failing, another process changing the word all the time,
//! looks at the clock every [`RETRIES_PER_CHECK`] failures), the wait for
//! `IO_IN_PROGRESS` to end, and a miss that keeps finding the table
//! changed under it (`cache/replacement.rs`). The clock sweep does not
//! wait at all: a buffer whose header lock is held is passed like a pinned
//! one. An uncontended acquire, a short spin and an optimistic read never
//! read the clock. The words record no holder (no bit is free in the state
//! word, and a pid read from shared memory is itself any number an
//! attacher wrote), so there is no liveness check: a holder that died is
//! found by the timeout. A guard's drop cannot fail: a release that times
//! out leaves the pin (that buffer is lost anyway).
//!
//! # A miss
//!
//! In `cache/replacement.rs`: the clock hand sweeps the descriptors
//! (`Cache::victim`); a buffer pinned by nobody with usage count 0 is the
//! victim (pinned by the sweeper under its header lock), one with a higher
//! count has it lowered and is passed. A dirty victim is written back
//! (`cache/io.rs`: under its content lock, `DIRTY` cleared before the
//! copy). Then the sweeper takes the partition locks, looks the block up
//! again (another process may have read it in meanwhile: then it uses
//! that buffer and lets the victim go), checks under the header lock that
//! the victim is still pinned once and clean (else retries), moves it to
//! the new chain with `TAG_VALID | IO_IN_PROGRESS` and a new version,
//! releases the partition locks and reads the block (`Cache::claim`, then
//! `Cache::fill`). Processes that find a buffer with `IO_IN_PROGRESS` wait
//! for `VALID`; a failed read takes the buffer out of the table again and
//! they retry.
//!
//! # Optimistic reads
//!
//! In `cache/lookups.rs`: [`Cache::read_with`](crate::Cache::read_with)
//! reads a block with no lock, no pin and no store to shared memory on a
//! hit (the "optimistic latch" of LeanStore and Umbra, a seqlock per
//! buffer): it walks the chain as the hit path does, loads the state
//! (acquire: `TAG_VALID | VALID`, no `EXCLUSIVE`, no `LOCKED`, the tag the
//! block), runs the caller's closure over the block's words (relaxed
//! atomic loads), then an acquire fence, and loads state and tag again.
//! The read counts when the version and the flags `TAG_VALID`, `VALID`,
//! `IO_IN_PROGRESS` and `EXCLUSIVE` are unchanged and the tag is still the
//! block (`layout::state::STABLE`); pins, shares, usage and `DIRTY` may
//! change beside it. Otherwise the closure runs again, and after
//! [`OPTIMISTIC_TRIES`](crate::OPTIMISTIC_TRIES) attempts the read takes a
//! pin and the content lock shared, so a block written all the time cannot
//! starve it. Why that is enough: every store to a buffer's bytes comes
//! after a release fence that follows a change of the state's stable part
//! (a writer sets `EXCLUSIVE`, then fences, writes, and releases with the
//! version raised: [`lock_content`], [`pin_and_lock`], [`release`]; a
//! retag raises the version, then fences, then reads the block in; a retag
//! fences before it stores the tag: `Cache::claim`). A closure load that
//! saw such a store makes that fence synchronize with the reader's acquire
//! fence, so the second state load sees the change. The closure may see a
//! torn block on an attempt that then fails, so it must only load and
//! compute or copy; only a checked attempt's result is returned. A miss, a
//! block being read in and the direct mode take the pinned path. The
//! usage count goes up by one compare-and-swap, not retried, and only
//! while below its maximum: a block read all the time costs no store.
//!
//! # Invariants
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

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::CacheError;
use crate::layout::state::{
    self, EXCLUSIVE, IO_IN_PROGRESS, LOCKED, MAX_USAGE, REF_ONE, SHARE_ONE, TAG_VALID, VALID,
};

/// Writer bit of a reader-writer lock word; the readers count below it.
pub(crate) const WRITER: u32 = 1 << 31;

/// How long a process waits for a lock or flag in shared memory before it
/// gives up with [`CacheError::LockTimeout`], unless
/// [`Cache::set_lock_timeout`](crate::Cache::set_lock_timeout) says
/// otherwise: far longer than any lock of the protocol is held between
/// two live processes (a few instructions, a block's `pread`), shorter
/// than an operator waits for a hung server.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Spins before a waiter starts to yield (and to look at the clock).
const SPINS: u32 = 64;

/// Failed compare-and-swaps between two looks at the clock.
const RETRIES_PER_CHECK: u32 = 1024;

/// One bounded wait for a word in shared memory: the back-off of each
/// failed attempt and the deadline.
pub(crate) struct Wait {
    limit: Duration,
    what: &'static str,
    tries: u32,
    retries: u32,
    since: Option<Instant>,
}

impl Wait {
    /// A wait for `what` of at most `limit` (after the spins).
    #[inline(always)]
    pub(crate) fn new(limit: Duration, what: &'static str) -> Wait {
        Wait {
            limit,
            what,
            tries: 0,
            retries: 0,
            since: None,
        }
    }

    /// One attempt found the word `word` held: spin for the first tries,
    /// then yield; the error once the lock timeout has passed.
    #[inline(always)]
    pub(crate) fn pause(&mut self, word: u64) -> Result<(), CacheError> {
        self.pause_as(word, self.what)
    }

    /// [`pause`](Wait::pause) for another lock of the same word (the
    /// header lock, while waiting for a content lock): the error names
    /// `what`.
    #[inline(always)]
    pub(crate) fn pause_as(&mut self, word: u64, what: &'static str) -> Result<(), CacheError> {
        if self.tries < SPINS {
            self.tries += 1;
            std::hint::spin_loop();
            Ok(())
        } else {
            self.yield_or_give_up(word, what)
        }
    }

    /// A compare-and-swap failed (the word changed under it): try again
    /// at once, but look at the clock now and then.
    #[inline(always)]
    pub(crate) fn retry(&mut self, word: u64) -> Result<(), CacheError> {
        self.retries = self.retries.wrapping_add(1);
        if self.retries % RETRIES_PER_CHECK == 0 {
            self.check(word, self.what)
        } else {
            Ok(())
        }
    }

    #[cold]
    #[inline(never)]
    fn yield_or_give_up(&mut self, word: u64, what: &'static str) -> Result<(), CacheError> {
        self.check(word, what)?;
        std::thread::yield_now();
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn check(&mut self, word: u64, what: &'static str) -> Result<(), CacheError> {
        let now = Instant::now();
        let waited = now - *self.since.get_or_insert(now);
        if waited >= self.limit {
            return Err(CacheError::LockTimeout { what, word, waited });
        }
        Ok(())
    }
}

/// Takes `w` shared.
#[inline]
pub(crate) fn read_lock(
    w: &AtomicU32,
    limit: Duration,
    what: &'static str,
) -> Result<(), CacheError> {
    let mut wait = Wait::new(limit, what);
    loop {
        let s = w.load(Ordering::Relaxed);
        if s & WRITER == 0
            && w.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return Ok(());
        }
        wait.pause(s.into())?;
    }
}

/// Releases a shared hold of `w`.
#[inline]
pub(crate) fn read_unlock(w: &AtomicU32) {
    w.fetch_sub(1, Ordering::Release);
}

/// Takes `w` exclusive.
#[inline]
pub(crate) fn write_lock(
    w: &AtomicU32,
    limit: Duration,
    what: &'static str,
) -> Result<(), CacheError> {
    let mut wait = Wait::new(limit, what);
    loop {
        let s = w.load(Ordering::Relaxed);
        if s == 0
            && w.compare_exchange_weak(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return Ok(());
        }
        wait.pause(s.into())?;
    }
}

/// Takes `w` exclusive if no one holds it; false otherwise.
#[inline]
pub(crate) fn try_write_lock(w: &AtomicU32) -> bool {
    w.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// Releases an exclusive hold of `w`.
#[inline]
pub(crate) fn write_unlock(w: &AtomicU32) {
    w.store(0, Ordering::Release);
}

/// What the header spinlock's waits are called in a
/// [`CacheError::LockTimeout`].
const HEADER: &str = "buffer header lock";

/// Sets the `LOCKED` bit of a buffer state word, returning the state with
/// it set.
#[inline]
pub(crate) fn lock_header(s: &AtomicU64, limit: Duration) -> Result<u64, CacheError> {
    let mut wait = Wait::new(limit, HEADER);
    loop {
        let old = s.fetch_or(LOCKED, Ordering::Acquire);
        if old & LOCKED == 0 {
            return Ok(old | LOCKED);
        }
        wait.pause(old)?;
    }
}

/// Sets the `LOCKED` bit if it is clear: the state with it set, or `None`
/// (nothing changed) when another process holds it.
#[inline]
pub(crate) fn try_lock_header(s: &AtomicU64) -> Option<u64> {
    let old = s.fetch_or(LOCKED, Ordering::Acquire);
    (old & LOCKED == 0).then_some(old | LOCKED)
}

/// Stores `new` (without `LOCKED`) into a state word this process locked.
#[inline]
pub(crate) fn unlock_header(s: &AtomicU64, new: u64) {
    s.store(new & !LOCKED, Ordering::Release);
}

/// The state word once it is not header-locked (acquire).
#[inline(always)]
fn unlocked(st: &AtomicU64, wait: &mut Wait) -> Result<u64, CacheError> {
    loop {
        let v = st.load(Ordering::Acquire);
        if v & LOCKED == 0 {
            return Ok(v);
        }
        wait.pause_as(v, HEADER)?;
    }
}

/// Replaces the state word `s` by `f(s)` in one compare-and-swap taken
/// while the header spinlock is free (release ordering), retrying until it
/// lands or the lock timeout passes. `f` must not panic on any word (the
/// word may be anything another process wrote): it uses wrapping
/// arithmetic.
#[inline(always)]
pub(crate) fn change_unlocked(
    st: &AtomicU64,
    limit: Duration,
    f: impl Fn(u64) -> u64,
) -> Result<(), CacheError> {
    let mut wait = Wait::new(limit, HEADER);
    loop {
        let s = unlocked(st, &mut wait)?;
        if st
            .compare_exchange_weak(s, f(s), Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        wait.retry(s)?;
    }
}

/// Pins the buffer of state `st`, which holds block `blk` (one more
/// reference; the usage count goes up when `bump`); refused when its count
/// is full.
#[inline(always)]
pub(crate) fn pin(st: &AtomicU64, bump: bool, blk: u64, limit: Duration) -> Result<(), CacheError> {
    let mut wait = Wait::new(limit, HEADER);
    loop {
        let s = unlocked(st, &mut wait)?;
        if !state::can_pin(s) {
            return Err(CacheError::TooManyPins {
                block: blk,
                pins: state::refs(s),
            });
        }
        let mut n = s + REF_ONE;
        if bump && state::usage(s) < MAX_USAGE {
            n = state::with_usage(n, state::usage(s) + 1);
        }
        if st
            .compare_exchange_weak(s, n, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        wait.retry(s)?;
    }
}

/// Lets go of a pin.
#[inline(always)]
pub(crate) fn unpin(st: &AtomicU64, limit: Duration) -> Result<(), CacheError> {
    change_unlocked(st, limit, |s| s.wrapping_sub(REF_ONE))
}

/// Waits while another process reads the block in: true when the buffer
/// holds it, false when that read failed.
#[inline(always)]
pub(crate) fn wait_valid(st: &AtomicU64, limit: Duration) -> Result<bool, CacheError> {
    let mut wait = Wait::new(
        limit,
        "read-in of a block by another process (IO_IN_PROGRESS)",
    );
    loop {
        let s = st.load(Ordering::Acquire);
        if s & VALID != 0 {
            return Ok(true);
        }
        if s & IO_IN_PROGRESS == 0 {
            return Ok(false);
        }
        wait.pause(s)?;
    }
}

/// What the content lock's waits are called in a
/// [`CacheError::LockTimeout`].
const CONTENT: &str = "content lock";

/// The content lock bit (`exclusive`) or one share.
#[inline(always)]
fn content_bit(exclusive: bool) -> u64 {
    if exclusive {
        EXCLUSIVE
    } else {
        SHARE_ONE
    }
}

/// Takes the content lock of a buffer this process has pinned: waits while
/// a writer holds it (and, for `exclusive`, readers).
pub(crate) fn lock_content(
    st: &AtomicU64,
    exclusive: bool,
    limit: Duration,
) -> Result<(), CacheError> {
    let mut wait = Wait::new(limit, CONTENT);
    loop {
        let s = unlocked(st, &mut wait)?;
        if !state::content_free(s, exclusive) {
            wait.pause(s)?;
            continue;
        }
        if st
            .compare_exchange_weak(
                s,
                s + content_bit(exclusive),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            if exclusive {
                // The writer's bytes come after `EXCLUSIVE` is set.
                fence(Ordering::Release);
            }
            return Ok(());
        }
        wait.retry(s)?;
    }
}

/// Releases a content lock taken by [`lock_content`] (the pin stays).
pub(crate) fn unlock_content(
    st: &AtomicU64,
    exclusive: bool,
    limit: Duration,
) -> Result<(), CacheError> {
    let lock = content_bit(exclusive);
    change_unlocked(st, limit, |s| s.wrapping_sub(lock))
}

/// Releases the content lock and the pin of a guard in one
/// compare-and-swap; a writer's release sets `DIRTY` and raises the write
/// version in the same step, so the flag is set before the lock is free (a
/// write-back either copies the new bytes or finds `DIRTY` set) and an
/// optimistic reader that overlapped the write fails its check (see
/// [`Cache::read_with`](crate::Cache::read_with)).
#[inline(always)]
pub(crate) fn release(st: &AtomicU64, exclusive: bool, limit: Duration) -> Result<(), CacheError> {
    if exclusive {
        change_unlocked(st, limit, |s| {
            state::bump_version((s.wrapping_sub(EXCLUSIVE) | state::DIRTY).wrapping_sub(REF_ONE))
        })
    } else {
        change_unlocked(st, limit, |s| s.wrapping_sub(SHARE_ONE + REF_ONE))
    }
}

/// The hit path's pin and content lock in one compare-and-swap of state
/// `st`, while it holds `blk` (tag `tag`) valid: true when pinned and
/// locked with the tag still `blk` (read again once pinned: a buffer
/// retagged twice may come back to the same state word), false when the
/// buffer does not hold it (then nothing is held).
#[inline(always)]
pub(crate) fn pin_and_lock(
    st: &AtomicU64,
    tag: &AtomicU64,
    blk: u64,
    exclusive: bool,
    limit: Duration,
) -> Result<bool, CacheError> {
    let lock = content_bit(exclusive);
    let mut wait = Wait::new(limit, CONTENT);
    loop {
        let s = unlocked(st, &mut wait)?;
        if s & (TAG_VALID | VALID) != TAG_VALID | VALID || tag.load(Ordering::Relaxed) != blk {
            return Ok(false);
        }
        if !state::can_pin(s) {
            return Err(CacheError::TooManyPins {
                block: blk,
                pins: state::refs(s),
            });
        }
        if !state::content_free(s, exclusive) {
            wait.pause(s)?;
            continue;
        }
        let mut n = s + REF_ONE + lock;
        if state::usage(s) < MAX_USAGE {
            n = state::with_usage(n, state::usage(s) + 1);
        }
        if st
            .compare_exchange_weak(s, n, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            wait.retry(s)?;
            continue;
        }
        if tag.load(Ordering::Relaxed) == blk {
            if exclusive {
                // The writer's bytes come after `EXCLUSIVE` is set.
                fence(Ordering::Release);
            }
            return Ok(true);
        }
        // Another block now (rare): let go without marking it dirty.
        let r = unlock_content(st, exclusive, limit);
        unpin(st, limit)?;
        r?;
        return Ok(false);
    }
}

/// The partition locks' name in a [`CacheError::LockTimeout`].
pub(crate) const PARTITION: &str = "partition lock";

/// The stripe locks' name in a [`CacheError::LockTimeout`].
pub(crate) const STRIPE: &str = "stripe lock";

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(50);

    #[test]
    fn rw_lock_counts_readers_and_excludes_writer() {
        let w = AtomicU32::new(0);
        read_lock(&w, T, "test").unwrap();
        read_lock(&w, T, "test").unwrap();
        assert_eq!(w.load(Ordering::Relaxed), 2);
        read_unlock(&w);
        read_unlock(&w);
        read_lock(&w, T, "test").unwrap();
        assert!(!try_write_lock(&w));
        read_unlock(&w);
        write_lock(&w, T, "test").unwrap();
        assert_eq!(w.load(Ordering::Relaxed), WRITER);
        assert!(!try_write_lock(&w));
        write_unlock(&w);
        assert_eq!(w.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn header_lock_keeps_other_bits() {
        let s = AtomicU64::new(5);
        let v = lock_header(&s, T).unwrap();
        assert_eq!(v, 5 | LOCKED);
        unlock_header(&s, v + 1);
        let mut w = Wait::new(T, "test");
        assert_eq!(unlocked(&s, &mut w).unwrap(), 6);
    }

    /// A word held by no live process (or written by another) ends each
    /// wait with the timeout and the word, never a hang.
    #[test]
    fn held_words_time_out() {
        let timeout = |r: Result<(), CacheError>, word: u64| match r {
            Err(CacheError::LockTimeout {
                word: w, waited, ..
            }) => assert!(w == word && waited >= T, "{w:#x} {waited:?}"),
            other => panic!("{other:?}"),
        };
        let w = AtomicU32::new(WRITER);
        timeout(read_lock(&w, T, "test"), WRITER.into());
        timeout(write_lock(&w, T, "test"), WRITER.into());
        let r = AtomicU32::new(3);
        timeout(write_lock(&r, T, "test"), 3);
        let st = AtomicU64::new(LOCKED | TAG_VALID | VALID);
        timeout(lock_header(&st, T).map(drop), st.load(Ordering::Relaxed));
        timeout(pin(&st, true, 1, T), st.load(Ordering::Relaxed));
        timeout(unpin(&st, T), st.load(Ordering::Relaxed));
        let tag = AtomicU64::new(1);
        timeout(
            pin_and_lock(&st, &tag, 1, false, T).map(drop),
            st.load(Ordering::Relaxed),
        );
        let x = AtomicU64::new(TAG_VALID | VALID | EXCLUSIVE | 1);
        timeout(lock_content(&x, false, T), x.load(Ordering::Relaxed));
        timeout(
            pin_and_lock(&x, &tag, 1, false, T).map(drop),
            x.load(Ordering::Relaxed),
        );
        let io = AtomicU64::new(TAG_VALID | IO_IN_PROGRESS | 1);
        timeout(wait_valid(&io, T).map(drop), io.load(Ordering::Relaxed));
    }

    /// Releases on a word another process zeroed wrap instead of
    /// panicking on overflow.
    #[test]
    fn releases_of_a_zeroed_word_do_not_panic() {
        unpin(&AtomicU64::new(0), T).unwrap();
        release(&AtomicU64::new(0), true, T).unwrap();
        release(&AtomicU64::new(0), false, T).unwrap();
        unlock_content(&AtomicU64::new(0), false, T).unwrap();
    }
}
