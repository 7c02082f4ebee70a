//! Faulting a mapping's pages in: atomic touches, `madvise` (populate,
//! huge page advice), read touches and `mlock`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::mm::Advice;

use super::mapping::{check_range, Mapping};
use crate::page::base_page_size;
use crate::SysError;

/// Write-faults every page of `ptr..ptr + len` with one atomic
/// compare-and-swap of a byte with itself per `page` bytes, which
/// preserves contents even while other processes write. Any stride no
/// larger than the real page size is correct, merely slower when smaller.
///
/// Not `fetch_or(0)`: LLVM turns an idempotent read-modify-write into a
/// plain load, and drops a relaxed load whose value is unused, so a
/// release build touched nothing (a region pre-faulted this way had only
/// its header page resident). A compare-and-swap is kept, and on x86-64
/// `lock cmpxchg` writes whether or not it succeeds, so the page is
/// write-faulted; where it fails, another writer has just faulted it.
///
/// # Safety
/// `ptr..ptr + len` must be a live, writable mapping that no other thread
/// of this process accesses non-atomically during the call.
unsafe fn touch_pages(ptr: *mut u8, len: usize, page: usize) {
    let start = ptr as usize;
    let mut off = 0usize;
    while off < len {
        // SAFETY: off < len, so the byte lies in the caller's writable
        // mapping; u8 atomics need no alignment and the caller excludes
        // concurrent non-atomic access.
        let byte = unsafe { AtomicU8::from_ptr(ptr.add(off)) };
        let v = byte.load(Ordering::Relaxed);
        let _ =
            std::hint::black_box(byte.compare_exchange(v, v, Ordering::Relaxed, Ordering::Relaxed));
        // Next page boundary after start + off.
        let addr = start + off;
        off = (addr / page + 1) * page - start;
    }
}

impl Mapping {
    /// Write-faults every page of `offset..offset + n` without changing
    /// contents: one atomic `fetch_or(0)` per `page` bytes (0 = the
    /// mapping's page size). The fallback where the kernel lacks
    /// `MADV_POPULATE_WRITE`; several threads may touch disjoint (or even
    /// the same) ranges at once.
    pub fn touch_range(&self, offset: usize, n: usize, page: usize) -> Result<(), SysError> {
        let p = self.range_ptr("touch", offset, n)?;
        let page = if page == 0 { self.page_size } else { page };
        // SAFETY: the checked range of a live read-write mapping; every
        // access is atomic, and non-atomic ones need `&mut self`.
        unsafe { touch_pages(p, n, page) };
        self.intact("touch")
    }

    /// [`touch_range`](Mapping::touch_range) over the whole mapping
    /// (unchecked for a lost mapping: see [`is_lost`](Mapping::is_lost)).
    pub fn touch(&self) {
        // SAFETY: the whole live read-write mapping; every access is
        // atomic, and non-atomic ones need `&mut self`.
        unsafe { touch_pages(self.base(), self.len, self.page_size) };
    }

    fn madvise(&self, what: &str, offset: usize, n: usize, advice: Advice) -> Result<(), SysError> {
        let call = || format!("madvise(addr={:#x}, len={n}, {what})", self.addr() + offset);
        check_range(call, offset, n, self.len)?;
        let p = self.addr() + offset;
        if p % base_page_size() != 0 {
            return Err(SysError::invalid(call(), "address is not page-aligned"));
        }
        loop {
            // SAFETY: a checked, page-aligned range of a live mapping owned
            // by self; the advice used here never changes memory contents.
            match unsafe { rustix::mm::madvise(p as *mut c_void, n, advice) } {
                Err(rustix::io::Errno::INTR) => continue,
                r => {
                    r.map_err(|e| SysError::os(call(), e))?;
                    return self.intact(what);
                }
            }
        }
    }

    /// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14+) of `offset..offset + n`:
    /// write-faults those pages, allocating them, without changing
    /// contents. A page the kernel cannot supply is an error
    /// (`ENOMEM`/`EFAULT`, `EHWPOISON`), never SIGBUS; `EINVAL` on kernels
    /// without the advice (see [`populate_write_supported`]). Threads may
    /// populate disjoint ranges at once.
    pub fn populate_write_range(&self, offset: usize, n: usize) -> Result<(), SysError> {
        self.madvise("MADV_POPULATE_WRITE", offset, n, Advice::LinuxPopulateWrite)
    }

    /// [`populate_write_range`](Mapping::populate_write_range) over the
    /// whole mapping.
    pub fn populate_write(&self) -> Result<(), SysError> {
        self.populate_write_range(0, self.len)
    }

    /// `madvise(MADV_POPULATE_READ)` (Linux 5.14+) of `offset..offset + n`:
    /// maps those pages into this process's page tables as a read fault
    /// would, without changing contents; an error (not SIGBUS) when one
    /// cannot be had. On shared memory whose pages exist already (an
    /// attached region) this allocates nothing but page tables.
    pub fn populate_read_range(&self, offset: usize, n: usize) -> Result<(), SysError> {
        self.madvise("MADV_POPULATE_READ", offset, n, Advice::LinuxPopulateRead)
    }

    /// [`populate_read_range`](Mapping::populate_read_range) over the
    /// whole mapping.
    pub fn populate_read(&self) -> Result<(), SysError> {
        self.populate_read_range(0, self.len)
    }

    /// `madvise(MADV_HUGEPAGE)` over the mapping: asks for transparent huge
    /// pages (tmpfs mounted with `huge=advise`, anonymous memory with THP
    /// `enabled=madvise`).
    pub fn advise_hugepage(&self) -> Result<(), SysError> {
        self.madvise("MADV_HUGEPAGE", 0, self.len, Advice::LinuxHugepage)
    }

    /// Reads one byte per `page` bytes (volatile; 0 = the mapping's page
    /// size), faulting every page in for reading: the fallback for kernels
    /// without `MADV_POPULATE_READ`. Returns a value derived from the bytes
    /// so the reads are not optimized away.
    pub fn read_touch(&self, page: usize) -> u8 {
        let page = if page == 0 { self.page_size } else { page };
        let mut acc = 0u8;
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len inside the live mapping owned by self.
            acc ^= unsafe { std::ptr::read_volatile(self.base().add(off)) };
            off += page;
        }
        acc
    }

    /// `mlock` over the mapping: faults in and locks every page (undone by
    /// releasing it). The kernel checks the length against
    /// `RLIMIT_MEMLOCK`.
    pub fn mlock(&self) -> Result<(), SysError> {
        // SAFETY: a live mapping owned by self; locking does not change
        // memory contents.
        unsafe { rustix::mm::mlock(self.base().cast::<c_void>(), self.len) }.map_err(|e| {
            SysError::os(
                format!("mlock(addr={:#x}, len={})", self.addr(), self.len),
                e,
            )
        })?;
        self.intact("mlock")
    }
}

/// Whether the kernel knows `MADV_POPULATE_WRITE` (Linux 5.14+).
///
/// Asks with an empty range: the kernel validates the advice before it
/// looks at the range, so this is `EINVAL` exactly when the advice is
/// unknown, and touches no memory either way.
pub fn populate_write_supported() -> bool {
    // SAFETY: a zero-length range covers no memory; address 0 is page-aligned.
    let r = unsafe { rustix::mm::madvise(std::ptr::null_mut(), 0, Advice::LinuxPopulateWrite) };
    r.is_ok()
}

#[cfg(test)]
mod tests {
    use crate::base_page_size as page;
    use crate::mm::tests::rss_kb;
    use crate::MapOptions;

    #[test]
    fn anon_shared_fill_touch_populate() {
        let mut m = MapOptions::new(3 * page() + 5)
            .shared()
            .map_anon()
            .expect("mmap");
        assert_eq!(m.len(), 4 * page());
        m.fill(0x5a);
        m.touch();
        m.populate_write()
            .expect("MADV_POPULATE_WRITE on kernel >= 5.14");
        let mut buf = [0u8; 1];
        for off in [0, page(), m.len() - 1] {
            m.read_at(off, &mut buf).unwrap();
            assert_eq!(buf[0], 0x5a, "touch/populate must preserve contents");
        }
        drop(m);
    }

    /// Touching faults every page in (a release build once compiled the
    /// idempotent atomic away and touched nothing: run these tests with
    /// `--release` too), and so does the peers' plain touch loop.
    #[test]
    fn touch_faults_every_page_in() {
        let n = 64;
        let m = MapOptions::new(n * page()).shared().map_anon().unwrap();
        assert_eq!(rss_kb(m.addr()), 0);
        m.touch();
        assert_eq!(rss_kb(m.addr()), (n * page() / 1024) as u64);
        let mut m = MapOptions::new(n * page()).shared().map_anon().unwrap();
        let pieces = m.pieces_mut(&[(0, n * page())]).unwrap();
        for mut p in pieces {
            p.touch_pages(page(), 1);
        }
        assert_eq!(rss_kb(m.addr()), (n * page() / 1024) as u64);
        let mut b = [0u8];
        m.read_at(5 * page(), &mut b).unwrap();
        assert_eq!(b[0], 1);
        // MAP_POPULATE faults everything before mmap returns.
        let m = MapOptions::new(n * page())
            .shared()
            .populate()
            .map_anon()
            .unwrap();
        assert_eq!(rss_kb(m.addr()), (n * page() / 1024) as u64);
    }

    #[test]
    fn touch_pages_unaligned_covers_every_page() {
        let mut m = MapOptions::new(4 * page()).map_anon().unwrap();
        m.fill(7);
        m.touch_range(100, 2 * page(), page()).unwrap();
        m.touch_range(0, m.len(), 0).unwrap();
        assert!(m.touch_range(100, m.len(), 0).is_err());
        let mut b = [0u8];
        m.read_at(2 * page() + 99, &mut b).unwrap();
        assert_eq!(b[0], 7);
    }
}
