//! The real functions: the next definition after this library (libc's),
//! looked up once with `dlsym(RTLD_NEXT)`, or the system call where there
//! is none.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

type MmapFn =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, libc::off_t) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, usize) -> c_int;
type MremapFn = unsafe extern "C" fn(*mut c_void, usize, usize, c_int, *mut c_void) -> *mut c_void;
type ShmgetFn = unsafe extern "C" fn(libc::key_t, usize, c_int) -> c_int;
type ShmatFn = unsafe extern "C" fn(c_int, *const c_void, c_int) -> *mut c_void;
type ShmdtFn = unsafe extern "C" fn(*const c_void) -> c_int;
/// `mprotect` and `madvise` (an address, a length, an int).
type MprotectFn = unsafe extern "C" fn(*mut c_void, usize, c_int) -> c_int;

pub(crate) static REAL_MMAP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static REAL_MUNMAP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static REAL_MREMAP: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static REAL_SHMGET: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static REAL_SHMAT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static REAL_SHMDT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static REAL_MPROTECT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub(crate) static REAL_MADVISE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The next definition of `name` after this library (libc's), looked up
/// once; null if there is none (then the system call is made directly).
pub(crate) fn next(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Relaxed);
    if !p.is_null() {
        return p;
    }
    // SAFETY: RTLD_NEXT and a NUL-terminated name; dlsym only reads them.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    slot.store(p, Ordering::Relaxed);
    p
}

/// `f` (libc's `mmap` or `mmap64`, from [`next`]), or the system call when
/// it is null.
///
/// # Safety
/// The caller's `mmap` contract.
pub(crate) unsafe fn real_mmap(
    f: *mut c_void,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if f.is_null() {
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) }
            as *mut c_void;
    }
    // SAFETY: `f` is libc's mmap (or mmap64, the same function on x86-64),
    // whose type is MmapFn; the caller's arguments, passed on unchanged.
    unsafe { std::mem::transmute::<*mut c_void, MmapFn>(f)(addr, len, prot, flags, fd, off) }
}

/// # Safety
/// The caller's `munmap` contract for `addr..addr + len`.
pub(crate) unsafe fn real_munmap(addr: *mut c_void, len: usize) -> c_int {
    let f = next(&REAL_MUNMAP, c"munmap");
    if f.is_null() {
        // SAFETY: the caller's range.
        return unsafe { libc::syscall(libc::SYS_munmap, addr, len) } as c_int;
    }
    // SAFETY: libc's munmap; the caller's range.
    unsafe { std::mem::transmute::<*mut c_void, MunmapFn>(f)(addr, len) }
}

/// # Safety
/// The caller's `mremap` contract for these arguments.
pub(crate) unsafe fn real_mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    to: *mut c_void,
) -> *mut c_void {
    let f = next(&REAL_MREMAP, c"mremap");
    if f.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, to) }
            as *mut c_void;
    }
    // SAFETY: libc's mremap, variadic in its fifth argument, which the
    // x86-64 convention passes in the same register as a fixed one; the
    // caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, MremapFn>(f)(old, old_len, new_len, flags, to) }
}

/// `shmget` has no memory argument.
pub(crate) fn real_shmget(key: libc::key_t, size: usize, flags: c_int) -> c_int {
    let f = next(&REAL_SHMGET, c"shmget");
    if f.is_null() {
        // SAFETY: integer arguments only.
        return unsafe { libc::syscall(libc::SYS_shmget, key, size, flags) } as c_int;
    }
    // SAFETY: libc's shmget; integer arguments only.
    unsafe { std::mem::transmute::<*mut c_void, ShmgetFn>(f)(key, size, flags) }
}

/// # Safety
/// The caller's `shmat` contract for `addr` and `flags`.
pub(crate) unsafe fn real_shmat(shmid: c_int, addr: *const c_void, flags: c_int) -> *mut c_void {
    let f = next(&REAL_SHMAT, c"shmat");
    if f.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { libc::syscall(libc::SYS_shmat, shmid, addr, flags) } as *mut c_void;
    }
    // SAFETY: libc's shmat; the caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, ShmatFn>(f)(shmid, addr, flags) }
}

/// # Safety
/// The caller's `shmdt` contract for `addr`.
pub(crate) unsafe fn real_shmdt(addr: *const c_void) -> c_int {
    let f = next(&REAL_SHMDT, c"shmdt");
    if f.is_null() {
        // SAFETY: the caller's address.
        return unsafe { libc::syscall(libc::SYS_shmdt, addr) } as c_int;
    }
    // SAFETY: libc's shmdt; the caller's address.
    unsafe { std::mem::transmute::<*mut c_void, ShmdtFn>(f)(addr) }
}

/// `mprotect` or `madvise` (`slot`, `name`, `sysno`): an address, a length
/// and an int.
///
/// # Safety
/// The caller's contract of that function for these arguments.
pub(crate) unsafe fn real_range_call(
    slot: &AtomicPtr<c_void>,
    name: &CStr,
    sysno: libc::c_long,
    addr: *mut c_void,
    len: usize,
    arg: c_int,
) -> c_int {
    let f = next(slot, name);
    if f.is_null() {
        // SAFETY: the caller's arguments.
        return unsafe { libc::syscall(sysno, addr, len, arg) } as c_int;
    }
    // SAFETY: libc's mprotect or madvise, both of type MprotectFn; the
    // caller's arguments.
    unsafe { std::mem::transmute::<*mut c_void, MprotectFn>(f)(addr, len, arg) }
}
