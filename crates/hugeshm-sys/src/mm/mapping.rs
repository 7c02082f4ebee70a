//! [`Mapping`]: one owned range of this process's address space, its
//! addresses, range-checked copies and its release.

use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

use super::sigbus;
use crate::SysError;

/// How a [`Mapping`] is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Release {
    /// `munmap(addr, len)`.
    Munmap,
    /// `shmdt(addr)` of an attachment of this System V segment.
    Shmdt { shmid: i32 },
}

/// A range of this process's address space that this value owns: an
/// `mmap`'d range or a `shmat` attachment, released on drop (`munmap` or
/// `shmdt`; a failure goes to the `log` facade, [`Mapping::release`]
/// returns it instead).
///
/// `len()` is the mapped length: the requested length rounded up to the
/// mapping's page size for `mmap` (`munmap` of a hugetlb mapping needs the
/// full length), the segment size rounded up to the segment's page size for
/// `shmat` (read back from the mapping: see [`shm_attach_placed`](crate::shm_attach_placed)).
pub struct Mapping {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    pub(super) page_size: usize,
    pub(super) release: Release,
    /// Mapped `MAP_SYNC` (a DAX file): flushing CPU caches makes writes
    /// durable.
    pub(super) sync: bool,
    /// Its slot in the SIGBUS guard (file mappings), see [`sigbus`].
    pub(super) guard: sigbus::Guard,
}

// SAFETY: a Mapping is a plain owned address range; munmap/shmdt may be
// called from any thread, and non-atomic writes through it need `&mut self`.
unsafe impl Send for Mapping {}
// SAFETY: the `&self` operations are address queries, volatile reads,
// atomic per-byte or per-word accesses and madvise/mlock, none of which
// race with a non-atomic access (those need `&mut self`).
unsafe impl Sync for Mapping {}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mapping");
        d.field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("page_size", &self.page_size);
        if let Release::Shmdt { shmid } = self.release {
            d.field("shmid", &shmid);
        }
        d.finish()
    }
}

#[inline(always)]
pub(super) fn check_range(
    call: impl FnOnce() -> String,
    offset: usize,
    n: usize,
    len: usize,
) -> Result<(), SysError> {
    match offset.checked_add(n) {
        Some(end) if end <= len => Ok(()),
        _ => Err(range_error(call(), offset, n, len)),
    }
}

/// The error of a range check, out of line: the word accessors are on the
/// hot path of shared data structures, their failure never is.
#[cold]
#[inline(never)]
fn range_error(call: String, offset: usize, n: usize, len: usize) -> SysError {
    SysError::invalid(
        call,
        format!("range {offset}+{n} exceeds the region length {len}"),
    )
}

impl Mapping {
    /// Start address. Accessing memory through it is the caller's
    /// responsibility (`unsafe`); it stays valid until `self` is released.
    ///
    /// A file mapping whose raw pointer was handed out leaves the SIGBUS
    /// guard (see the crate docs): code that reads through the pointer
    /// cannot be told that the memory went, so a fault then ends the
    /// process as it did without the guard, rather than feed it zeros.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.guard.hand_out_raw();
        self.base()
    }

    /// The start address, for this type's own checked accesses.
    #[inline(always)]
    pub(super) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Start address as an integer (for reports and `/proc/PID/smaps`).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Mapped length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty mappings cannot be made.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Page size backing the mapping: the huge page size for hugetlb
    /// mappings (a `SHM_HUGETLB` segment's included), else the base page
    /// size. Transparent huge pages are not counted (see
    /// `/proc/self/smaps`).
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The System V segment of a `shmat` attachment.
    pub fn shmid(&self) -> Option<i32> {
        match self.release {
            Release::Shmdt { shmid } => Some(shmid),
            Release::Munmap => None,
        }
    }

    #[cold]
    pub(super) fn call(&self, what: &str) -> String {
        match self.release {
            Release::Munmap => format!("{what}(addr={:#x})", self.addr()),
            Release::Shmdt { shmid } => format!("{what}(shmid={shmid}, addr={:#x})", self.addr()),
        }
    }

    /// The address of `offset..offset + n`, checked against the mapping.
    #[inline(always)]
    pub(super) fn range_ptr(
        &self,
        what: &str,
        offset: usize,
        n: usize,
    ) -> Result<*mut u8, SysError> {
        check_range(|| self.call(what), offset, n, self.len)?;
        // SAFETY: offset + n <= len: inside (or one past) the mapping.
        Ok(unsafe { self.base().add(offset) })
    }

    /// Copies `buf.len()` bytes at `offset` out of the mapping (volatile
    /// byte reads: other processes may write concurrently).
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), SysError> {
        let src = self.range_ptr("read_at", offset, buf.len())?;
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: i < buf.len(), inside the range checked above, in a
            // live mapping owned by self.
            *b = unsafe { std::ptr::read_volatile(src.add(i)) };
        }
        self.intact("read_at")
    }

    /// Copies `data` into the mapping at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), SysError> {
        let dst = self.range_ptr("write_at", offset, data.len())?;
        for (i, b) in data.iter().enumerate() {
            // SAFETY: i < data.len(), inside the checked range of a live
            // read-write mapping; `&mut self` excludes other accesses from
            // this process.
            unsafe { std::ptr::write_volatile(dst.add(i), *b) };
        }
        self.intact("write_at")
    }

    /// Sets `offset..offset + n` to `byte` (faults those pages in).
    pub fn fill_range(&mut self, offset: usize, n: usize, byte: u8) -> Result<(), SysError> {
        let dst = self.range_ptr("fill", offset, n)?;
        // SAFETY: the checked range of a live read-write mapping; `&mut
        // self` excludes other accesses from this process and no Rust
        // references into it exist.
        unsafe { std::ptr::write_bytes(dst, byte, n) };
        self.intact("fill")
    }

    /// Sets every byte of the mapping to `byte` (unchecked for a lost
    /// mapping: see [`is_lost`](Mapping::is_lost)).
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole live read-write mapping owned by self; `&mut
        // self` excludes other accesses from this process.
        unsafe { std::ptr::write_bytes(self.base(), byte, self.len) };
    }

    /// A `shmat` attachment at `ptr` of `len` bytes of `page_size` pages,
    /// detached (`shmdt`) when released. A System V segment cannot be
    /// truncated: nothing for the SIGBUS guard.
    pub(crate) fn shm_attachment(
        ptr: NonNull<u8>,
        len: usize,
        page_size: usize,
        shmid: i32,
    ) -> Mapping {
        Mapping {
            ptr,
            len,
            page_size,
            release: Release::Shmdt { shmid },
            sync: false,
            guard: sigbus::Guard::none(),
        }
    }

    /// Sets the length and page size of a `shmat` attachment to what the
    /// kernel mapped, read back from it.
    pub(crate) fn set_extent(&mut self, len: usize, page_size: usize) {
        self.len = len;
        self.page_size = page_size;
    }

    /// `Ok` unless a SIGBUS hit the mapping (see [`sigbus`]): one load,
    /// made after the access it follows.
    #[inline(always)]
    pub(crate) fn intact(&self, what: &str) -> Result<(), SysError> {
        if self.guard.is_lost() {
            return Err(self.lost(what));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn lost(&self, what: &str) -> SysError {
        let (offset, code) = self.guard.fault();
        SysError::MappingLost {
            call: self.call(what),
            offset,
            code,
        }
    }

    /// Whether a SIGBUS hit the mapping (its file lost memory under it):
    /// every checked access fails with [`SysError::MappingLost`] then.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Gives the mapping up without releasing it: the range stays mapped
    /// and is no longer this value's to unmap (nor the SIGBUS guard's to
    /// watch). Returns `(address, length)`. For code that hands the
    /// mapping to a program that unmaps it itself (the `hugeshm run`
    /// interposer returns it from the server's `mmap` or `shmat`).
    pub fn into_raw(self) -> (usize, usize) {
        let mut this = std::mem::ManuallyDrop::new(self);
        this.guard.unregister();
        (this.addr(), this.len)
    }

    /// Releases the mapping now (`munmap` or `shmdt`), returning the error
    /// instead of logging it.
    pub fn release(self) -> Result<(), SysError> {
        let mut this = std::mem::ManuallyDrop::new(self);
        this.do_release()
    }

    fn do_release(&mut self) -> Result<(), SysError> {
        // Out of the SIGBUS guard before the range can be someone else's.
        self.guard.unregister();
        match self.release {
            Release::Munmap => {
                // SAFETY: ptr/len are exactly what mmap returned and no
                // references into the mapping can outlive self (none are
                // handed out beyond `&self`/`&mut self` borrows).
                unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len) }.map_err(
                    |e| {
                        SysError::os(
                            format!("munmap(addr={:#x}, len={})", self.addr(), self.len),
                            e,
                        )
                    },
                )
            }
            Release::Shmdt { shmid } => {
                // SAFETY: ptr is the address shmat returned; nothing
                // references the attachment beyond self.
                let rc = unsafe { libc::shmdt(self.ptr.as_ptr().cast::<c_void>().cast_const()) };
                if rc < 0 {
                    return Err(SysError::last_os(format!(
                        "shmdt(shmid={shmid}, addr={:#x})",
                        self.addr()
                    )));
                }
                Ok(())
            }
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Err(err) = self.do_release() {
            log::warn!("{err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::base_page_size as page;
    use crate::MapOptions;

    #[test]
    fn anon_private_rounds_and_roundtrips() {
        let mut m = MapOptions::new(1).map_anon().expect("mmap");
        assert_eq!(m.len(), page());
        assert_eq!(m.page_size(), page());
        assert_eq!(m.addr() % page(), 0);
        m.write_at(10, b"abc").unwrap();
        let mut buf = [0u8; 3];
        m.read_at(10, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
        assert!(m.read_at(page() - 1, &mut buf).is_err());
        assert!(m.write_at(usize::MAX, b"x").is_err());
        m.release().expect("munmap");
    }
}
