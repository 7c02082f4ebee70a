//! `hugeshm run [OPTIONS] -- COMMAND [ARGS...]`: runs an unmodified server
//! with `libhugeshm-run.so` preloaded and its settings in `HUGESHM_RUN`
//! (`hugeshm_region::run`), by `exec`: the process is the server's, and so
//! are its signals and its exit code.
//!
//! Before the `exec`, `hugeshm_region::run::prepare` checks the request
//! and this command refuses, with exit code 2 and the reason, what cannot
//! work: a COMMAND the loader would not preload into (statically
//! linked when it is the target, setuid, setgid or with file capabilities,
//! not x86-64), a script without `--target`, a page size the host does not
//! offer, a NUMA placement on a one-node host under `--policy only` (a
//! warning under `try`), a library that others could have replaced. This
//! file holds the options, the words, and the exec.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hugeshm_region::run::{prepare, RunPageSize, RunPrefault, RunRequest, SETTINGS_ENV};
use hugeshm_region::{Placement, Policy, Roots};
use serde::Serialize;

use crate::output::Out;

/// `hugeshm run` options.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hugeshm run --prefault -- postgres -D /var/lib/postgresql/15/main
  hugeshm run --target postgres --numa interleave --prefault --policy only -- \\
      pg_ctl -D /srv/pg -l /srv/pg/log start
  hugeshm run --private --prefault -- mariadbd --innodb-buffer-pool-size=256M
  hugeshm run --target postgres --prefault --print-env     (for a systemd drop-in)

In the target process only, each shared anonymous mmap and each SysV segment of at least
--min-size (and with --private each private anonymous mmap, and each MAP_FIXED commit inside a
PROT_NONE reservation of the target's) is put on the page size asked for (by default the host's
default huge page size),
placed on the NUMA nodes asked for before its first touch, pre-faulted in parallel before the
call returns, verified, and recorded for `hugeshm segments`. Everything else, and every other
process of the chain (pg_ctl, a shell, what the server execs), is left as it is.
Exit codes: those of COMMAND; 2 when hugeshm refuses before running it.")]
pub struct Args {
    /// The server's executable, when COMMAND is a wrapper that execs it
    /// (pg_ctl, pg_ctlcluster, mysqld_safe): a file name (matched against
    /// the executable's name) or a path. Default: COMMAND itself.
    #[arg(long, value_name = "NAME|PATH", value_hint = clap::ValueHint::AnyPath)]
    pub target: Option<OsString>,
    /// The page size mappings are moved onto, their length rounded up.
    #[arg(long, default_value = "default",
          value_parser = crate::values::Listed::new(&RUN_PAGE_SIZES, parse_page_size))]
    pub page_size: RunPageSize,
    /// What a mapping that cannot get its huge pages does.
    #[arg(long, default_value = "try", value_parser = crate::values::run_policy())]
    pub policy: Policy,
    /// Where the pages go: interleave[=NODES], bind=NODES, preferred=NODE,
    /// weighted-interleave[=NODES] (mbind before the first touch; the
    /// server's private memory is not affected).
    #[arg(long, value_name = "PLACEMENT", value_parser = parse_numa)]
    pub numa: Option<Placement>,
    /// Pre-fault each mapping before the call returns: with THREADS
    /// threads (default: the CPUs of the nodes it is placed on, else every
    /// CPU), with MADV_POPULATE_WRITE (an error, never SIGBUS); `populate`:
    /// one mmap with MAP_POPULATE on the calling thread, as PostgreSQL's
    /// proposed shmem_populate does.
    #[arg(long, value_name = "THREADS|populate", num_args = 0..=1, require_equals = true,
          default_missing_value = "all", value_parser = parse_prefault)]
    pub prefault: Option<RunPrefault>,
    /// Private anonymous mappings too (an InnoDB buffer pool, a JVM heap).
    #[arg(long)]
    pub private: bool,
    /// What a shared mapping that fell back to 4 KiB pages (--policy try)
    /// becomes: `base` stays so; `thp` is collapsed onto 2 MiB transparent
    /// huge pages after its pre-fault (needs --prefault; Linux 6.1+): small
    /// page tables without a hugetlb pool, e.g. in a container without a
    /// hugetlb allowance. Not reserved as hugetlb pages are.
    #[arg(long, value_name = "base|thp", default_value = "base", value_parser = ["base", "thp"])]
    pub fallback: String,
    /// Smaller mappings and segments are left alone.
    #[arg(long, default_value = "64M", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub min_size: u64,
    /// The interposition library (default: ../lib/hugeshm/libhugeshm-run.so
    /// beside this binary, then /usr/lib/hugeshm/).
    #[arg(long, value_name = "PATH")]
    pub library: Option<PathBuf>,
    /// Print the environment that does it (LD_PRELOAD, HUGESHM_RUN) instead
    /// of running COMMAND: for a systemd drop-in's Environment= lines.
    #[arg(long)]
    pub print_env: bool,
    /// With --print-env: as JSON.
    #[arg(long, requires = "print_env")]
    pub json: bool,
    /// The server (or a wrapper that execs it) and its arguments.
    #[arg(last = true, value_name = "COMMAND", value_hint = clap::ValueHint::CommandWithArguments)]
    pub command: Vec<OsString>,
}

/// `--page-size`'s values in help and completions.
const RUN_PAGE_SIZES: [(&str, &str); 4] = [
    (
        "default",
        "The host's default huge page size, or the server's own huge page size",
    ),
    ("keep", "The page size the server asks for"),
    ("2m", "2 MiB huge pages"),
    ("1g", "1 GiB huge pages"),
];

fn parse_page_size(s: &str) -> Result<RunPageSize, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "keep" => return Ok(RunPageSize::Keep),
        "default" => return Ok(RunPageSize::Default),
        _ => {}
    }
    match crate::values::huge_page_bytes(s)? {
        p if p >= 2 << 20 => Ok(RunPageSize::Huge(p)),
        _ => Err(format!("{s:?}: expected default, keep, 2m or 1g")),
    }
}

fn parse_numa(s: &str) -> Result<Placement, String> {
    match s.parse::<Placement>()? {
        Placement::PerNode => {
            Err("per-node is for `hugeshm create`: one region per node".to_owned())
        }
        Placement::Default => Err("default: leave --numa out".to_owned()),
        p => Ok(p),
    }
}

fn parse_prefault(s: &str) -> Result<RunPrefault, String> {
    match s {
        "all" => Ok(RunPrefault::Threads(None)),
        "populate" => Ok(RunPrefault::Populate),
        n => match n.parse::<usize>() {
            Ok(t) if (1..=hugeshm_region::run::MAX_THREADS).contains(&t) => {
                Ok(RunPrefault::Threads(Some(t)))
            }
            _ => Err(format!(
                "{s:?}: expected a number of threads (1 to {}) or populate",
                hugeshm_region::run::MAX_THREADS
            )),
        },
    }
}

/// What `--print-env --json` prints.
#[derive(Debug, Serialize)]
struct Env {
    ld_preload: String,
    hugeshm_run: String,
    library: String,
    target: String,
    warnings: Vec<String>,
}

/// `hugeshm run`.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mut req = RunRequest::new(a.command.clone());
    req.target = a.target.clone();
    req.page_size = a.page_size;
    req.policy = a.policy;
    req.numa = a.numa.clone();
    req.prefault = a.prefault.unwrap_or(RunPrefault::Off);
    req.private = a.private;
    req.fallback_thp = a.fallback == "thp";
    req.min_bytes = a.min_size;
    req.library = a.library.clone();
    req.env_only = a.print_env;
    let p = match prepare(roots, &req) {
        Ok(p) => p,
        Err(why) => {
            crate::terminal::eprintln(format!("hugeshm run: error: {why}"));
            return Ok(ExitCode::from(2));
        }
    };
    for w in &p.warnings {
        crate::terminal::eprintln(format!("hugeshm run: warning: {w}"));
    }
    let env = Env {
        ld_preload: p.ld_preload,
        hugeshm_run: p.settings.encode(),
        library: p.library.display().to_string(),
        target: p.settings.target.to_string(),
        warnings: p.warnings.iter().map(ToString::to_string).collect(),
    };
    if a.print_env {
        if a.json {
            out.json_doc(&env)?;
        } else {
            out.line(format!("LD_PRELOAD={}", env.ld_preload))?;
            out.line(format!("{SETTINGS_ENV}={}", env.hugeshm_run))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    out.flush()?;
    let (program, args) = a.command.split_first().expect("checked in prepare");
    let err = std::process::Command::new(program)
        .args(args)
        .env("LD_PRELOAD", &env.ld_preload)
        .env(SETTINGS_ENV, &env.hugeshm_run)
        .exec();
    crate::terminal::eprintln(format!(
        "hugeshm run: error: cannot run {}: {err}",
        Path::new(program).display()
    ));
    Ok(ExitCode::from(
        if err.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_words() {
        assert_eq!(parse_page_size("keep").unwrap(), RunPageSize::Keep);
        assert_eq!(parse_page_size("2m").unwrap(), RunPageSize::Huge(2 << 20));
        assert!(parse_page_size("4k").is_err());
        use clap::ValueEnum;
        assert!(crate::values::RunPolicyArg::from_str("off", false).is_err());
        assert_eq!(
            crate::values::RunPolicyArg::from_str("on", false),
            Ok(crate::values::RunPolicyArg::Only)
        );
        assert!(parse_numa("per-node").is_err());
        assert_eq!(parse_prefault("populate").unwrap(), RunPrefault::Populate);
        assert_eq!(parse_prefault("3").unwrap(), RunPrefault::Threads(Some(3)));
        assert!(parse_prefault("0").is_err());
    }
}
