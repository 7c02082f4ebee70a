//! `fork` for single-threaded callers, and waiting for the child: what a
//! memory that is shared with forked children only (shared anonymous
//! memory) needs; `exec_self`, re-executing this program from any thread.

use crate::SysError;

/// Threads of the calling process (entries of `/proc/self/task`).
pub fn thread_count() -> Result<usize, SysError> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .map_err(|e| SysError::Os {
            call: "opendir(/proc/self/task)".to_owned(),
            errno: e.raw_os_error().unwrap_or(libc::EIO),
        })
}

/// Forks; the child runs `f` and exits with its value (101 if it panics)
/// through `_exit`, so nothing of the parent (buffered output, exit
/// handlers) runs twice. Returns the child's pid in the parent. The child
/// starts with the default actions of SIGINT, SIGTERM and SIGHUP.
///
/// Refused when the calling process has more than one thread: a child of a
/// multi-threaded process inherits locks (the allocator's among them) that
/// threads which do not exist in it hold forever.
pub fn fork_child(f: impl FnOnce() -> i32) -> Result<u32, SysError> {
    // A thread just joined may still be listed for a moment while the
    // kernel finishes its exit: wait up to about 200 ms for it to go.
    let mut threads = thread_count()?;
    for _ in 0..200 {
        if threads == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        threads = thread_count()?;
    }
    if threads != 1 {
        return Err(SysError::invalid(
            "fork()".to_owned(),
            format!("the process has {threads} threads; fork is only safe from a single-threaded process"),
        ));
    }
    // SAFETY: the process has one thread (checked above, and no other can
    // start one meanwhile), so the child inherits no lock held by a thread
    // that does not exist in it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SysError::last_os("fork()".to_owned()));
    }
    if pid == 0 {
        // The child starts with the default actions of the termination
        // signals: a handler the parent installed (its thread does not
        // exist here) would leave the child deaf to Ctrl-C and SIGTERM.
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: signal() with SIG_DFL is async-signal-safe and
            // touches only this (single-threaded) child's dispositions.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: _exit ends the child without running the parent's exit
        // handlers or flushing its copied buffers.
        unsafe { libc::_exit(code) };
    }
    Ok(pid as u32)
}

/// Waits for child `pid` to end: its exit code, or 128 + the signal that
/// killed it.
pub fn wait_child(pid: u32) -> Result<i32, SysError> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: status is a live c_int the kernel writes.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if rc >= 0 {
            break;
        }
        let err = SysError::last_os(format!("waitpid({pid})"));
        if err.errno() != Some(libc::EINTR) {
            return Err(err);
        }
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Ok(128 + libc::WTERMSIG(status))
    } else {
        Ok(-1)
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`), in
/// seconds: what a benchmark divides by when other processes share the
/// CPUs.
pub fn thread_cpu_seconds() -> Result<f64, SysError> {
    cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID, "CLOCK_THREAD_CPUTIME_ID")
}

/// CPU time the calling process has used, all its threads together
/// (`CLOCK_PROCESS_CPUTIME_ID`), in seconds: the work of a multi-threaded
/// step, whatever share of the CPUs other processes left it.
pub fn process_cpu_seconds() -> Result<f64, SysError> {
    cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID, "CLOCK_PROCESS_CPUTIME_ID")
}

fn cpu_seconds(clock: libc::clockid_t, name: &str) -> Result<f64, SysError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a live timespec the kernel writes.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc < 0 {
        return Err(SysError::last_os(format!("clock_gettime({name})")));
    }
    Ok(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// Makes `cmd` start its program in a session of its own (`setsid(2)` in
/// the child, before `exec`): the program has no controlling terminal, so
/// one run for root as another user (a PostgreSQL binary as its cluster's
/// owner) cannot reach root's terminal (`TIOCSTI`, reading `/dev/tty`).
pub fn in_new_session(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec; it calls
    // setsid(2) only, which is async-signal-safe, and allocates nothing
    // (an errno converts to io::Error without allocating).
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        })
    }
}

/// Replaces this process's image by this program (`/proc/self/exe`) run
/// with `args` (`argv[1..]`), from any thread, with the signal
/// dispositions as they are: `std`'s `CommandExt::exec` first sets
/// `SIGPIPE` back to its default for the whole process, and another
/// thread that writes to a closed pipe before the `execve` (a worker that
/// died of the same Ctrl-C) then kills the process instead of getting
/// `EPIPE`. Returns only on failure.
pub fn exec_self(args: &[String]) -> SysError {
    let call = || "execv(/proc/self/exe)".to_owned();
    let mut owned = Vec::with_capacity(args.len() + 1);
    for a in std::iter::once("hugeshm").chain(args.iter().map(String::as_str)) {
        match std::ffi::CString::new(a) {
            Ok(c) => owned.push(c),
            Err(_) => return SysError::invalid(call(), format!("{a:?} holds a NUL byte")),
        }
    }
    let mut argv: Vec<*const libc::c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: the path and every argument are NUL-terminated C strings that
    // live (in `owned`) across the call, and `argv` ends with a null
    // pointer; execv returns only on failure.
    unsafe { libc::execv(c"/proc/self/exe".as_ptr(), argv.as_ptr()) };
    SysError::last_os(call())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_is_refused_with_threads_and_cpu_time_advances() {
        let _t = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(300)));
        let e = fork_child(|| 0).unwrap_err().to_string();
        assert!(e.contains("threads; fork is only safe"), "{e}");
        let a = thread_cpu_seconds().unwrap();
        let p = process_cpu_seconds().unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        let spent = thread_cpu_seconds().unwrap() - a;
        assert!(spent > 0.0);
        // The process's clock counts this thread's time too.
        assert!(process_cpu_seconds().unwrap() - p >= spent * 0.99);
    }
}
