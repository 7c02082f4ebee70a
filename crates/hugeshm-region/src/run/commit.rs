//! Servers that reserve, then commit: MariaDB 10.11 reserves 8 TiB with
//! `mmap(PROT_NONE)` and commits its buffer pool inside it with
//! `mmap(addr, size, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_FIXED|MAP_ANONYMOUS)`;
//! OpenJDK 17 reserves its heap (`PROT_NONE`, `MAP_NORESERVE`) and
//! commits it the same way. Such a commit, of at least `--min-size`,
//! inside a `PROT_NONE` anonymous reservation of the target's, is placed
//! like any other qualifying mapping: its huge-page-aligned part goes
//! `MAP_FIXED|MAP_HUGETLB` at the same address, the pages around it are
//! the server's own commit, and it is pre-faulted, verified and recorded.
//!
//! The interposer makes the server's own commit first (the whole range on
//! base pages). The huge pages are mapped, placed, pre-faulted and
//! verified here at an address of their own, then moved over the commit
//! by the interposer ([`Committer`], `mremap(MREMAP_FIXED)`): the range
//! stays committed throughout, never a hole another thread could map
//! into, and huge pages that could not be had or faulted never reach the
//! server (never SIGBUS): under `try` the commit stays on base pages,
//! with a line; under `--policy only` the reservation is put back
//! (`PROT_NONE`) and the call fails with `ENOMEM`.

use hugeshm_parse::run_record::RunObject;
use hugeshm_parse::size::format_bytes;
use hugeshm_sys::MapOptions;

use super::place::{Fault, Placer};
use super::table::Entry;
use super::{Done, Outcome, Settings};
use crate::model::{Backend, Policy};
use crate::pool::{self, Backing};

/// A server's `MAP_FIXED` commit that `hugeshm run` looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitRequest {
    /// Where the server commits.
    pub addr: usize,
    /// How much.
    pub len: usize,
    /// `MAP_SHARED` (else `MAP_PRIVATE`).
    pub shared: bool,
    /// `MAP_POPULATE` (MariaDB 11's commit): the interposer makes the
    /// server's own commit without it, and the huge pages are faulted as
    /// `--prefault` says, or with `MAP_POPULATE` without it.
    pub populate: bool,
}

/// What the interposer does for [`place_commit`] (the calls that replace
/// memory at an address, which are `unsafe`, are the interposer's).
pub trait Committer {
    /// Moves the mapping `from..from + len` (made and pre-faulted here) to
    /// `to` (inside the server's commit) with `mremap(MREMAP_FIXED)`,
    /// which replaces what was there in one step; on failure the mapping
    /// at `from` is unmapped. Whether it moved.
    fn place(&mut self, from: usize, to: usize, len: usize) -> bool;
    /// The reservation as it was over `start..start + len` (`PROT_NONE`,
    /// `MAP_NORESERVE`): a refused commit. Whether it succeeded.
    fn reserve(&mut self, start: usize, len: usize) -> bool;
}

const MAP_TYPE: i32 = 0x0f;

impl Settings {
    /// The server's `mmap(addr, len, prot, flags)` as a commit
    /// `hugeshm run` looks at: `MAP_FIXED` at `addr`, read-write,
    /// anonymous, base pages, at least `--min-size`, shared (or private
    /// with `--private`). Whether `addr..addr + len` is a reservation of
    /// the target's is [`reserved`]'s to say.
    #[inline]
    pub fn commit_request(
        &self,
        addr: usize,
        len: usize,
        prot: i32,
        flags: i32,
    ) -> Option<CommitRequest> {
        let known = MAP_TYPE
            | libc::MAP_ANONYMOUS
            | libc::MAP_FIXED
            | libc::MAP_NORESERVE
            | libc::MAP_POPULATE;
        if addr == 0
            || (len as u64) < self.min_bytes
            || prot != libc::PROT_READ | libc::PROT_WRITE
            || flags & (libc::MAP_ANONYMOUS | libc::MAP_FIXED)
                != libc::MAP_ANONYMOUS | libc::MAP_FIXED
            || flags & !known != 0
        {
            return None;
        }
        let shared = self.sharing(flags)?;
        Some(CommitRequest {
            addr,
            len,
            shared,
            populate: flags & libc::MAP_POPULATE != 0,
        })
    }
}

/// Whether `addr..addr + len` lies wholly in anonymous private
/// `PROT_NONE` mappings of this process (`/proc/self/maps`): a reservation
/// the process made (no file, no other process maps into it).
pub fn reserved(addr: usize, len: usize) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    reserved_in(&maps, addr, len)
}

/// The protection (`PROT_*`) of this process's mapping at `addr`
/// (`/proc/self/maps`), for a huge page split onto base pages.
pub fn prot_at(addr: usize) -> Option<i32> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    prot_in(&maps, addr)
}

fn prot_in(maps: &str, addr: usize) -> Option<i32> {
    maps.lines().find_map(|line| {
        let (range, rest) = line.split_once(' ')?;
        let (s, e) = range.split_once('-')?;
        let (s, e) = (
            usize::from_str_radix(s, 16).ok()?,
            usize::from_str_radix(e, 16).ok()?,
        );
        if !(s..e).contains(&addr) {
            return None;
        }
        let p = rest.as_bytes();
        let bit = |i: usize, c: u8, v: i32| if p.get(i) == Some(&c) { v } else { 0 };
        Some(
            bit(0, b'r', libc::PROT_READ)
                | bit(1, b'w', libc::PROT_WRITE)
                | bit(2, b'x', libc::PROT_EXEC),
        )
    })
}

fn reserved_in(maps: &str, addr: usize, len: usize) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let mut at = addr;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return false;
        };
        let Some((s, e)) = range.split_once('-') else {
            return false;
        };
        let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) else {
            return false;
        };
        if e <= at {
            continue;
        }
        if s > at || perms != "---p" || inode != "0" || f.next().is_some() {
            return false;
        }
        at = e;
        if at >= end {
            return true;
        }
    }
    false
}

/// Places the huge-page-aligned part of a commit the server has made
/// already (on base pages) inside its reservation.
pub fn place_commit(s: &Settings, req: &CommitRequest, c: &mut dyn Committer) -> Done {
    let what = format!(
        "pid {}: mmap({}|MAP_FIXED|MAP_ANONYMOUS, {}) inside its reservation",
        std::process::id(),
        if req.shared {
            "MAP_SHARED"
        } else {
            "MAP_PRIVATE"
        },
        format_bytes(req.len as u64)
    );
    let p = Placer::new(s, what);
    let base = p.base();
    let pass = |line: Option<String>| Done {
        outcome: Outcome::Pass,
        line,
    };
    // The page size: what the request's plan says for base pages asked.
    let page = match p.request(Backend::Anon, base, req.len as u64).page_size {
        crate::model::PageSize::Huge(page) => page as usize,
        _ => return pass(None),
    };
    let start = req.addr.next_multiple_of(page);
    let end = (req.addr + req.len) / page * page;
    if end <= start {
        return pass(None);
    }
    let len = end - start;
    let preq = p.request(Backend::Anon, base, len as u64);
    let refuse = |c: &mut dyn Committer, e| {
        c.reserve(req.addr, req.len);
        p.refuse(e)
    };
    let plan = match p.plan(&preq) {
        Ok(plan) => plan,
        Err(e) => return refuse(c, e),
    };
    let mut warnings = plan.warnings.clone();
    if plan.backing != Backing::Hugetlb {
        let why = plan.fallback.as_ref().map(|f| f.reason.as_str());
        return pass(p.say(why, &warnings));
    }
    let placed = p
        .fault(&plan, req.populate, &mut warnings)
        .and_then(|fault| {
            let mut o = MapOptions::new(len);
            o.huge(plan.page_size).align(page);
            if fault == Fault::MapPopulate && !p.binds() {
                o.populate();
            }
            if req.shared {
                o.shared();
            }
            let map = o
                .map_anon()
                .map_err(|e| pool::map_refused(&p.probe, e, Some(plan.page_size), len as u64))?;
            let st = p.settle(&map, req.shared, &plan, fault, 0.0)?;
            Ok((map, st))
        });
    let (map, st) = match placed {
        Ok(done) => done,
        Err(e) if s.policy == Policy::Try => {
            return pass(p.say(
                Some(&format!(
                    "{e}; left on 4 KiB pages as the server committed it"
                )),
                &warnings,
            ))
        }
        Err(e) => return refuse(c, e),
    };
    warnings.extend(st.warnings.iter().cloned());
    let (from, _) = map.into_raw();
    if !c.place(from, start, len) {
        let e = "mremap onto the server's commit failed; left on 4 KiB pages as the server committed it";
        return pass(p.say(Some(e), &warnings));
    }
    let object = if req.shared {
        RunObject::Anon
    } else {
        RunObject::Private
    };
    let asked = (len as u64, base);
    let recorded = p.record((start, len), object, &plan, asked, &st, None, &mut warnings);
    Done {
        outcome: Outcome::Mapped {
            addr: req.addr,
            entry: Entry {
                start,
                len,
                asked_len: len,
                page,
                shmid: None,
                creator: std::process::id(),
                recorded,
                pending: None,
            },
        },
        line: p.say(None, &warnings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Target;

    #[test]
    fn commits_inside_reservations_qualify() {
        let mut s = Settings::new(Target::Name("x".into()));
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let fixed = libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS;
        let at = 0x7f00_0000_0000;
        assert_eq!(s.commit_request(at, 256 << 20, rw, fixed), None);
        s.private = true;
        let r = s.commit_request(at, 256 << 20, rw, fixed).unwrap();
        assert!(!r.shared && !r.populate && r.addr == at && r.len == 256 << 20);
        // MariaDB 11's my_virtual_mem_commit adds MAP_POPULATE.
        let r = s.commit_request(at, 256 << 20, rw, fixed | libc::MAP_POPULATE);
        assert!(r.unwrap().populate);
        for (addr, len, prot, flags) in [
            (0, 256 << 20, rw, fixed),
            (at, 63 << 20, rw, fixed),
            (at, 256 << 20, libc::PROT_NONE, fixed | libc::MAP_NORESERVE),
            (at, 256 << 20, rw, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS),
            (at, 256 << 20, rw, fixed | libc::MAP_HUGETLB),
            (at, 256 << 20, rw, libc::MAP_PRIVATE | libc::MAP_FIXED),
        ] {
            assert_eq!(s.commit_request(addr, len, prot, flags), None);
        }
    }

    #[test]
    fn a_reservation_is_anonymous_private_and_prot_none_throughout() {
        let maps = "\
100000-200000 ---p 00000000 00:00 0 \n\
200000-400000 ---p 00000000 00:00 0\n\
400000-500000 rw-p 00000000 00:00 0\n\
500000-600000 ---p 00001000 08:01 1234    /usr/lib/x.so\n";
        assert!(reserved_in(maps, 0x100000, 0x300000));
        assert!(reserved_in(maps, 0x180000, 0x100000));
        assert!(!reserved_in(maps, 0x180000, 0x300000));
        assert!(!reserved_in(maps, 0x500000, 0x1000));
        assert!(!reserved_in(maps, 0x80000, 0x1000));
        assert!(!reserved_in(maps, 0x100000, usize::MAX));
        assert_eq!(
            prot_in(maps, 0x480000),
            Some(libc::PROT_READ | libc::PROT_WRITE)
        );
        assert_eq!(prot_in(maps, 0x100000), Some(libc::PROT_NONE));
        assert_eq!(prot_in(maps, 0x700000), None);
    }
}
