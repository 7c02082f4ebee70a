//! Commits inside the server's reservations ([`run::place_commit`]) and
//! the huge pages of changed mappings that the server's later calls cut
//! (split onto base pages first).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use hugeshm_region::run::{self, Committer, Outcome, Settings};

use crate::real::{next, real_mmap, real_mremap, real_munmap, REAL_MMAP};
use crate::{
    counted, has_room, is_busy, keep, missed, run_placement, say, set_errno, table, Busy, TRACKED,
};

/// The server's `MAP_FIXED` commit (made as it asked) and its reservation.
struct Commit;

impl Committer for Commit {
    fn place(&mut self, from: usize, to: usize, len: usize) -> bool {
        let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
        // SAFETY: moves the huge pages the region library mapped and
        // pre-faulted for this commit (`from`, nothing else references
        // them) over the commit the server has just made in its own
        // reservation (`to`, inside place_commit's range), whose fresh
        // zero pages nothing has touched yet.
        let moved = unsafe { real_mremap(from as *mut c_void, len, len, flags, to as *mut c_void) };
        if moved == libc::MAP_FAILED {
            // SAFETY: the region library's mapping, given up to this call.
            unsafe { real_munmap(from as *mut c_void, len) };
            return false;
        }
        true
    }

    fn reserve(&mut self, start: usize, len: usize) -> bool {
        let flags = libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        let f = next(&REAL_MMAP, c"mmap");
        // SAFETY: MAP_FIXED over the server's own commit, which this call
        // fails: the reservation it was.
        let p = unsafe { real_mmap(f, start as *mut c_void, len, libc::PROT_NONE, flags, -1, 0) };
        p != libc::MAP_FAILED
    }
}

/// A `MAP_FIXED` `mmap` of the target: a qualifying commit inside its
/// reservation is placed; any other passes through (`None`), its range
/// taken out of the table by [`mmap`].
pub(crate) fn slow_commit(
    s: &Settings,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
) -> Option<*mut c_void> {
    let Some(req) = s.commit_request(addr as usize, len, prot, flags) else {
        missed(len, prot, flags);
        return None;
    };
    let _busy = Busy::enter()?;
    if !run::reserved(req.addr, req.len) {
        missed(len, prot, flags);
        return None;
    }
    if !has_room() {
        return None;
    }
    let f = next(&REAL_MMAP, c"mmap");
    // The server's own call, without MAP_POPULATE: its base pages are
    // replaced at once (the huge pages are faulted as it asked).
    let flags = flags & !libc::MAP_POPULATE;
    // SAFETY: the server's own call, less a hint to fault its pages now.
    let made = unsafe { real_mmap(f, addr, len, prot, flags, -1, 0) };
    if made == libc::MAP_FAILED {
        return Some(made);
    }
    let mut commit = Commit;
    match run_placement(|| run::place_commit(s, &req, &mut commit)) {
        Some(Outcome::Mapped { entry, .. }) => keep(entry),
        Some(Outcome::Refused { errno }) => {
            set_errno(errno);
            return Some(libc::MAP_FAILED);
        }
        _ => {}
    }
    Some(made)
}

/// Before a call of the server over `addr..addr + len` (a `MAP_FIXED`
/// `mmap`, `munmap`, `mprotect`, `madvise`): each huge page of a changed
/// mapping that the range cuts goes onto base pages, its contents kept,
/// so that the call does what it does on base pages instead of failing
/// with `EINVAL` (the JVM maps its archived heap, 480 KiB, over the top
/// of its heap). The mapping's record becomes one per piece left.
pub(crate) fn split_cuts(addr: usize, len: usize) {
    if TRACKED.load(Ordering::Relaxed) == 0 || is_busy() {
        return;
    }
    let Some(_busy) = Busy::enter() else { return };
    let cuts = table().cuts(addr, len);
    for (start, page) in cuts {
        // SAFETY: `start..start + page` is one huge page of a mapping this
        // library made; split_page replaces it with base pages holding
        // what it held.
        if !unsafe { split_page(start, page) } {
            say(&format!(
                "hugeshm run: pid {}: the 2 MiB page at {start:#x} could not be split onto base pages: the server's call over {addr:#x}+{len} may fail",
                std::process::id()
            ));
            continue;
        }
        let before = {
            let mut t = table();
            let b = t.split(start, true);
            counted(&t);
            b
        };
        if let Some(e) = before {
            run::split_records(&e, start);
        }
    }
}

/// Puts the huge page at `start` onto base pages: a fresh base-page
/// mapping gets a copy of it (`process_vm_readv`, which returns an error
/// for an unreadable page where a copy would fault), its protection, and
/// is moved over it with `mremap(MREMAP_FIXED)`, which replaces the huge
/// page in one step (no hole another thread could map into).
///
/// # Safety
/// `start..start + page` must be one huge page of a mapping this library
/// made for the server.
unsafe fn split_page(start: usize, page: usize) -> bool {
    let f = next(&REAL_MMAP, c"mmap");
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: a fresh mapping where the kernel chooses.
    let tmp = unsafe { real_mmap(f, std::ptr::null_mut(), page, rw, anon, -1, 0) };
    if tmp == libc::MAP_FAILED {
        return false;
    }
    let prot = run::prot_at(start).unwrap_or(rw);
    if prot & libc::PROT_READ != 0 {
        let local = libc::iovec {
            iov_base: tmp,
            iov_len: page,
        };
        let remote = libc::iovec {
            iov_base: start as *mut c_void,
            iov_len: page,
        };
        // SAFETY: reads `page` bytes of this process at `start` into the
        // fresh mapping `tmp` of that size; an unreadable page is an error.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n != page as isize {
            // SAFETY: the fresh mapping, unmapped whole.
            unsafe { real_munmap(tmp, page) };
            return false;
        }
    }
    // SAFETY: the fresh mapping, which nothing else references.
    if prot != rw && unsafe { libc::mprotect(tmp, page, prot) } != 0 {
        // SAFETY: as above.
        unsafe { real_munmap(tmp, page) };
        return false;
    }
    let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
    // SAFETY: moves the fresh mapping over the huge page (the caller's),
    // which holds the same bytes.
    let moved = unsafe { real_mremap(tmp, page, page, flags, start as *mut c_void) };
    if moved == libc::MAP_FAILED {
        // SAFETY: as above.
        unsafe { real_munmap(tmp, page) };
        return false;
    }
    true
}

/// After a `MAP_FIXED` or `munmap` of the server over `addr..addr + len`:
/// what it replaced or unmapped of the changed mappings leaves the table (their records go
/// when it was all of one).
pub(crate) fn replaced(addr: usize, len: usize) {
    if TRACKED.load(Ordering::Relaxed) == 0 || is_busy() {
        return;
    }
    let gone = {
        let mut t = table();
        let gone = t.unmapped(addr, len);
        counted(&t);
        gone
    };
    for e in &gone {
        run::forget(e);
    }
}
