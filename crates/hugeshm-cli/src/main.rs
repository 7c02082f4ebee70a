//! `hugeshm`: huge-page shared memory done right.
//!
//! Exit codes: 0 success; 1 `--check` found a warning or error; 2 usage error;
//! 3 the command failed.
#![forbid(unsafe_code)]
// Human text reaches stdout and stderr only through the output layer
// (output::Out, terminal::eprintln), which makes it safe for a terminal.
#![deny(clippy::print_stdout, clippy::print_stderr, clippy::disallowed_methods)]

mod cmd;
mod output;
mod progress;
mod terminal;
#[cfg(test)]
mod usage_walk;
mod values;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use hugeshm_probe::{Roots, FS_ROOT_ENV, PROC_ROOT_ENV, SYS_ROOT_ENV};
use std::path::PathBuf;
use std::process::ExitCode;

/// Huge-page shared memory done right: a host doctor, region tools and benchmarks.
#[derive(Debug, Parser)]
#[command(name = "hugeshm", version, about, long_about = None, after_help = "\
Sizes: 4096, 4k, 2M, 1.5G, 10GiB: k, M, G, T (and KiB, MiB, GiB, TiB) are powers of 1024;
kB, MB, GB and TB are refused (write 10G for 10 GiB, or 10000000000 for 10 GB).
Exit codes: 0 ok, 1 --check found a warning or error, 2 usage error, 3 failure.
Start with `hugeshm status`; `hugeshm segments` tells which shared memory really sits on huge pages.")]
struct Cli {
    /// When to use colour (auto: on a terminal, unless NO_COLOR is set).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true,
          help_heading = GLOBAL_OPTIONS)]
    color: ColorChoice,
    /// Read /proc from this directory (for captured fixture trees).
    #[arg(long, env = PROC_ROOT_ENV, global = true, hide = true)]
    proc_root: Option<PathBuf>,
    /// Read /sys from this directory.
    #[arg(long, env = SYS_ROOT_ENV, global = true, hide = true)]
    sys_root: Option<PathBuf>,
    /// Browse mounts (hugetlbfs, /dev/shm) under this directory.
    #[arg(long, env = FS_ROOT_ENV, global = true, hide = true)]
    fs_root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// The heading of the options every command takes, listed after the
/// command's own.
const GLOBAL_OPTIONS: &str = "Global options";

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal unless NO_COLOR is set.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The huge page pools per page size and NUMA node, THP, limits, and what is wrong.
    Status(cmd::status::Args),
    /// Every shared memory segment and huge page mapping, and the page size really backing it.
    Segments(cmd::segments::Args),
    /// Create a shared region on huge pages, pre-fault it and verify it.
    Create(cmd::region::CreateArgs),
    /// Remove a named region (refused while processes are attached).
    Rm(cmd::region::RmArgs),
    /// Attach a named region: check its header, verify its page size, list who holds it.
    Attach(cmd::share::AttachArgs),
    /// List the hugeshm regions on this host, orphans included.
    Ls(cmd::share::LsArgs),
    /// How many huge pages of each size each node needs, and the configuration.
    Advise(cmd::advise::Args),
    /// Reserve a plan on the running host (all or nothing) and optionally persist it.
    Apply(cmd::apply::Args),
    /// Run an unmodified server with its shared memory on huge pages, placed,
    /// pre-faulted, verified and recorded (LD_PRELOAD of libhugeshm-run.so).
    Run(cmd::run::Args),
    /// Serve the status and segments reports as Prometheus metrics (or write them once).
    Exporter(cmd::exporter::Args),
    /// Move a running process's shared memory from 4 KiB onto 2 MiB pages in
    /// place, for every process that maps it (MADV_COLLAPSE; no restart).
    Collapse(cmd::collapse::Args),
    /// Measure on this host what published reports on Oracle and huge pages
    /// measured, each of their figures beside this host's.
    ///
    /// Six reproductions (--only picks some): startup (create and pre-fault
    /// time against region size, one thread against all CPUs), pagetables
    /// (page-table memory per session and in total as sessions attach),
    /// fallback (one huge page short under --policy try and only), numa
    /// (local, remote and interleaved bandwidth; two NUMA nodes or more), oltp
    /// (sessions over the shared buffer cache: /dev/shm files on 4 KiB pages
    /// against SysV on 2 MiB) and dmbc (a buffer cache read in place from a
    /// mapped file, DAX, against one that copies). The reports are blog posts
    /// of 2007 to 2022 on Oracle databases, each named in the output (docs/lab.md).
    ///
    /// Prints a table per reproduction and a summary; --json the same as
    /// data; --out DIR writes lab.json, SVG plots and report.html. As root the
    /// lab raises the huge page pools each reproduction needs and gives them
    /// back (--no-reserve leaves them alone).
    Lab(cmd::lab::Args),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Man pages and shell completions from these definitions (for packagers).
    #[command(subcommand, hide = true)]
    Generate(cmd::generate::GenerateCommand),
}

/// Prints what the libraries report through the `log` facade (cleanup that
/// could not be undone, a failed unmap) on stderr, warnings and up.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            terminal::eprintln(format_args!(
                "hugeshm: {}: {}",
                r.level().as_str().to_lowercase(),
                r.args()
            ));
        }
    }
    fn flush(&self) {}
}

static LOGGER: StderrLog = StderrLog;

fn main() -> ExitCode {
    let _ = log::set_logger(&LOGGER).map(|()| log::set_max_level(log::LevelFilter::Warn));
    let cli = Cli::parse();
    hugeshm_lab::keeper::install(hugeshm_lab::keeper::Setup {
        say: |line| terminal::eprintln(line),
        watchdog: &["bench", "watchdog"],
        interrupted: &["bench", "interrupted"],
    });
    if let Err(e) = hugeshm_probe::MapsSource::from_env() {
        terminal::eprintln(format_args!("hugeshm: error: {e}"));
        return ExitCode::from(2);
    }
    let defaults = Roots::default();
    let roots = Roots {
        proc: cli.proc_root.clone().unwrap_or(defaults.proc),
        sys: cli.sys_root.clone().unwrap_or(defaults.sys),
        fs: cli.fs_root.clone().unwrap_or(defaults.fs),
    };
    let mut out = output::Out::new(cli.color);
    let result = match cli.command {
        Command::Status(a) => cmd::status::run(&roots, &a, &mut out),
        Command::Segments(a) => cmd::segments::run(&roots, &a, &mut out),
        Command::Create(a) => cmd::region::create(&roots, &a, &mut out),
        Command::Rm(a) => cmd::region::rm(&roots, &a, &mut out),
        Command::Attach(a) => cmd::share::attach(&roots, &a, &mut out),
        Command::Ls(a) => cmd::share::ls(&roots, &a, &mut out),
        Command::Advise(a) => cmd::advise::run(&roots, &a, &mut out),
        Command::Apply(a) => cmd::apply::run(&roots, &a, &mut out),
        Command::Run(a) => cmd::run::run(&roots, &a, &mut out),
        Command::Collapse(a) => cmd::collapse::run(&roots, &a, &mut out),
        Command::Exporter(a) => cmd::exporter::run(&roots, &a, &mut out),
        Command::Lab(a) => cmd::lab::run(&roots, &a, &mut out),
        Command::Bench(b) => cmd::bench::run(&roots, b, &mut out),
        Command::Generate(g) => cmd::generate::run(Cli::command(), &g, &mut out),
    };
    // An interrupt's handler is giving back what the run took (and ends
    // the process with 128 + the signal): the run it cut short must not
    // end the process first.
    hugeshm_lab::keeper::wait_if_interrupted();
    match result {
        Ok(code) => code,
        Err(e) => {
            if output::is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            output::print_error(&e);
            ExitCode::from(output::error_status(&e))
        }
    }
}
