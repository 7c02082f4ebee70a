//! [`Region::collapse`]: a region on 4 KiB pages (SysV, posix, memfd,
//! shared anonymous) is mapped 2 MiB-aligned, and its creator moves it onto
//! 2 MiB transparent huge pages in place: every block collapsed, the data
//! intact, and a second attachment (made aligned too) maps the same blocks
//! as 2 MiB pages. A region nobody touched has nothing to move.

mod common;

use common::*;
use hugeshm_region::{Backend, Locator, PageSize, RegionBuilder};

const M2: usize = 2 << 20;

/// `ShmemPmdMapped` of this process's mapping at `addr`, in bytes.
fn pmd_mapped(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let head = format!("{addr:x}-");
    let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
    assert!(lines.next().is_some(), "no mapping at {addr:#x}");
    lines
        .take_while(|l| !l.contains('-') || l.contains(':'))
        .find_map(|l| l.strip_prefix("ShmemPmdMapped:"))
        .map(|v| {
            v.trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<u64>()
                .unwrap()
                * 1024
        })
        .unwrap_or(0)
}

#[test]
fn a_region_on_4k_pages_moves_onto_2m_pages_in_place() {
    let Some(pool) = live!() else {
        return;
    };
    for backend in [Backend::Sysv, Backend::Posix, Backend::Memfd, Backend::Anon] {
        let name = unique("collapse");
        let mut b = RegionBuilder::new(8 << 20)
            .backend(backend)
            .page_size(PageSize::Base);
        if backend.is_named() {
            b = b.name(&name);
        }
        let (mut region, _) = b.create().unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(
            region.addr() % M2,
            0,
            "{backend}: mapped at {:#x}",
            region.addr()
        );
        let end = region.data_len() - 8;
        region.write_at(0, b"first!!!").unwrap();
        region.write_at(end, b"last!!!!").unwrap();
        let c = region
            .collapse()
            .unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(c.blocks, (region.len() / M2) as u64, "{backend}: {c:?}");
        assert_eq!(c.collapsed, c.blocks, "{backend}: {c:?}");
        assert_eq!(pmd_mapped(region.addr()), c.blocks * M2 as u64, "{backend}");
        let (mut first, mut last) = ([0u8; 8], [0u8; 8]);
        region.read_at(0, &mut first).unwrap();
        region.read_at(end, &mut last).unwrap();
        assert_eq!((&first, &last), (b"first!!!", b"last!!!!"), "{backend}");
        // Collapsed again: nothing left to move, nothing refused.
        let again = region.collapse().unwrap();
        assert_eq!(again.collapsed + again.refused, again.blocks, "{again:?}");
        if backend.is_named() {
            // Another attachment, aligned, maps the blocks as 2 MiB pages.
            let other = Locator::new(&name, backend).attach().unwrap();
            assert_eq!(
                other.addr() % M2,
                0,
                "{backend}: attached at {:#x}",
                other.addr()
            );
            other.populate_read().unwrap();
            assert_eq!(pmd_mapped(other.addr()), c.blocks * M2 as u64, "{backend}");
            other.close().unwrap();
            region.destroy().unwrap();
        } else {
            region.close().unwrap();
        }
    }
    pool.finish();
}

#[test]
fn an_untouched_region_has_nothing_to_move() {
    let Some(pool) = live!() else {
        return;
    };
    let (region, _) = RegionBuilder::new(8 << 20)
        .backend(Backend::Anon)
        .page_size(PageSize::Base)
        .prefault_threads(0)
        .create()
        .unwrap();
    let c = region.collapse().unwrap();
    // The header's block has a page; the others none.
    assert_eq!(c.collapsed, 1, "{c:?}");
    assert_eq!(c.refused, c.blocks - 1, "{c:?}");
    region.close().unwrap();
    pool.finish();
}
