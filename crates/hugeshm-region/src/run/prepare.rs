//! `hugeshm run`'s preparation, before the exec: every check of what it
//! was asked ([`RunRequest`]) in order, then what the server is started
//! with ([`Prepared`]: `LD_PRELOAD`, the [`Settings`]), or the first
//! [`RunRefusal`]. The front end starts the process.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::checks::{
    check_command, check_loadable, find_library, replaceable_program, resolve_command, target_of,
};
use super::refusal::{FileRole, RunRefusal, RunWarning};
use super::{
    check_host, RunPageSize, RunPrefault, Settings, Target, DEFAULT_MIN_BYTES, MIN_MIN_BYTES,
};
use crate::model::{Placement, Policy};
use crate::{Probe, Roots};

/// The library's file name where the package installs it
/// (`/usr/lib/hugeshm/libhugeshm-run.so`).
pub const LIBRARY_FILE: &str = "libhugeshm-run.so";

/// Its name in a cargo build tree (`target/<profile>/libhugeshm_run.so`,
/// beside the `hugeshm` binary).
pub const BUILD_LIBRARY_FILE: &str = "libhugeshm_run.so";

/// Where the library is looked for when not run as root (for tests and
/// builds elsewhere); as root only [`RunRequest::library`] overrides the
/// places derived from the running executable's location.
pub const LIBRARY_ENV: &str = "HUGESHM_RUN_LIBRARY";

/// What `hugeshm run` is asked to do.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunRequest {
    /// COMMAND and its arguments (empty: only the environment, for a
    /// named target).
    pub command: Vec<OsString>,
    /// `--target NAME|PATH` (default: COMMAND itself).
    pub target: Option<OsString>,
    /// The page size mappings are moved onto.
    pub page_size: RunPageSize,
    /// What a mapping that cannot get its huge pages does.
    pub policy: Policy,
    /// Where the pages go.
    pub numa: Option<Placement>,
    /// Whether and how to pre-fault.
    pub prefault: RunPrefault,
    /// Private anonymous mappings too.
    pub private: bool,
    /// `--fallback thp`: a shared mapping that fell back to base pages is
    /// collapsed onto 2 MiB transparent huge pages after its pre-fault.
    pub fallback_thp: bool,
    /// Smaller mappings and segments are left alone.
    pub min_bytes: u64,
    /// The interposition library (default: found as [`environment`]
    /// finds it).
    pub library: Option<PathBuf>,
    /// Only the environment is wanted (`--print-env`): COMMAND may be left
    /// out where a target is named.
    pub env_only: bool,
}

impl RunRequest {
    /// A request to run `command` with the defaults.
    pub fn new(command: Vec<OsString>) -> Self {
        RunRequest {
            command,
            target: None,
            page_size: RunPageSize::Default,
            policy: Policy::Try,
            numa: None,
            prefault: RunPrefault::Off,
            private: false,
            fallback_thp: false,
            min_bytes: DEFAULT_MIN_BYTES,
            library: None,
            env_only: false,
        }
    }
}

/// What the server is started with.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Prepared {
    /// `LD_PRELOAD`: the library first, then what was there.
    pub ld_preload: String,
    /// What goes into `HUGESHM_RUN` ([`Settings::encode`]).
    pub settings: Settings,
    /// The library's canonical path.
    pub library: PathBuf,
    /// What is done as asked, and said.
    pub warnings: Vec<RunWarning>,
}

/// Every check of `req` on the host under `roots`, in order (the options
/// together, COMMAND and the target, who could replace them, the host,
/// the library), then the environment (`LD_PRELOAD` extends the
/// process's own).
pub fn prepare(roots: &Roots, req: &RunRequest) -> Result<Prepared, RunRefusal> {
    let mut warnings = Vec::new();
    if req.command.is_empty() && !(req.env_only && req.target.is_some()) {
        return Err(RunRefusal::NoCommand);
    }
    if req.min_bytes < MIN_MIN_BYTES {
        return Err(RunRefusal::MinSize {
            min_bytes: req.min_bytes,
        });
    }
    if req.prefault == RunPrefault::Populate && req.numa.is_some() {
        return Err(RunRefusal::PopulateWithNuma);
    }
    if req.fallback_thp && (req.policy != Policy::Try || req.prefault == RunPrefault::Off) {
        return Err(RunRefusal::FallbackThp);
    }
    let (given, command) = match req.command.first() {
        Some(c) => {
            let (found, canonical) = resolve_command(c)?;
            (Some(found), Some(canonical))
        }
        None => (None, None),
    };
    let target = match (&req.target, &command) {
        (Some(t), _) => target_of(t)?,
        (None, Some(c)) => Target::Path(c.clone()),
        (None, None) => unreachable!("checked above"),
    };
    if let Some(c) = &command {
        check_command(c, &target)?;
    }
    if let Target::Path(t) = &target {
        if command.as_ref() != Some(t) {
            check_loadable(t, FileRole::Target)?;
        }
    }
    // Who could replace what runs: COMMAND, and the --target path.
    let uid = rustix::process::geteuid().as_raw();
    if let (Some(g), Some(c)) = (&given, &command) {
        if let Some(replaceable) = replaceable_program(FileRole::Command, g, c) {
            warnings.push(RunWarning::Replaceable { replaceable, uid });
        }
    }
    if let (Some(t), Target::Path(canonical)) = (&req.target, &target) {
        if command.as_ref() != Some(canonical) {
            if let Some(replaceable) =
                replaceable_program(FileRole::Target, Path::new(t), canonical)
            {
                warnings.push(RunWarning::Replaceable { replaceable, uid });
            }
        }
    }
    let host = Probe::new(roots.clone()).host_for_regions();
    let asked = req.numa.clone().unwrap_or_default();
    let numa = match check_host(&host, req.page_size, req.numa.as_ref(), req.policy) {
        Ok(Some(numa)) => numa,
        Ok(None) => {
            warnings.push(RunWarning::NumaIgnored {
                numa: asked,
                nodes: host.nodes.len(),
            });
            Placement::Default
        }
        Err(refusal) => {
            return Err(RunRefusal::Host {
                numa: asked,
                refusal,
            })
        }
    };
    let library = find_library(req.library.as_deref())?;
    let mut settings = Settings::new(target);
    settings.min_bytes = req.min_bytes;
    settings.page_size = req.page_size;
    settings.policy = req.policy;
    settings.numa = numa;
    settings.prefault = req.prefault;
    settings.private = req.private;
    settings.fallback_thp = req.fallback_thp;
    let ld_preload = preload_list(&library, std::env::var_os("LD_PRELOAD").as_deref());
    Ok(Prepared {
        ld_preload,
        settings,
        library,
        warnings,
    })
}

/// The two variables for a service that starts a server whose executable
/// is named by `settings` (`advise --run` prints them as a systemd
/// drop-in): `LD_PRELOAD`, the library found as [`prepare`] finds it
/// with no library named, alone; and `HUGESHM_RUN`, the settings.
pub fn environment(settings: &Settings) -> Result<(String, String), RunRefusal> {
    let lib = find_library(None)?;
    Ok((preload_list(&lib, None), settings.encode()))
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
}
