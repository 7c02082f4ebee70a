//! `hugeshm bench ...`: benchmarks that reproduce the field reports.

use crate::cmd::bench_common::{parse_size_arg, reap};
use crate::output::{Out, Table};
use hugeshm_doctor::segments::SegmentKind;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
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
        name: String,
        /// Its backend.
        backend: hugeshm_region::Backend,
        /// The data file.
        data: std::path::PathBuf,
    },
    /// (internal) attach a named region on request and hold it.
    #[command(hide = true)]
    PagetablesChild {
        /// The region name.
        name: String,
        /// Its backend.
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
        op: String,
        /// The region name.
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
    /// Processes attached to the segment.
    #[arg(long, default_value_t = 1000)]
    pub procs: u32,
    /// Segment size.
    #[arg(long, default_value = "64M", value_parser = parse_size_arg)]
    pub size: u64,
    /// Page size of the segment: 4k, or a huge page size the pool can serve.
    #[arg(long, default_value = "4k", value_parser = parse_size_arg)]
    pub page_size: u64,
    /// Timed scans (after one warm-up scan).
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `bench scan --json` prints.
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
}

/// Runs a benchmark.
pub fn run(roots: &Roots, cmd: BenchCommand, out: &mut Out) -> anyhow::Result<ExitCode> {
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
        BenchCommand::PagetablesChild { name, backend } => {
            crate::cmd::bench_pagetables::child(&name, backend)
        }
        BenchCommand::AttachChild { shmid } => attach_child(shmid),
        BenchCommand::DaxChild {
            op,
            name,
            offset,
            arg,
        } => dax_child(roots, &op, &name, offset, &arg),
    }
}

fn dax_child(
    roots: &Roots,
    op: &str,
    name: &str,
    offset: usize,
    arg: &str,
) -> anyhow::Result<ExitCode> {
    let mut region = hugeshm_region::Locator::new(name, hugeshm_region::Backend::Dax)
        .probe(Probe::new(roots.clone()))
        .attach()
        .map_err(crate::cmd::region::region_error)?;
    match op {
        "write" => {
            region
                .write_at(offset, arg.as_bytes())
                .map_err(crate::cmd::region::region_error)?;
            let how = region
                .persist(offset, arg.len())
                .map_err(crate::cmd::region::region_error)?;
            println!(
                "wrote {} bytes at {offset}, persisted with {}",
                arg.len(),
                how.as_str()
            );
        }
        "read" => {
            let mut buf = vec![0u8; arg.parse()?];
            region
                .read_at(offset, &mut buf)
                .map_err(crate::cmd::region::region_error)?;
            println!("{}", String::from_utf8_lossy(&buf));
        }
        other => anyhow::bail!("dax-child: {other}: expected write or read"),
    }
    region.close().map_err(crate::cmd::region::region_error)?;
    Ok(ExitCode::SUCCESS)
}

fn attach_child(shmid: i32) -> anyhow::Result<ExitCode> {
    let att = sys::shm_attach(shmid)?;
    att.touch();
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
    let t0 = Instant::now();
    let bar = out.tty && !a.json;
    for i in 0..a.procs {
        let child = Command::new(&exe)
            .args(["bench", "attach-child", &shmid.to_string()])
            .stdin(Stdio::from(reader.try_clone()?))
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("spawning child {i} of {}: {e}", a.procs))?;
        fleet.children.push(child);
        if bar && i % 50 == 0 {
            eprint!("\rspawning {i}/{} processes", a.procs);
        }
    }
    drop(reader);
    // Wait until every child is attached.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = sys::shm_stat(shmid)?;
        if st.nattch > u64::from(a.procs) {
            break;
        }
        if let Some(dead) = fleet
            .children
            .iter_mut()
            .find_map(|c| c.try_wait().ok().flatten())
        {
            anyhow::bail!(
                "a child exited before attaching ({dead}); {} of {} attached",
                st.nattch.saturating_sub(1),
                a.procs
            );
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "only {} of {} children attached after 120 s",
                st.nattch.saturating_sub(1),
                a.procs
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let spawn_seconds = t0.elapsed().as_secs_f64();
    if bar {
        eprintln!("\r{} processes attached in {:.1} s", a.procs, spawn_seconds);
    }

    let probe = Probe::new(roots.clone());
    let mut runs = Vec::new();
    let mut last = None;
    for i in 0..=a.runs {
        let t = Instant::now();
        let r = hugeshm_doctor::segments::build(&probe);
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if i > 0 {
            runs.push(ms);
        }
        last = Some(r);
    }
    let r = last.expect("at least one scan ran");
    let seg = r
        .segments
        .iter()
        .find(|s| s.kind == SegmentKind::Sysv && s.id == Some(shmid as u64));
    let mut sorted = runs.clone();
    sorted.sort_by(|x, y| x.total_cmp(y));
    let res = ScanResult {
        procs: a.procs,
        size_bytes: a.size,
        page_size_bytes: a.page_size,
        processes_scanned: r.processes_scanned,
        attached_found: seg.map(|s| s.attached_pids.len()).unwrap_or(0),
        page_size_found: seg.and_then(|s| s.page_size_bytes),
        spawn_seconds,
        min_ms: sorted.first().copied().unwrap_or(0.0),
        median_ms: sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        runs_ms: runs,
    };
    drop(fleet);
    parent.release()?;
    if a.json {
        out.json_doc(&res)?;
    } else {
        let mut t = Table::new(&[
            ">procs",
            ">segment",
            "page",
            ">scanned",
            ">attached found",
            ">min ms",
            ">median ms",
        ]);
        t.row(vec![
            res.procs.to_string(),
            format_bytes(res.size_bytes),
            page_size_short(res.page_size_bytes),
            res.processes_scanned.to_string(),
            res.attached_found.to_string(),
            format!("{:.1}", res.min_ms),
            format!("{:.1}", res.median_ms),
        ]);
        t.render(out, "")?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}
