//! [`Region::collapse`]: a region on 4 KiB pages (a `try` that fell back,
//! or one made on base pages) moved onto 2 MiB transparent huge pages in
//! place by its own process (`madvise(MADV_COLLAPSE)`, Linux 6.1+), for
//! every process that maps it: they refault each block as one 2 MiB page.

use crate::{Backend, Region, RegionError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A 2 MiB block: what one `MADV_COLLAPSE` call makes one huge page of.
const BLOCK: usize = 2 << 20;

/// How often a block the kernel finds busy (`EAGAIN`) is tried.
const TRIES: u32 = 3;

/// What [`Region::collapse`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Collapsed {
    /// Whole 2 MiB blocks of the region's mapping.
    pub blocks: u64,
    /// Blocks now on one 2 MiB page each.
    pub collapsed: u64,
    /// Blocks the kernel refused (`EINVAL`): mostly blocks no process has
    /// touched yet, which have nothing to move.
    pub refused: u64,
    /// Blocks still busy (`EAGAIN`) after a few tries.
    pub busy: u64,
}

impl Region {
    /// Moves this region's memory from 4 KiB pages onto 2 MiB transparent
    /// huge pages in place, block by block, for every process that maps it
    /// (they refault each block as one 2 MiB page: fewer page tables and TLB
    /// misses, no restart). For a region whose `try` fell back to base
    /// pages: a huge page pool one page short, a memlock or cgroup limit, a
    /// container without hugetlb pages.
    ///
    /// Only blocks with a page in memory move (touch or pre-fault first);
    /// the region must be mapped 2 MiB-aligned (regions are, from this
    /// version on). Unlike hugetlb pages, these are not reserved: the
    /// kernel may split them again under memory pressure or swap.
    ///
    /// # Errors
    ///
    /// [`RegionError::Unsupported`] for a region on huge pages already, a
    /// DAX region, or one mapped at an address that is not 2 MiB-aligned;
    /// the kernel's errors other than `EINVAL` and `EAGAIN` (`ENOMEM`: no
    /// free 2 MiB page; `EBUSY`: the memory cgroup is full) as
    /// [`RegionError::Sys`], with what was done before it lost.
    pub fn collapse(&self) -> Result<Collapsed, RegionError> {
        let what = || self.name().unwrap_or("(anonymous)").to_owned();
        if self.backend() == Backend::Dax {
            return Err(RegionError::Unsupported(format!(
                "region {}: a DAX region is mapped from its device; nothing to collapse",
                what()
            )));
        }
        if self.page_size() as usize != hugeshm_sys::base_page_size() {
            return Err(RegionError::Unsupported(format!(
                "region {} is on {}-byte pages already: nothing to collapse",
                what(),
                self.page_size()
            )));
        }
        let m = self.mapping();
        if m.addr() % BLOCK != 0 {
            return Err(RegionError::Unsupported(format!(
                "region {} is mapped at {:#x}, not 2 MiB-aligned: its pages cannot be mapped as \
                 2 MiB pages (attach it again to map it aligned)",
                what(),
                m.addr()
            )));
        }
        let mut done = Collapsed {
            blocks: (m.len() / BLOCK) as u64,
            collapsed: 0,
            refused: 0,
            busy: 0,
        };
        for b in 0..m.len() / BLOCK {
            let mut tries = 0;
            loop {
                match m.collapse_range(b * BLOCK, BLOCK) {
                    Ok(()) => done.collapsed += 1,
                    Err(e) if e.errno() == Some(libc::EINVAL) => done.refused += 1,
                    Err(e) if e.errno() == Some(libc::EAGAIN) && tries + 1 < TRIES => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    Err(e) if e.errno() == Some(libc::EAGAIN) => done.busy += 1,
                    Err(e) => return Err(e.into()),
                }
                break;
            }
        }
        Ok(done)
    }
}
