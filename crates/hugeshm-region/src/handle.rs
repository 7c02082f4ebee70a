//! [`Region`]: a mapped region this process holds, its data, and how it
//! goes (detach, destroy).

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};

use hugeshm_sys::{self as sys, Mapping, SysError};

use crate::backend::{Made, Object};
use crate::error::RegionError;
use crate::header::{self, HeaderState, RegionHeader, STATE_OFFSET};
use crate::memlock;
use crate::model::{Backend, PrefaultMethod};
use crate::verify::{self, Verification};

/// A mapped shared memory region.
///
/// ## Layout
///
/// The first 4 KiB are the [header](crate::header); the caller's data are
/// the rest: [`data_offset`](Region::data_offset) (4096) to
/// [`len`](Region::len). [`read_at`](Region::read_at),
/// [`write_at`](Region::write_at) and [`fill`](Region::fill) take offsets
/// into the data; [`as_ptr`](Region::as_ptr) and [`len`](Region::len)
/// describe the whole mapping, header included. Never write the header.
///
/// ## Lifetime
///
/// Owns its mapping (and its fd or SysV attachment) and unmaps it on drop
/// (a failed unmap goes to the `log` facade; [`Region::close`] returns it
/// instead). Dropping never removes a named object (`sysv`, `hugetlbfs`,
/// `posix`): it stays for other processes until [`Region::destroy`] or
/// [`remove`](crate::remove). A `memfd` region lives while some process
/// holds it; the last holder to close it removes its record. `anon`
/// regions vanish with their last mapping.
///
/// ## After `fork`
///
/// A child inherits the mapping (and a file or memfd region's descriptor,
/// with the parent's open file description). In the child, a `Region`
/// value copied over (e.g. captured by a closure) may be **closed or
/// dropped**: that unmaps the child's copy and leaves the parent's lock,
/// record and object alone. The child must not **destroy** it (that
/// removes the name for everyone); a child that needs its own handle
/// attaches by name.
///
/// The memory may be shared with other processes, which can write to it at
/// any time, so `Region` hands out no `&[u8]`: use the raw pointer, or the
/// copying [`Region::read_at`] / [`Region::write_at`].
#[derive(Debug)]
pub struct Region {
    // Declared first: unmapped before the fd closes (and before a memfd's
    // last-holder check).
    mem: Mapping,
    object: Object,
    backend: Backend,
    name: Option<String>,
    page_size: u64,
    pub(crate) header: RegionHeader,
}

/// Destroys a half-made region (object and mapping) unless disarmed.
pub(crate) struct CreateGuard(Option<Region>);

impl CreateGuard {
    pub(crate) fn new(region: Region) -> Self {
        CreateGuard(Some(region))
    }
    pub(crate) fn region(&self) -> &Region {
        self.0.as_ref().expect("armed guard holds its region")
    }
    pub(crate) fn region_mut(&mut self) -> &mut Region {
        self.0.as_mut().expect("armed guard holds its region")
    }
    pub(crate) fn disarm(mut self) -> Region {
        self.0.take().expect("armed guard holds its region")
    }
}

impl Drop for CreateGuard {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            if let Err(e) = r.destroy() {
                log::warn!("cleanup after a failed create: {e}");
            }
        }
    }
}

impl Region {
    /// A region from a backend's mapped object and its header.
    pub(crate) fn from_parts(made: Made, header: RegionHeader) -> Region {
        Region {
            mem: made.mem,
            object: made.object,
            backend: header.backend,
            name: header.name.clone(),
            page_size: header.page_size_bytes,
            header,
        }
    }

    /// A region this process is creating, under `name` as asked.
    pub(crate) fn created(made: Made, header: RegionHeader, backend: Backend) -> Region {
        Region {
            backend,
            ..Region::from_parts(made, header)
        }
    }

    /// Writes the header (state as in `self.header`, normally
    /// `initializing`) into a region this process just created.
    /// Takes `&self`: the pre-fault threads fault the rest of the region
    /// while the creating thread writes it (with 1 GiB pages faulting the
    /// header's page zeroes 1 GiB).
    pub(crate) fn write_header(&self) -> Result<(), RegionError> {
        // Fault the header page in first, where a failure is an error
        // (MADV_POPULATE_WRITE), not SIGBUS (full tmpfs, hugetlb cgroup
        // limit at fault time).
        if sys::populate_write_supported() {
            let first = (self.page_size as usize).min(self.len());
            self.mem
                .populate_write_range(0, first)
                .map_err(|source| RegionError::Prefault {
                    method: PrefaultMethod::PopulateWrite,
                    offset: 0,
                    source,
                })?;
        }
        let bytes = header::encode(&self.header);
        // Atomic word stores (`&self`: the pre-fault threads share the
        // mapping meanwhile, on other pages).
        self.mem.store_words(0, &bytes)?;
        // The state word last, with release: a reader that sees it sees
        // the rest.
        self.mem
            .store_u32_release(STATE_OFFSET, self.header.state.word())?;
        Ok(())
    }

    /// Publishes a header state with one aligned atomic store.
    pub(crate) fn set_state(&mut self, state: HeaderState) -> Result<(), RegionError> {
        self.mem.store_u32_release(STATE_OFFSET, state.word())?;
        self.header.state = state;
        Ok(())
    }

    /// The mapping (for the pre-fault).
    pub(crate) fn mapping(&self) -> &Mapping {
        &self.mem
    }

    /// Start address of the mapping (the header). Accessing memory through
    /// it is the caller's responsibility (`unsafe`); it is valid until the
    /// region is dropped. Handing it out takes a file region out of the
    /// SIGBUS guard (see the crate docs): a fault through a raw pointer
    /// ends the process, as it did without the guard, instead of reading
    /// zeros no one is told about.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }

    /// Start address as an integer.
    pub fn addr(&self) -> usize {
        self.mem.addr()
    }

    /// Mapped length in bytes, header included (a multiple of the page
    /// size).
    #[inline]
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Where the data start: 4096 (after the header).
    #[inline]
    pub fn data_offset(&self) -> usize {
        self.header.data_offset as usize
    }

    /// Data bytes: [`len`](Region::len) − [`data_offset`](Region::data_offset).
    #[inline]
    pub fn data_len(&self) -> usize {
        self.len().saturating_sub(self.data_offset())
    }

    /// Start of the data (`as_ptr() + data_offset()`), for raw access: the
    /// same rules as [`as_ptr`](Region::as_ptr).
    pub fn data_ptr(&self) -> *mut u8 {
        self.as_ptr().wrapping_add(self.data_offset())
    }

    /// The header, as written (creator) or checked (attacher).
    pub fn header(&self) -> &RegionHeader {
        &self.header
    }

    /// The page size the region was created with.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The name, for named regions.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub(crate) fn set_name(&mut self, name: &str) {
        self.name = Some(name.to_owned());
    }

    /// SysV shmid.
    pub fn shmid(&self) -> Option<i32> {
        self.object.sysv().map(|(id, _)| id)
    }

    /// SysV key (0 for `IPC_PRIVATE`).
    pub fn sysv_key(&self) -> Option<i32> {
        self.object.sysv().map(|(_, key)| key)
    }

    /// The path another process can open: the file of a `hugetlbfs` or
    /// `posix` region while it is linked, `/proc/PID/fd/N` for a memfd.
    pub fn path(&self) -> Option<PathBuf> {
        self.object.path()
    }

    /// The record of a named memfd region.
    pub fn memfd_record(&self) -> Option<&Path> {
        self.object.memfd_record()
    }

    /// The file descriptor of file and memfd regions (to pass to a child).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.object.fd()
    }

    /// Bytes the kernel has allocated to the region, whichever process
    /// faulted them (its file's `st_blocks`; a SysV segment's needs
    /// CAP_SYS_ADMIN). `None` where that cannot be read (anon regions).
    pub fn allocated_bytes(&self) -> Option<u64> {
        self.object.allocated_bytes(&self.mem)
    }

    /// Device and inode of a file or memfd region (as in `/proc/PID/maps`).
    pub(crate) fn dev_ino(&self) -> Option<((u32, u32), u64)> {
        self.object.dev_ino()
    }

    /// The object, for messages.
    pub(crate) fn object_text(&self) -> String {
        self.object.describe()
    }

    /// Whether the mapping can share page tables with other processes:
    /// hugetlb pages smaller than 1 GiB, a 1 GiB-aligned address, at least
    /// one whole GiB (see [`hugeshm_sys::PMD_SHARE_ALIGN`]).
    pub fn aligned_for_pmd_sharing(&self) -> bool {
        self.pmd_shareable_bytes() > 0
    }

    /// Bytes of the mapping whose page tables can be shared.
    pub fn pmd_shareable_bytes(&self) -> u64 {
        sys::pmd_shareable_bytes(
            self.addr(),
            self.len(),
            self.header.hugetlb.then_some(self.page_size),
        )
    }

    #[inline(always)]
    fn data_range(&self, what: &str, offset: usize, n: usize) -> Result<usize, RegionError> {
        match offset.checked_add(n) {
            Some(end) if end <= self.data_len() => Ok(self.data_offset() + offset),
            _ => Err(self.range_error(what, offset, n)),
        }
    }

    /// Out of line: the word accessors are on hot paths, their failure
    /// never is.
    #[cold]
    #[inline(never)]
    fn range_error(&self, what: &str, offset: usize, n: usize) -> RegionError {
        RegionError::Sys(SysError::InvalidArgument {
            call: format!("Region::{what}(offset={offset}, len={n})"),
            reason: format!(
                "range {offset}+{n} exceeds the data length {}",
                self.data_len()
            ),
        })
    }

    /// A failed access: [`RegionError::Lost`] with the file's size now
    /// when the SIGBUS guard caught a fault, else the system error.
    #[cold]
    #[inline(never)]
    fn access_error(&self, e: SysError) -> RegionError {
        if !matches!(e, SysError::MappingLost { .. }) {
            return RegionError::Sys(e);
        }
        #[allow(clippy::unnecessary_cast)]
        let file_bytes = self
            .fd()
            .and_then(|fd| rustix::fs::fstat(fd).ok())
            .map(|st| st.st_size as u64);
        RegionError::Lost {
            object: self.object_text(),
            file_bytes,
            region_bytes: self.len() as u64,
            name: self.name.clone().map(|n| Box::new((n, self.backend))),
            source: Box::new(e),
        }
    }

    /// Copies `buf.len()` bytes at data offset `offset` out of the region.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), RegionError> {
        let at = self.data_range("read_at", offset, buf.len())?;
        self.mem.read_at(at, buf).map_err(|e| self.access_error(e))
    }

    /// Copies `data` into the region at data offset `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        let at = self.data_range("write_at", offset, data.len())?;
        self.mem
            .write_at(at, data)
            .map_err(|e| self.access_error(e))
    }

    /// The 32-bit atomic word at data offset `offset` (a multiple of 4):
    /// for structures that live in the region and are shared by every
    /// process that maps it (locks, counters, links as offsets).
    #[inline(always)]
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32, RegionError> {
        let at = self.data_range("atomic_u32", offset, 4)?;
        self.mem.atomic_u32(at).map_err(|e| self.access_error(e))
    }

    /// The 64-bit atomic word at data offset `offset` (a multiple of 8).
    #[inline(always)]
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, RegionError> {
        let at = self.data_range("atomic_u64", offset, 8)?;
        self.mem.atomic_u64(at).map_err(|e| self.access_error(e))
    }

    /// `n` consecutive 32-bit atomic words at data offset `offset` (a
    /// multiple of 4), checked once.
    #[inline(always)]
    pub fn atomic_u32s(&self, offset: usize, n: usize) -> Result<&[AtomicU32], RegionError> {
        let at = self.data_range("atomic_u32s", offset, n.saturating_mul(4))?;
        self.mem
            .atomic_u32s(at, n)
            .map_err(|e| self.access_error(e))
    }

    /// `n` consecutive 64-bit atomic words at data offset `offset` (a
    /// multiple of 8), checked once.
    #[inline(always)]
    pub fn atomic_u64s(&self, offset: usize, n: usize) -> Result<&[AtomicU64], RegionError> {
        let at = self.data_range("atomic_u64s", offset, n.saturating_mul(8))?;
        self.mem
            .atomic_u64s(at, n)
            .map_err(|e| self.access_error(e))
    }

    /// Starts loading the cache line at data offset `offset` (for writing
    /// when `write`) and returns at once; see
    /// [`Mapping::prefetch`](hugeshm_sys::Mapping::prefetch). An offset
    /// beyond the data does nothing.
    #[inline]
    pub fn prefetch(&self, offset: usize, write: bool) {
        if offset < self.data_len() {
            self.mem.prefetch(self.data_offset() + offset, write);
        }
    }

    /// Copies `buf.len()` bytes at data offset `offset` out of the region
    /// as atomic 8-byte words (both multiples of 8): the fast copy for
    /// blocks that a lock word in the region protects.
    pub fn load_words(&self, offset: usize, buf: &mut [u8]) -> Result<(), RegionError> {
        let at = self.data_range("load_words", offset, buf.len())?;
        self.mem
            .load_words(at, buf)
            .map_err(|e| self.access_error(e))
    }

    /// Copies `data` into the region at data offset `offset` as atomic
    /// 8-byte words (both multiples of 8). Takes `&self`: which process may
    /// write a block is the protocol of the structure in the region.
    pub fn store_words(&self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        let at = self.data_range("store_words", offset, data.len())?;
        self.mem
            .store_words(at, data)
            .map_err(|e| self.access_error(e))
    }

    /// Sets every data byte to `byte` (the header is kept). A mapping
    /// that lost its memory ([`is_lost`](Region::is_lost)) takes the
    /// bytes and keeps nothing.
    pub fn fill(&mut self, byte: u8) {
        let (at, n) = (self.data_offset(), self.data_len());
        match self.mem.fill_range(at, n, byte) {
            Ok(()) | Err(SysError::MappingLost { .. }) => {}
            Err(e) => unreachable!("the data lie inside the mapping: {e}"),
        }
    }

    /// The wrapping sum of the data as 8-byte words: reads every data
    /// byte once, front to back (what a read-bandwidth measurement times).
    /// 0 for a mapping that lost its memory ([`is_lost`](Region::is_lost)).
    pub fn sum_words(&self) -> u64 {
        let (at, n) = (self.data_offset(), self.data_len() & !7);
        match self.mem.sum_u64_range(at, n) {
            Ok(sum) => sum,
            Err(SysError::MappingLost { .. }) => 0,
            Err(e) => unreachable!("the data lie inside the mapping, 8-byte aligned: {e}"),
        }
    }

    /// Whether this process's mapping lost the region's memory: another
    /// process truncated its file (see the crate docs on SIGBUS); every
    /// checked access then fails with [`RegionError::Lost`].
    pub fn is_lost(&self) -> bool {
        self.mem.is_lost()
    }

    /// Maps every page of the region into this process's page tables by
    /// reading (`MADV_POPULATE_READ`, Linux 5.14+; else one read per page):
    /// what an attached process does to pay its page-table cost up front.
    /// Contents are unchanged; pages that exist are not allocated again.
    ///
    /// Where the page tables can be shared (hugetlb pages below 1 GiB in a
    /// mapping aligned to 1 GiB), each whole GiB is read-faulted at its
    /// first page only: that fault shares another process's page-table
    /// page for the GiB, when one exists, with every entry already there.
    /// Sampled entries of `/proc/self/pagemap` (the second, middle and
    /// last page) tell whether it did; a GiB that got its own page table
    /// is populated whole. Measured on a 4 GiB SysV region held by its
    /// creator: 0.02 ms instead of 0.8 ms for `MADV_POPULATE_READ` of
    /// every page (which walks them one by one).
    pub fn populate_read(&self) -> Result<(), RegionError> {
        match self.populate_read_sharing() {
            Err(RegionError::Sys(e)) if e.errno() == Some(libc::EINVAL) => {
                std::hint::black_box(self.mem.read_touch(self.page_size as usize));
                Ok(())
            }
            r => r,
        }
    }

    fn populate_read_sharing(&self) -> Result<(), RegionError> {
        let shared = self.pmd_shareable_bytes() as usize;
        let page = self.page_size as usize;
        if shared == 0 || page == 0 {
            return Ok(self.mem.populate_read()?);
        }
        let gib = sys::PMD_SHARE_ALIGN;
        let pagemap = std::fs::File::open("/proc/self/pagemap").ok();
        let present = |offset: usize| -> bool {
            use std::os::unix::fs::FileExt;
            let Some(f) = pagemap.as_ref() else {
                return false;
            };
            let mut b = [0u8; 8];
            let at = (self.addr() + offset) as u64 / 4096 * 8;
            f.read_exact_at(&mut b, at).is_ok()
                && hugeshm_parse::pagemap::Entry(u64::from_ne_bytes(b)).present()
        };
        for chunk in (0..shared).step_by(gib) {
            self.mem.populate_read_range(chunk, page)?;
            let whole = [chunk + page, chunk + gib / 2, chunk + gib - page]
                .into_iter()
                .all(present);
            if !whole {
                self.mem.populate_read_range(chunk, gib)?;
            }
        }
        if shared < self.len() {
            self.mem.populate_read_range(shared, self.len() - shared)?;
        }
        Ok(())
    }

    /// Write-faults every page of the region without changing its contents
    /// (`MADV_POPULATE_WRITE`, else one atomic `fetch_or(0)` per page).
    pub fn touch_all(&mut self) -> Result<(), RegionError> {
        match self.mem.populate_write() {
            Err(e) if e.errno() == Some(libc::EINVAL) => {
                self.mem.touch();
                Ok(())
            }
            r => Ok(r?),
        }
    }

    /// Reads `/proc/self/smaps` for the region: the page size the kernel
    /// really uses and the resident bytes.
    pub fn verify(&self) -> Result<Verification, RegionError> {
        let pmd = verify::pmd_size(&hugeshm_probe::Probe::default());
        self.verify_with(pmd)
    }

    /// The page size the kernel really backs the region with, the cheap
    /// way, for a start-up check: for a hugetlb region, the page size of
    /// its mappings from `PROCMAP_QUERY` (Linux 6.11+), which does not walk
    /// the page tables, so it costs the same at 64 GiB as at 2 MiB
    /// ([`verify`](Region::verify) reads smaps, which does: 1 ms at 16 GiB
    /// on 2 MiB pages on a 2-core VM). Base pages, transparent huge pages
    /// (the mapping reports 4 KiB whatever backs it), DAX and older kernels
    /// are judged from smaps, as `verify` does. Residency is not checked:
    /// after [`touch_all`](Region::touch_all) or
    /// [`populate_read`](Region::populate_read) succeeded, every page is
    /// mapped.
    pub fn verify_page_size(&self) -> Result<verify::PageSizeCheck, RegionError> {
        let (addr, len) = (self.addr() as u64, self.len() as u64);
        if self.backend() != crate::Backend::Dax {
            if let Some(page) = verify::query_page_size(addr, len)? {
                if page > 4096 {
                    return Ok(verify::PageSizeCheck {
                        page_size_bytes: page,
                        hugetlb: true,
                        source: verify::PageSizeSource::ProcmapQuery,
                    });
                }
            }
        }
        let v = self.verify()?;
        Ok(verify::PageSizeCheck {
            page_size_bytes: v.page_size_bytes,
            hugetlb: v.hugetlb,
            source: verify::PageSizeSource::Smaps,
        })
    }

    /// [`verify`](Region::verify) with the host's THP size known.
    pub(crate) fn verify_with(&self, pmd_size: Option<u64>) -> Result<Verification, RegionError> {
        verify::verify_range(self.addr() as u64, self.len() as u64, pmd_size)
    }

    /// Makes data bytes `offset..offset + len` durable: for a `dax`
    /// region mapped `MAP_SYNC`, by writing the CPU cache lines back (CLWB,
    /// else CLFLUSHOPT, else CLFLUSH, chosen from CPUID) and a store fence;
    /// otherwise with `msync(MS_SYNC)` (which for tmpfs and hugetlbfs
    /// regions, whose memory is gone with the machine, only orders writes).
    /// Returns how it was done.
    pub fn persist(
        &self,
        offset: usize,
        len: usize,
    ) -> Result<hugeshm_sys::PersistMethod, RegionError> {
        let at = self.data_range("persist", offset, len)?;
        Ok(self.mem.persist_range(at, len)?)
    }

    /// [`persist`](Region::persist) for the header (state, creator,
    /// checksum), so that after a power loss the region is found in the
    /// state it was last set to.
    pub(crate) fn persist_header(&self) -> Result<hugeshm_sys::PersistMethod, RegionError> {
        Ok(self
            .mem
            .persist_range(0, crate::header::HEADER_BYTES as usize)?)
    }

    /// `mlock`s the region (after checking `RLIMIT_MEMLOCK`).
    pub fn mlock(&self) -> Result<(), RegionError> {
        memlock::check_memlock(self.len() as u64)?;
        self.mem.mlock().map_err(|e| match e.errno() {
            Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => {
                let lim = rustix::process::getrlimit(rustix::process::Resource::Memlock);
                memlock::memlock_error(self.len() as u64, 0, lim.current, lim.maximum, "*")
            }
            _ => RegionError::Sys(e),
        })
    }

    /// Removes the named object (SysV `IPC_RMID`, unlinks the file, removes
    /// a memfd's record) and unmaps. Other processes that have it mapped
    /// keep their mapping; the memory is freed when the last one goes. An
    /// object someone else removed already is not an error.
    pub fn destroy(self) -> Result<(), RegionError> {
        let Region {
            mem, mut object, ..
        } = self;
        let removed = object.destroy();
        let unmapped = mem.release();
        drop(object);
        removed?;
        Ok(unmapped?)
    }

    /// Detaches: unmaps now (keeping any named object), returning a failed
    /// unmap instead of logging it. The last holder of a memfd region
    /// removes its record.
    pub fn close(self) -> Result<(), RegionError> {
        let Region { mem, object, .. } = self;
        let r = mem.release();
        drop(object);
        Ok(r?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{Decoded, USED_BYTES};
    use crate::model::{PageSize, Policy};
    use crate::RegionBuilder;
    use hugeshm_sys::PMD_SHARE_ALIGN;
    use std::os::fd::AsFd;

    #[test]
    fn tiny_anon_region_has_a_header_and_data() {
        // Works without root: anon, base pages.
        let (mut r, report) = RegionBuilder::new(1)
            .backend(Backend::Anon)
            .page_size(PageSize::Base)
            .policy(Policy::Only)
            .create()
            .unwrap();
        let base = sys::base_page_size();
        assert_eq!(r.len(), 2 * base, "1 byte + the 4 KiB header");
        assert_eq!(r.data_offset(), 4096);
        assert_eq!(r.data_len(), r.len() - 4096);
        assert_eq!(report.data_bytes, r.data_len() as u64);
        let h = report.header.clone().unwrap();
        assert_eq!(h.state, HeaderState::Ready);
        assert_eq!(h.requested_bytes, 1);
        assert_eq!(h.creator_pid, std::process::id());
        assert!(!h.hugetlb && h.name.is_none());
        // The header in memory says the same.
        let mut bytes = vec![0u8; USED_BYTES];
        r.mem.read_at(0, &mut bytes).unwrap();
        assert_eq!(header::decode(&bytes), Decoded::Valid(h));
        // Data-relative access, bounded by the data.
        r.write_at(0, b"first").unwrap();
        r.write_at(r.data_len() - 4, b"last").unwrap();
        assert!(r.write_at(r.data_len() - 3, b"last").is_err());
        let mut b = [0u8; 5];
        r.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"first");
        r.fill(7);
        r.read_at(0, &mut b).unwrap();
        assert_eq!(b, [7; 5]);
        r.touch_all().unwrap();
        r.populate_read().unwrap();
        assert!(!r.aligned_for_pmd_sharing());
        // Fill never reaches the header.
        let mut magic = [0u8; 8];
        r.mem.read_at(0, &mut magic).unwrap();
        assert_eq!(&magic, b"HUGESHM\0");
        r.destroy().unwrap();
    }

    #[test]
    fn placed_mappings_are_aligned() {
        let m = sys::MapOptions::new(3 * 4096)
            .shared()
            .align(PMD_SHARE_ALIGN)
            .map_anon()
            .unwrap();
        assert_eq!(m.addr() % PMD_SHARE_ALIGN, 0);
        assert_eq!(m.len(), 3 * 4096);
        // Base pages never share page tables; hugetlb below 1 GiB does,
        // for whole aligned GiBs only.
        assert_eq!(sys::pmd_shareable_bytes(m.addr(), 1 << 30, None), 0);
        assert_eq!(
            sys::pmd_shareable_bytes(1 << 30, (3 << 29) as usize, Some(2 << 20)),
            1 << 30
        );
        assert_eq!(
            sys::pmd_shareable_bytes((1 << 30) + (2 << 20), 2 << 30, Some(2 << 20)),
            0
        );
        assert_eq!(sys::pmd_shareable_bytes(1 << 30, 1 << 30, Some(1 << 30)), 0);
        m.release().unwrap();
        let fd = sys::memfd_create("hugeshm-placed-test", None).unwrap();
        sys::set_len(fd.as_fd(), 8192).unwrap();
        let m = sys::MapOptions::new(8192)
            .align(PMD_SHARE_ALIGN)
            .map(fd.as_fd())
            .unwrap();
        assert_eq!(m.addr() % PMD_SHARE_ALIGN, 0);
        m.release().unwrap();
    }
}
