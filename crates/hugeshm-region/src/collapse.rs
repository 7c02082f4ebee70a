//! [`Region::collapse`]: a region on 4 KiB pages (a `try` that fell back,
//! or one made on base pages) moved onto 2 MiB transparent huge pages in
//! place by its own process (`madvise(MADV_COLLAPSE)`, Linux 6.1+), for
//! every process that maps it: they refault each block as one 2 MiB page.

use crate::{Backend, Region, RegionError};
use hugeshm_sys::COLLAPSE_BLOCK;
use serde::{Deserialize, Serialize};

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
        if m.addr() % COLLAPSE_BLOCK != 0 {
            return Err(RegionError::Unsupported(format!(
                "region {} is mapped at {:#x}, not 2 MiB-aligned: its pages cannot be mapped as \
                 2 MiB pages (attach it again to map it aligned)",
                what(),
                m.addr()
            )));
        }
        let r = m.collapse_blocks();
        if let Some(e) = r.stopped {
            return Err(e.into());
        }
        Ok(Collapsed {
            blocks: r.blocks,
            collapsed: r.collapsed,
            refused: r.refused,
            busy: r.busy,
        })
    }
}
