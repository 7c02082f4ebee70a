//! Disjoint mutable pieces of a mapping, for parallel writers.

use std::marker::PhantomData;

use super::mapping::Mapping;
use crate::SysError;

/// Splits `pages` pages into `threads` contiguous runs, `(first, count)`,
/// as even as can be (none empty): the ranges of parallel writers, each
/// run's pages times the page size making a [`Mapping::pieces_mut`] range.
pub fn even_runs(pages: usize, threads: usize) -> Vec<(usize, usize)> {
    (0..threads)
        .map(|t| {
            let a = pages * t / threads;
            let b = pages * (t + 1) / threads;
            (a, b - a)
        })
        .filter(|&(_, n)| n > 0)
        .collect()
}

impl Mapping {
    /// Disjoint mutable pieces `offset..offset + len` of the mapping, for
    /// threads that write their own piece each (e.g. a parallel memset).
    /// The ranges must be in bounds and must not overlap.
    pub fn pieces_mut(&mut self, ranges: &[(usize, usize)]) -> Result<Vec<Piece<'_>>, SysError> {
        self.intact("pieces_mut")?;
        let mut sorted: Vec<(usize, usize)> = ranges.to_vec();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(SysError::invalid(
                    self.call("pieces_mut"),
                    format!("ranges {:?} and {:?} overlap", w[0], w[1]),
                ));
            }
        }
        ranges
            .iter()
            .map(|&(off, n)| {
                let ptr = self.range_ptr("pieces_mut", off, n)?;
                Ok(Piece {
                    ptr,
                    len: n,
                    _owner: PhantomData,
                })
            })
            .collect()
    }
}

/// A disjoint mutable piece of a [`Mapping`] (see [`Mapping::pieces_mut`]),
/// which can be sent to another thread.
pub struct Piece<'a> {
    ptr: *mut u8,
    len: usize,
    _owner: PhantomData<&'a mut Mapping>,
}

// SAFETY: a Piece is exclusive access to a disjoint range of a mapping
// that outlives it; moving that access to another thread is fine.
unsafe impl Send for Piece<'_> {}

impl Piece<'_> {
    /// Length of the piece.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false for pieces of non-empty ranges.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets every byte of the piece to `byte` (a plain `memset`).
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the piece is an in-bounds range of a live read-write
        // mapping, disjoint from every other piece, borrowed mutably.
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
    }

    /// Zeroes the piece `chunk` bytes at a time, each chunk a separate
    /// `memset` that the compiler may not merge with the next: with 4 KiB
    /// chunks, how the kernel clears a huge page it faults in (one
    /// `clear_page` per 4 KiB subpage; with glibc on a CPU with fast
    /// string stores both are a `rep stosb` of 4 KiB).
    pub fn zero_by(&mut self, chunk: usize) {
        let chunk = chunk.max(1);
        let mut off = 0;
        while off < self.len {
            let n = chunk.min(self.len - off);
            // SAFETY: off + n <= len, in bounds of the live read-write
            // mapping, disjoint from every other piece, borrowed mutably.
            // black_box hides the pointer so that the calls stay one per
            // chunk.
            unsafe { std::ptr::write_bytes(std::hint::black_box(self.ptr.add(off)), 0, n) };
            off += n;
        }
    }

    /// Writes `byte` to the first byte of every `page` bytes of the piece
    /// (a plain store, not atomic): the touch loop of a JVM's
    /// AlwaysPreTouch or a database touching its buffers in, which
    /// write-faults each page once.
    pub fn touch_pages(&mut self, page: usize, byte: u8) {
        let page = page.max(1);
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, in bounds of the live read-write mapping,
            // disjoint from every other piece, borrowed mutably; volatile so
            // that the store is not elided.
            unsafe { std::ptr::write_volatile(self.ptr.add(off), byte) };
            off += page;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::base_page_size as page;
    use crate::MapOptions;

    #[test]
    fn pieces_are_disjoint_and_fill() {
        let mut m = MapOptions::new(4 * page()).map_anon().unwrap();
        assert!(m.pieces_mut(&[(0, 2 * page()), (page(), page())]).is_err());
        assert!(m.pieces_mut(&[(3 * page(), 2 * page())]).is_err());
        let pieces = m
            .pieces_mut(&[(0, 2 * page()), (2 * page(), 2 * page())])
            .unwrap();
        std::thread::scope(|s| {
            for (i, mut p) in pieces.into_iter().enumerate() {
                s.spawn(move || p.fill(i as u8 + 1));
            }
        });
        let mut b = [0u8; 1];
        m.read_at(page(), &mut b).unwrap();
        assert_eq!(b[0], 1);
        m.read_at(4 * page() - 1, &mut b).unwrap();
        assert_eq!(b[0], 2);
        m.store_u32_release(8, 7).unwrap();
        assert_eq!(m.load_u32_acquire(8).unwrap(), 7);
        assert!(m.load_u32_acquire(6).is_err());
        assert!(m.populate_read_range(1, page()).is_err());
    }

    /// `zero_by` zeroes every byte of its piece, whatever the chunk (one
    /// that does not divide the piece, one larger than it), and nothing
    /// outside it.
    #[test]
    fn zero_by_zeroes_the_piece_and_only_it() {
        let len = 4 * page();
        let mut m = MapOptions::new(len).map_anon().unwrap();
        for chunk in [4096, 3000, 1, 10 * len] {
            let all = m.pieces_mut(&[(0, len)]).unwrap();
            all.into_iter().for_each(|mut p| p.fill(0xff));
            let (at, n) = (100, len - 300);
            let mut piece = m.pieces_mut(&[(at, n)]).unwrap().pop().unwrap();
            piece.zero_by(chunk);
            let mut b = vec![0u8; len];
            m.read_at(0, &mut b).unwrap();
            assert!(b[..at].iter().all(|&x| x == 0xff), "chunk {chunk}: before");
            assert!(
                b[at..at + n].iter().all(|&x| x == 0),
                "chunk {chunk}: piece"
            );
            assert!(
                b[at + n..].iter().all(|&x| x == 0xff),
                "chunk {chunk}: after"
            );
        }
    }

    #[test]
    fn even_runs_cover_everything_once() {
        assert_eq!(super::even_runs(10, 3), vec![(0, 3), (3, 3), (6, 4)]);
        assert_eq!(super::even_runs(1, 4), vec![(0, 1)]);
        assert_eq!(super::even_runs(4, 2), vec![(0, 2), (2, 2)]);
    }
}
