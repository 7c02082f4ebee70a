//! Spin locks made of one shared atomic word: what every process maps, so
//! no process-local pointer or kernel object is involved. A waiter spins a
//! little, then yields the CPU (a lock holder may be descheduled when
//! there are more processes than cores).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::layout::state::LOCKED;

/// Writer bit of a reader-writer lock word; the readers count below it.
const WRITER: u32 = 1 << 31;

/// Back-off for one failed attempt: spin for the first tries, then yield.
#[inline]
pub(crate) fn backoff(tries: &mut u32) {
    if *tries < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *tries = tries.saturating_add(1);
}

/// Takes `w` shared.
#[inline]
pub(crate) fn read_lock(w: &AtomicU32) {
    let mut tries = 0;
    loop {
        let s = w.load(Ordering::Relaxed);
        if s & WRITER == 0
            && w.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        backoff(&mut tries);
    }
}

/// Releases a shared hold of `w`.
#[inline]
pub(crate) fn read_unlock(w: &AtomicU32) {
    w.fetch_sub(1, Ordering::Release);
}

/// Takes `w` exclusive.
#[inline]
pub(crate) fn write_lock(w: &AtomicU32) {
    let mut tries = 0;
    loop {
        if w.load(Ordering::Relaxed) == 0
            && w.compare_exchange_weak(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        backoff(&mut tries);
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

/// Sets the `LOCKED` bit of a buffer state word, returning the state with
/// it set.
#[inline]
pub(crate) fn lock_header(s: &AtomicU64) -> u64 {
    let mut tries = 0;
    loop {
        let old = s.fetch_or(LOCKED, Ordering::Acquire);
        if old & LOCKED == 0 {
            return old | LOCKED;
        }
        backoff(&mut tries);
    }
}

/// Stores `new` (without `LOCKED`) into a state word this process locked.
#[inline]
pub(crate) fn unlock_header(s: &AtomicU64, new: u64) {
    s.store(new & !LOCKED, Ordering::Release);
}

/// Waits until the state word is not header-locked; returns it.
#[inline]
pub(crate) fn wait_unlocked(s: &AtomicU64) -> u64 {
    let mut tries = 0;
    loop {
        let v = s.load(Ordering::Acquire);
        if v & LOCKED == 0 {
            return v;
        }
        backoff(&mut tries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rw_lock_counts_readers_and_excludes_writer() {
        let w = AtomicU32::new(0);
        read_lock(&w);
        read_lock(&w);
        assert_eq!(w.load(Ordering::Relaxed), 2);
        read_unlock(&w);
        read_unlock(&w);
        read_lock(&w);
        assert!(!try_write_lock(&w));
        read_unlock(&w);
        write_lock(&w);
        assert_eq!(w.load(Ordering::Relaxed), WRITER);
        assert!(!try_write_lock(&w));
        write_unlock(&w);
        assert_eq!(w.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn header_lock_keeps_other_bits() {
        let s = AtomicU64::new(5);
        let v = lock_header(&s);
        assert_eq!(v, 5 | LOCKED);
        unlock_header(&s, v + 1);
        assert_eq!(wait_unlocked(&s), 6);
    }
}
