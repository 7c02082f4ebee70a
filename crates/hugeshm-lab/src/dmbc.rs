//! `hugeshm bench dmbc`: the directly mapped buffer cache of the fifth field
//! report. The same OLTP-like workload runs over the shared buffer cache
//! (hugeshm-cache) in its classic mode (every block copied in with `pread`)
//! and in its direct mode (blocks in no buffer read in place through a
//! shared mapping of the data file); the report counts logical reads,
//! physical reads (blocks copied in), bytes copied and transactions, per
//! second and per transaction, like the report's table.
//!
//! The data file goes to `--data-dir`: on a file system mounted `-o dax` the
//! direct mode reads persistent memory in place; elsewhere its mapping is
//! the page cache, and the report says so ([`ModeRun::mapping`]).
//!
//! [`measure`] builds the [`Report`] (what `hugeshm bench dmbc` prints
//! and `hugeshm lab` compares).

use crate::common::DataFile as TempFile;
use crate::oltp::workload::{Dist, Picker, Rng};
use crate::region_failed::region_failed;
use crate::{Steps, Usage};
use anyhow::Context;
use hugeshm_cache::{create_data_file, Cache, Layout, Mode, Stats};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The options a report was measured with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Options {
    /// Directory of the data file.
    pub dir: PathBuf,
    /// Bytes of the data file.
    pub data_size_bytes: u64,
    /// Bytes of buffers.
    pub cache_size_bytes: u64,
    /// Block size.
    pub block_size: u64,
    /// Block accesses per transaction.
    pub blocks_per_tx: u32,
    /// Percentage of accesses that write.
    pub write_pct: u32,
    /// Block choice.
    pub dist: Dist,
    /// Seconds of each timed run.
    pub duration_seconds: f64,
    /// Processes working on the cache at once.
    #[serde(default = "one")]
    pub workers: u32,
}

fn one() -> u32 {
    1
}

/// Where the data file lives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataFile {
    /// Its path (removed after the run).
    pub path: PathBuf,
    /// Mount point of its file system.
    pub mount: Option<String>,
    /// File system type.
    pub fs_type: Option<String>,
    /// The mount has `dax` / `dax=always` (from the mount table).
    pub mount_dax: bool,
    /// The kernel serves the file by DAX (`statx` `STATX_ATTR_DAX`);
    /// `None` where the kernel does not say.
    pub file_dax: Option<bool>,
}

/// One mode's timed run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeRun {
    /// Classic or direct.
    pub mode: Mode,
    /// What the direct mode's mapping is: `dax` (persistent memory in
    /// place) or `page cache`; `None` for the classic mode.
    pub mapping: Option<String>,
    /// Buffers in the cache.
    pub buffers: u64,
    /// Seconds of the timed run.
    pub seconds: f64,
    /// Transactions.
    pub transactions: u64,
    /// Transactions per second.
    pub tps: f64,
    /// Block accesses (reads and updates), wherever the block was found.
    pub logical_reads: u64,
    /// Blocks copied into a buffer from the data file.
    pub physical_reads: u64,
    /// Blocks read in place through the mapping (direct mode).
    pub in_place_reads: u64,
    /// Bytes copied into buffers by the physical reads.
    pub bytes_copied: u64,
    /// Bytes copied by accesses that only read (no update): zero in the
    /// direct mode unless the block was already in a buffer.
    pub bytes_copied_by_reads: u64,
    /// Dirty blocks written back.
    pub write_backs: u64,
    /// Logical reads per second.
    pub logical_per_second: f64,
    /// Physical reads per second.
    pub physical_per_second: f64,
    /// Logical reads per transaction.
    pub logical_per_tx: f64,
    /// Physical reads per transaction.
    pub physical_per_tx: f64,
    /// The cache's counters of the run.
    pub stats: Stats,
}

/// The field report's AWR figures (per second), for comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FieldFigures {
    /// Logical reads per second, PMEM filestore (directly mapped).
    pub direct_logical: f64,
    /// Logical reads per second, XFS on NVDIMM (classic).
    pub classic_logical: f64,
    /// Physical reads per second, directly mapped.
    pub direct_physical: f64,
    /// Physical reads per second, classic.
    pub classic_physical: f64,
    /// Transactions per second, directly mapped.
    pub direct_tps: f64,
    /// Transactions per second, classic.
    pub classic_tps: f64,
}

/// Seed 004 (Oracle 21c, SLOB, NVDIMM emulated under KVM).
pub const FIELD: FieldFigures = FieldFigures {
    direct_logical: 39_777.5,
    classic_logical: 36_529.7,
    direct_physical: 5_211.5,
    classic_physical: 30_594.4,
    direct_tps: 215.2,
    classic_tps: 196.8,
};

/// What `bench dmbc` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The options.
    pub options: Options,
    /// The data file.
    pub data: DataFile,
    /// Whether the direct mode read persistent memory in place (the file is
    /// served by DAX); false: it read the page cache through a mapping.
    pub dax: bool,
    /// A sentence on what was measured (DAX or not).
    pub note: String,
    /// The classic mode.
    pub classic: ModeRun,
    /// The direct mode.
    pub direct: ModeRun,
    /// classic physical reads per second / direct's (`None` when direct
    /// did none).
    pub physical_ratio: Option<f64>,
    /// direct tps / classic tps.
    pub tps_ratio: Option<f64>,
    /// The field report's figures.
    pub field: FieldFigures,
}

/// Counters of one run beside the cache's.
#[derive(Default, Serialize, Deserialize)]
struct Loop {
    transactions: u64,
    read_copies: u64,
    checksum: u64,
}

/// Transactions over `cache` until `duration` has passed.
fn drive(
    cache: &Cache,
    o: &Options,
    picker: &Picker,
    seed: u64,
    duration: Duration,
) -> anyhow::Result<(Loop, f64)> {
    let mut rng = Rng::new(seed);
    let rows = (o.block_size / 64).max(1);
    let mut l = Loop::default();
    let start = Instant::now();
    let deadline = start + duration;
    while Instant::now() < deadline {
        for _ in 0..o.blocks_per_tx.max(1) {
            let blk = picker.pick(&mut rng);
            let row = rng.below(rows) as usize * 8;
            if rng.below(100) < u64::from(o.write_pct) {
                let g = cache.write(blk)?;
                let w = &g.words()?[row..row + 8];
                let v = w[0].load(Ordering::Relaxed).wrapping_add(1);
                for (i, x) in w.iter().enumerate() {
                    x.store(v ^ i as u64, Ordering::Relaxed);
                }
            } else {
                let copied = cache.stats().bytes_copied;
                let g = cache.read(blk)?;
                for x in &g.words()?[row..row + 8] {
                    l.checksum = l.checksum.wrapping_add(x.load(Ordering::Relaxed));
                }
                l.read_copies += cache.stats().bytes_copied - copied;
            }
        }
        l.transactions += 1;
    }
    Ok((l, start.elapsed().as_secs_f64()))
}

/// One process's timed run.
#[derive(Serialize, Deserialize)]
struct ProcRun {
    counters: Loop,
    seconds: f64,
    stats: Stats,
}

/// A warm-up run, then a timed one with fresh counters (process `i`'s
/// seeds). Each ends with a checkpoint, off the clock: the warm-up's
/// updates reach the file before the counters start, and the timed run's
/// are all counted as write-backs (without it, a run too short to evict
/// counted none: how many it wrote back depended on the host's load).
fn warm_then_timed(
    cache: &Cache,
    o: &Options,
    picker: &Picker,
    i: u64,
    d: Duration,
) -> anyhow::Result<ProcRun> {
    drive(cache, o, picker, 1 + 2 * i, d)?;
    cache.checkpoint()?;
    cache.reset_stats();
    let (counters, seconds) = drive(cache, o, picker, 2 + 2 * i, d)?;
    cache.checkpoint()?;
    Ok(ProcRun {
        counters,
        seconds,
        stats: cache.stats(),
    })
}

/// `o.workers` forked processes run [`warm_then_timed`] on the one cache
/// at once, each sending its figures back through a pipe; their sums, and
/// the longest timed run.
fn in_workers(
    cache: &Cache,
    o: &Options,
    picker: &Picker,
    d: Duration,
) -> anyhow::Result<(Loop, f64, Stats)> {
    use std::io::{Read, Write};
    let mut kids = Vec::new();
    let reap = |kids: &mut Vec<(u32, std::fs::File)>| {
        for (pid, _) in kids.drain(..) {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            let _ = hugeshm_sys::wait_child(pid);
        }
    };
    for i in 0..o.workers {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let w = &w;
        // fork needs one thread: the interrupt handler's waits.
        let forked = crate::guard::paused(|| {
            hugeshm_sys::fork_child(move || {
                crate::common::die_with_parent();
                let Ok(run) = warm_then_timed(cache, o, picker, u64::from(i), d) else {
                    return 1;
                };
                let mut f = std::fs::File::from(w.try_clone().expect("dup"));
                match serde_json::to_vec(&run).map(|b| f.write_all(&b)) {
                    Ok(Ok(())) => 0,
                    _ => 1,
                }
            })
        });
        match forked {
            Ok(pid) => kids.push((pid, std::fs::File::from(r))),
            Err(e) => {
                reap(&mut kids);
                anyhow::bail!("forking worker {i} of {}: {e}", o.workers);
            }
        }
    }
    let (mut sum, mut longest, mut stats) = (Loop::default(), 0.0f64, Stats::default());
    let mut failed = Vec::new();
    for (pid, mut f) in std::mem::take(&mut kids) {
        let mut text = Vec::new();
        let read = f.read_to_end(&mut text);
        let code = hugeshm_sys::wait_child(pid).unwrap_or(-1);
        match (read, serde_json::from_slice::<ProcRun>(&text)) {
            (Ok(_), Ok(run)) if code == 0 => {
                sum.transactions += run.counters.transactions;
                sum.read_copies += run.counters.read_copies;
                sum.checksum = sum.checksum.wrapping_add(run.counters.checksum);
                longest = longest.max(run.seconds);
                stats.add(&run.stats);
            }
            _ => failed.push(format!("pid {pid} exit {code}")),
        }
    }
    anyhow::ensure!(
        failed.is_empty(),
        "{} of {} workers failed ({})",
        failed.len(),
        o.workers,
        failed.join(", ")
    );
    Ok((sum, longest, stats))
}

/// One mode: a cache in a fresh anonymous region of base pages over the
/// data file, a warm-up run, a timed run, a checkpoint.
fn measure_mode(o: &Options, data: &Path, mode: Mode) -> anyhow::Result<(ModeRun, Option<bool>)> {
    let bs = o.block_size as usize;
    let layout = Layout::new(bs, (o.cache_size_bytes / o.block_size) as usize);
    let region_bytes = (layout.total as u64 + 4096).div_ceil(4096) * 4096;
    let (region, _) = RegionBuilder::new(region_bytes)
        .backend(Backend::Anon)
        .page_size(PageSize::Base)
        .policy(Policy::Only)
        .create()
        .map_err(region_failed)?;
    let cache = Cache::create_with(region, data, bs, Some(layout.buffers), mode)?;
    let picker = Picker::new(o.dist, cache.data_blocks());
    let d = Duration::from_secs_f64(o.duration_seconds);
    let (l, seconds, stats) = if o.workers <= 1 {
        let run = warm_then_timed(&cache, o, &picker, 0, d)?;
        (run.counters, run.seconds, run.stats)
    } else {
        in_workers(&cache, o, &picker, d)?
    };
    cache.checkpoint()?;
    let dax = cache.data_is_dax();
    let per = |n: u64, by: f64| if by > 0.0 { n as f64 / by } else { 0.0 };
    let run = ModeRun {
        mode,
        mapping: (mode == Mode::Direct).then(|| {
            if dax == Some(true) {
                "dax".to_owned()
            } else {
                "page cache".to_owned()
            }
        }),
        buffers: layout.buffers as u64,
        seconds,
        transactions: l.transactions,
        tps: per(l.transactions, seconds),
        logical_reads: stats.logical_reads(),
        physical_reads: stats.physical_reads(),
        in_place_reads: stats.direct_reads,
        bytes_copied: stats.bytes_copied,
        bytes_copied_by_reads: l.read_copies,
        write_backs: stats.writes,
        logical_per_second: per(stats.logical_reads(), seconds),
        physical_per_second: per(stats.physical_reads(), seconds),
        logical_per_tx: per(stats.logical_reads(), l.transactions as f64),
        physical_per_tx: per(stats.physical_reads(), l.transactions as f64),
        stats,
    };
    std::hint::black_box(l.checksum);
    cache.into_region().destroy().map_err(region_failed)?;
    Ok((run, dax))
}

/// How many steps [`measure`] takes: the data file, then each mode.
pub const STEPS: u64 = 3;

/// Runs both modes over one data file in `o.dir` and returns the report
/// (the data file removed whatever happens); the data file and each mode
/// are a step of `steps` ([`STEPS`] of them).
pub fn measure(roots: &Roots, o: &Options, steps: &Steps) -> anyhow::Result<Report> {
    crate::common::check_cache_run(
        o.duration_seconds,
        o.block_size,
        o.cache_size_bytes,
        o.data_size_bytes,
    )?;
    anyhow::ensure!(
        (1..=1024).contains(&o.workers),
        Usage(format!("--workers {} must be from 1 to 1024", o.workers))
    );
    if o.workers > 1 {
        crate::common::check_process_room(
            &Probe::new(roots.clone()),
            o.workers.into(),
            "--workers",
        )?;
    }
    anyhow::ensure!(
        o.write_pct <= 100,
        Usage(format!("--write-pct {} is above 100", o.write_pct))
    );
    let data_file = TempFile::new(&o.dir, "hugeshm-dmbc-")?;
    let path = data_file.path.clone();
    let blocks = o.data_size_bytes / o.block_size;
    steps.begin(&format!(
        "writing a {} data file",
        format_bytes(blocks * o.block_size)
    ));
    create_data_file(&path, blocks, o.block_size as usize, |b, buf| {
        buf[..8].copy_from_slice(&b.to_le_bytes())
    })
    .with_context(|| {
        format!(
            "writing the {} data file in {} (make --data-size smaller or free space there)",
            format_bytes(blocks * o.block_size),
            o.dir.display()
        )
    })?;
    let mounts = Probe::new(roots.clone()).mounts().unwrap_or_default();
    let canon = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    let m = hugeshm_parse::mounts::mount_of(&mounts, &canon);
    steps.begin("classic mode: warm-up and timed run");
    let (classic, _) = measure_mode(o, &path, Mode::Classic)?;
    steps.begin("direct mode: warm-up and timed run");
    let (direct, file_dax) = measure_mode(o, &path, Mode::Direct)?;
    let data = DataFile {
        path: path.clone(),
        mount: m.map(|m| m.target.clone()),
        fs_type: m.map(|m| m.fstype.clone()),
        mount_dax: m.is_some_and(|m| m.is_dax()),
        file_dax,
    };
    let dax = file_dax == Some(true);
    let fs = format!(
        "{} on {}",
        data.fs_type.as_deref().unwrap_or("?"),
        data.mount.as_deref().unwrap_or("?")
    );
    let note = if dax {
        format!("the data file is on DAX ({fs}): the direct mode read persistent memory in place")
    } else {
        format!(
            "the data file is not on DAX ({fs}): the direct mode read the page cache through a \
             shared mapping, not persistent memory (give --data-dir a file system mounted -o dax)"
        )
    };
    Ok(Report {
        options: o.clone(),
        physical_ratio: (direct.physical_per_second > 0.0)
            .then(|| classic.physical_per_second / direct.physical_per_second),
        tps_ratio: (classic.tps > 0.0).then(|| direct.tps / classic.tps),
        data,
        dax,
        note,
        classic,
        direct,
        field: FIELD,
    })
}

/// What a `hugeshm bench dax-child` does (the guest's power-off test).
#[derive(Debug, Clone, Copy)]
pub enum DaxChildOp<'a> {
    /// Write the text, then persist it.
    Write(&'a str),
    /// Read this many bytes.
    Read(usize),
}

/// The line a `hugeshm bench dax-child` prints: the dax region `name`
/// attached over `probe`; at `offset` the text written and persisted
/// ("wrote N bytes at OFFSET, persisted with HOW"), or the bytes read there
/// (what the parent test wrote, compared byte for byte); the region closed.
pub fn dax_child_line(
    probe: Probe,
    name: &str,
    offset: usize,
    op: DaxChildOp<'_>,
) -> Result<String, hugeshm_region::RegionError> {
    let mut region = hugeshm_region::Locator::new(name, Backend::Dax)
        .probe(probe)
        .attach()?;
    let line = match op {
        DaxChildOp::Write(text) => {
            region.write_at(offset, text.as_bytes())?;
            let how = region.persist(offset, text.len())?;
            format!(
                "wrote {} bytes at {offset}, persisted with {}",
                text.len(),
                how.as_str()
            )
        }
        DaxChildOp::Read(len) => {
            let mut buf = vec![0u8; len];
            region.read_at(offset, &mut buf)?;
            String::from_utf8_lossy(&buf).into_owned()
        }
    };
    region.close()?;
    Ok(line)
}
