//! Shared words and block copies: what a data structure that lives in
//! shared memory (a buffer cache, a queue) needs from a [`Mapping`].
//!
//! Other processes may access the memory at any moment, so every access
//! here is atomic: [`Mapping::atomic_u32`] and [`Mapping::atomic_u64`]
//! hand out a reference to an aligned atomic word, and the block copies
//! ([`Mapping::load_words`], [`Mapping::store_words`]) move 8-byte words
//! with relaxed atomic loads and stores (plain `mov`s on x86-64). A copy is
//! therefore never undefined behaviour, even when another process writes
//! the same bytes at the same time; whether the bytes are *consistent*
//! is the caller's protocol (a lock word, a sequence number).
//!
//! Each accessor checks the SIGBUS guard's mark (one load; see `sigbus`):
//! the copies after they copied, the atomic words before they hand out the
//! reference (an access through a reference taken before a fault sees
//! zeros, and the next accessor call fails).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::mapping::Mapping;
use crate::SysError;

const WORD: usize = 8;

impl Mapping {
    /// The address of an aligned `size`-byte word at `offset`, checked.
    #[inline(always)]
    fn aligned_ptr(&self, what: &str, offset: usize, size: usize) -> Result<*mut u8, SysError> {
        let p = self.range_ptr(what, offset, size)?;
        if p as usize % size != 0 {
            return Err(self.misaligned(what, offset, size));
        }
        Ok(p)
    }

    #[cold]
    #[inline(never)]
    fn misaligned(&self, what: &str, offset: usize, size: usize) -> SysError {
        SysError::invalid(
            self.call(what),
            format!("offset {offset} is not {size}-byte aligned"),
        )
    }

    /// A reference to the 32-bit atomic word at `offset` (a multiple of 4,
    /// inside the mapping), valid as long as the mapping. Every process
    /// that touches the word must use atomics too.
    #[inline(always)]
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32, SysError> {
        let p = self.aligned_ptr("atomic_u32", offset, 4)?;
        self.intact("atomic_u32")?;
        // SAFETY: p is 4-byte aligned inside a live read-write mapping that
        // outlives the returned reference (bound to `&self`); the mapping
        // hands out no non-atomic references, so every access to the word
        // from this process is atomic.
        Ok(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) })
    }

    /// A reference to the 64-bit atomic word at `offset` (a multiple of 8,
    /// inside the mapping); see [`atomic_u32`](Mapping::atomic_u32).
    #[inline(always)]
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, SysError> {
        let p = self.aligned_ptr("atomic_u64", offset, 8)?;
        self.intact("atomic_u64")?;
        // SAFETY: as in atomic_u32, with 8-byte alignment checked.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// `n` consecutive 32-bit atomic words from `offset` (a multiple of
    /// 4), checked once: for arrays in the mapping (hash buckets, links)
    /// indexed without a range check per word.
    #[inline(always)]
    pub fn atomic_u32s(&self, offset: usize, n: usize) -> Result<&[AtomicU32], SysError> {
        self.atomic_slice("atomic_u32s", offset, n)
    }

    /// `n` consecutive 64-bit atomic words from `offset` (a multiple of
    /// 8), checked once: for loops over a row or a block without a check
    /// per word.
    #[inline(always)]
    pub fn atomic_u64s(&self, offset: usize, n: usize) -> Result<&[AtomicU64], SysError> {
        self.atomic_slice("atomic_u64s", offset, n)
    }

    /// `n` consecutive atomic words of type `W` from `offset`, checked
    /// once (range and alignment).
    #[inline(always)]
    fn atomic_slice<W: AtomicWord>(
        &self,
        what: &str,
        offset: usize,
        n: usize,
    ) -> Result<&[W], SysError> {
        let size = std::mem::size_of::<W>();
        let bytes = n
            .checked_mul(size)
            .ok_or_else(|| SysError::invalid(self.call(what), format!("{n} words overflow")))?;
        self.range_ptr(what, offset, bytes)?;
        let p = self.aligned_ptr(what, offset, size)?.cast::<W>();
        self.intact(what)?;
        // SAFETY: n aligned words of W's size inside a live read-write
        // mapping (checked above) that outlives the slice (bound to
        // `&self`); W is an atomic integer (sealed trait), valid for any
        // bits, and every access through the slice is atomic.
        Ok(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// Asks the CPU to start loading the cache line at `offset` into its
    /// caches (for writing when `write`: the line comes exclusive) and
    /// returns at once: a hint for software pipelining, where a lookup
    /// names the lines its next operations touch before it needs them.
    /// Reads no value, never faults, never waits; an offset outside the
    /// mapping (or another architecture than x86-64) does nothing.
    #[inline]
    pub fn prefetch(&self, offset: usize, write: bool) {
        if offset >= self.len() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
            let p = self.base().wrapping_add(offset).cast::<i8>().cast_const();
            // SAFETY: a prefetch reads and writes nothing and cannot fault
            // (p is inside the mapping anyway, checked above). Safe to call
            // from Rust 1.87 on; `unsafe` for the 1.85 this crate supports.
            #[allow(unused_unsafe)]
            unsafe {
                if write {
                    _mm_prefetch::<_MM_HINT_ET0>(p);
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(p);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = write;
    }

    /// Checks a word copy: offset 8-byte aligned, length a multiple of 8,
    /// the range inside the mapping.
    fn word_range(&self, what: &str, offset: usize, n: usize) -> Result<*mut u64, SysError> {
        if n % WORD != 0 {
            return Err(SysError::invalid(
                self.call(what),
                format!("length {n} is not a multiple of 8"),
            ));
        }
        self.range_ptr(what, offset, n)?;
        Ok(self.aligned_ptr(what, offset, WORD)?.cast::<u64>())
    }

    /// Copies `buf.len()` bytes at `offset` out of the mapping as relaxed
    /// atomic 8-byte loads. `offset` and `buf.len()` must be multiples of 8.
    pub fn load_words(&self, offset: usize, buf: &mut [u8]) -> Result<(), SysError> {
        let p = self.word_range("load_words", offset, buf.len())?;
        for (i, chunk) in buf.chunks_exact_mut(WORD).enumerate() {
            // SAFETY: word i lies inside the aligned range checked above, in
            // a live mapping owned by self; the access is atomic.
            let w = unsafe { AtomicU64::from_ptr(p.add(i)) }.load(Ordering::Relaxed);
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        self.intact("load_words")
    }

    /// Copies `data` into the mapping at `offset` as relaxed atomic 8-byte
    /// stores. `offset` and `data.len()` must be multiples of 8. Takes
    /// `&self`: the stores are atomic, so concurrent writers (threads or
    /// processes) cannot cause undefined behaviour, only torn blocks if
    /// the caller's lock protocol lets two of them write at once.
    pub fn store_words(&self, offset: usize, data: &[u8]) -> Result<(), SysError> {
        let p = self.word_range("store_words", offset, data.len())?;
        for (i, chunk) in data.chunks_exact(WORD).enumerate() {
            let w = u64::from_ne_bytes(chunk.try_into().expect("8-byte chunk"));
            // SAFETY: as in load_words.
            unsafe { AtomicU64::from_ptr(p.add(i)) }.store(w, Ordering::Relaxed);
        }
        self.intact("store_words")
    }

    /// The wrapping sum of the 8-byte words of `offset..offset + n`
    /// (volatile reads, front to back: other processes may write
    /// concurrently): reads every byte of the range, for a read-bandwidth
    /// measurement. `offset` and `n` must be multiples of 8.
    pub fn sum_u64_range(&self, offset: usize, n: usize) -> Result<u64, SysError> {
        if offset % 8 != 0 || n % 8 != 0 {
            return Err(SysError::invalid(
                self.call("sum_u64"),
                format!("offset {offset} and length {n} must be multiples of 8"),
            ));
        }
        let p = self.range_ptr("sum_u64", offset, n)?.cast::<u64>();
        let words = n / 8;
        // Four independent sums keep several loads in flight.
        let mut acc = [0u64; 4];
        let mut i = 0;
        while i + 4 <= words {
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + k < words: an 8-byte aligned word (the mapping
                // is page-aligned, offset a multiple of 8) inside the range
                // checked above, in a live mapping owned by self.
                *a = a.wrapping_add(unsafe { std::ptr::read_volatile(p.add(i + k)) });
            }
            i += 4;
        }
        while i < words {
            // SAFETY: i < words, as above.
            acc[0] = acc[0].wrapping_add(unsafe { std::ptr::read_volatile(p.add(i)) });
            i += 1;
        }
        self.intact("sum_u64")?;
        Ok(acc.iter().fold(0u64, |s, a| s.wrapping_add(*a)))
    }

    fn word(&self, what: &str, offset: usize) -> Result<&AtomicU32, SysError> {
        let p = self.range_ptr(what, offset, 4)?;
        if p as usize % 4 != 0 {
            return Err(SysError::invalid(self.call(what), "not 4-byte aligned"));
        }
        // SAFETY: p is 4-byte aligned inside a live read-write mapping that
        // outlives the returned reference (bound to `&self`); every access
        // to such a word (here, in any process) is atomic.
        Ok(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) })
    }

    /// Stores a 32-bit word at `offset` with one aligned atomic store
    /// (release ordering: a reader that loads the word with acquire
    /// ordering sees every write this process made before). `offset` must
    /// be a multiple of 4.
    pub fn store_u32_release(&self, offset: usize, value: u32) -> Result<(), SysError> {
        self.word("store_u32", offset)?
            .store(value, Ordering::Release);
        self.intact("store_u32")
    }

    /// Loads a 32-bit word at `offset` with acquire ordering (see
    /// [`store_u32_release`](Mapping::store_u32_release)).
    pub fn load_u32_acquire(&self, offset: usize) -> Result<u32, SysError> {
        let v = self.word("load_u32", offset)?.load(Ordering::Acquire);
        self.intact("load_u32")?;
        Ok(v)
    }
}

/// The atomic integers [`Mapping`] hands out as slices: valid for any bits,
/// aligned to their size. Sealed: implemented here only.
trait AtomicWord {}
impl AtomicWord for AtomicU32 {}
impl AtomicWord for AtomicU64 {}

#[cfg(test)]
mod tests {
    use crate::base_page_size as page;
    use crate::MapOptions;
    use std::sync::atomic::Ordering;

    #[test]
    fn atomics_are_checked_for_bounds_and_alignment() {
        let m = MapOptions::new(4096).shared().map_anon().expect("mmap");
        m.atomic_u64(8).unwrap().store(7, Ordering::Release);
        assert_eq!(m.atomic_u32(8).unwrap().load(Ordering::Acquire), 7);
        assert_eq!(m.atomic_u64(8).unwrap().fetch_add(1, Ordering::AcqRel), 7);
        let e = m.atomic_u64(4).unwrap_err().to_string();
        assert!(e.contains("not 8-byte aligned"), "{e}");
        assert!(m.atomic_u32(2).is_err());
        assert!(m.atomic_u64(4096).is_err());
        assert!(m.atomic_u32(4092).is_ok());
        let row = m.atomic_u64s(8, 4).unwrap();
        assert_eq!(row[0].load(Ordering::Relaxed), 8);
        assert_eq!(row.len(), 4);
        assert!(m.atomic_u64s(4096 - 16, 3).is_err());
        assert!(m.atomic_u64s(4, 1).is_err());
        assert!(m.atomic_u64s(0, usize::MAX).is_err());
        let heads = m.atomic_u32s(8, 3).unwrap();
        assert_eq!(
            heads[0].load(Ordering::Relaxed),
            8,
            "the low half, little-endian"
        );
        assert_eq!(heads.len(), 3);
        assert!(m.atomic_u32s(4096 - 8, 3).is_err());
        let e = m.atomic_u32s(2, 1).unwrap_err().to_string();
        assert!(e.contains("not 4-byte aligned"), "{e}");
        assert!(m.atomic_u32s(0, usize::MAX / 2).is_err());
        // Hints only: inside, at the end, far outside; nothing changes.
        m.prefetch(64, false);
        m.prefetch(128, true);
        m.prefetch(4096, true);
        m.prefetch(usize::MAX, false);
        assert_eq!(m.atomic_u64(8).unwrap().load(Ordering::Relaxed), 8);
        m.release().unwrap();
    }

    #[test]
    fn word_copies_roundtrip_and_refuse_bad_ranges() {
        let m = MapOptions::new(8192).shared().map_anon().expect("mmap");
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        m.store_words(4096, &data).unwrap();
        let mut back = vec![0u8; 4096];
        m.load_words(4096, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(m.store_words(4100, &data[..8]).is_err());
        assert!(m.store_words(0, &data[..7]).is_err());
        assert!(m.load_words(8192 - 8, &mut back[..16]).is_err());
        m.release().unwrap();
    }

    #[test]
    fn sum_u64_reads_every_word() {
        let mut m = MapOptions::new(2 * page()).map_anon().expect("mmap");
        m.fill(1);
        let words = (2 * page() / 8) as u64;
        assert_eq!(
            m.sum_u64_range(0, m.len()).unwrap(),
            words.wrapping_mul(0x0101_0101_0101_0101)
        );
        assert_eq!(m.sum_u64_range(8, 24).unwrap(), 3 * 0x0101_0101_0101_0101);
        assert!(m.sum_u64_range(4, 8).is_err(), "unaligned offset");
        assert!(
            m.sum_u64_range(0, 12).is_err(),
            "length not a multiple of 8"
        );
        assert!(m.sum_u64_range(page(), 2 * page()).is_err(), "out of range");
        m.release().expect("munmap");
    }
}
