//! What the benches share: checks of their options, reaping children,
//! topping up the huge page pools for a run, a private data file. A leaf:
//! it imports no other bench module.

use crate::guard::{Taken, Undo};
use crate::Usage;
use anyhow::Context;
use hugeshm_apply::{PoolFiles, SysfsPools};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{HostSnapshot, Probe};
use std::process::Child;
use std::time::{Duration, Instant};

/// Least-squares line through the points: `(slope, intercept)`; `None`
/// with fewer than two distinct `x`.
pub(crate) fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| (sxy / sxx, my - sxy / sxx * mx))
}

/// Decimal gigabytes per second (the unit `dd` and the region's reports
/// use); 0 for no time.
pub(crate) fn gbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / 1e9 / seconds
    } else {
        0.0
    }
}

/// Least-squares slope of `y` over `x` (see [`fit`]).
pub(crate) fn slope(points: &[(f64, f64)]) -> Option<f64> {
    fit(points).map(|(k, _)| k)
}

/// A page size a bench could not measure, why, and how to get its pages.
#[derive(Debug, serde::Serialize)]
pub struct Skipped {
    /// The page size.
    pub page_size_bytes: u64,
    /// Why it was not measured.
    pub reason: String,
    /// How to get its pages, where there is a way.
    pub fix: Option<String>,
}

impl Skipped {
    /// The kernel has no pool of this size; the reason names the sizes it
    /// has.
    pub fn no_such_pages(host: &HostSnapshot, page_size: u64, pages: u64) -> Skipped {
        let has: Vec<String> = host
            .pools
            .iter()
            .map(|p| page_size_short(p.page_size_bytes))
            .collect();
        let has = if has.is_empty() {
            "none".to_owned()
        } else {
            has.join(", ")
        };
        Skipped {
            page_size_bytes: page_size,
            reason: format!(
                "this kernel offers no {} pages (it has: {has})",
                page_size_short(page_size)
            ),
            fix: Some(format!(
                "where the architecture has {0} pages, boot with hugepagesz={0} hugepages={pages}",
                page_size_short(page_size)
            )),
        }
    }

    /// Reserving or using `pages` pages of this size failed with `e` (the
    /// fix: how to get the pages; none for base pages).
    pub fn failed(page_size: u64, pages: u64, e: &anyhow::Error) -> Skipped {
        Skipped {
            page_size_bytes: page_size,
            reason: crate::error_text(e),
            fix: (page_size > 4096).then(|| pages_fix(page_size, pages)),
        }
    }
}

/// How to get `pages` pages of `page_size` that the running host could not
/// give.
pub(crate) fn pages_fix(page_size: u64, pages: u64) -> String {
    if page_size >= 1 << 30 {
        format!(
            "1 GiB pages are rarely free at run time on a used host: reserve them at boot with \
             hugepagesz=1G hugepages={pages} on the kernel command line (or hugetlb_cma=)"
        )
    } else {
        format!(
            "free memory, then: echo {pages} > /sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
            page_size / 1024
        )
    }
}

/// Waits for children whose stdin the caller has closed, killing those still
/// running after `grace`.
pub(crate) fn reap<'a>(children: impl IntoIterator<Item = &'a mut Child>, grace: Duration) {
    let deadline = Instant::now() + grace;
    for c in children {
        loop {
            match c.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}

/// The most seconds a timed run may take: a day.
const MAX_DURATION_SECONDS: f64 = 86_400.0;

/// Refuses a `--duration` that is not a number of seconds above 0 and at
/// most a day (`inf` and `1e308` ran no timed run at all and reported its
/// zeros; `nan` compared as no number).
pub fn check_duration(seconds: f64) -> anyhow::Result<()> {
    anyhow::ensure!(
        seconds > 0.0 && seconds <= MAX_DURATION_SECONDS,
        Usage(format!(
            "--duration {seconds} must be a number of seconds above 0 and at most \
             {MAX_DURATION_SECONDS} (a day)"
        ))
    );
    Ok(())
}

/// Refuses a `--block-size` that is not a power of two from 512 bytes to
/// 1 MiB.
pub fn check_block_size(bytes: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        bytes.is_power_of_two() && (512..=1 << 20).contains(&bytes),
        Usage(format!(
            "--block-size {bytes} must be a power of two from 512 bytes to 1 MiB"
        ))
    );
    Ok(())
}

/// Refuses the options of a run over a buffer cache (`bench oltp`, `bench
/// dmbc`) that do not make one: a [`check_duration`], a
/// [`check_block_size`], and a cache and data file that hold a block.
pub(crate) fn check_cache_run(
    seconds: f64,
    block: u64,
    cache: u64,
    data: u64,
) -> anyhow::Result<()> {
    check_duration(seconds)?;
    check_block_size(block)?;
    anyhow::ensure!(
        cache >= block && data >= block,
        Usage(format!(
            "--cache-size ({cache}) and --data-size ({data}) must hold at least one \
             {block}-byte block"
        ))
    );
    Ok(())
}

/// What one idle child process of a bench costs beyond what the children
/// share (the executable's pages): an idle `hugeshm` shows 1.3 MiB of
/// `Private_Dirty` and 80 KiB of page tables, plus its kernel stack;
/// rounded up.
const CHILD_BYTES: u64 = 2 << 20;

/// Refuses a bench that would start `n` processes where the kernel would
/// refuse some of them part way (`kernel.pid_max`, `kernel.threads-max`,
/// `RLIMIT_NPROC` for a user other than root) or where they would not fit
/// in the memory available (about 2 MiB each): an error with the numbers
/// and the fix, before anything is made. `what` names the option.
pub(crate) fn check_process_room(probe: &Probe, n: u64, what: &str) -> anyhow::Result<()> {
    let read = |rel: &str| -> Option<u64> {
        std::fs::read_to_string(probe.proc_path(rel))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    // loadavg's fourth field: runnable/existing scheduling entities, each
    // holding a pid.
    let tasks: u64 = std::fs::read_to_string(probe.proc_path("loadavg"))
        .ok()
        .and_then(|t| t.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok())
        .unwrap_or(0);
    for (sysctl, limit) in [
        ("kernel.pid_max", read("sys/kernel/pid_max")),
        ("kernel.threads-max", read("sys/kernel/threads-max")),
    ] {
        let Some(limit) = limit else { continue };
        let room = limit.saturating_sub(tasks);
        // Room for the bench's own threads and the host's meanwhile.
        let need = n + 64;
        anyhow::ensure!(
            need <= room,
            "{what} {n}: the kernel can start about {room} more processes here ({sysctl} = {limit}, \
             {tasks} tasks exist); pass {what} {} or less, or raise the limit: sysctl -w {sysctl}={}",
            room.saturating_sub(64),
            tasks + need
        );
    }
    if !rustix::process::geteuid().is_root() {
        if let Some(limit) = rustix::process::getrlimit(rustix::process::Resource::Nproc).current {
            anyhow::ensure!(
                n < limit,
                "{what} {n}: this user may run at most {limit} processes (RLIMIT_NPROC, ulimit -u); \
                 pass a smaller {what}, or raise it (ulimit -u, limits.conf's nproc)"
            );
        }
    }
    if let Some(avail) = mem_available(probe) {
        let most = avail / 10 * 9;
        anyhow::ensure!(
            n * CHILD_BYTES <= most,
            "{what} {n}: {n} processes take about {} (2 MiB each), more than 90% of the memory \
             available (MemAvailable {}); pass {what} {} or less",
            format_bytes(n * CHILD_BYTES),
            format_bytes(avail),
            most / CHILD_BYTES
        );
    }
    Ok(())
}

/// `MemAvailable` now, under the probe's `/proc`; `None` where it cannot
/// be read (the checks that use it are then skipped).
fn mem_available(probe: &Probe) -> Option<u64> {
    std::fs::read_to_string(probe.proc_path("meminfo"))
        .ok()
        .and_then(|t| hugeshm_parse::meminfo::parse(&t).ok())
        .and_then(|m| m.mem_available_bytes)
}

/// Makes this process (a bench's worker, started by the bench's main
/// thread) end with `SIGTERM` when the bench does: a bench killed with
/// SIGKILL cannot stop its workers, and a worker in the middle of a timed
/// run would hold the region, and so its pages, until the run ends. Its
/// watchdog (see [`crate::guard`]) removes the region once they let go.
/// A bench that died before this call is seen the usual way: the worker's
/// stdin ends.
pub fn die_with_parent() {
    // Best effort: without it the worker still ends with its work.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
}

/// Huge pages a bench adds to the host-wide pools for its run, given back
/// when it is dropped (whatever happened in between).
///
/// What is given back is what the bench added, taken off what the pool
/// holds then: a pool someone changed meanwhile (`hugeshm apply`, another
/// bench) keeps their change. Writing back the count from before, two
/// benches at once left the second one's pages in the pool for good, and
/// a bench beside `apply` undid the admin's new pool.
pub(crate) struct PoolTopUp<'a> {
    probe: &'a Probe,
    pools: SysfsPools<'a>,
    /// (page size, node (`None`: host-wide), pages added, the same
    /// registered for the interrupt handler).
    restore: Vec<(u64, Option<u32>, u64, Undo)>,
}

impl<'a> PoolTopUp<'a> {
    /// Nothing added yet.
    pub fn new(probe: &'a Probe) -> Self {
        PoolTopUp {
            probe,
            pools: SysfsPools::new(probe),
            restore: Vec::new(),
        }
    }

    /// Makes `pages` pages of `page_size` available (free − reserved),
    /// raising the pool when it holds fewer (root only).
    pub fn ensure(
        &mut self,
        host: &HostSnapshot,
        page_size: u64,
        pages: u64,
    ) -> anyhow::Result<()> {
        if host.pool(page_size).is_none() {
            return Ok(());
        }
        self.raise(page_size, None, pages)
    }

    /// Makes `pages` pages of `page_size` free on NUMA node `node`,
    /// raising that node's pool when it holds fewer (root only).
    pub fn ensure_on_node(
        &mut self,
        host: &HostSnapshot,
        page_size: u64,
        node: u32,
        pages: u64,
    ) -> anyhow::Result<()> {
        if !host
            .node_pools
            .iter()
            .any(|p| p.node == node && p.counters.page_size_bytes == page_size)
        {
            return Ok(());
        }
        self.raise(page_size, Some(node), pages)
    }

    /// Raises the pool by what it lacks for `pages` available, read now
    /// (not from the run's first snapshot: another bench may have raised
    /// it since), refusing growth past 90% of `MemAvailable` before any
    /// write: the kernel would take that memory from the rest of the host
    /// (reclaiming its caches) and still fall short.
    fn raise(&mut self, page_size: u64, node: Option<u32>, pages: u64) -> anyhow::Result<()> {
        let nr = self.pools.nr(page_size, node)?;
        let available = self
            .pools
            .free(page_size, node)?
            .saturating_sub(self.pools.resv(page_size, node)?);
        if available >= pages {
            return Ok(());
        }
        let on = node.map(|n| format!(" on node {n}")).unwrap_or_default();
        let grow = pages - available;
        let target = nr + grow;
        if let Some(avail) = mem_available(self.probe) {
            let most = avail / 10 * 9;
            anyhow::ensure!(
                grow.saturating_mul(page_size) <= most,
                "reserving {pages} {} pages{on} for the bench needs {} more in the pool \
                 ({grow} pages), more than 90% of the memory available (MemAvailable {}); \
                 pass a smaller size (at most {} of these pages can be added)",
                format_bytes(page_size),
                format_bytes(grow.saturating_mul(page_size)),
                format_bytes(avail),
                most / page_size
            );
        }
        // Registered before the write, so an interrupt in between still
        // gives it back.
        let path: std::path::PathBuf = self.pools.describe(page_size, node).into();
        let undo = crate::guard::undo(Taken::Pool {
            path: path.clone(),
            pages: nr,
            added: None,
        });
        self.pools.set_nr(page_size, node, target).with_context(|| {
            format!(
                "reserving {pages} {} pages{on} for the bench (run as root, or --no-reserve with a pool that holds them)",
                format_bytes(page_size)
            )
        })?;
        // Until the kernel says how many it granted, the pool is set back
        // to `nr` if the run is cut short.
        let got = self.pools.nr(page_size, node);
        let added = got.as_ref().map_or(target - nr, |g| g.saturating_sub(nr));
        undo.update(Taken::Pool {
            path,
            pages: nr,
            added: Some(added),
        });
        self.restore.push((page_size, node, added, undo));
        let got = got?;
        if got < target {
            anyhow::bail!(
                "the kernel granted {got} of {target} {} pages{on}: not enough memory for the bench",
                format_bytes(page_size)
            );
        }
        Ok(())
    }
}

impl Drop for PoolTopUp<'_> {
    fn drop(&mut self) {
        // Last raised, first restored; none that an interrupt's handler
        // has taken to restore itself (twice would take others' pages).
        while let Some((size, node, added, undo)) = self.restore.pop() {
            let Some(_claim) = undo.claim() else {
                continue;
            };
            let back = self
                .pools
                .nr(size, node)
                .and_then(|now| self.pools.set_nr(size, node, now.saturating_sub(added)));
            if let Err(e) = back {
                let on = node.map(|n| format!(" of node {n}")).unwrap_or_default();
                log::warn!(
                    "could not take the {added} pages this bench added off the {} pool{on}: {e}",
                    format_bytes(size)
                );
            }
        }
    }
}

/// A bench's data file, `data` in a private directory of its own (mode
/// 0700, a random name, made in `--dir`, which is often `/var/tmp`): no
/// other user can plant a symlink or a file where it goes. Created with
/// `O_EXCL`; the directory is removed when dropped, by the interrupt
/// handler on Ctrl-C, or by the watchdog if the run is killed.
pub(crate) struct DataFile {
    /// The file (not created yet).
    pub path: std::path::PathBuf,
    dir: std::path::PathBuf,
    on_interrupt: Option<Undo>,
}

impl DataFile {
    /// Makes the private directory `PREFIX…` in `parent` (refused where
    /// `parent` or a directory above it is another user's, or one others
    /// can write that is not sticky).
    pub fn new(parent: &std::path::Path, prefix: &str) -> anyhow::Result<Self> {
        use anyhow::Context;
        let dir = hugeshm_sys::DirHandle::private_temp(parent, prefix, hugeshm_sys::sudo_uid())
            .with_context(|| {
                format!(
                    "making a private directory for the data file in {}",
                    parent.display()
                )
            })?;
        let dir = dir.path().to_owned();
        let undo = crate::guard::undo(Taken::PrivateDir(dir.clone()));
        Ok(DataFile {
            path: dir.join("data"),
            dir,
            on_interrupt: Some(undo),
        })
    }
}

impl Drop for DataFile {
    fn drop(&mut self) {
        // Not when an interrupt's handler has taken it to delete itself
        // (`on_interrupt` is only ever taken here).
        let Some(_claim) = self.on_interrupt.take().and_then(Undo::claim) else {
            return;
        };
        if let Err(e) = hugeshm_sys::remove_private_dir(&self.dir) {
            log::warn!("{e}");
        }
    }
}

/// Creates the named region a bench's child processes attach (policy
/// `only`), first telling the interrupt handler to remove it on Ctrl-C;
/// the returned guard keeps that until dropped.
pub(crate) fn bench_region(
    name: &str,
    size: u64,
    backend: hugeshm_region::Backend,
    page: hugeshm_region::PageSize,
) -> anyhow::Result<(hugeshm_region::Region, Undo)> {
    let undo = crate::guard::undo(Taken::Region {
        name: name.to_owned(),
        backend,
    });
    let (region, _) = hugeshm_region::RegionBuilder::new(size)
        .backend(backend)
        .page_size(page)
        .policy(hugeshm_region::Policy::Only)
        .name(name.to_owned())
        .create()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((region, undo))
}

#[cfg(test)]
mod tests {
    use super::{fit, slope};

    #[test]
    fn slope_is_the_least_squares_line() {
        assert_eq!(slope(&[(1.0, 3.0), (2.0, 5.0), (3.0, 7.0)]), Some(2.0));
        assert_eq!(slope(&[(1.0, 3.0)]), None);
        assert_eq!(slope(&[(1.0, 3.0), (1.0, 4.0)]), None);
        assert_eq!(fit(&[(1.0, 3.0), (2.0, 5.0), (3.0, 7.0)]), Some((2.0, 1.0)));
    }
}
