//! The SIGBUS guard of file mappings.
//!
//! A file in `/dev/shm`, on hugetlbfs or on a DAX file system can be cut
//! short (`ftruncate`) by any process that may write it, while others map
//! it: their next access past the new end gets SIGBUS, which kills a
//! process that does not handle it. (A memfd region's size is sealed; a
//! SysV segment or anonymous memory cannot be truncated.) A hugetlb
//! mapping gets SIGBUS too when its pool has no page left at fault time,
//! and a DAX mapping on a memory error.
//!
//! Every mapping of a file ([`MapOptions::map`](crate::MapOptions::map)) is
//! therefore registered here, and a process-wide SIGBUS handler (installed
//! with the first registration, `SA_SIGINFO | SA_ONSTACK`) looks the
//! faulting address up:
//!
//! * **inside a registered mapping** (a fault the kernel raised): it marks
//!   the mapping *lost* (the first fault's offset and `si_code`), maps
//!   anonymous zero memory `MAP_FIXED` over the whole mapping and returns,
//!   so the faulting access completes (on zeros). Every checked accessor of
//!   [`Mapping`](crate::Mapping) tests the mark with one load after its
//!   access (before handing out a reference, for the atomic-word
//!   accessors) and returns [`SysError::MappingLost`](crate::SysError)
//!   instead of data. The mapping stays valid memory (zeros, private)
//!   until it is released as usual.
//! * **anywhere else**, or sent by a process (`kill`): it hands the signal
//!   to the action that was there before (Rust's own handler, a C
//!   program's, or the default action: the fault runs again and kills the
//!   process, a sent signal is raised again), so a real SIGBUS ends the
//!   process as it did without hugeshm.
//!
//! The handler is async-signal-safe: atomics, `mmap` and `sigaction`
//! only; `errno` is kept. The registry is a fixed array of slots, each a
//! sequence lock (odd while its owner writes it), so the handler never
//! reads a half-written slot and never takes a lock. A slot is published
//! after its mapping exists and withdrawn before `munmap`, so the handler
//! never maps over an address range that is no longer the mapping's. Two
//! threads faulting at once both map zeros over the mapping (the second
//! replaces the first's zeros; the mark keeps the first fault).
//!
//! A mapping whose raw pointer was handed out
//! ([`Mapping::as_ptr`](crate::Mapping::as_ptr), and through it
//! `Region::as_ptr` and the C API's pointers) leaves the guard: code that
//! reads through a raw pointer cannot be told the memory went, so its
//! faults end the process as before instead of feeding it zeros (a
//! database would write them back as data).
//!
//! What it cannot do: a value read through an atomic reference handed out
//! *before* the fault is zero, with no error until the next accessor call.
//! Another SIGBUS handler installed later replaces this one until the next
//! file mapping is made (which reinstalls it, chaining to that handler).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::SysError;

/// How many file mappings one process may hold at once.
pub(crate) const SLOTS: usize = 1024;

/// One registered mapping.
#[derive(Debug)]
struct Slot {
    /// Even: stable; odd: its owner is writing it.
    seq: AtomicUsize,
    /// Start address; 0 when the slot is free.
    start: AtomicUsize,
    /// Length in bytes.
    len: AtomicUsize,
    /// 0: intact; else the offset of the first fault + 1.
    lost: AtomicUsize,
    /// `si_code` of the first fault.
    code: AtomicI32,
    /// Its raw pointer was handed out: faults are not the guard's.
    raw: AtomicBool,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            seq: AtomicUsize::new(0),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
            code: AtomicI32::new(0),
            raw: AtomicBool::new(false),
        }
    }
}

static REGISTRY: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// The `lost` word of a mapping without a slot: never set.
static NEVER_LOST: Slot = Slot::new();

/// The SIGBUS action found when the guard was installed: its handler
/// address (`SIG_DFL` = 0, `SIG_IGN` = 1) and `sa_flags`.
static PREV_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREV_FLAGS: AtomicI32 = AtomicI32::new(0);

/// A mapping's place in the registry (none for mappings that cannot lose
/// their memory this way).
#[derive(Debug)]
pub(crate) struct Guard {
    slot: &'static Slot,
    registered: bool,
}

impl Guard {
    /// For a mapping that is not guarded (anonymous memory, SysV).
    pub(crate) fn none() -> Guard {
        Guard {
            slot: &NEVER_LOST,
            registered: false,
        }
    }

    /// Whether a fault hit the mapping: one relaxed load, after a compiler
    /// fence that keeps it behind the access before it (a fault is handled
    /// on the faulting thread, before the access completes).
    #[inline(always)]
    pub(crate) fn is_lost(&self) -> bool {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.slot.lost.load(Ordering::Relaxed) != 0
    }

    /// The mapping's raw pointer goes out: from now on a fault in it is
    /// handed on (kills by default), never turned into zeros that code
    /// reading through the pointer could not tell from data.
    #[inline]
    pub(crate) fn hand_out_raw(&self) {
        if self.registered && !self.slot.raw.load(Ordering::Relaxed) {
            self.slot.raw.store(true, Ordering::Relaxed);
        }
    }

    /// The first fault: offset into the mapping and `si_code`.
    #[cold]
    pub(crate) fn fault(&self) -> (usize, i32) {
        let lost = self.slot.lost.load(Ordering::Acquire);
        (
            lost.saturating_sub(1),
            self.slot.code.load(Ordering::Relaxed),
        )
    }

    /// Withdraws the slot (before the mapping is unmapped).
    pub(crate) fn unregister(&mut self) {
        if !std::mem::take(&mut self.registered) {
            return;
        }
        let slot = self.slot;
        let s = slot.seq.load(Ordering::Relaxed);
        slot.seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        slot.start.store(0, Ordering::Relaxed);
        slot.len.store(0, Ordering::Relaxed);
        slot.seq.store(s + 2, Ordering::Release);
        self.slot = &NEVER_LOST;
    }
}

/// Registers the mapping `start..start + len` (installing the handler
/// first, or again where another took its place).
pub(crate) fn register(start: usize, len: usize) -> Result<Guard, SysError> {
    install()?;
    for slot in REGISTRY.iter() {
        let s = slot.seq.load(Ordering::Acquire);
        if s % 2 == 1 || slot.start.load(Ordering::Relaxed) != 0 {
            continue;
        }
        // Claimed by whoever moves the sequence first; start stays 0
        // until the sequence moves, so it is still free.
        if slot
            .seq
            .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        fence(Ordering::Release);
        slot.len.store(len, Ordering::Relaxed);
        slot.lost.store(0, Ordering::Relaxed);
        slot.code.store(0, Ordering::Relaxed);
        slot.raw.store(false, Ordering::Relaxed);
        slot.start.store(start, Ordering::Relaxed);
        slot.seq.store(s + 2, Ordering::Release);
        return Ok(Guard {
            slot,
            registered: true,
        });
    }
    Err(SysError::invalid(
        format!("mmap(addr={start:#x}, len={len})"),
        format!("this process maps {SLOTS} files already, all that the SIGBUS guard holds"),
    ))
}

/// The registered mapping that holds `addr`: its slot, start and length.
fn find(addr: usize) -> Option<(&'static Slot, usize, usize)> {
    REGISTRY.iter().find_map(|slot| {
        let s = slot.seq.load(Ordering::Acquire);
        if s % 2 == 1 {
            return None;
        }
        let start = slot.start.load(Ordering::Relaxed);
        let len = slot.len.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let stable = slot.seq.load(Ordering::Relaxed) == s;
        (stable && start != 0 && addr >= start && addr - start < len).then_some((slot, start, len))
    })
}

/// Installs [`on_sigbus`] unless it is the action already; what was there
/// becomes the action it chains to.
fn install() -> Result<(), SysError> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _serial = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags,
    // empty mask); sigaction only writes the current action into it.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only queries; `cur` is valid for writes.
    if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut cur) } != 0 {
        return Err(SysError::last_os("sigaction(SIGBUS, query)".to_owned()));
    }
    let ours = on_sigbus as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
    if cur.sa_sigaction == ours {
        return Ok(());
    }
    PREV_FLAGS.store(cur.sa_flags, Ordering::Relaxed);
    PREV_HANDLER.store(cur.sa_sigaction, Ordering::Release);
    // SAFETY: as above, zeroed is valid; then set like sigaction(2) says.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = ours;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    // SAFETY: `act` is a valid, initialized sigaction whose handler is an
    // `extern "C"` function with the SA_SIGINFO signature that stays for
    // the life of the process.
    if unsafe { libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) } != 0 {
        return Err(SysError::last_os(
            "sigaction(SIGBUS, SA_SIGINFO|SA_ONSTACK)".to_owned(),
        ));
    }
    Ok(())
}

/// The handler (see the module docs). Async-signal-safe.
extern "C" fn on_sigbus(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno is a thread-local int that every thread has.
    let errno = unsafe { *libc::__errno_location() };
    let (code, addr) = if info.is_null() {
        (0, 0)
    } else {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo; for
        // SIGBUS si_addr is the union member that is set.
        unsafe { ((*info).si_code, (*info).si_addr() as usize) }
    };
    // si_code > 0: raised by the kernel for a fault (not kill/sigqueue).
    if code > 0 {
        if let Some((slot, start, len)) =
            find(addr).filter(|(s, ..)| !s.raw.load(Ordering::Relaxed))
        {
            // Marked first: another thread that reads the zeros (after the
            // mapping below, which shoots its TLB down) sees the mark.
            if slot
                .lost
                .compare_exchange(0, addr - start + 1, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                slot.code.store(code, Ordering::Release);
            }
            // SAFETY: start..start + len is a live mapping this process
            // registered (withdrawn before it is unmapped, and it cannot be
            // unmapped while an access through it runs); replacing it with
            // private zero memory keeps every address valid.
            let zeroed = unsafe {
                rustix::mm::mmap_anonymous(
                    start as *mut c_void,
                    len,
                    rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                    rustix::mm::MapFlags::PRIVATE
                        | rustix::mm::MapFlags::FIXED
                        | rustix::mm::MapFlags::NORESERVE,
                )
            };
            if zeroed.is_ok() {
                // SAFETY: as above.
                unsafe { *libc::__errno_location() = errno };
                return;
            }
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    chain(sig, code, info, ctx);
}

/// Hands a SIGBUS that is not the guard's to the action that was there
/// before it.
fn chain(sig: c_int, code: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let handler = PREV_HANDLER.load(Ordering::Acquire);
    let flags = PREV_FLAGS.load(Ordering::Relaxed);
    match handler {
        libc::SIG_IGN if code <= 0 => {}
        libc::SIG_DFL | libc::SIG_IGN => {
            // The default action, as without hugeshm: a fault runs again
            // when this returns and kills; a sent signal is sent again
            // (blocked in here, it arrives when this returns).
            // SAFETY: zeroed is SIG_DFL with no flags and an empty mask;
            // sigaction and raise are async-signal-safe.
            unsafe {
                let dfl: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
                if code <= 0 {
                    libc::raise(libc::SIGBUS);
                }
            }
        }
        h if flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous action was installed with SA_SIGINFO, so
            // its address is a handler of this signature; it gets what the
            // kernel gave us.
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        }
        h => {
            // SAFETY: a plain sa_handler of `void (*)(int)`.
            let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }
}

/// How `si_code` reads in an error.
pub(crate) fn cause(code: i32) -> &'static str {
    match code {
        libc::BUS_ADRERR => {
            "BUS_ADRERR: the file no longer has that page (another process truncated it, or a \
             hugetlb pool had no page left at fault time)"
        }
        libc::BUS_OBJERR => "BUS_OBJERR: the file system reported an error for the page",
        libc::BUS_MCEERR_AR | libc::BUS_MCEERR_AO => {
            "BUS_MCEERR: a hardware memory error in the page"
        }
        _ => "a SIGBUS the kernel raised for the page",
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    use std::sync::atomic::Ordering;

    use crate::{MapOptions, Mapping, SysError};

    const MIB: usize = 1 << 20;

    /// A 1 MiB file in /dev/shm (tmpfs), unlinked at once, every page
    /// written; and its mapping.
    fn mapped_file() -> (OwnedFd, Mapping) {
        let fd = crate::open_tmpfile(std::path::Path::new("/dev/shm"), 0o600).unwrap();
        crate::set_len(fd.as_fd(), MIB as u64).unwrap();
        let mut m = MapOptions::new(MIB).map(fd.as_fd()).unwrap();
        m.fill(0x5a);
        (fd, m)
    }

    #[track_caller]
    fn assert_lost(r: Result<(), SysError>, what: &str) {
        match r {
            Err(SysError::MappingLost { offset, code, call }) => {
                assert_eq!(code, libc::BUS_ADRERR, "{what}: {call}");
                assert!((4096..MIB).contains(&offset), "{what}: offset {offset}");
                assert!(call.contains(what), "{what}: {call}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }

    /// Another holder cuts the file to 4 KiB: every checked access past
    /// the end is an error naming the fault, never SIGBUS; the process goes
    /// on and releases the mapping cleanly.
    #[test]
    fn a_truncated_file_is_an_error_not_sigbus() {
        let (fd, mut m) = mapped_file();
        let mut head = [0u8; 8];
        m.read_at(0, &mut head).unwrap();
        assert_eq!(head, [0x5a; 8]);
        assert!(!m.is_lost());
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let mut buf = [0u8; 64];
        assert_lost(m.read_at(8192, &mut buf), "read_at");
        assert!(m.is_lost());
        // After the fault every checked access says so, inside the file's
        // remaining page too: the whole mapping is zeros now.
        assert_lost(m.read_at(0, &mut buf), "read_at");
        assert_eq!(buf, [0u8; 64], "zeros, not the file");
        assert_lost(m.write_at(16384, b"x"), "write_at");
        assert_lost(m.atomic_u64(4096 * 9).map(|_| ()), "atomic_u64");
        assert_lost(m.atomic_u32s(0, 4).map(|_| ()), "atomic_u32s");
        assert_lost(m.load_words(65536, &mut buf), "load_words");
        assert_lost(m.store_words(65536, &buf), "store_words");
        assert_lost(m.store_u32_release(8, 1), "store_u32");
        assert_lost(m.fill_range(0, 4096, 1), "fill");
        assert_lost(m.sum_u64_range(0, 4096).map(|_| ()), "sum_u64");
        let text = m.read_at(0, &mut buf).unwrap_err().to_string();
        assert!(
            text.contains("BUS_ADRERR") && text.contains("truncated"),
            "{text}"
        );
        m.release().unwrap();
    }

    /// The first access of the mapping after the cut may be an atomic word
    /// handed out before: it reads zeros and the next call fails.
    #[test]
    fn a_reference_taken_before_the_cut_reads_zeros() {
        let (fd, m) = mapped_file();
        let w = m.atomic_u64(MIB - 8).unwrap();
        assert_eq!(w.load(Ordering::Relaxed), 0x5a5a_5a5a_5a5a_5a5a);
        rustix::fs::ftruncate(&fd, 0).unwrap();
        assert_eq!(w.fetch_add(1, Ordering::AcqRel), 0);
        assert_lost(m.atomic_u64(MIB - 8).map(|_| ()), "atomic_u64");
        drop(m);
    }

    /// Eight threads fault on different pages past the end at once: each
    /// gets the error, the process lives.
    #[test]
    fn threads_faulting_at_once_each_get_the_error() {
        let (fd, m) = mapped_file();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for t in 0..8usize {
                let (m, barrier) = (&m, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut b = [0u8; 8];
                    assert_lost(m.load_words((t + 1) * 65536, &mut b), "load_words");
                });
            }
        });
        let (offset, code) = m.guard.fault();
        assert_eq!(code, libc::BUS_ADRERR);
        assert!(offset >= 65536, "{offset}");
        drop(m);
    }

    /// Released mappings give their slot back: more mappings one after
    /// another than the registry holds at once.
    #[test]
    fn slots_are_given_back() {
        let fd = crate::open_tmpfile(std::path::Path::new("/dev/shm"), 0o600).unwrap();
        crate::set_len(fd.as_fd(), 4096).unwrap();
        for _ in 0..super::SLOTS + 10 {
            MapOptions::new(4096)
                .map(fd.as_fd())
                .unwrap()
                .release()
                .unwrap();
        }
    }

    const CHILD: &str = "HUGESHM_SIGBUS_CHILD";

    /// Runs `case` of [`sigbus_child`] in a fresh process; its exit status.
    fn child(case: &str) -> std::process::ExitStatus {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "mm::sigbus::tests::sigbus_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, case)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    }

    /// A SIGBUS that is not the guard's ends the process as before: a
    /// fault in a file mapping made without hugeshm-sys (with the guard
    /// installed, and chaining to Rust's own handler), one sent by `kill`
    /// where the previous action is the default, and a fault through the
    /// raw pointer of a mapping that handed it out. A guarded fault in the
    /// same kind of process does not.
    #[test]
    fn a_sigbus_elsewhere_still_kills() {
        for case in ["unguarded", "killed", "raw"] {
            let st = child(case);
            assert_eq!(st.signal(), Some(libc::SIGBUS), "{case}: {st}");
        }
        let st = child("guarded");
        assert!(st.success(), "guarded: {st}");
    }

    /// The child side of [`a_sigbus_elsewhere_still_kills`], which runs it
    /// (alone, it has nothing to do).
    #[test]
    #[ignore = "helper: a_sigbus_elsewhere_still_kills runs it"]
    fn sigbus_child() {
        let Ok(case) = std::env::var(CHILD) else {
            return;
        };
        // The guard installed, chaining to what was there.
        let (fd, guarded) = mapped_file();
        match case.as_str() {
            "unguarded" => {
                // SAFETY: a fresh shared mapping of our own file; the test
                // reads it after cutting the file short, to die of SIGBUS.
                let p = unsafe {
                    rustix::mm::mmap(
                        std::ptr::null_mut(),
                        MIB,
                        rustix::mm::ProtFlags::READ,
                        rustix::mm::MapFlags::SHARED,
                        &fd,
                        0,
                    )
                }
                .unwrap();
                rustix::fs::ftruncate(&fd, 0).unwrap();
                // SAFETY: inside the mapping above (faults: SIGBUS).
                let v = unsafe { std::ptr::read_volatile(p.cast::<u8>().add(8192)) };
                println!("read {v}: not killed");
            }
            "killed" => {
                // The default action before the guard, then a kill.
                // SAFETY: zeroed is SIG_DFL with an empty mask.
                unsafe {
                    let dfl: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
                }
                let (_fd2, _m2) = mapped_file();
                rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::BUS,
                )
                .unwrap();
                std::thread::sleep(std::time::Duration::from_secs(5));
            }
            "raw" => {
                let p = guarded.as_ptr();
                rustix::fs::ftruncate(&fd, 0).unwrap();
                // SAFETY: inside the live mapping (faults: SIGBUS).
                let v = unsafe { std::ptr::read_volatile(p.add(8192)) };
                println!("read {v}: not killed");
            }
            _ => {
                rustix::fs::ftruncate(&fd, 0).unwrap();
                let mut b = [0u8; 8];
                assert!(guarded.read_at(8192, &mut b).is_err());
                drop(guarded);
                return;
            }
        }
        drop(guarded);
    }
}
