//! Moves a running process's shmem onto 2 MiB pages in place: the
//! [`CollapsePlan`] that `hugeshm_doctor::collapse::plan` made, carried out
//! one 2 MiB block per `process_madvise(MADV_COLLAPSE)` call on several
//! threads at once (disjoint blocks), so that the server's accesses wait on
//! one small range at a time; then read back from every process that maps
//! the memory (`ShmemPmdMapped`, `Rss`, `VmPTE`, before and after).
//!
//! A block the kernel finds locked or pinned for a moment (`EAGAIN`) is
//! tried again; one it refuses (`EINVAL`: no page in it yet, or not
//! eligible) is counted and passed over; no free 2 MiB page (`ENOMEM`), a
//! full memory cgroup (`EBUSY`) or no permission stop the whole run. What
//! is done stays done: a stop (the caller's flag, on Ctrl-C) leaves the
//! collapsed blocks collapsed and the rest as they were.

use hugeshm_doctor::collapse::{CollapsePlan, ShmemMapping, BLOCK};
use hugeshm_probe::Probe;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How a collapse runs.
#[derive(Default)]
pub struct CollapseOptions<'a> {
    /// Blocks copied at once (0: the plan's count).
    pub threads: usize,
    /// Told `(bytes done, bytes in all)` after each block.
    pub on_progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
    /// Set (by a signal handler) to stop after the blocks under way.
    pub stop: Option<&'a AtomicBool>,
}

/// One process mapping the collapsed memory, as its smaps and status say.
#[derive(Debug, Clone, Serialize)]
pub struct Mapper {
    /// The process.
    pub pid: u32,
    /// Its name (`comm`).
    pub comm: String,
    /// Its mappings of the memory, together.
    pub mapped_bytes: u64,
    /// `Rss` of those mappings.
    pub rss_bytes: u64,
    /// `ShmemPmdMapped` of those mappings: on 2 MiB pages.
    pub pmd_mapped_bytes: u64,
    /// `VmPTE`: the process's page tables.
    pub vm_pte_bytes: Option<u64>,
}

/// Blocks the kernel did not collapse, by cause.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NotCollapsed {
    /// `EINVAL`: the block has no page yet, or the kernel refused it.
    pub refused: u64,
    /// `EAGAIN` after every retry: pages locked or pinned.
    pub busy: u64,
    /// The first few blocks not collapsed: address and the kernel's error.
    pub examples: Vec<(u64, String)>,
}

/// What a collapse did.
#[derive(Debug, Clone, Serialize)]
pub struct CollapseReport {
    /// The process asked of.
    pub pid: u32,
    /// Blocks asked for.
    pub blocks: u64,
    /// Blocks collapsed (or found collapsed).
    pub collapsed: u64,
    /// Blocks left as they were.
    pub not_collapsed: NotCollapsed,
    /// Set when the run stopped early (a signal), with what stopped it.
    pub stopped: Option<String>,
    /// Threads that ran.
    pub threads: usize,
    /// Seconds the calls took.
    pub seconds: f64,
    /// Decimal GB per second of blocks collapsed.
    pub gbps: f64,
    /// Every process mapping the memory, before.
    pub before: Vec<Mapper>,
    /// The same, after (a process other than the one asked of maps the
    /// 2 MiB pages on its next access to each block).
    pub after: Vec<Mapper>,
}

/// Why a collapse stopped.
#[derive(Debug, thiserror::Error)]
pub enum CollapseError {
    /// The process could not be reached (gone, or not allowed).
    #[error("{0}")]
    Process(hugeshm_sys::SysError),
}

/// An error that ends the whole run rather than one block.
fn fatal(errno: i32) -> Option<&'static str> {
    match errno {
        libc_errno::ENOMEM => Some(
            "no free 2 MiB page (ENOMEM), even after the kernel's reclaim and compaction: free \
             memory and run it again (what is done stays done)",
        ),
        libc_errno::EBUSY => Some(
            "the process's memory cgroup is at its limit (EBUSY): each block is copied before its \
             small pages are freed; raise memory.max a little or collapse with --threads 1",
        ),
        libc_errno::EPERM => Some(
            "not permitted (EPERM): asking MADV_COLLAPSE of another process needs CAP_SYS_NICE \
             (run as root)",
        ),
        libc_errno::EACCES => Some(
            "not permitted (EACCES): the process's memory may not be read by this user \
             (PTRACE_MODE_READ: the same user, or CAP_SYS_PTRACE)",
        ),
        libc_errno::ESRCH => Some("the process exited (ESRCH)"),
        _ => None,
    }
}

/// The errno values this module tells apart.
mod libc_errno {
    use rustix::io::Errno;
    pub const EPERM: i32 = Errno::PERM.raw_os_error();
    pub const ESRCH: i32 = Errno::SRCH.raw_os_error();
    pub const EAGAIN: i32 = Errno::AGAIN.raw_os_error();
    pub const ENOMEM: i32 = Errno::NOMEM.raw_os_error();
    pub const EACCES: i32 = Errno::ACCESS.raw_os_error();
    pub const EBUSY: i32 = Errno::BUSY.raw_os_error();
}

/// How often a block found busy (`EAGAIN`) is tried.
const TRIES: u32 = 5;

/// Every process that maps one of `objects` (device, inode), with its
/// figures for those mappings.
pub fn mappers(probe: &Probe, objects: &[((u32, u32), u64)]) -> Vec<Mapper> {
    let Ok(list) = probe.processes() else {
        return Vec::new();
    };
    let holders: Vec<u32> = probe
        .read_each(&list.pids, 0, |f| f.maps().ok())
        .into_iter()
        .filter(|(_, maps)| {
            maps.iter()
                .flatten()
                .any(|m| m.perms.shared && objects.contains(&((m.dev_major, m.dev_minor), m.inode)))
        })
        .map(|(pid, _)| pid)
        .collect();
    mappers_among(probe, &holders, objects)
}

/// [`mappers`] of `pids` only (those found before: a process that
/// exited since is left out).
fn mappers_among(probe: &Probe, pids: &[u32], objects: &[((u32, u32), u64)]) -> Vec<Mapper> {
    let mut out = Vec::new();
    for &pid in pids {
        let files = probe.pid(pid);
        let Ok(smaps) = files.smaps() else { continue };
        let status = files.status().ok();
        let mut m = Mapper {
            pid,
            comm: status.as_ref().map(|s| s.name.clone()).unwrap_or_default(),
            mapped_bytes: 0,
            rss_bytes: 0,
            pmd_mapped_bytes: 0,
            vm_pte_bytes: status.and_then(|s| s.vm_pte_bytes),
        };
        for e in smaps.iter().filter(|e| {
            e.map.perms.shared
                && objects.contains(&((e.map.dev_major, e.map.dev_minor), e.map.inode))
        }) {
            m.mapped_bytes += e.size_bytes;
            m.rss_bytes += e.rss_bytes;
            m.pmd_mapped_bytes += e.shmem_pmd_mapped_bytes.unwrap_or(0);
        }
        out.push(m);
    }
    out
}

/// The objects of a plan's collapsible mappings.
fn objects(plan: &CollapsePlan) -> Vec<((u32, u32), u64)> {
    let mut v: Vec<_> = plan.collapsible().map(|m| (m.dev, m.inode)).collect();
    v.sort();
    v.dedup();
    v
}

/// Carries out `plan` (which must have no refusal; see the module's text).
pub fn collapse(
    probe: &Probe,
    plan: &CollapsePlan,
    opts: &CollapseOptions<'_>,
) -> Result<CollapseReport, CollapseError> {
    let objects = objects(plan);
    let before = mappers(probe, &objects);
    let target = hugeshm_sys::PidFd::open(plan.pid).map_err(CollapseError::Process)?;
    let blocks: Vec<u64> = plan
        .collapsible()
        .flat_map(|m: &ShmemMapping| (0..m.blocks).map(move |i| m.first_block + i * BLOCK))
        .collect();
    let total = blocks.len() as u64 * BLOCK;
    let threads = match opts.threads {
        0 => plan.threads,
        n => n,
    }
    .clamp(1, blocks.len().max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let collapsed = AtomicU64::new(0);
    let not = Mutex::new(NotCollapsed::default());
    let stopped: Mutex<Option<String>> = Mutex::new(None);
    let t = Instant::now();
    let worker = || loop {
        if opts.stop.is_some_and(|f| f.load(Ordering::Relaxed))
            || stopped.lock().is_ok_and(|s| s.is_some())
        {
            return;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&addr) = blocks.get(i) else { return };
        let mut tries = 0;
        let result = loop {
            tries += 1;
            match hugeshm_sys::collapse_block(&target, addr, BLOCK) {
                Err(e) if e.errno() == Some(libc_errno::EAGAIN) && tries < TRIES => {
                    std::thread::sleep(Duration::from_millis(u64::from(tries)));
                }
                r => break r,
            }
        };
        match result {
            Ok(()) => {
                collapsed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let errno = e.errno().unwrap_or(0);
                if let Some(why) = fatal(errno) {
                    let mut s = stopped.lock().unwrap_or_else(|e| e.into_inner());
                    s.get_or_insert_with(|| why.to_owned());
                    return;
                }
                let mut n = not.lock().unwrap_or_else(|e| e.into_inner());
                if errno == libc_errno::EAGAIN {
                    n.busy += 1;
                } else {
                    n.refused += 1;
                }
                if n.examples.len() < 8 {
                    n.examples.push((addr, e.to_string()));
                }
            }
        }
        let d = done.fetch_add(BLOCK, Ordering::Relaxed) + BLOCK;
        if let Some(p) = opts.on_progress {
            p(d, total);
        }
    };
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                // On the CPUs of the memory's nodes (a failure leaves the
                // thread where it is).
                if !plan.cpus.is_empty() {
                    let _ = hugeshm_sys::set_affinity(&plan.cpus);
                }
                worker()
            });
        }
    });
    let seconds = t.elapsed().as_secs_f64();
    let collapsed = collapsed.into_inner();
    let mut stopped = stopped.into_inner().unwrap_or_else(|e| e.into_inner());
    if stopped.is_none() && opts.stop.is_some_and(|f| f.load(Ordering::Relaxed)) {
        stopped = Some("interrupted: the blocks collapsed so far stay collapsed".to_owned());
    }
    Ok(CollapseReport {
        pid: plan.pid,
        blocks: blocks.len() as u64,
        collapsed,
        not_collapsed: not.into_inner().unwrap_or_else(|e| e.into_inner()),
        stopped,
        threads,
        seconds,
        gbps: if seconds > 0.0 {
            (collapsed * BLOCK) as f64 / seconds / 1e9
        } else {
            0.0
        },
        after: mappers_among(
            probe,
            &before.iter().map(|m| m.pid).collect::<Vec<_>>(),
            &objects,
        ),
        before,
    })
}
