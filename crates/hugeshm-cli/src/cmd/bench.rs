//! `hugeshm bench ...`: benchmarks that reproduce the field reports.

use crate::cmd::bench_common::{parse_count_arg, reap, slope};
use crate::output::{Out, Table};
use hugeshm_doctor::segments::SegmentKind;
use hugeshm_lab::Steps;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{MapsRead, MapsSource, Probe, Roots};
use hugeshm_sys as sys;
use std::io::Read;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Time `hugeshm segments` on a host with many processes attached to one segment.
    Scan(ScanArgs),
    /// Time creating and pre-faulting a region per page size and thread count,
    /// against a memset of already-faulted memory.
    Prefault(crate::cmd::bench_prefault::Args),
    /// Page-table bytes per attached process, by page size, against the theory.
    Pagetables(crate::cmd::bench_pagetables::Args),
    /// Write and read bandwidth of a region placed local, remote and
    /// interleaved, per page size.
    Numa(crate::cmd::bench_numa::Args),
    /// Worker processes over the shared buffer cache, by page size and
    /// backend: transactions per second, latency, hit ratio, page tables,
    /// start-up, dTLB misses; and the same loop without the cache.
    Oltp(crate::cmd::bench_oltp::Args),
    /// The directly mapped buffer cache: the same workload with blocks
    /// copied into buffers (classic) and read in place from a mapped data
    /// file (direct, in place on DAX): logical and physical reads, tps,
    /// bytes copied.
    Dmbc(crate::cmd::bench_dmbc::Args),
    /// (internal) a bench oltp worker: attach by name, serve runs on stdin.
    #[command(hide = true)]
    OltpWorker {
        /// The region name.
        #[arg(value_parser = crate::cmd::region::parse_region_name)]
        name: String,
        /// Its backend.
        #[arg(value_parser = crate::values::backend())]
        backend: hugeshm_region::Backend,
        /// The data file.
        data: std::path::PathBuf,
    },
    /// (internal) what an interrupted bench re-executes as: removes its
    /// regions (BACKEND:NAME) once nothing holds them.
    #[command(hide = true)]
    Interrupted {
        /// The signal that interrupted it.
        #[arg(long)]
        signal: i32,
        /// BACKEND:NAME of each region.
        regions: Vec<String>,
    },
    /// (internal) started by a bench or the lab: gives back what the run
    /// registered (pools, regions, files) if the run dies without doing so
    /// (SIGKILL), as its stdin tells.
    #[command(hide = true)]
    Watchdog,
    /// How long a new process takes to attach a large region and map every
    /// page, with and without the smaps verification.
    Attach(crate::cmd::bench_attach::Args),
    /// (internal) attach a region by name, map every page, verify, print times.
    #[command(hide = true)]
    AttachTimeChild {
        /// The region name.
        #[arg(value_parser = crate::cmd::region::parse_region_name)]
        name: String,
        /// Its backend.
        #[arg(value_parser = crate::values::backend())]
        backend: hugeshm_region::Backend,
    },
    /// (internal) attach a named region on request and hold it.
    #[command(hide = true)]
    PagetablesChild {
        /// The region name.
        #[arg(value_parser = crate::cmd::region::parse_region_name)]
        name: String,
        /// Its backend.
        #[arg(value_parser = crate::values::backend())]
        backend: hugeshm_region::Backend,
    },
    /// (internal) attach a SysV segment and wait for stdin to close.
    #[command(hide = true)]
    AttachChild {
        /// The shmid.
        shmid: i32,
    },
    /// (internal) attach a dax region by name and write (then persist) or
    /// read data bytes: the guest's power-off test.
    #[command(hide = true)]
    DaxChild {
        /// write or read.
        #[arg(value_enum)]
        op: DaxOp,
        /// The region name.
        #[arg(value_parser = crate::cmd::region::parse_region_name)]
        name: String,
        /// Data offset.
        offset: usize,
        /// write: the text; read: how many bytes.
        arg: String,
    },
}

/// `bench scan` options.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// Processes attached to the segment; several (comma-separated, e.g.
    /// 1000,2000,5000) make a sweep with the slope per 1,000 processes.
    #[arg(long, value_delimiter = ',', default_value = "1000",
          value_parser = parse_count_arg::<u32>)]
    pub procs: Vec<u32>,
    /// Segment size.
    #[arg(long, default_value = "64M", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: u64,
    /// Page size of the segment: 4k, or a huge page size the pool can serve.
    #[arg(long, default_value = "4k", value_parser = crate::values::page_size_bytes())]
    pub page_size: u64,
    /// Timed scans (after one warm-up scan).
    #[arg(long, default_value_t = 5, value_parser = parse_count_arg::<u32>)]
    pub runs: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One process count of `bench scan`: the `segments` scan (as it reads
/// maps by default, and by the text), the plain read of every process's
/// maps text and the ioctl walk over every process's mappings, timed in
/// turn in the same run.
#[derive(Debug, Clone, serde::Serialize)]
struct ScanRow {
    procs: u32,
    processes_scanned: u64,
    attached_found: usize,
    page_size_found: Option<u64>,
    /// How the scan read maps: `query` (`PROCMAP_QUERY`) or `text`.
    maps_read: MapsRead,
    runs_ms: Vec<f64>,
    min_ms: f64,
    median_ms: f64,
    /// The same scan reading the maps text (`HUGESHM_MAPS=text`).
    text_scan_runs_ms: Vec<f64>,
    text_scan_median_ms: f64,
    /// Whether both scans found the bench's segment the same (attached
    /// processes, their names and page tables, page size).
    text_scan_same: bool,
    /// Reading every process's `maps` once, parsing nothing.
    maps_runs_ms: Vec<f64>,
    maps_min_ms: f64,
    maps_median_ms: f64,
    /// Bytes of `maps` read in one pass.
    maps_bytes: u64,
    /// Stepping over every process's mappings of files once by ioctl,
    /// naming none (where the kernel has `PROCMAP_QUERY`).
    walk_runs_ms: Vec<f64>,
    walk_median_ms: Option<f64>,
    /// Mappings of files seen in one walk.
    walk_vmas: u64,
    /// `median_ms / maps_median_ms`.
    vs_maps: f64,
    /// `median_ms / text_scan_median_ms`.
    vs_text_scan: f64,
    /// CPU time of the process (all threads), median per step: the work,
    /// whatever share of the CPUs other processes left the bench.
    cpu_ms: StepCpu,
}

/// Median CPU milliseconds of each step of one `bench scan` row.
#[derive(Debug, Clone, Default, serde::Serialize)]
struct StepCpu {
    scan: f64,
    text_scan: f64,
    maps_read: f64,
    walk: Option<f64>,
}

/// What `bench scan --json` prints: the top-level figures are those of
/// the largest process count; `sweep` has every count.
#[derive(Debug, serde::Serialize)]
struct ScanResult {
    procs: u32,
    size_bytes: u64,
    page_size_bytes: u64,
    processes_scanned: u64,
    attached_found: usize,
    page_size_found: Option<u64>,
    spawn_seconds: f64,
    runs_ms: Vec<f64>,
    min_ms: f64,
    median_ms: f64,
    maps_median_ms: f64,
    vs_maps: f64,
    maps_read: MapsRead,
    text_scan_median_ms: f64,
    walk_median_ms: Option<f64>,
    sweep: Vec<ScanRow>,
    /// Least-squares slope of the median scan time, ms per 1,000 processes
    /// (with two or more counts).
    slope_ms_per_1000: Option<f64>,
    /// The same for the plain maps read.
    maps_slope_ms_per_1000: Option<f64>,
}

fn min_median(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|x, y| x.total_cmp(y));
    (
        s.first().copied().unwrap_or(0.0),
        s.get(s.len() / 2).copied().unwrap_or(0.0),
    )
}

/// Runs a benchmark.
pub fn run(roots: &Roots, cmd: BenchCommand, out: &mut Out) -> anyhow::Result<ExitCode> {
    if matches!(
        cmd,
        BenchCommand::OltpWorker { .. }
            | BenchCommand::AttachTimeChild { .. }
            | BenchCommand::PagetablesChild { .. }
            | BenchCommand::AttachChild { .. }
    ) {
        crate::cmd::bench_common::die_with_parent();
    }
    match cmd {
        BenchCommand::Scan(a) => scan(roots, &a, out),
        BenchCommand::Prefault(a) => crate::cmd::bench_prefault::run(roots, &a, out),
        BenchCommand::Pagetables(a) => crate::cmd::bench_pagetables::run(roots, &a, out),
        BenchCommand::Numa(a) => crate::cmd::bench_numa::run(roots, &a, out),
        BenchCommand::Oltp(a) => crate::cmd::bench_oltp::run(roots, &a, out),
        BenchCommand::Dmbc(a) => crate::cmd::bench_dmbc::run(roots, &a, out),
        BenchCommand::OltpWorker {
            name,
            backend,
            data,
        } => crate::cmd::bench_oltp::worker(&name, backend, &data),
        BenchCommand::Interrupted { signal, regions } => {
            Ok(crate::interrupt::finish(signal, &regions))
        }
        BenchCommand::Watchdog => Ok(crate::interrupt::watch()),
        BenchCommand::Attach(a) => crate::cmd::bench_attach::run(roots, &a, out),
        BenchCommand::AttachTimeChild { name, backend } => {
            crate::cmd::bench_attach::child(&name, backend, out)
        }
        BenchCommand::PagetablesChild { name, backend } => {
            crate::cmd::bench_pagetables::child(&name, backend, out)
        }
        BenchCommand::AttachChild { shmid } => attach_child(shmid),
        BenchCommand::DaxChild {
            op,
            name,
            offset,
            arg,
        } => dax_child(roots, op, &name, offset, &arg, out),
    }
}

/// What `bench dax-child` does.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DaxOp {
    /// Write the text, then persist it.
    Write,
    /// Read that many bytes.
    Read,
}

fn dax_child(
    roots: &Roots,
    op: DaxOp,
    name: &str,
    offset: usize,
    arg: &str,
    out: &mut Out,
) -> anyhow::Result<ExitCode> {
    let mut region = hugeshm_region::Locator::new(name, hugeshm_region::Backend::Dax)
        .probe(Probe::new(roots.clone()))
        .attach()
        .map_err(crate::cmd::region::region_error)?;
    match op {
        DaxOp::Write => {
            region
                .write_at(offset, arg.as_bytes())
                .map_err(crate::cmd::region::region_error)?;
            let how = region
                .persist(offset, arg.len())
                .map_err(crate::cmd::region::region_error)?;
            out.exact(&format!(
                "wrote {} bytes at {offset}, persisted with {}",
                arg.len(),
                how.as_str()
            ))?;
        }
        DaxOp::Read => {
            let mut buf = vec![0u8; arg.parse()?];
            region
                .read_at(offset, &mut buf)
                .map_err(crate::cmd::region::region_error)?;
            // What the parent test wrote, compared byte for byte.
            out.exact(&String::from_utf8_lossy(&buf))?;
        }
    }
    region.close().map_err(crate::cmd::region::region_error)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn attach_child(shmid: i32) -> anyhow::Result<ExitCode> {
    // Attached, not touched: the scan reads maps, which do not depend on
    // residency, and 5,000 processes faulting a 64 MiB segment page by
    // page would take minutes (page tables are `bench pagetables`' part).
    let att = sys::shm_attach(shmid)?;
    // Block until the parent closes the pipe (or dies).
    let mut buf = [0u8; 1];
    let _ = std::io::stdin().read(&mut buf);
    att.release()?;
    Ok(ExitCode::SUCCESS)
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

fn scan(roots: &Roots, a: &ScanArgs, out: &mut Out) -> anyhow::Result<ExitCode> {
    let most = a.procs.iter().copied().max().unwrap_or(0);
    crate::cmd::bench_common::check_process_room(
        &Probe::new(roots.clone()),
        most.into(),
        "--procs",
    )?;
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
    let mut counts = a.procs.clone();
    counts.sort_unstable();
    counts.dedup();
    anyhow::ensure!(!counts.is_empty(), "--procs needs at least one count");
    let probe = crate::cmd::doctor_probe(roots);
    let mut sweep = Vec::new();
    let mut spawn_seconds = 0.0;
    // Per count: the processes started and attached, then each scan.
    let runs = u64::from(a.runs.max(1));
    let steps = crate::progress::steps("bench scan", counts.len() as u64 * (1 + runs));
    let _finish = steps.finish_on_drop();
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
        sweep.push(scan_once(&probe, a, n, shmid, &steps)?);
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
    let res = ScanResult {
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
    };
    if a.json {
        out.json_doc(&res)?;
    } else {
        out.line(format!(
            "segments scan with N processes attached to one {} segment on {} pages (maps read by {}), against the same scan reading the maps text, reading every process's maps text once and stepping over every process's mappings by ioctl once (median of {} runs each, in turn)",
            format_bytes(res.size_bytes),
            page_size_short(res.page_size_bytes),
            res.maps_read.as_str(),
            a.runs.max(1)
        ))?;
        let mut t = Table::new(&[
            ">procs",
            ">scanned",
            ">attached found",
            ">scan ms",
            ">text scan ms",
            ">maps read ms",
            ">ioctl walk ms",
            ">maps KiB",
            ">scan / maps",
            ">scan / text scan",
        ]);
        for r in &res.sweep {
            t.row(vec![
                r.procs.to_string(),
                r.processes_scanned.to_string(),
                r.attached_found.to_string(),
                format!("{:.1}", r.median_ms),
                format!(
                    "{:.1}{}",
                    r.text_scan_median_ms,
                    if r.text_scan_same { "" } else { " (differs!)" }
                ),
                format!("{:.1}", r.maps_median_ms),
                r.walk_median_ms
                    .map(|w| format!("{w:.1}"))
                    .unwrap_or_else(|| "-".to_string()),
                (r.maps_bytes / 1024).to_string(),
                format!("{:.2}x", r.vs_maps),
                format!("{:.2}x", r.vs_text_scan),
            ]);
        }
        t.render(out, "")?;
        out.line(format!(
            "{} processes started and attached in {:.1} s",
            res.procs, res.spawn_seconds
        ))?;
        out.line(
            "CPU time of all the bench's threads, median ms (what the steps cost whatever share of the CPUs other processes left):",
        )?;
        for r in &res.sweep {
            let c = &r.cpu_ms;
            out.line(format!(
                "  {} procs: scan {:.1}, text scan {:.1}, maps read {:.1}, ioctl walk {}; scan / maps {:.2}x",
                r.procs,
                c.scan,
                c.text_scan,
                c.maps_read,
                c.walk.map(|w| format!("{w:.1}")).unwrap_or_else(|| "-".to_string()),
                if c.maps_read > 0.0 { c.scan / c.maps_read } else { 0.0 },
            ))?;
        }
        if let (Some(s), Some(m)) = (res.slope_ms_per_1000, res.maps_slope_ms_per_1000) {
            out.line(format!(
                "slope: scan {s:.1} ms per 1,000 processes, maps read {m:.1} ms per 1,000"
            ))?;
        }
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
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
    a: &ScanArgs,
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
