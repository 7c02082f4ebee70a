//! `hugeshm run [OPTIONS] -- COMMAND [ARGS...]`: runs an unmodified server
//! with `libhugeshm-run.so` preloaded and its settings in `HUGESHM_RUN`
//! (`hugeshm_region::run`), by `exec`: the process is the server's, and so
//! are its signals and its exit code.
//!
//! Before the `exec` it refuses, with exit code 2 and the reason, what
//! cannot work: a COMMAND the loader would not preload into (statically
//! linked when it is the target, setuid, setgid or with file capabilities,
//! not x86-64), a script without `--target`, a page size the host does not
//! offer, a NUMA placement on a one-node host under `--policy only` (a
//! warning under `try`), a library that others could have replaced.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hugeshm_parse::elf::{self, Executable, EM_X86_64};
use hugeshm_parse::size::format_bytes;
use hugeshm_region::run::{
    check_host, HostRefusal, RunPageSize, RunPrefault, Settings, Target, MIN_MIN_BYTES,
    SETTINGS_ENV,
};
use hugeshm_region::{Placement, Policy, Probe, Roots};
use serde::Serialize;

use crate::output::Out;

/// The library's file name where the package installs it
/// (`/usr/lib/hugeshm/libhugeshm-run.so`).
pub const LIBRARY_FILE: &str = "libhugeshm-run.so";

/// Its name in a cargo build tree (`target/<profile>/libhugeshm_run.so`,
/// beside the `hugeshm` binary).
pub const BUILD_LIBRARY_FILE: &str = "libhugeshm_run.so";

/// Where the library is looked for when `hugeshm` is not run as root (for
/// tests and builds elsewhere); as root only `--library` overrides the
/// places derived from the binary's own location.
pub const LIBRARY_ENV: &str = "HUGESHM_RUN_LIBRARY";

/// `hugeshm run` options.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  hugeshm run --prefault -- postgres -D /var/lib/postgresql/15/main
  hugeshm run --target postgres --numa interleave --prefault --policy only -- \\
      pg_ctl -D /srv/pg -l /srv/pg/log start
  hugeshm run --private --page-size 1g --prefault -- mysqld
  hugeshm run --target postgres --prefault --print-env     (for a systemd drop-in)

In the target process only, each shared anonymous mmap and each SysV segment of at least
--min-size (and with --private each private anonymous mmap) is put on the page size asked for,
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
    #[arg(long, default_value = "keep",
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
const RUN_PAGE_SIZES: [(&str, &str); 3] = [
    ("keep", "The page size the server asks for"),
    ("2m", "2 MiB huge pages"),
    ("1g", "1 GiB huge pages"),
];

fn parse_page_size(s: &str) -> Result<RunPageSize, String> {
    if s.trim().eq_ignore_ascii_case("keep") {
        return Ok(RunPageSize::Keep);
    }
    match crate::values::huge_page_bytes(s)? {
        p if p >= 2 << 20 => Ok(RunPageSize::Huge(p)),
        _ => Err(format!("{s:?}: expected keep, 2m or 1g")),
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

/// A refusal: said on stderr, exit code 2.
struct Refused(String);

/// `hugeshm run`.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    match prepare(roots, a) {
        Err(Refused(why)) => {
            crate::terminal::eprintln(format!("hugeshm run: error: {why}"));
            Ok(ExitCode::from(2))
        }
        Ok(env) => {
            for w in &env.warnings {
                crate::terminal::eprintln(format!("hugeshm run: warning: {w}"));
            }
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
    }
}

/// Every check, then the environment.
fn prepare(roots: &Roots, a: &Args) -> Result<Env, Refused> {
    let mut warnings = Vec::new();
    if a.command.is_empty() && !(a.print_env && a.target.is_some()) {
        return Err(Refused(
            "no COMMAND: hugeshm run [OPTIONS] -- COMMAND [ARGS...] (or --print-env with --target)"
                .to_owned(),
        ));
    }
    if a.min_size < MIN_MIN_BYTES {
        return Err(Refused(format!(
            "--min-size {}: at least {} (smaller mappings are a server's own bookkeeping)",
            format_bytes(a.min_size),
            format_bytes(MIN_MIN_BYTES)
        )));
    }
    if a.prefault == Some(RunPrefault::Populate) && a.numa.is_some() {
        return Err(Refused(
            "--prefault=populate with --numa: MAP_POPULATE faults the pages inside mmap, before \
             mbind could place them; use --prefault (threads)"
                .to_owned(),
        ));
    }
    let (given, command) = match a.command.first() {
        Some(c) => {
            let (found, canonical) = resolve_command(c)?;
            (Some(found), Some(canonical))
        }
        None => (None, None),
    };
    let target = match (&a.target, &command) {
        (Some(t), _) => target_of(t)?,
        (None, Some(c)) => Target::Path(c.clone()),
        (None, None) => unreachable!("checked above"),
    };
    if let Some(c) = &command {
        check_command(c, &target)?;
    }
    if let Target::Path(t) = &target {
        if command.as_ref() != Some(t) {
            check_loadable(t, "--target")?;
        }
    }
    // Who could replace what runs: COMMAND, and the --target path.
    if let (Some(g), Some(c)) = (&given, &command) {
        warnings.extend(replaceable_program("COMMAND", g, c));
    }
    if let (Some(t), Target::Path(canonical)) = (&a.target, &target) {
        if command.as_ref() != Some(canonical) {
            warnings.extend(replaceable_program("--target", Path::new(t), canonical));
        }
    }
    let host = Probe::new(roots.clone()).host_for_regions();
    let numa_text = a.numa.clone().unwrap_or_default();
    let one_node = |n: usize| {
        format!(
            "--numa {numa_text}: this host has {n} NUMA node{}: there is nothing to place",
            if n == 1 { "" } else { "s" }
        )
    };
    let numa = match check_host(&host, a.page_size, a.numa.as_ref(), a.policy) {
        Ok(Some(numa)) => numa,
        Ok(None) => {
            warnings.push(format!("{}; --numa is ignored", one_node(host.nodes.len())));
            Placement::Default
        }
        Err(HostRefusal::PageSize { page_size, offered }) => {
            return Err(Refused(format!(
                "--page-size {}: this kernel offers {} (/sys/kernel/mm/hugepages)",
                format_bytes(page_size),
                if offered.is_empty() {
                    "no huge pages".to_owned()
                } else {
                    offered
                        .iter()
                        .map(|p| format_bytes(*p))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )))
        }
        Err(HostRefusal::TooFewNodes { nodes }) => {
            return Err(Refused(format!("{} (--policy only)", one_node(nodes))))
        }
        Err(HostRefusal::NoSuchNode { node, nodes }) => {
            return Err(Refused(format!(
                "--numa {numa_text}: node {node} does not exist (nodes: {})",
                nodes
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };
    let library = find_library(a.library.as_deref())?;
    let mut settings = Settings::new(target.clone());
    settings.min_bytes = a.min_size;
    settings.page_size = a.page_size;
    settings.policy = a.policy;
    settings.numa = numa;
    settings.prefault = a.prefault.unwrap_or(RunPrefault::Off);
    settings.private = a.private;
    let ld_preload = preload_list(&library, std::env::var_os("LD_PRELOAD").as_deref());
    Ok(Env {
        ld_preload,
        hugeshm_run: settings.encode(),
        library: library.display().to_string(),
        target: target.to_string(),
        warnings,
    })
}

/// The two variables for a service that starts a server whose executable
/// is named by `settings` (`advise --run` prints them as a systemd
/// drop-in): the library found as `hugeshm run` finds it, alone in
/// `LD_PRELOAD`, and the settings.
pub fn environment(settings: &Settings) -> Result<(String, String), String> {
    let lib = find_library(None).map_err(|Refused(why)| why)?;
    Ok((preload_list(&lib, None), settings.encode()))
}

/// COMMAND as found (as given when it has a `/`, else found in `PATH` the
/// way `exec` will find it) and as a canonical path.
fn resolve_command(c: &OsStr) -> Result<(PathBuf, PathBuf), Refused> {
    let p = Path::new(c);
    let found = if c.as_encoded_bytes().contains(&b'/') {
        Some(p.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path).map(|d| d.join(p)).find(|f| {
                f.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
        })
    };
    let found = found.ok_or_else(|| Refused(format!("{}: not found in PATH", p.display())))?;
    let canonical = found
        .canonicalize()
        .map_err(|e| Refused(format!("{}: {e}", found.display())))?;
    Ok((found, canonical))
}

/// `--target NAME|PATH`.
fn target_of(t: &OsStr) -> Result<Target, Refused> {
    let text = t
        .to_str()
        .ok_or_else(|| Refused("--target is not UTF-8".to_owned()))?;
    if text.contains('/') {
        let p = Path::new(text)
            .canonicalize()
            .map_err(|e| Refused(format!("--target {text}: {e}")))?;
        if p.to_str().is_none() {
            return Err(Refused("--target: the path is not UTF-8".to_owned()));
        }
        Ok(Target::Path(p))
    } else if text.is_empty() || text.len() > 255 {
        Err(Refused("--target: a file name or a path".to_owned()))
    } else {
        Ok(Target::Name(text.to_owned()))
    }
}

/// The file's ELF headers (its first 64 KiB), read from a regular file
/// (`hugeshm_sys::OpenCheck`: a FIFO is refused, not waited on).
fn executable(p: &Path) -> Result<Executable, Refused> {
    use std::io::Read;
    let mut buf = Vec::new();
    let f = hugeshm_sys::OpenCheck::read()
        .open(p)
        .map_err(|e| Refused(e.to_string()))?;
    std::fs::File::from(f.into_fd())
        .take(64 << 10)
        .read_to_end(&mut buf)
        .map_err(|e| Refused(format!("{}: {e}", p.display())))?;
    elf::parse(&buf).map_err(|e| Refused(format!("{}: {}", p.display(), e.message)))
}

/// What makes the loader ignore `LD_PRELOAD` (secure execution): setuid,
/// setgid, file capabilities.
fn secure_exec(p: &Path) -> Result<Option<String>, Refused> {
    let md = p
        .metadata()
        .map_err(|e| Refused(format!("{}: {e}", p.display())))?;
    if md.mode() & 0o4000 != 0 {
        return Ok(Some("setuid".to_owned()));
    }
    if md.mode() & 0o2000 != 0 && md.mode() & 0o010 != 0 {
        return Ok(Some("setgid".to_owned()));
    }
    if rustix::fs::getxattr(p, "security.capability", &mut [0u8; 64][..]).is_ok() {
        return Ok(Some(
            "given file capabilities (security.capability)".to_owned(),
        ));
    }
    Ok(None)
}

/// COMMAND: the loader must pass the environment on (not secure
/// execution); when it is the target, it must also load the library.
fn check_command(c: &Path, target: &Target) -> Result<(), Refused> {
    if let Some(why) = secure_exec(c)? {
        return Err(Refused(format!(
            "{} is {why}: the loader runs it in secure-execution mode and ignores LD_PRELOAD",
            c.display()
        )));
    }
    let is_target = target.matches(c.as_os_str().as_encoded_bytes());
    match executable(c)? {
        Executable::Script(interp) if is_target => Err(Refused(format!(
            "{} is a script (#!{interp}): name the server it starts with --target NAME|PATH",
            c.display()
        ))),
        Executable::Script(_) => Ok(()),
        Executable::Elf(_) if !is_target => Ok(()),
        Executable::Elf(_) => check_loadable(c, "COMMAND"),
    }
}

/// The target's executable: a dynamically linked x86-64 ELF, not secure.
fn check_loadable(p: &Path, what: &str) -> Result<(), Refused> {
    if let Some(why) = secure_exec(p)? {
        return Err(Refused(format!(
            "{what} {} is {why}: the loader ignores LD_PRELOAD for it",
            p.display()
        )));
    }
    match executable(p)? {
        Executable::Script(interp) => Err(Refused(format!(
            "{what} {} is a script (#!{interp}): the target is the server's own executable",
            p.display()
        ))),
        Executable::Elf(e) if !(e.class64 && e.little_endian && e.machine == EM_X86_64) => {
            Err(Refused(format!(
                "{what} {} is a {}{} ELF executable: libhugeshm-run.so is x86-64 Linux",
                p.display(),
                if e.class64 { "64-bit " } else { "32-bit " },
                e.machine_name()
            )))
        }
        Executable::Elf(e) if !e.dynamic => Err(Refused(format!(
            "{what} {} is statically linked: no loader runs to preload libhugeshm-run.so",
            p.display()
        ))),
        Executable::Elf(_) => Ok(()),
    }
}

/// The library: `--library`, else `$HUGESHM_RUN_LIBRARY` (not as root),
/// else beside this binary (`../lib/hugeshm/libhugeshm-run.so`, or a
/// build tree's `libhugeshm_run.so`), else `/usr/lib/hugeshm/`. The one
/// found, and every directory above it, must belong to root or this user,
/// and none may be writable by others (but a sticky directory).
fn find_library(explicit: Option<&Path>) -> Result<PathBuf, Refused> {
    let euid = rustix::process::geteuid().as_raw();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    } else {
        if euid != 0 {
            if let Some(p) = std::env::var_os(LIBRARY_ENV) {
                candidates.push(PathBuf::from(p));
            }
        }
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            candidates.push(dir.join("../lib/hugeshm").join(LIBRARY_FILE));
            candidates.push(dir.join(BUILD_LIBRARY_FILE));
        }
        candidates.push(Path::new("/usr/lib/hugeshm").join(LIBRARY_FILE));
    }
    let found = candidates.iter().find(|p| p.is_file()).ok_or_else(|| {
        Refused(format!(
            "{LIBRARY_FILE} not found (looked at {}): install the hugeshm package, or give --library",
            candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let lib = found
        .canonicalize()
        .map_err(|e| Refused(format!("{}: {e}", found.display())))?;
    if lib.to_str().is_none_or(|s| s.contains([':', ' ', '\n'])) {
        return Err(Refused(format!(
            "{}: LD_PRELOAD cannot hold a path with ':', a space or a newline",
            lib.display()
        )));
    }
    // The file, then every directory up to /: each this user's or root's,
    // and none that others can write to (a sticky directory such as /tmp
    // only lets them replace their own entries, which the level below
    // would not accept).
    match replaceable(&lib, "the library", |uid| uid == 0 || uid == euid)? {
        Some(why) => Err(Refused(format!(
            "{why}: it could be replaced by another user"
        ))),
        None => Ok(lib),
    }
}

/// Why another user could replace the file at `p` (`what`: `the
/// library`), `None` when nobody but `trusted` users can: the file, then
/// every directory above it, each owned by a trusted uid and not writable
/// by group or others (a sticky directory may be: its entries are their
/// owners' alone); a symbolic link on the way (of a path not made
/// canonical) counts by its owner. The first that fails, as `PATH (WHAT)
/// belongs to uid N, neither root nor you` or `... is writable by group or
/// others (mode 0777)`.
fn replaceable(
    p: &Path,
    what: &str,
    trusted: impl Fn(u32) -> bool,
) -> Result<Option<String>, Refused> {
    for (i, p) in p.ancestors().enumerate() {
        if p.as_os_str().is_empty() {
            break;
        }
        let md =
            std::fs::symlink_metadata(p).map_err(|e| Refused(format!("{}: {e}", p.display())))?;
        let what = match i {
            0 => what,
            _ if md.is_symlink() => "a symbolic link on the way",
            _ => "a directory above it",
        };
        if !trusted(md.uid()) {
            return Ok(Some(format!(
                "{} ({what}) belongs to uid {}, neither root nor you",
                p.display(),
                md.uid()
            )));
        }
        let sticky_dir = md.is_dir() && md.mode() & 0o1000 != 0;
        if md.mode() & 0o022 != 0 && !sticky_dir && !md.is_symlink() {
            return Ok(Some(format!(
                "{} ({what}) is writable by group or others (mode {:04o}); chmod go-w it",
                p.display(),
                md.mode() & 0o7777
            )));
        }
    }
    Ok(None)
}

/// A warning when another user could replace the program root runs
/// (COMMAND, or the `--target` path): `given` as found (its symlinks
/// count) and `canonical`, each file and every directory above it. The
/// server's own binary is the admin's choice: a warning, never a refusal.
fn replaceable_program(what: &str, given: &Path, canonical: &Path) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    let sudo = crate::cmd::sudo_uid();
    let trusted = |uid: u32| uid == 0 || uid == me || Some(uid) == sudo;
    let given = std::env::current_dir()
        .map(|d| d.join(given))
        .unwrap_or_else(|_| given.to_path_buf());
    let why = [given.as_path(), canonical]
        .into_iter()
        .find_map(|p| replaceable(p, what, trusted).ok().flatten())?;
    Some(format!(
        "{why}: another user can replace the program run as uid {me}; it is run as asked (the \
         server's binary is your choice), but install it owned by root, not writable by group \
         or others, in directories that are too"
    ))
}

/// `LD_PRELOAD`: the library first, then what was there (an earlier
/// libhugeshm-run entry dropped).
fn preload_list(lib: &Path, current: Option<&OsStr>) -> String {
    let mut list = vec![lib.display().to_string()];
    if let Some(cur) = current.and_then(OsStr::to_str) {
        list.extend(
            cur.split([':', ' '])
                .filter(|e| !e.is_empty())
                .filter(|e| {
                    let name = e.rsplit('/').next().unwrap_or(e);
                    name != LIBRARY_FILE && name != BUILD_LIBRARY_FILE
                })
                .map(str::to_owned),
        );
    }
    list.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_goes_first_once() {
        let lib = Path::new("/usr/lib/hugeshm/libhugeshm-run.so");
        assert_eq!(
            preload_list(lib, None),
            "/usr/lib/hugeshm/libhugeshm-run.so"
        );
        assert_eq!(
            preload_list(
                lib,
                Some(OsStr::new(
                    "/x/libhugeshm-run.so /opt/libjemalloc.so:/y/libhugeshm_run.so"
                ))
            ),
            "/usr/lib/hugeshm/libhugeshm-run.so:/opt/libjemalloc.so"
        );
    }

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
