//! # libhugeshm-run.so
//!
//! The interposition library of `hugeshm run`: loaded into every process of
//! a server's start chain by `LD_PRELOAD`, it acts in the target process
//! only (its executable is the one `HUGESHM_RUN` names) and hands the
//! server's big shared anonymous `mmap`s and SysV segments to
//! `hugeshm_region::run`, which places, pre-faults, verifies and records
//! them. This crate is the C boundary and nothing more:
//!
//! * **Once, at load** (a constructor in `.init_array`): read
//!   `HUGESHM_RUN`; if this process is not the target, do nothing else (the
//!   environment stays, for the wrapper's children). In the target, take
//!   the library's entry out of `LD_PRELOAD` and `HUGESHM_RUN` out of the
//!   environment, so that what the server execs (an `archive_command`'s
//!   shell, `cp`) loads nothing.
//! * **Every call** (`mmap`, `mmap64`, `munmap`, `mremap`, `mprotect`,
//!   `madvise`, `shmget`, `shmat`, `shmdt`): one load and compare, then the real function
//!   (`dlsym(RTLD_NEXT)`), unless the process is the target and the call
//!   qualifies ([`Settings::mmap_request`]). Nothing is allocated or
//!   written before that.
//! * **Re-entry**: a thread-local flag marks a thread inside the library;
//!   its own calls (`shmat` from `hugeshm-sys`, say) pass straight through.
//!   glibc's `malloc` and thread stacks use its internal `__mmap`, not the
//!   interposed symbol (libc.so has no relocation against `mmap`), and the
//!   region library maps through direct system calls.
//! * **Lengths**: what was changed is kept in a fixed [`Table`], so that the
//!   server's `munmap`/`mremap`/`shmdt` of it use the rounded length, and
//!   its record goes when the process that made it unmaps it.
//! * **Commits inside reservations** (MariaDB's buffer pool, the JVM's
//!   heap): a qualifying `MAP_FIXED` commit inside a `PROT_NONE`
//!   reservation of the target's is made as the server asked, then its
//!   huge-page-aligned part is mapped over it ([`run::place_commit`]). Any
//!   `MAP_FIXED` over a changed mapping (an uncommit, a re-commit) takes it
//!   out of the table.
//! * **Output**: at most one line per changed mapping on stderr (what the
//!   region library says), written with `write(2)`; and, where nothing was
//!   changed at all, one line at the target's first `mmap` after
//!   [`run::QUIET_SECONDS`] or at its exit ([`run::nothing_placed`]).
//!
//! x86-64 Linux only (`hugeshm run` refuses other executables): `mremap`'s
//! optional fifth argument is read as a plain fifth argument, which the
//! x86-64 calling convention makes the same thing.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("libhugeshm-run.so is for x86-64 Linux");

use std::cell::Cell;
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use hugeshm_region::run::{self, Done, Missed, Outcome, Settings, Table, SETTINGS_ENV};

mod commit;
mod real;

use commit::{replaced, slow_commit, split_cuts};
use real::*;

/// Not yet decided (a call before the constructor ran): pass through.
const UNKNOWN: u8 = 0;
/// Not the target: pass through, always.
const PASSIVE: u8 = 1;
/// The target.
const TARGET: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static SETTINGS: OnceLock<Settings> = OnceLock::new();
static TABLE: Mutex<Table> = Mutex::new(Table::new());
/// Entries in [`TABLE`]: `munmap` & co. look at the table only when it is
/// not 0.
static TRACKED: AtomicUsize = AtomicUsize::new(0);

/// The target's pid (a forked child says nothing of its parent's start).
static TARGET_PID: AtomicU32 = AtomicU32::new(0);
/// Calls the library acted on (placed, fell back or refused): the
/// "nothing was placed" line is for a target where this stays 0.
static ACTED: AtomicUsize = AtomicUsize::new(0);
/// The "nothing was placed" line was said (or need not be).
static QUIET_SAID: AtomicBool = AtomicBool::new(false);
/// The largest anonymous read-write mmap that did not qualify, and its flags.
static MISSED_LEN: AtomicUsize = AtomicUsize::new(0);
static MISSED_FLAGS: AtomicI32 = AtomicI32::new(0);
static STARTED: OnceLock<std::time::Instant> = OnceLock::new();

thread_local! {
    /// This thread is inside the library.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// The library's file names (the build tree's and the package's).
const LIBRARY_NAMES: [&str; 2] = ["libhugeshm-run.so", "libhugeshm_run.so"];

// ---------------------------------------------------------------------------
// Load time
// ---------------------------------------------------------------------------

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    let decided = std::panic::catch_unwind(decide).unwrap_or(PASSIVE);
    if decided == TARGET {
        STARTED.get_or_init(std::time::Instant::now);
        TARGET_PID.store(std::process::id(), Ordering::Relaxed);
    }
    STATE.store(decided, Ordering::Release);
}

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;

/// At the target's exit: the "nothing was placed" line, if it is due, and
/// the records of what it still maps (a JVM exits without unmapping its
/// heap) go with it.
extern "C" fn fini() {
    if STATE.load(Ordering::Relaxed) == TARGET {
        let _ = std::panic::catch_unwind(|| {
            say_quiet(true);
            if TRACKED.load(Ordering::Relaxed) != 0 {
                let all = {
                    let mut t = table();
                    let all = t.take_all();
                    counted(&t);
                    all
                };
                for e in &all {
                    run::forget(e);
                }
            }
        });
    }
}

/// Says once that nothing was placed, in the target itself, when nothing
/// was and (unless at `exit`) its first [`run::QUIET_SECONDS`] are over.
fn say_quiet(exit: bool) {
    if QUIET_SAID.load(Ordering::Relaxed)
        || ACTED.load(Ordering::Relaxed) != 0
        || TARGET_PID.load(Ordering::Relaxed) != std::process::id()
    {
        return;
    }
    let lived = STARTED
        .get()
        .map(|t| t.elapsed().as_secs_f64())
        .unwrap_or(0.0);
    let due = if exit {
        lived >= run::QUIET_MIN_LIFE as f64
    } else {
        lived >= run::QUIET_SECONDS as f64
    };
    if !due || QUIET_SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let Some(s) = SETTINGS.get() else { return };
    let exe = std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let missed = Missed {
        len: MISSED_LEN.load(Ordering::Relaxed),
        flags: MISSED_FLAGS.load(Ordering::Relaxed),
    };
    say(&run::nothing_placed(s, &exe, exit, missed));
}

/// Notes an anonymous read-write mmap that did not qualify (the largest is
/// named in the "nothing was placed" line).
fn missed(len: usize, prot: c_int, flags: c_int) {
    if ACTED.load(Ordering::Relaxed) == 0
        && prot == libc::PROT_READ | libc::PROT_WRITE
        && flags & libc::MAP_ANONYMOUS != 0
        && flags & libc::MAP_STACK == 0
        && len > MISSED_LEN.load(Ordering::Relaxed)
    {
        MISSED_LEN.store(len, Ordering::Relaxed);
        MISSED_FLAGS.store(flags, Ordering::Relaxed);
    }
}

/// Whether this process is the target (and, if so, the settings are set
/// and the environment cleaned).
fn decide() -> u8 {
    // SAFETY: a NUL-terminated name; the value is copied before the
    // environment is changed.
    let raw = unsafe { libc::getenv(c"HUGESHM_RUN".as_ptr()) };
    if raw.is_null() {
        return PASSIVE;
    }
    // SAFETY: getenv returned a NUL-terminated string in the environment.
    let bytes = unsafe { CStr::from_ptr(raw) }.to_bytes();
    let settings = match std::str::from_utf8(bytes)
        .map_err(|_| "not UTF-8".to_owned())
        .and_then(Settings::parse)
    {
        Ok(s) => s,
        Err(e) => {
            say(&format!(
                "hugeshm run: {SETTINGS_ENV} is not valid ({e}): pid {} is left as it is",
                std::process::id()
            ));
            return PASSIVE;
        }
    };
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path and a buffer of buf.len() bytes.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n <= 0 || n as usize >= buf.len() || !settings.target.matches(&buf[..n as usize]) {
        return PASSIVE;
    }
    if SETTINGS.set(settings).is_err() {
        return PASSIVE;
    }
    clean_environment();
    TARGET
}

/// Takes this library out of `LD_PRELOAD` and removes `HUGESHM_RUN`.
fn clean_environment() {
    std::env::remove_var(SETTINGS_ENV);
    let Some(preload) = std::env::var_os("LD_PRELOAD") else {
        return;
    };
    let Some(preload) = preload.to_str() else {
        return;
    };
    let kept: Vec<&str> = preload
        .split([':', ' '])
        .filter(|e| !e.is_empty())
        .filter(|e| !LIBRARY_NAMES.contains(&e.rsplit('/').next().unwrap_or(e)))
        .collect();
    if kept.is_empty() {
        std::env::remove_var("LD_PRELOAD");
    } else {
        std::env::set_var("LD_PRELOAD", kept.join(":"));
    }
}

// ---------------------------------------------------------------------------
// The slow paths (target only)
// ---------------------------------------------------------------------------

/// Marks this thread inside the library; `None` if it already is.
struct Busy;

impl Busy {
    fn enter() -> Option<Busy> {
        BUSY.with(|b| (!b.replace(true)).then_some(Busy))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(false));
    }
}

fn is_busy() -> bool {
    BUSY.with(Cell::get)
}

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stores the table's size for the fast paths.
fn counted(t: &Table) {
    TRACKED.store(t.len(), Ordering::Relaxed);
}

/// Writes one line on stderr.
fn say(line: &str) {
    let mut text = Vec::with_capacity(line.len() + 1);
    text.extend_from_slice(line.as_bytes());
    text.push(b'\n');
    let mut off = 0;
    while off < text.len() {
        // SAFETY: writes from an in-bounds slice of `text`.
        let n = unsafe { libc::write(2, text[off..].as_ptr().cast(), text.len() - off) };
        if n <= 0 {
            break;
        }
        off += n as usize;
    }
}

fn set_errno(errno: c_int) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = errno };
}

/// Runs a placement, saying its line; a panic passes the call through.
fn run_placement(f: impl FnOnce() -> Done) -> Option<Outcome> {
    ACTED.fetch_add(1, Ordering::Relaxed);
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()?;
    if let Some(line) = &done.line {
        say(line);
    }
    Some(done.outcome)
}

/// Puts what was changed into the table.
fn keep(entry: run::Entry) {
    let mut t = table();
    if t.insert(entry).is_err() {
        say("hugeshm run: the table of changed mappings filled meanwhile");
    }
    counted(&t);
}

fn has_room() -> bool {
    if table().has_room() {
        return true;
    }
    say(&format!(
        "hugeshm run: pid {}: {} mappings changed already: this one is left as the server asked",
        std::process::id(),
        run::TABLE_SLOTS
    ));
    false
}

#[cold]
fn slow_mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int) -> Option<*mut c_void> {
    let s = SETTINGS.get()?;
    if !QUIET_SAID.load(Ordering::Relaxed) && ACTED.load(Ordering::Relaxed) == 0 {
        say_quiet(false);
    }
    if flags & libc::MAP_FIXED != 0 {
        return slow_commit(s, addr, len, prot, flags);
    }
    let Some(req) = s.mmap_request(addr as usize, len, prot, flags) else {
        missed(len, prot, flags);
        return None;
    };
    let _busy = Busy::enter()?;
    if !has_room() {
        return None;
    }
    match run_placement(|| run::place_mmap(s, &req))? {
        Outcome::Mapped { addr, entry } => {
            keep(entry);
            Some(addr as *mut c_void)
        }
        Outcome::Refused { errno } => {
            set_errno(errno);
            Some(libc::MAP_FAILED)
        }
        _ => None,
    }
}

#[cold]
fn slow_shmget(key: libc::key_t, size: usize, flags: c_int) -> Option<c_int> {
    let s = SETTINGS.get()?;
    let req = s.shmget_request(key, size, flags)?;
    let _busy = Busy::enter()?;
    if !has_room() {
        return None;
    }
    match run_placement(|| run::place_shmget(s, &req))? {
        Outcome::Created { shmid, entry } => {
            keep(entry);
            Some(shmid)
        }
        Outcome::Refused { errno } => {
            set_errno(errno);
            Some(-1)
        }
        _ => None,
    }
}

#[cold]
fn slow_shmat(shmid: c_int) -> Option<*mut c_void> {
    let s = SETTINGS.get()?;
    let _busy = Busy::enter()?;
    let entry = {
        let mut t = table();
        let e = t.take_pending(shmid);
        counted(&t);
        e
    }?;
    match run_placement(move || run::attach_shm(s, entry))? {
        Outcome::Mapped { addr, entry } => {
            keep(entry);
            Some(addr as *mut c_void)
        }
        Outcome::Refused { errno } => {
            set_errno(errno);
            Some(usize::MAX as *mut c_void)
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// The interposed functions
// ---------------------------------------------------------------------------

/// `mmap(2)`.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if STATE.load(Ordering::Relaxed) == TARGET {
        if let Some(p) = slow_mmap(addr, len, prot, flags) {
            return p;
        }
    }
    if flags & libc::MAP_FIXED != 0 {
        split_cuts(addr as usize, len);
    }
    // SAFETY: the caller's arguments, passed on unchanged.
    let p = unsafe { real_mmap(next(&REAL_MMAP, c"mmap"), addr, len, prot, flags, fd, off) };
    if flags & libc::MAP_FIXED != 0 && p != libc::MAP_FAILED {
        replaced(p as usize, len);
    }
    p
}

/// `mmap64(2)`: on x86-64 the same function as `mmap` (glibc exports one
/// under both names).
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`: a changed mapping is unmapped whole, rounded length and
/// all, when the server unmaps what it knows of it.
///
/// # Safety
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if TRACKED.load(Ordering::Relaxed) == 0 || is_busy() {
        // SAFETY: the caller's range.
        return unsafe { real_munmap(addr, len) };
    }
    let len = table().unmap_len(addr as usize, len).unwrap_or(len);
    split_cuts(addr as usize, len);
    // SAFETY: the caller's range, extended only over the rest of a mapping
    // this library made for it.
    let rc = unsafe { real_munmap(addr, len) };
    if rc == 0 {
        replaced(addr as usize, len);
    }
    rc
}

/// `mprotect(2)`: a range that cuts a huge page of a changed mapping
/// splits it first.
///
/// # Safety
/// As `mprotect(2)`.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int {
    split_cuts(addr as usize, len);
    // SAFETY: the caller's arguments.
    unsafe {
        real_range_call(
            &REAL_MPROTECT,
            c"mprotect",
            libc::SYS_mprotect,
            addr,
            len,
            prot,
        )
    }
}

/// `madvise(2)`: a range that cuts a huge page of a changed mapping
/// splits it first (`MADV_DONTNEED` of part of one, say).
///
/// # Safety
/// As `madvise(2)`.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    split_cuts(addr as usize, len);
    // SAFETY: the caller's arguments.
    unsafe {
        real_range_call(
            &REAL_MADVISE,
            c"madvise",
            libc::SYS_madvise,
            addr,
            len,
            advice,
        )
    }
}

/// `mremap(2)`, with its optional fifth argument.
///
/// # Safety
/// As `mremap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    to: *mut c_void,
) -> *mut c_void {
    let lens = if TRACKED.load(Ordering::Relaxed) == 0 || is_busy() {
        None
    } else {
        table().remap_lens(old as usize, old_len, new_len)
    };
    let Some((o, n)) = lens else {
        // SAFETY: the caller's arguments.
        return unsafe { real_mremap(old, old_len, new_len, flags, to) };
    };
    // SAFETY: the caller's mapping, its lengths rounded to what this library
    // mapped for it.
    let r = unsafe { real_mremap(old, o, n, flags, to) };
    if r != libc::MAP_FAILED {
        let before = table().remapped(old as usize, r as usize, new_len, n);
        if let Some(e) = before {
            run::forget(&e);
        }
    }
    r
}

/// `shmget(2)`.
///
/// # Safety
/// As `shmget(2)` (no memory argument).
#[no_mangle]
pub unsafe extern "C" fn shmget(key: libc::key_t, size: usize, flags: c_int) -> c_int {
    if STATE.load(Ordering::Relaxed) == TARGET {
        if let Some(r) = slow_shmget(key, size, flags) {
            return r;
        }
    }
    real_shmget(key, size, flags)
}

/// `shmat(2)`: the first attach of a segment this library made places it.
///
/// # Safety
/// As `shmat(2)`.
#[no_mangle]
pub unsafe extern "C" fn shmat(shmid: c_int, addr: *const c_void, flags: c_int) -> *mut c_void {
    if TRACKED.load(Ordering::Relaxed) != 0 && addr.is_null() && flags == 0 && !is_busy() {
        let pending = table().is_pending(shmid);
        if pending {
            if let Some(p) = slow_shmat(shmid) {
                return p;
            }
        }
    }
    // SAFETY: the caller's arguments.
    unsafe { real_shmat(shmid, addr, flags) }
}

/// `shmdt(2)`.
///
/// # Safety
/// As `shmdt(2)`.
#[no_mangle]
pub unsafe extern "C" fn shmdt(addr: *const c_void) -> c_int {
    // SAFETY: the caller's address.
    let rc = unsafe { real_shmdt(addr) };
    if rc == 0 && TRACKED.load(Ordering::Relaxed) != 0 && !is_busy() {
        let gone = {
            let mut t = table();
            let e = t.detached(addr as usize);
            counted(&t);
            e
        };
        if let Some(e) = gone {
            run::forget(&e);
        }
    }
    rc
}
