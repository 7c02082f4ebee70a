//! `/proc/PID/pagemap`: one little-endian 64-bit word per virtual 4 KiB page
//! (Documentation/admin-guide/mm/pagemap.rst), and what the words of one
//! 2 MiB-aligned window say about how the kernel mapped a DAX file there.
//!
//! Bits used: 63 present, 62 swapped, 61 `PM_FILE` (a file page or shared
//! anonymous page), 0–54 the page frame number (zero unless the reader has
//! `CAP_SYS_ADMIN`).
//!
//! **DAX and PMD faults.** A DAX file's pages are device memory: `smaps`
//! counts them nowhere (no `Rss`, `KernelPageSize` 4 kB, `FilePmdMapped` 0,
//! nothing in `numa_maps`), so it cannot tell a mapping served by 2 MiB
//! (PMD) entries from one served by 4 KiB (PTE) entries. `pagemap` can:
//!
//! - a PMD entry maps all 512 pages of its window at once, onto 512
//!   consecutive frames that start 2 MiB aligned; a window with some pages
//!   present and others not, or frames that do not run on from a 2 MiB
//!   boundary, is mapped by PTEs;
//! - up to Linux 6.14 the kernel sets `PM_FILE` on a PMD-mapped DAX page
//!   (`pagemap_pmd_range` takes `pmd_page()`) but not on a PTE-mapped one
//!   (`vm_normal_page()` returns no page for a devmap PTE), which works
//!   without `CAP_SYS_ADMIN` too. From 6.15 DAX pages are refcounted
//!   folios and PTE mappings may carry `PM_FILE` as well; the frame rule
//!   still holds there.
//!
//! Measured in the test guest (Linux 6.1, `crates/hugeshm-cli/tests/guest/guest_pmem.rs`): a
//! 64 MiB file mapped from file offset 0 at a 2 MiB-aligned address had
//! every window `Pmd` and `PM_FILE` on all 16384 pages, its process 40–56 kB
//! of page tables (`VmPTE`); the same from file offset 4096, every window
//! `Pte`, `PM_FILE` on none, and 172–176 kB: about 128 KiB more, one
//! 4 KiB page-table page per 2 MiB window.
//!
//! ```
//! use hugeshm_parse::pagemap::{self, Window};
//! // Two pages present, PM_FILE, frames 0x200 and 0x201.
//! let mut bytes = Vec::new();
//! for pfn in [0x200u64, 0x201] {
//!     bytes.extend_from_slice(&((1u64 << 63) | (1 << 61) | pfn).to_le_bytes());
//! }
//! let e = pagemap::parse("/proc/1/pagemap", &bytes).unwrap();
//! assert_eq!(e[1].pfn(), Some(0x201));
//! // A 2 MiB window needs 512 words; 2 present of 512 is a PTE mapping.
//! let mut w = e.clone();
//! w.resize(512, pagemap::Entry(0));
//! assert_eq!(pagemap::window(&w), Window::Pte);
//! ```

use crate::error::ParseError;

/// Bit 63: the page is present in RAM (or device memory).
pub const PRESENT: u64 = 1 << 63;
/// Bit 62: the page is swapped out.
pub const SWAPPED: u64 = 1 << 62;
/// Bit 61: a file page or a shared anonymous page (`PM_FILE`).
pub const FILE: u64 = 1 << 61;
/// Bits 0–54: the page frame number of a present page.
pub const PFN_MASK: u64 = (1 << 55) - 1;

/// Bytes of pagemap per virtual page.
pub const ENTRY_BYTES: usize = 8;
/// Base pages in a 2 MiB (PMD) window on x86-64.
pub const PMD_PAGES: usize = 512;

/// One pagemap word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry(pub u64);

impl Entry {
    /// Bit 63.
    pub fn present(self) -> bool {
        self.0 & PRESENT != 0
    }
    /// Bit 61, `PM_FILE`.
    pub fn file(self) -> bool {
        self.0 & FILE != 0
    }
    /// The frame number of a present page; `None` when absent or hidden
    /// (zero: the reader lacks `CAP_SYS_ADMIN`).
    pub fn pfn(self) -> Option<u64> {
        let pfn = self.0 & PFN_MASK;
        (self.present() && self.0 & SWAPPED == 0 && pfn != 0).then_some(pfn)
    }
}

/// Parses the bytes read from a pagemap at some offset (a whole number of
/// 8-byte words).
pub fn parse(path: &str, bytes: &[u8]) -> Result<Vec<Entry>, ParseError> {
    if bytes.len() % ENTRY_BYTES != 0 {
        return Err(ParseError::file(
            path,
            format!(
                "{} bytes is not a whole number of 8-byte entries",
                bytes.len()
            ),
        ));
    }
    Ok(bytes
        .chunks_exact(ENTRY_BYTES)
        .map(|c| {
            let mut w = [0u8; ENTRY_BYTES];
            w.copy_from_slice(c);
            Entry(u64::from_le_bytes(w))
        })
        .collect())
}

/// How one 2 MiB-aligned virtual window of a DAX mapping is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// No page present: not touched yet.
    Empty,
    /// One PMD entry: all 512 pages present, `PM_FILE` on each, and (where
    /// frames are visible) 512 consecutive frames from a 2 MiB boundary.
    Pmd,
    /// PTEs: some page present without the others, or without `PM_FILE`,
    /// or frames that a PMD could not map.
    Pte,
}

/// Judges one window: `entries` are the 512 words of a 2 MiB-aligned
/// virtual range (fewer or more is `Pte`: a PMD covers exactly 512).
pub fn window(entries: &[Entry]) -> Window {
    let present = entries.iter().filter(|e| e.present()).count();
    if present == 0 {
        return Window::Empty;
    }
    if entries.len() != PMD_PAGES || present != PMD_PAGES || !entries.iter().all(|e| e.file()) {
        return Window::Pte;
    }
    // Frames, where the reader may see them: a PMD maps 512 frames in a
    // row from a 2 MiB boundary.
    let pfns: Vec<Option<u64>> = entries.iter().map(|e| e.pfn()).collect();
    if pfns.iter().all(Option::is_none) {
        return Window::Pmd;
    }
    let Some(first) = pfns[0] else {
        return Window::Pte;
    };
    let in_a_row = pfns
        .iter()
        .enumerate()
        .all(|(i, p)| *p == Some(first + i as u64));
    if first % PMD_PAGES as u64 == 0 && in_a_row {
        Window::Pmd
    } else {
        Window::Pte
    }
}

/// Whether the frames of `entries` are visible to this reader (any present
/// page has a nonzero frame number).
pub fn frames_visible(entries: &[Entry]) -> bool {
    entries.iter().any(|e| e.pfn().is_some())
}

/// The windows of a run of pagemap words, counted ([`tally`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tally {
    /// Whole 2 MiB-aligned windows in the run.
    pub windows: u64,
    /// Of those, mapped by one PMD entry.
    pub pmd: u64,
    /// Of those, mapped by 4 KiB PTEs.
    pub pte: u64,
    /// PTE windows whose frames do not line up with the file's pages on a
    /// 2 MiB grid (frame ≢ file page modulo 512): the file's blocks, not
    /// the mapping, keep a PMD out.
    pub pte_off_grid: u64,
    /// Present pages in the whole run.
    pub present: u64,
    /// Present pages with `PM_FILE`.
    pub file_pages: u64,
    /// Whether any frame number was visible.
    pub frames_visible: bool,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.windows += o.windows;
        self.pmd += o.pmd;
        self.pte += o.pte;
        self.pte_off_grid += o.pte_off_grid;
        self.present += o.present;
        self.file_pages += o.file_pages;
        self.frames_visible |= o.frames_visible;
    }
}

/// Judges every whole 2 MiB-aligned window of `entries`, the words of the
/// pages from virtual address `start` on, which map file offset
/// `file_offset` at `start` (0 for anonymous or device memory mapped from
/// its start).
pub fn tally(entries: &[Entry], start: u64, file_offset: u64) -> Tally {
    const M2: u64 = 2 << 20;
    let page = 4096u64;
    let mut t = Tally {
        present: entries.iter().filter(|e| e.present()).count() as u64,
        file_pages: entries.iter().filter(|e| e.present() && e.file()).count() as u64,
        frames_visible: frames_visible(entries),
        ..Tally::default()
    };
    let end = start + entries.len() as u64 * page;
    let mut w = start.div_ceil(M2) * M2;
    while w + M2 <= end {
        let i = ((w - start) / page) as usize;
        let win = &entries[i..i + PMD_PAGES];
        t.windows += 1;
        match window(win) {
            Window::Pmd => t.pmd += 1,
            Window::Pte => {
                t.pte += 1;
                if let Some(j) = win.iter().position(|e| e.pfn().is_some()) {
                    let file_page = (w - start + file_offset) / page + j as u64;
                    let pfn = win[j].pfn().unwrap_or(0);
                    if pfn % PMD_PAGES as u64 != file_page % PMD_PAGES as u64 {
                        t.pte_off_grid += 1;
                    }
                }
            }
            Window::Empty => {}
        }
        w += M2;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pfn0: Option<u64>, n: usize, flags: u64) -> Vec<Entry> {
        (0..n)
            .map(|i| Entry(flags | pfn0.map(|p| p + i as u64).unwrap_or(0)))
            .collect()
    }

    #[test]
    fn parses_little_endian_words_and_rejects_a_torn_read() {
        let bytes = [
            0x01, 0x02, 0, 0, 0, 0, 0, 0xa0, // present | file, pfn 0x201
            0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let e = parse("/proc/7/pagemap", &bytes).unwrap();
        assert_eq!(e.len(), 2);
        assert!(e[0].present() && e[0].file());
        assert_eq!(e[0].pfn(), Some(0x0201));
        assert!(!e[1].present());
        assert_eq!(e[1].pfn(), None);
        let err = parse("/proc/7/pagemap", &bytes[..12]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/proc/7/pagemap: 12 bytes is not a whole number of 8-byte entries"
        );
        // Swapped pages carry a swap entry, not a frame.
        assert_eq!(Entry(PRESENT | SWAPPED | 5).pfn(), None);
    }

    #[test]
    fn a_pmd_window_is_512_frames_in_a_row_from_a_2m_boundary() {
        let pf = PRESENT | FILE;
        assert_eq!(window(&words(Some(0x10_0200), 512, pf)), Window::Pmd);
        // Frames hidden (no CAP_SYS_ADMIN): PM_FILE on all 512 decides.
        assert_eq!(window(&words(None, 512, pf)), Window::Pmd);
        // Blocks not 2 MiB aligned (the 6.1 guest's plain mkfs.ext4 -b 4096).
        assert_eq!(window(&words(Some(0x10_22e9), 512, pf)), Window::Pte);
        // A hole in the run.
        let mut w = words(Some(0x10_0200), 512, pf);
        w[300] = Entry(pf | 0x77_7000);
        assert_eq!(window(&w), Window::Pte);
        // Present without PM_FILE: PTE-mapped DAX up to 6.14 (the 4 KiB
        // file offset case of the guest).
        assert_eq!(window(&words(Some(0x10_0201), 512, PRESENT)), Window::Pte);
        // Half touched: a PMD maps all 512 or none.
        let mut w = words(Some(0x10_0200), 512, pf);
        for e in &mut w[256..] {
            *e = Entry(0);
        }
        assert_eq!(window(&w), Window::Pte);
        assert_eq!(window(&words(None, 512, 0)), Window::Empty);
        assert_eq!(window(&words(Some(0x200), 511, pf)), Window::Pte);
        assert!(frames_visible(&words(Some(0x200), 2, pf)));
    }

    #[test]
    fn tally_counts_whole_windows_and_tells_blocks_from_offsets() {
        let pf = PRESENT | FILE;
        // 3 MiB from 1 MiB: one whole window (2-4 MiB), PMD-mapped.
        let mut run = words(None, 256, 0);
        run.extend(words(Some(0x400), 512, pf));
        run.extend(words(None, 0, 0));
        let t = tally(&run, 1 << 20, 0);
        assert_eq!((t.windows, t.pmd, t.pte, t.present), (1, 1, 0, 512));
        assert_eq!(t.file_pages, 512);
        // File offset 4096, blocks aligned: frames one page past 2 MiB
        // line up with the file's pages; the mapping is at fault.
        let t = tally(&words(Some(0x401), 512, PRESENT), 2 << 20, 4096);
        assert_eq!((t.pte, t.pte_off_grid, t.file_pages), (1, 0, 0));
        // File offset 0, frames off the grid: the blocks.
        let t = tally(&words(Some(0x4e9), 512, PRESENT), 2 << 20, 0);
        assert_eq!((t.pte, t.pte_off_grid), (1, 1));
        let mut sum = t;
        sum += tally(&words(Some(0x400), 512, pf), 4 << 20, 0);
        assert_eq!(
            (sum.windows, sum.pmd, sum.pte, sum.present),
            (2, 1, 1, 1024)
        );
        assert!(!frames_visible(&words(None, 2, pf)));
    }
}
