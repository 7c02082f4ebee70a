//! Making writes durable: CPU cache write-back on a `MAP_SYNC` mapping,
//! else `msync`.

use std::ffi::c_void;

use super::mapping::Mapping;
use crate::page::base_page_size;
use crate::SysError;

impl Mapping {
    /// Whether it was mapped `MAP_SYNC` ([`MapOptions::sync`](crate::MapOptions::sync)).
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Makes `offset..offset + n` durable: on a `MAP_SYNC` mapping by
    /// writing the CPU cache lines back to memory (the persistence domain
    /// of a DAX device) with the best instruction the CPU has, then a
    /// store fence; elsewhere with `msync(MS_SYNC)` over the pages. Returns
    /// how it was done.
    pub fn persist_range(&self, offset: usize, n: usize) -> Result<PersistMethod, SysError> {
        let start = self.range_ptr("persist", offset, n)?;
        if n == 0 {
            return Ok(PersistMethod::None);
        }
        if self.sync {
            if let Some(m) = cache::flush(start as usize, n) {
                self.intact("persist")?;
                return Ok(m);
            }
        }
        let page = base_page_size();
        let first = (start as usize) / page * page;
        let end = start as usize + n;
        // SAFETY: [first, end) lies in pages of this mapping (start is
        // inside it, rounded down to its page; end is checked above);
        // msync only writes dirty pages back.
        unsafe {
            rustix::mm::msync(
                first as *mut c_void,
                end - first,
                rustix::mm::MsyncFlags::SYNC,
            )
        }
        .map_err(|e| SysError::os(self.call("msync"), e))?;
        self.intact("msync")?;
        Ok(PersistMethod::Msync)
    }
}

/// How [`Mapping::persist_range`] made a range durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistMethod {
    /// Nothing to do (an empty range).
    None,
    /// `CLWB` per cache line (writes back, keeps the line), `SFENCE`.
    Clwb,
    /// `CLFLUSHOPT` per cache line, `SFENCE`.
    Clflushopt,
    /// `CLFLUSH` per cache line (serialized), `SFENCE`.
    Clflush,
    /// `msync(MS_SYNC)`: the page cache or file system writes it back.
    Msync,
}

impl PersistMethod {
    /// Its name, lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            PersistMethod::None => "none",
            PersistMethod::Clwb => "clwb",
            PersistMethod::Clflushopt => "clflushopt",
            PersistMethod::Clflush => "clflush",
            PersistMethod::Msync => "msync",
        }
    }
}

/// CPU cache write-back for persistent memory.
mod cache {
    use super::PersistMethod;

    /// The cache line size the flush steps by (x86-64).
    const LINE: usize = 64;

    /// The best cache write-back instruction this CPU has (CPUID leaf 7:
    /// EBX bit 24 CLWB, bit 23 CLFLUSHOPT; leaf 1: EDX bit 19 CLFLUSH).
    #[cfg(target_arch = "x86_64")]
    // CPUID is an unsafe intrinsic before Rust 1.87 (the pinned 1.85).
    #[allow(unused_unsafe)]
    pub(super) fn best() -> Option<PersistMethod> {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        use std::sync::OnceLock;
        static BEST: OnceLock<Option<PersistMethod>> = OnceLock::new();
        *BEST.get_or_init(|| {
            // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 says how
            // many leaves there are.
            let max = unsafe { __cpuid(0) }.eax;
            if max >= 7 {
                // SAFETY: leaf 7 exists (checked above).
                let ebx = unsafe { __cpuid_count(7, 0) }.ebx;
                if ebx & (1 << 24) != 0 {
                    return Some(PersistMethod::Clwb);
                }
                if ebx & (1 << 23) != 0 {
                    return Some(PersistMethod::Clflushopt);
                }
            }
            // SAFETY: leaf 1 exists on every x86-64 CPU.
            let edx = unsafe { __cpuid(1) }.edx;
            (edx & (1 << 19) != 0).then_some(PersistMethod::Clflush)
        })
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn best() -> Option<PersistMethod> {
        None
    }

    /// Writes back every cache line of `[addr, addr + n)` and fences;
    /// `None` where the CPU has no such instruction (msync then).
    pub(super) fn flush(addr: usize, n: usize) -> Option<PersistMethod> {
        let m = best()?;
        #[cfg(target_arch = "x86_64")]
        {
            let mut line = addr / LINE * LINE;
            while line < addr + n {
                let p = line as *const u8;
                // SAFETY: `p` is in a cache line that overlaps a range the
                // caller checked lies in its mapping; these instructions
                // only write the line back (or evict it), never change
                // memory, and are supported (CPUID above).
                unsafe {
                    match m {
                        PersistMethod::Clwb => {
                            std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
                        }
                        PersistMethod::Clflushopt => {
                            std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
                        }
                        _ => {
                            std::arch::asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
                        }
                    }
                }
                line += LINE;
            }
            // SAFETY: SFENCE is an x86-64 baseline instruction; it orders
            // the write-backs before later stores.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (addr, n, LINE);
        Some(m)
    }
}
