//! `hugeshm bench scan`: how long the `segments` scan takes on a host with
//! many processes attached to one System V segment, against reading every
//! process's maps text once and stepping over every process's mappings by
//! ioctl once, per process count.
//!
//! [`measure`] creates the segment, starts the processes (each the hidden
//! child [`attach_child`], `hugeshm bench attach-child SHMID`) and times the
//! scans; the [`Report`] is what `--json` prints.

use crate::common::{check_process_room, reap, slope};
use crate::Steps;
use hugeshm_doctor::segments::SegmentKind;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{MapsRead, MapsSource, Probe};
use hugeshm_sys as sys;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What one run measures (the CLI's `bench scan` options).
#[derive(Debug, Clone)]
pub struct Options {
    /// Process counts to attach (any order; each measured once).
    pub procs: Vec<u32>,
    /// Segment size.
    pub size: u64,
    /// Page size of the segment: 4096, or a huge page size the pool can serve.
    pub page_size: u64,
    /// Timed scans per count (after one warm-up scan; at least one).
    pub runs: u32,
}

/// The process counts of `o`: ascending, each once.
fn counts(o: &Options) -> Vec<u32> {
    let mut counts = o.procs.clone();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// How many steps [`measure`] takes: per process count, starting the
/// processes and each timed scan.
pub fn planned_steps(o: &Options) -> u64 {
    counts(o).len() as u64 * (1 + u64::from(o.runs.max(1)))
}

/// One process count of `bench scan`: the `segments` scan (as it reads
/// maps by default, and by the text), the plain read of every process's
/// maps text and the ioctl walk over every process's mappings, timed in
/// turn in the same run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScanRow {
    /// Processes attached to the segment.
    pub procs: u32,
    /// Processes the scan read.
    pub processes_scanned: u64,
    /// Processes the scan found attached to the bench's segment.
    pub attached_found: usize,
    /// The segment's page size as the scan found it.
    pub page_size_found: Option<u64>,
    /// How the scan read maps: `query` (`PROCMAP_QUERY`) or `text`.
    pub maps_read: MapsRead,
    /// Each timed scan.
    pub runs_ms: Vec<f64>,
    /// The fastest.
    pub min_ms: f64,
    /// The median.
    pub median_ms: f64,
    /// The same scan reading the maps text (`HUGESHM_MAPS=text`).
    pub text_scan_runs_ms: Vec<f64>,
    /// Its median.
    pub text_scan_median_ms: f64,
    /// Whether both scans found the bench's segment the same (attached
    /// processes, their names and page tables, page size).
    pub text_scan_same: bool,
    /// Reading every process's `maps` once, parsing nothing.
    pub maps_runs_ms: Vec<f64>,
    /// Its fastest.
    pub maps_min_ms: f64,
    /// Its median.
    pub maps_median_ms: f64,
    /// Bytes of `maps` read in one pass.
    pub maps_bytes: u64,
    /// Stepping over every process's mappings of files once by ioctl,
    /// naming none (where the kernel has `PROCMAP_QUERY`).
    pub walk_runs_ms: Vec<f64>,
    /// Its median.
    pub walk_median_ms: Option<f64>,
    /// Mappings of files seen in one walk.
    pub walk_vmas: u64,
    /// `median_ms / maps_median_ms`.
    pub vs_maps: f64,
    /// `median_ms / text_scan_median_ms`.
    pub vs_text_scan: f64,
    /// CPU time of the process (all threads), median per step: the work,
    /// whatever share of the CPUs other processes left the bench.
    pub cpu_ms: StepCpu,
}

/// Median CPU milliseconds of each step of one `bench scan` row.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StepCpu {
    /// The scan.
    pub scan: f64,
    /// The scan reading the maps text.
    pub text_scan: f64,
    /// Reading every process's maps text.
    pub maps_read: f64,
    /// The ioctl walk (where the kernel has `PROCMAP_QUERY`).
    pub walk: Option<f64>,
}

/// What `bench scan` measured (`--json` prints exactly this): the
/// top-level figures are those of the largest process count; `sweep` has
/// every count.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The largest process count.
    pub procs: u32,
    /// Segment size.
    pub size_bytes: u64,
    /// Segment page size.
    pub page_size_bytes: u64,
    /// Processes the last scan read.
    pub processes_scanned: u64,
    /// Processes it found attached to the segment.
    pub attached_found: usize,
    /// The segment's page size as it found it.
    pub page_size_found: Option<u64>,
    /// Starting and attaching all the processes.
    pub spawn_seconds: f64,
    /// Each timed scan at the largest count.
    pub runs_ms: Vec<f64>,
    /// The fastest of them.
    pub min_ms: f64,
    /// Their median.
    pub median_ms: f64,
    /// The median plain maps read.
    pub maps_median_ms: f64,
    /// `median_ms / maps_median_ms`.
    pub vs_maps: f64,
    /// How the scan read maps.
    pub maps_read: MapsRead,
    /// The median scan reading the maps text.
    pub text_scan_median_ms: f64,
    /// The median ioctl walk.
    pub walk_median_ms: Option<f64>,
    /// Every process count, ascending.
    pub sweep: Vec<ScanRow>,
    /// Least-squares slope of the median scan time, ms per 1,000 processes
    /// (with two or more counts).
    pub slope_ms_per_1000: Option<f64>,
    /// The same for the plain maps read.
    pub maps_slope_ms_per_1000: Option<f64>,
}

/// The fastest and the median of `v` (0 for none).
fn min_median(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|x, y| x.total_cmp(y));
    (
        s.first().copied().unwrap_or(0.0),
        s.get(s.len() / 2).copied().unwrap_or(0.0),
    )
}

/// The hidden child that `measure` starts (`hugeshm bench attach-child
/// SHMID`): attaches the segment and holds it until `stdin` ends (the
/// bench closes the pipe, or dies).
pub fn attach_child(shmid: i32, mut stdin: impl Read) -> anyhow::Result<()> {
    // Attached, not touched: the scan reads maps, which do not depend on
    // residency, and 5,000 processes faulting a 64 MiB segment page by
    // page would take minutes (page tables are `bench pagetables`' part).
    let att = sys::shm_attach(shmid)?;
    // Block until the parent closes the pipe (or dies).
    let mut buf = [0u8; 1];
    let _ = stdin.read(&mut buf);
    att.release()?;
    Ok(())
}

/// Children and the segment, cleaned up in Drop whatever happens.
struct Fleet {
    children: Vec<Child>,
    writer: Option<std::os::fd::OwnedFd>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.writer.take();
        reap(&mut self.children, Duration::from_secs(20));
    }
}

/// Creates the segment (removed at once: it goes with its last
/// attachment), starts and attaches the processes of each count in
/// ascending order (a step each), times the scans at each (`o.runs` steps
/// each), and reaps every child whatever happens. `probe` is the one the
/// `segments` command scans with.
pub fn measure(probe: &Probe, a: &Options, steps: &Steps) -> anyhow::Result<Report> {
    let most = a.procs.iter().copied().max().unwrap_or(0);
    check_process_room(probe, most.into(), "--procs")?;
    let huge = (a.page_size > 4096).then_some(a.page_size);
    let shmid = sys::shm_get(0, a.size, sys::ShmFlags::create_new(huge)).map_err(|e| {
        anyhow::anyhow!(
            "{e}{}",
            if huge.is_some() {
                format!(
                    "; the bench needs {} free {} pages (try --page-size 4k)",
                    a.size.div_ceil(a.page_size),
                    format_bytes(a.page_size)
                )
            } else {
                String::new()
            }
        )
    })?;
    // Parent attachment keeps it alive; IPC_RMID right away so nothing leaks
    // even if this process dies (Linux still lets children attach by id).
    let parent = sys::shm_attach(shmid);
    let rm = sys::shm_remove(shmid);
    let parent = parent?;
    rm?;
    parent.touch();

    let exe = std::env::current_exe()?;
    // Close-on-exec: a child holding the write end never sees the end of its
    // stdin, and would only go when killed after the grace period.
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let mut fleet = Fleet {
        children: Vec::new(),
        writer: Some(writer),
    };
    let counts = counts(a);
    anyhow::ensure!(!counts.is_empty(), "--procs needs at least one count");
    let mut sweep = Vec::new();
    let mut spawn_seconds = 0.0;
    for &n in &counts {
        steps.begin(&format!("starting and attaching {n} processes"));
        let t0 = Instant::now();
        while fleet.children.len() < n as usize {
            let i = fleet.children.len();
            let child = Command::new(&exe)
                .args(["bench", "attach-child", &shmid.to_string()])
                .stdin(Stdio::from(reader.try_clone()?))
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| anyhow::anyhow!("spawning child {i} of {n}: {e}"))?;
            fleet.children.push(child);
        }
        wait_attached(shmid, n, &mut fleet)?;
        spawn_seconds += t0.elapsed().as_secs_f64();
        sweep.push(scan_once(probe, a, n, shmid, steps)?);
    }
    drop(reader);
    drop(fleet);
    parent.release()?;
    let last = sweep.last().expect("at least one count").clone();
    let pts = |f: fn(&ScanRow) -> f64| -> Vec<(f64, f64)> {
        sweep
            .iter()
            .map(|r| (f64::from(r.procs) / 1000.0, f(r)))
            .collect()
    };
    Ok(Report {
        procs: last.procs,
        size_bytes: a.size,
        page_size_bytes: a.page_size,
        processes_scanned: last.processes_scanned,
        attached_found: last.attached_found,
        page_size_found: last.page_size_found,
        spawn_seconds,
        runs_ms: last.runs_ms.clone(),
        min_ms: last.min_ms,
        median_ms: last.median_ms,
        maps_median_ms: last.maps_median_ms,
        vs_maps: last.vs_maps,
        maps_read: last.maps_read,
        text_scan_median_ms: last.text_scan_median_ms,
        walk_median_ms: last.walk_median_ms,
        slope_ms_per_1000: slope(&pts(|r| r.median_ms)),
        maps_slope_ms_per_1000: slope(&pts(|r| r.maps_median_ms)),
        sweep,
    })
}

/// Waits until `n` children (and the parent) are attached to `shmid`.
fn wait_attached(shmid: i32, n: u32, fleet: &mut Fleet) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = sys::shm_stat(shmid)?;
        if st.nattch > u64::from(n) {
            return Ok(());
        }
        if let Some(dead) = fleet
            .children
            .iter_mut()
            .find_map(|c| c.try_wait().ok().flatten())
        {
            anyhow::bail!(
                "a child exited before attaching ({dead}); {} of {n} attached",
                st.nattch.saturating_sub(1),
            );
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "only {} of {n} children attached after 120 s",
                st.nattch.saturating_sub(1),
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the scan by ioctl and the scan by text found the segment the
/// same: what each read from the maps (its processes, kind, page size,
/// size, path), not what changes between two scans taken moments apart
/// (resident bytes of children still faulting, their page tables).
fn same_segment(
    a: Option<&hugeshm_doctor::segments::Segment>,
    b: Option<&hugeshm_doctor::segments::Segment>,
) -> bool {
    let key = |s: &hugeshm_doctor::segments::Segment| {
        let mut pids = s.attached_pids.clone();
        pids.sort_unstable();
        (
            s.kind,
            s.id,
            s.path.clone(),
            s.size_bytes,
            s.page_size_bytes,
            pids,
        )
    };
    a.map(key) == b.map(key)
}

/// One warm-up of each, then `a.runs` rounds of: the plain read of every
/// process's maps text, the ioctl walk, the scan, the scan by text.
fn scan_once(
    probe: &Probe,
    a: &Options,
    n: u32,
    shmid: i32,
    steps: &Steps,
) -> anyhow::Result<ScanRow> {
    let how = probe.maps_read();
    let text_probe = probe.clone().with_maps(MapsSource::Text);
    let (mut runs, mut text_runs, mut maps_runs, mut walk_runs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut maps_bytes, mut walk_vmas) = (0, 0);
    // The scan timed, not its findings: no regions looked up.
    let kept = hugeshm_doctor::segments::KeptRegions::default();
    let mut last = hugeshm_doctor::segments::build(probe, &kept);
    let mut last_text = hugeshm_doctor::segments::build(&text_probe, &kept);
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let cpu = || sys::process_cpu_seconds().map(|s| s * 1000.0);
    let mut cpu_runs: [Vec<f64>; 4] = Default::default();
    for r in 0..a.runs.max(1) {
        steps.begin(&format!("{n} processes, scan {}", r + 1));
        let pids = probe.processes().map(|l| l.pids).unwrap_or_default();
        let (t, c) = (Instant::now(), cpu()?);
        (_, maps_bytes) = probe.read_every_maps(&pids);
        maps_runs.push(ms(t));
        cpu_runs[0].push(cpu()? - c);
        if how == MapsRead::Query {
            let (t, c) = (Instant::now(), cpu()?);
            (_, walk_vmas) = probe.walk_every_maps(&pids);
            walk_runs.push(ms(t));
            cpu_runs[1].push(cpu()? - c);
        }
        let (t, c) = (Instant::now(), cpu()?);
        last = hugeshm_doctor::segments::build(probe, &kept);
        runs.push(ms(t));
        cpu_runs[2].push(cpu()? - c);
        let (t, c) = (Instant::now(), cpu()?);
        last_text = hugeshm_doctor::segments::build(&text_probe, &kept);
        text_runs.push(ms(t));
        cpu_runs[3].push(cpu()? - c);
    }
    let cpu_ms = StepCpu {
        maps_read: min_median(&cpu_runs[0]).1,
        walk: (!cpu_runs[1].is_empty()).then(|| min_median(&cpu_runs[1]).1),
        scan: min_median(&cpu_runs[2]).1,
        text_scan: min_median(&cpu_runs[3]).1,
    };
    let ours = |r: &hugeshm_doctor::segments::SegmentsReport| {
        r.segments
            .iter()
            .find(|s| s.kind == SegmentKind::Sysv && s.id == Some(shmid as u64))
            .cloned()
    };
    let seg = ours(&last);
    let (min_ms, median_ms) = min_median(&runs);
    let (_, text_scan_median_ms) = min_median(&text_runs);
    let (maps_min_ms, maps_median_ms) = min_median(&maps_runs);
    let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { 0.0 };
    Ok(ScanRow {
        procs: n,
        processes_scanned: last.processes_scanned,
        attached_found: seg.as_ref().map(|s| s.attached_pids.len()).unwrap_or(0),
        page_size_found: seg.as_ref().and_then(|s| s.page_size_bytes),
        maps_read: how,
        text_scan_same: same_segment(seg.as_ref(), ours(&last_text).as_ref()),
        runs_ms: runs,
        min_ms,
        median_ms,
        text_scan_runs_ms: text_runs,
        text_scan_median_ms,
        maps_runs_ms: maps_runs,
        maps_min_ms,
        maps_median_ms,
        maps_bytes,
        walk_median_ms: (!walk_runs.is_empty()).then(|| min_median(&walk_runs).1),
        walk_runs_ms: walk_runs,
        walk_vmas,
        vs_maps: ratio(median_ms, maps_median_ms),
        vs_text_scan: ratio(median_ms, text_scan_median_ms),
        cpu_ms,
    })
}
