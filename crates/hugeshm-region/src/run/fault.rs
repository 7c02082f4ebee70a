//! Pre-faulting a server's shared mapping in parallel without leaving
//! anything in the server.
//!
//! Threads started in the server would stay in it after they are joined:
//! glibc keeps a joined thread's stack in its stack cache and the malloc
//! arena a thread created (a 64 MiB reservation) for good, so the server
//! (and every process it forks) would carry mappings it never made. A
//! shared mapping is therefore faulted by a forked child: the child's
//! threads fault the pages into the shared object, on the nodes' CPUs, and
//! the child ends (`_exit`) taking its stacks and arenas with it; then the
//! server maps the pages the child made into its own page tables with one
//! `MADV_POPULATE_WRITE` on the calling thread (no page is zeroed twice).
//! The child's outcome comes back through a pipe (the server's own
//! SIGCHLD handler may reap it first). A process that already has several
//! threads cannot fork safely: there the threads run in it.

use std::io::{Read, Write};
use std::time::Instant;

use hugeshm_sys::{self as sys, Mapping, SysError};

use crate::error::RegionError;
use crate::model::PrefaultMethod;
use crate::prefault::{self, Outcome};

/// Faults all of shared `map` with `threads` threads on `cpus`, in a child
/// when this process has one thread, else here.
pub(crate) fn prefault_shared(
    map: &Mapping,
    page: usize,
    threads: usize,
    cpus: &[u32],
    method: PrefaultMethod,
) -> Result<Outcome, RegionError> {
    if threads <= 1 {
        return prefault::prefault(map, page, threads, cpus, method, None);
    }
    let t0 = Instant::now();
    let (rd, wr) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| SysError::Os {
            call: "pipe2(O_CLOEXEC)".to_owned(),
            errno: e.raw_os_error(),
        })?;
    let mut wr = std::fs::File::from(wr);
    let forked = sys::fork_child(|| {
        let line = match prefault::prefault(map, page, threads, cpus, method, None) {
            Ok(o) => format!("ok {}\n", o.threads),
            Err(RegionError::Prefault { offset, source, .. }) => {
                format!("err {offset} {}\n", source.errno().unwrap_or(libc::EIO))
            }
            Err(_) => format!("err 0 {}\n", libc::EIO),
        };
        i32::from(wr.write_all(line.as_bytes()).is_err())
    });
    drop(wr);
    let pid = match forked {
        Ok(pid) => pid,
        // Several threads already: fault here.
        Err(_) => return prefault::prefault(map, page, threads, cpus, method, None),
    };
    let mut text = String::new();
    let read = std::fs::File::from(rd).take(256).read_to_string(&mut text);
    // Reaped by the server's own SIGCHLD handler, perhaps: the pipe said it.
    let _ = sys::wait_child(pid);
    let fields: Vec<&str> = text.split_whitespace().collect();
    let used = match (read, fields.as_slice()) {
        (Ok(_), ["ok", n]) => n.parse().unwrap_or(threads),
        (Ok(_), ["err", offset, errno]) => {
            return Err(RegionError::Prefault {
                method,
                offset: offset.parse().unwrap_or(0),
                source: SysError::Os {
                    call: format!("madvise(MADV_POPULATE_WRITE) in the pre-fault child {pid}"),
                    errno: errno.parse().unwrap_or(libc::EIO),
                },
            })
        }
        _ => {
            return Err(RegionError::Unsupported(format!(
                "the pre-fault child {pid} ended without saying how it went"
            )))
        }
    };
    // The pages exist now: map them here too (page tables only).
    let mapped = match method {
        PrefaultMethod::Touch => map.touch_range(0, map.len(), page),
        _ => map.populate_write_range(0, map.len()),
    };
    mapped.map_err(|source| RegionError::Prefault {
        method,
        offset: 0,
        source,
    })?;
    Ok(Outcome {
        method,
        threads: used,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
