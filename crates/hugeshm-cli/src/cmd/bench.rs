//! `hugeshm bench ...`: benchmarks that reproduce the field reports.

use crate::output::Out;
use hugeshm_probe::{Probe, Roots};
use std::process::ExitCode;

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Time `hugeshm segments` on a host with many processes attached to one segment.
    Scan(crate::cmd::bench_scan::Args),
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
/// Runs a benchmark.
pub fn run(roots: &Roots, cmd: BenchCommand, out: &mut Out) -> anyhow::Result<ExitCode> {
    if matches!(
        cmd,
        BenchCommand::OltpWorker { .. }
            | BenchCommand::AttachTimeChild { .. }
            | BenchCommand::PagetablesChild { .. }
            | BenchCommand::AttachChild { .. }
    ) {
        hugeshm_lab::common::die_with_parent();
    }
    match cmd {
        BenchCommand::Scan(a) => crate::cmd::bench_scan::run(roots, &a, out),
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
            Ok(hugeshm_lab::keeper::finish(signal, &regions))
        }
        BenchCommand::Watchdog => Ok(hugeshm_lab::keeper::watch()),
        BenchCommand::Attach(a) => crate::cmd::bench_attach::run(roots, &a, out),
        BenchCommand::AttachTimeChild { name, backend } => {
            crate::cmd::bench_attach::child(&name, backend, out)
        }
        BenchCommand::PagetablesChild { name, backend } => {
            crate::cmd::bench_pagetables::child(&name, backend, out)
        }
        BenchCommand::AttachChild { shmid } => crate::cmd::bench_scan::attach_child(shmid),
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
    use hugeshm_lab::dmbc::{dax_child_line, DaxChildOp};
    let op = match op {
        DaxOp::Write => DaxChildOp::Write(arg),
        DaxOp::Read => DaxChildOp::Read(arg.parse()?),
    };
    let line = dax_child_line(Probe::new(roots.clone()), name, offset, op)
        .map_err(crate::cmd::region::region_error)?;
    out.exact(&line)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
