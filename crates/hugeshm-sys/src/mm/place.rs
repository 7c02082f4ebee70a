//! Address placement: a mapping at an aligned address, found inside an
//! inaccessible reservation; page-table sharing of aligned hugetlb
//! mappings.

use std::ffi::c_void;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

use crate::SysError;

/// Alignment that lets shared hugetlb mappings share page tables: on
/// x86-64 the kernel shares one PMD page (the page-table page of 512 2 MiB
/// entries) among every process that maps the same file range at a
/// 1 GiB-aligned address with address ≡ file offset (mod 1 GiB)
/// (`huge_pmd_share`). Regions map file offset 0, so a 1 GiB-aligned
/// address is enough.
pub const PMD_SHARE_ALIGN: usize = 1 << 30;

/// Bytes of a mapping of file offset 0 at `addr` that can share page
/// tables with other processes: the whole 1 GiB ranges it covers, when the
/// address is 1 GiB-aligned and the pages are hugetlb pages smaller than
/// 1 GiB (1 GiB pages sit directly in the PUD and need no PMD page).
pub fn pmd_shareable_bytes(addr: usize, len: usize, hugetlb_page: Option<u64>) -> u64 {
    match hugetlb_page {
        Some(p) if (p as usize) < PMD_SHARE_ALIGN && addr % PMD_SHARE_ALIGN == 0 => {
            (len / PMD_SHARE_ALIGN * PMD_SHARE_ALIGN) as u64
        }
        _ => 0,
    }
}

/// Address space reserved with an inaccessible, unbacked mapping
/// (`PROT_NONE`, `MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE`): nothing can
/// touch it and it commits no memory. Unmapped on drop.
struct AddressReservation {
    start: usize,
    len: usize,
}

impl AddressReservation {
    fn new(len: usize) -> Result<Self, SysError> {
        // SAFETY: a null hint lets the kernel choose a fresh range; the
        // mapping is inaccessible and owned by the returned value.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| {
            SysError::os(
                format!("mmap(len={len}, PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE)"),
                e,
            )
        })?;
        Ok(AddressReservation {
            start: p as usize,
            len,
        })
    }

    fn unmap(start: usize, len: usize) -> Result<(), SysError> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: only ever called on parts of this reservation, which
        // nothing in the program references.
        unsafe { rustix::mm::munmap(start as *mut c_void, len) }
            .map_err(|e| SysError::os(format!("munmap(addr={start:#x}, len={len})"), e))
    }

    /// Unmaps the reservation around `keep..keep + keep_len`, which the
    /// caller has mapped over.
    fn release_around(self, keep: usize, keep_len: usize) -> Result<(), SysError> {
        let this = std::mem::ManuallyDrop::new(self);
        let end = this.start + this.len;
        let head = Self::unmap(this.start, keep - this.start);
        let tail = Self::unmap(keep + keep_len, end - (keep + keep_len));
        head.and(tail)
    }
}

impl Drop for AddressReservation {
    fn drop(&mut self) {
        if let Err(e) = Self::unmap(self.start, self.len) {
            log::warn!("{e}");
        }
    }
}

/// Maps `len` bytes with `map_at`: at a kernel-chosen address
/// (`map_at(None)`), or, with `align`, at the first `align`-aligned
/// address inside a fresh [`AddressReservation`] of `len + align` bytes
/// (`map_at(Some(addr))` must map exactly `len` bytes there with
/// `MAP_FIXED` semantics), releasing the rest of the reservation
/// afterwards.
///
/// `len` must be all the mapping will cover (a multiple of `page`, the
/// mapping's page size) and an `align` above `page` a multiple of it:
/// what `map_at` maps then lies inside the reservation, which is checked
/// before it is called.
pub(crate) fn placed(
    call: &dyn Fn() -> String,
    len: usize,
    page: usize,
    align: Option<usize>,
    map_at: impl FnOnce(Option<usize>) -> Result<*mut c_void, SysError>,
) -> Result<NonNull<u8>, SysError> {
    let nonnull = |p: *mut c_void| {
        NonNull::new(p.cast::<u8>())
            .ok_or_else(|| SysError::invalid(call(), "kernel returned address 0"))
    };
    let align = match align {
        // The kernel aligns to the page size by itself.
        Some(a) if a > page => a,
        _ => return nonnull(map_at(None)?),
    };
    if !align.is_power_of_two() || align % page != 0 || len % page != 0 {
        return Err(SysError::invalid(
            call(),
            format!(
                "alignment {align} and length {len} are not both multiples of the page size \
                 {page}, or the alignment is not a power of two"
            ),
        ));
    }
    let total = len
        .checked_add(align)
        .ok_or_else(|| SysError::invalid(call(), "length overflows"))?;
    let res = AddressReservation::new(total)?;
    let at = res.start.div_ceil(align) * align;
    // The reservation starts page-aligned, so `at` is less than `align`
    // past it and `len` more bytes end inside it.
    if at + len > res.start + res.len {
        return Err(SysError::invalid(
            call(),
            format!(
                "{len} bytes at {at:#x} would pass the end of the reservation {:#x}+{}",
                res.start, res.len
            ),
        ));
    }
    // On failure `res` drops and unmaps the whole range, including whatever
    // a failed MAP_FIXED left there.
    let p = map_at(Some(at))?;
    if p as usize != at {
        return Err(SysError::invalid(
            call(),
            format!("kernel mapped at {:#x} instead of {at:#x}", p as usize),
        ));
    }
    if let Err(e) = res.release_around(at, len) {
        // The mapping is in place; only address space of the reservation
        // may be left. Report, keep going.
        log::warn!("releasing the reservation around {at:#x}: {e}");
    }
    nonnull(p)
}
