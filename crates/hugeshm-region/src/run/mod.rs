//! `hugeshm run`: what the region library gives its own callers, given to a
//! server that was never written for it.
//!
//! `hugeshm run [OPTIONS] -- SERVER` starts the server with an interposition
//! library (`libhugeshm-run.so`, the `hugeshm-run-preload` crate) and the
//! [`Settings`] in `HUGESHM_RUN`. In the target process only, the library
//! hands each big shared anonymous `mmap` and each big SysV `shmget` (and,
//! with `--private`, each big private anonymous `mmap`) to this module,
//! which does what [`RegionBuilder::create`](crate::RegionBuilder::create)
//! does, without a header or a name:
//!
//! 1. **Plan** from one host snapshot: the page size (the server's, or
//!    `--page-size`), the length rounded up to it, the pool, the hugetlb
//!    cgroup of the server and the pools of the nodes it is placed on. A
//!    problem is the same [`RegionError`](crate::RegionError) `create`
//!    reports: under `only` the call fails with `ENOMEM` after one line with
//!    the numbers and the fix; under `try` the mapping goes whole on base
//!    pages and one line says why.
//! 2. **Map** through `hugeshm-sys` (direct system calls: nothing re-enters
//!    the interposer), a shared hugetlb mapping of 1 GiB or more at a 1
//!    GiB-aligned address (its processes share page tables).
//! 3. **Place** with `mbind` before any page is touched (`--numa`).
//! 4. **Pre-fault** (`--prefault`) with `MADV_POPULATE_WRITE` on the CPUs of
//!    the nodes it is placed on, in parallel, before the call returns
//!    (PostgreSQL forks right after). A shared mapping is faulted by the
//!    threads of a forked child, so that no thread stack or malloc arena is
//!    left in the server (the `fault` module). A fault the kernel refuses (a cgroup
//!    limit, a pool taken meanwhile) is an error, never SIGBUS: `only`
//!    fails, `try` starts over on base pages.
//! 5. **Verify** the page size (smaps) and the node split (numa_maps).
//! 6. **Record** it for the doctor ([`record`]).
//!
//! Before the exec, [`prepare`] checks what `hugeshm run` was asked
//! ([`RunRequest`]: COMMAND, the target's executable, the host, the
//! library) and gives the environment to start the server with
//! ([`Prepared`]), or a [`RunRefusal`]; the front end starts it.
//!
//! The interposer keeps what it changed in a [`Table`], so that the
//! server's `munmap`, `mremap` and `shmdt` stay consistent with the
//! rounded length, and removes the record when the process that made the
//! mapping unmaps it.

mod checks;
mod commit;
mod fault;
mod host;
mod place;
mod prepare;
mod quiet;
pub mod record;
mod refusal;
mod settings;
mod table;

pub use commit::{place_commit, prot_at, reserved, CommitRequest, Committer};
pub use host::{check_host, HostRefusal};
pub use prepare::{
    environment, prepare, Prepared, RunRequest, BUILD_LIBRARY_FILE, LIBRARY_ENV, LIBRARY_FILE,
};
pub use quiet::{nothing_placed, Missed, QUIET_MIN_LIFE, QUIET_SECONDS};
pub use refusal::{Exposure, FileRole, PathPart, Replaceable, RunRefusal, RunWarning, SecureExec};
pub use settings::{
    RunPageSize, RunPrefault, Settings, Target, DEFAULT_MIN_BYTES, MAX_SETTINGS_BYTES, MAX_THREADS,
    MIN_MIN_BYTES, SETTINGS_ENV,
};
pub use table::{Entry, Table, TABLE_SLOTS};

/// An `mmap` of the server that `hugeshm run` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MmapRequest {
    /// The length asked for.
    pub len: usize,
    /// `MAP_SHARED` (else `MAP_PRIVATE`).
    pub shared: bool,
    /// `MAP_HUGETLB` with this page size's log2 (0: the default size).
    pub huge_log2: Option<u32>,
    /// The server asked for `MAP_POPULATE`.
    pub populate: bool,
}

/// A `shmget` of the server that `hugeshm run` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShmRequest {
    /// The key.
    pub key: i32,
    /// The size asked for.
    pub size: usize,
    /// `IPC_EXCL`.
    pub exclusive: bool,
    /// `SHM_HUGETLB` with this page size's log2 (0: the default size).
    pub huge_log2: Option<u32>,
    /// Permission bits.
    pub mode: u32,
}

/// What to do with the server's call.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// Call the real function with the server's own arguments.
    Pass,
    /// The mapping is made (or the segment attached): return `addr`, and
    /// keep `entry` in the table.
    Mapped {
        /// Its address.
        addr: usize,
        /// What the table keeps.
        entry: Entry,
    },
    /// The segment is made: return `shmid`, keep `entry` (placed at the
    /// first `shmat`).
    Created {
        /// The segment.
        shmid: i32,
        /// What the table keeps.
        entry: Entry,
    },
    /// Fail the call with this errno.
    Refused {
        /// `ENOMEM`, or the call's own errno.
        errno: i32,
    },
}

/// An [`Outcome`] and the one line (if any) to write on the server's
/// stderr.
#[derive(Debug)]
#[non_exhaustive]
pub struct Done {
    /// What to do.
    pub outcome: Outcome,
    /// What to say, without a newline.
    pub line: Option<String>,
}

const MAP_TYPE: i32 = 0x0f;
const HUGE_MASK: i32 = 0x3f << libc::MAP_HUGE_SHIFT;

impl Settings {
    /// The server's `mmap(addr, len, prot, flags, fd, off)` as a request
    /// `hugeshm run` changes: no address asked for, read-write, anonymous,
    /// shared (or private with `--private`), at least `--min-size`, no
    /// flag beyond `MAP_HUGETLB` (with a size) and `MAP_POPULATE`. `None`
    /// for every other call: those pass through untouched.
    #[inline]
    pub fn mmap_request(
        &self,
        addr: usize,
        len: usize,
        prot: i32,
        flags: i32,
    ) -> Option<MmapRequest> {
        let known =
            MAP_TYPE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | HUGE_MASK | libc::MAP_POPULATE;
        if addr != 0
            || (len as u64) < self.min_bytes
            || prot != libc::PROT_READ | libc::PROT_WRITE
            || flags & libc::MAP_ANONYMOUS == 0
            || flags & !known != 0
        {
            return None;
        }
        let shared = self.sharing(flags)?;
        Some(MmapRequest {
            len,
            shared,
            huge_log2: (flags & libc::MAP_HUGETLB != 0)
                .then_some(((flags & HUGE_MASK) >> libc::MAP_HUGE_SHIFT) as u32),
            populate: flags & libc::MAP_POPULATE != 0,
        })
    }

    /// `Some(true)` for `MAP_SHARED`, `Some(false)` for `MAP_PRIVATE` with
    /// `--private`, else `None` (left as it is).
    #[inline]
    fn sharing(&self, flags: i32) -> Option<bool> {
        match flags & MAP_TYPE {
            libc::MAP_SHARED => Some(true),
            libc::MAP_PRIVATE if self.private => Some(false),
            _ => None,
        }
    }

    /// The server's `shmget(key, size, flags)` as a request `hugeshm run`
    /// changes: a creation (`IPC_CREAT`) of at least `--min-size`, with no
    /// flag beyond `IPC_EXCL`, `SHM_HUGETLB` (with a size) and the mode.
    #[inline]
    pub fn shmget_request(&self, key: i32, size: usize, flags: i32) -> Option<ShmRequest> {
        let known = 0o777 | libc::IPC_CREAT | libc::IPC_EXCL | libc::SHM_HUGETLB | HUGE_MASK;
        if flags & libc::IPC_CREAT == 0 || (size as u64) < self.min_bytes || flags & !known != 0 {
            return None;
        }
        Some(ShmRequest {
            key,
            size,
            exclusive: flags & libc::IPC_EXCL != 0,
            huge_log2: (flags & libc::SHM_HUGETLB != 0)
                .then_some(((flags & HUGE_MASK) >> libc::MAP_HUGE_SHIFT) as u32),
            mode: (flags & 0o777) as u32,
        })
    }
}

/// Places a qualifying `mmap` ([`Settings::mmap_request`]).
pub fn place_mmap(settings: &Settings, req: &MmapRequest) -> Done {
    place::place_mmap(settings, req)
}

/// Creates a qualifying SysV segment ([`Settings::shmget_request`]).
pub fn place_shmget(settings: &Settings, req: &ShmRequest) -> Done {
    place::place_shmget(settings, req)
}

/// The first `shmat` of a segment [`place_shmget`] made (its entry, taken
/// out of the table with [`Table::take_pending`]).
pub fn attach_shm(settings: &Settings, entry: Entry) -> Done {
    place::attach_shm(settings, entry)
}

/// After the server unmapped or detached `entry`: its record goes, when
/// this process made it.
pub fn forget(entry: &Entry) {
    if entry.recorded && entry.creator == std::process::id() {
        record::remove(
            entry.creator,
            entry.start as u64,
            rustix::process::geteuid().as_raw(),
        );
    }
}

/// After the huge page at `page_start` of `before` went onto base pages
/// (the table split it, [`Table::split`]): the record of the whole is
/// replaced by one for each piece left, when this process made it.
pub fn split_records(before: &Entry, page_start: usize) {
    if !(before.recorded && before.creator == std::process::id()) {
        return;
    }
    let end = before.start + before.len;
    let after = page_start + before.page;
    let pieces: Vec<(u64, u64)> = [
        (before.start, page_start - before.start),
        (after, end.saturating_sub(after)),
    ]
    .into_iter()
    .filter(|&(_, len)| len > 0)
    .map(|(s, l)| (s as u64, l as u64))
    .collect();
    let uid = rustix::process::geteuid().as_raw();
    record::split(before.creator, before.start as u64, uid, &pieces);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_big_anonymous_read_write_mappings_qualify() {
        let mut s = Settings::new(Target::Name("x".into()));
        s.min_bytes = 64 << 20;
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let shared = libc::MAP_SHARED | libc::MAP_ANONYMOUS;
        let big = 64 << 20;
        let r = s.mmap_request(0, big, rw, shared).unwrap();
        assert!(r.shared && r.huge_log2.is_none() && !r.populate);
        let r = s
            .mmap_request(
                0,
                big,
                rw,
                shared | libc::MAP_HUGETLB | (21 << libc::MAP_HUGE_SHIFT),
            )
            .unwrap();
        assert_eq!(r.huge_log2, Some(21));
        assert!(
            s.mmap_request(0, big, rw, shared | libc::MAP_POPULATE)
                .unwrap()
                .populate
        );
        for (addr, len, prot, flags) in [
            (0, big - 1, rw, shared),
            (0x1000, big, rw, shared),
            (0, big, libc::PROT_NONE, shared),
            (0, big, libc::PROT_READ, shared),
            (0, big, rw, libc::MAP_SHARED),
            (0, big, rw, shared | libc::MAP_FIXED),
            (0, big, rw, shared | libc::MAP_NORESERVE),
            (0, big, rw, shared | libc::MAP_LOCKED),
            (0, big, rw, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS),
            (0, big, rw, libc::MAP_SHARED_VALIDATE | libc::MAP_ANONYMOUS),
        ] {
            assert_eq!(
                s.mmap_request(addr, len, prot, flags),
                None,
                "{addr} {len} {prot} {flags:#x}"
            );
        }
        s.private = true;
        assert!(
            !s.mmap_request(0, big, rw, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS)
                .unwrap()
                .shared
        );
        // PostgreSQL's interlock segment: 56 bytes, untouched.
        let create = libc::IPC_CREAT | libc::IPC_EXCL | 0o600;
        assert_eq!(s.shmget_request(5432001, 56, create), None);
        assert_eq!(s.shmget_request(5432001, big, 0o600), None);
        assert_eq!(s.shmget_request(1, big, create | libc::SHM_NORESERVE), None);
        let r = s
            .shmget_request(1, big, create | libc::SHM_HUGETLB)
            .unwrap();
        assert!(r.exclusive && r.huge_log2 == Some(0) && r.mode == 0o600);
    }
}
