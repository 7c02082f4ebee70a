//! The mappings the interposer changed, in a fixed table: what `munmap`,
//! `mremap` and `shmdt` of the server need to stay consistent with a
//! length the server does not know (rounded up to the new page size), and
//! which record file goes with each.
//!
//! Pure bookkeeping: the interposer holds one [`Table`] behind a lock and
//! asks it before and after each call.

use crate::pool::Plan;

/// Slots in the table: more changed mappings than this are left as the
/// server asked.
pub const TABLE_SLOTS: usize = 64;

/// A SysV segment made by `shmget`, to be placed, pre-faulted and recorded
/// at its first `shmat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub plan: Plan,
    pub asked_page: u64,
}

/// One changed mapping (or SysV segment).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// Start address (0 for a segment not attached yet).
    pub start: usize,
    /// Length as mapped.
    pub len: usize,
    /// Length the server asked for.
    pub asked_len: usize,
    /// Its page size.
    pub page: usize,
    /// The SysV segment, for `shmget`'s.
    pub shmid: Option<i32>,
    /// The process that made it: only that process removes its record (a
    /// forked child unmapping its copy does not).
    pub creator: u32,
    /// Whether a record file was written for `(creator, start)`.
    pub recorded: bool,
    pub(crate) pending: Option<Box<Pending>>,
}

impl Entry {
    fn end(&self) -> usize {
        self.start + self.len
    }

    fn asked_end(&self) -> usize {
        let base = 4096;
        self.start + self.asked_len.div_ceil(base) * base
    }
}

/// The table.
#[derive(Debug)]
pub struct Table {
    slots: [Option<Entry>; TABLE_SLOTS],
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    /// An empty table (`const`: it can be a `static`).
    pub const fn new() -> Self {
        Table {
            slots: [const { None }; TABLE_SLOTS],
        }
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Whether no entry is in use.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a slot is free.
    pub fn has_room(&self) -> bool {
        self.slots.iter().any(|s| s.is_none())
    }

    /// Adds an entry; gives it back when the table is full.
    pub fn insert(&mut self, e: Entry) -> Result<(), Entry> {
        match self.slots.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some(e);
                Ok(())
            }
            None => Err(e),
        }
    }

    /// The length to pass for the server's `munmap(addr, len)`: extended to
    /// the end of a changed mapping when the server's range reaches the end
    /// it knows of (`None`: pass `len` as it is).
    pub fn unmap_len(&self, addr: usize, len: usize) -> Option<usize> {
        let end = addr.checked_add(len)?;
        self.slots
            .iter()
            .flatten()
            .filter(|e| e.start != 0 && e.shmid.is_none())
            .find(|e| {
                addr < e.end()
                    && end > e.start
                    && end.next_multiple_of(4096) >= e.asked_end()
                    && end < e.end()
            })
            .map(|e| e.end() - addr)
    }

    /// After a successful `munmap(addr, len)` (the length passed): the
    /// entries it removed whole; those it cut are trimmed.
    pub fn unmapped(&mut self, addr: usize, len: usize) -> Vec<Entry> {
        let end = addr.saturating_add(len);
        let mut gone = Vec::new();
        for slot in self.slots.iter_mut() {
            let Some(e) = slot else { continue };
            if e.start == 0 || e.shmid.is_some() || addr >= e.end() || end <= e.start {
                continue;
            }
            if addr <= e.start && end >= e.end() {
                gone.extend(slot.take());
            } else if addr <= e.start {
                let cut = end - e.start;
                e.start = end;
                e.len -= cut;
                e.asked_len = e.asked_len.saturating_sub(cut);
            } else {
                // The tail (or a hole, which keeps the head only).
                e.len = addr - e.start;
                e.asked_len = e.asked_len.min(e.len);
            }
        }
        gone
    }

    /// The huge pages of changed mappings that a call over `addr..addr +
    /// len` cuts (`(start, page size)`): each end of the range that lies
    /// inside a mapping on huge pages but not on a page boundary. The
    /// kernel cannot split a huge page (the call would fail with
    /// `EINVAL`): each goes onto base pages first ([`Table::split`]).
    pub fn cuts(&self, addr: usize, len: usize) -> Vec<(usize, usize)> {
        let end = addr.saturating_add(len);
        let mut cuts = Vec::new();
        for e in self.slots.iter().flatten() {
            if e.start == 0 || e.shmid.is_some() || e.page <= 4096 {
                continue;
            }
            for edge in [addr, end] {
                if edge > e.start && edge < e.end() && (edge - e.start) % e.page != 0 {
                    let page = e.start + (edge - e.start) / e.page * e.page;
                    if !cuts.contains(&(page, e.page)) {
                        cuts.push((page, e.page));
                    }
                }
            }
        }
        cuts
    }

    /// After the huge page at `page_start` went onto base pages: its
    /// mapping is two (the part before, the part after; the second kept
    /// where a slot is free), each `recorded` as the caller says. Returns
    /// the entry as it was (its record names the whole: the caller replaces
    /// it, [`crate::run::record::split`]).
    pub fn split(&mut self, page_start: usize, recorded: bool) -> Option<Entry> {
        let i = self.slots.iter().position(|s| {
            s.as_ref().is_some_and(|e| {
                e.start != 0 && e.shmid.is_none() && e.start <= page_start && page_start < e.end()
            })
        })?;
        let before = self.slots[i].clone()?;
        let page_end = page_start + before.page;
        let mut tail = before.clone();
        tail.start = page_end;
        tail.len = before.end().saturating_sub(page_end);
        tail.asked_len = tail.len;
        tail.recorded = recorded;
        let head = self.slots[i].as_mut()?;
        head.len = page_start - before.start;
        head.asked_len = head.len;
        head.recorded = recorded;
        if head.len == 0 {
            self.slots[i] = None;
        }
        if tail.len > 0 {
            let _ = self.insert(tail);
        }
        Some(before)
    }

    /// Takes every entry out (at the process's exit: their records go).
    pub fn take_all(&mut self) -> Vec<Entry> {
        self.slots.iter_mut().filter_map(Option::take).collect()
    }

    /// Takes the pending entry of SysV segment `shmid` out of the table
    /// (the caller places it and puts it back).
    pub fn take_pending(&mut self, shmid: i32) -> Option<Entry> {
        self.slots
            .iter_mut()
            .find(|s| {
                s.as_ref()
                    .is_some_and(|e| e.shmid == Some(shmid) && e.pending.is_some())
            })
            .and_then(Option::take)
    }

    /// Whether `shmid` is a segment made here, not attached yet.
    pub fn is_pending(&self, shmid: i32) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|e| e.shmid == Some(shmid) && e.pending.is_some())
    }

    /// After a successful `shmdt(addr)`: the attachment's entry.
    pub fn detached(&mut self, addr: usize) -> Option<Entry> {
        self.slots
            .iter_mut()
            .find(|s| {
                s.as_ref()
                    .is_some_and(|e| e.shmid.is_some() && e.start == addr && e.pending.is_none())
            })
            .and_then(Option::take)
    }

    /// The lengths to pass for the server's `mremap(addr, old, new)` of a
    /// changed mapping: the whole mapped length when `old` reaches the end
    /// the server knows of, and `new` rounded up to its page size.
    pub fn remap_lens(&self, addr: usize, old: usize, new: usize) -> Option<(usize, usize)> {
        let e = self
            .slots
            .iter()
            .flatten()
            .find(|e| e.start == addr && e.shmid.is_none())?;
        let old = if (addr + old).next_multiple_of(4096) >= e.asked_end() {
            e.len
        } else {
            old
        };
        let new = new.checked_next_multiple_of(e.page.max(1))?;
        Some((old, new))
    }

    /// After a successful `mremap` of the mapping at `addr` (asked `asked`
    /// bytes, given `len`) to `to`: the entry follows. Returns the entry as
    /// it was (its record names the old address: the caller removes it).
    pub fn remapped(&mut self, addr: usize, to: usize, asked: usize, len: usize) -> Option<Entry> {
        let e = self
            .slots
            .iter_mut()
            .flatten()
            .find(|e| e.start == addr && e.shmid.is_none())?;
        let before = e.clone();
        e.start = to;
        e.len = len;
        e.asked_len = asked;
        e.recorded = false;
        Some(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M2: usize = 2 << 20;

    fn entry(start: usize, len: usize, asked: usize) -> Entry {
        Entry {
            start,
            len,
            asked_len: asked,
            page: M2,
            shmid: None,
            creator: 1,
            recorded: true,
            pending: None,
        }
    }

    #[test]
    fn the_servers_unmap_covers_the_rounded_length() {
        let mut t = Table::new();
        let at = 0x7f00_0000_0000;
        // 10 MiB + 100 bytes asked, 12 MiB mapped.
        t.insert(entry(at, 12 << 20, (10 << 20) + 100)).unwrap();
        assert_eq!(t.unmap_len(at, (10 << 20) + 100), Some(12 << 20));
        // A range that does not reach the server's end, or lies elsewhere,
        // passes as it is.
        assert_eq!(t.unmap_len(at, M2), None);
        assert_eq!(t.unmap_len(at + (16 << 20), M2), None);
        assert_eq!(t.unmap_len(at, 12 << 20), None);
        // The tail from a 2 MiB boundary on.
        assert_eq!(t.unmap_len(at + (8 << 20), (2 << 20) + 100), Some(4 << 20));
        // Unmapped whole: gone, once.
        assert_eq!(t.unmapped(at, 12 << 20).len(), 1);
        assert!(t.is_empty());
        assert_eq!(t.unmap_len(at, (10 << 20) + 100), None);
    }

    #[test]
    fn a_cut_keeps_the_rest_tracked() {
        let mut t = Table::new();
        let at = 0x1000_0000;
        t.insert(entry(at, 8 << 20, (7 << 20) + 1)).unwrap();
        assert!(t.unmapped(at, M2).is_empty());
        assert_eq!(t.unmap_len(at + M2, (5 << 20) + 1), Some(6 << 20));
        assert!(t.unmapped(at + (4 << 20), 4 << 20).is_empty());
        assert_eq!(t.unmapped(at + M2, M2).len(), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn sysv_segments_are_pending_until_attached_then_detached_by_address() {
        let mut t = Table::new();
        let mut e = entry(0, 4 << 20, 3 << 20);
        e.shmid = Some(7);
        e.pending = Some(Box::new(Pending {
            plan: crate::pool::Plan {
                page_size: M2 as u64,
                size_bytes: 4 << 20,
                backing: crate::pool::Backing::Hugetlb,
                dir: None,
                fallback: None,
                warnings: Vec::new(),
            },
            asked_page: 4096,
        }));
        t.insert(e).unwrap();
        assert!(t.is_pending(7) && !t.is_pending(8));
        // munmap never touches a segment.
        assert_eq!(t.unmap_len(0, 3 << 20), None);
        let mut e = t.take_pending(7).unwrap();
        assert!(t.is_empty());
        e.pending = None;
        e.start = 0x4000_0000;
        t.insert(e).unwrap();
        assert!(!t.is_pending(7));
        assert!(t.unmapped(0x4000_0000, 4 << 20).is_empty());
        assert!(t.detached(0x5000_0000).is_none());
        assert_eq!(t.detached(0x4000_0000).unwrap().shmid, Some(7));
    }

    #[test]
    fn remap_rounds_and_follows() {
        let mut t = Table::new();
        t.insert(entry(0x1000_0000, 4 << 20, (3 << 20) + 5))
            .unwrap();
        assert_eq!(
            t.remap_lens(0x1000_0000, (3 << 20) + 5, (5 << 20) + 1),
            Some((4 << 20, 6 << 20))
        );
        assert_eq!(t.remap_lens(0x2000_0000, 1, 1), None);
        let before = t
            .remapped(0x1000_0000, 0x3000_0000, (5 << 20) + 1, 6 << 20)
            .unwrap();
        assert!(before.recorded);
        assert_eq!(t.unmap_len(0x3000_0000, (5 << 20) + 1), Some(6 << 20));
    }

    #[test]
    fn a_cut_inside_a_huge_page_splits_the_mapping_around_it() {
        let mut t = Table::new();
        let at = 0xf000_0000;
        t.insert(entry(at, 256 << 20, 256 << 20)).unwrap();
        // On page boundaries: nothing to split.
        assert!(t.cuts(at, 256 << 20).is_empty());
        assert!(t.cuts(at + M2, M2).is_empty());
        // The JVM maps its archived heap over the top of its heap.
        let cut = at + (255 << 20);
        assert_eq!(t.cuts(cut, 480 << 10), vec![(at + (254 << 20), M2)]);
        assert_eq!(t.cuts(at + 4096, 256 << 20), vec![(at, M2)]);
        let before = t.split(at + (254 << 20), false).unwrap();
        assert!(before.recorded && before.len == 256 << 20);
        assert_eq!(t.len(), 1, "the head; no tail after the last page");
        assert!(t.cuts(cut, 480 << 10).is_empty());
        // A page in the middle: head and tail.
        t.split(at + M2, true).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.unmapped(at, 256 << 20).len(), 2);
    }

    #[test]
    fn a_full_table_says_so() {
        let mut t = Table::new();
        for i in 0..TABLE_SLOTS {
            t.insert(entry((i + 1) << 30, M2, M2)).unwrap();
        }
        assert!(!t.has_room());
        assert!(t.insert(entry(1 << 40, M2, M2)).is_err());
        assert_eq!(t.len(), TABLE_SLOTS);
    }
}
