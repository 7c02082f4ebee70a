//! What `hugeshm run` checks of the files it is given before the exec:
//! COMMAND found as `exec` finds it, `--target`, each executable's ELF
//! headers and secure-execution bits, the library found and nobody but
//! root or this user able to replace it, and who could replace the
//! program run.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hugeshm_parse::elf::{self, Executable, EM_X86_64};

use super::refusal::{Exposure, FileRole, PathPart, Replaceable, RunRefusal, SecureExec};
use super::{Target, BUILD_LIBRARY_FILE, LIBRARY_ENV, LIBRARY_FILE};

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> RunRefusal + '_ {
    move |error| RunRefusal::File {
        path: path.to_path_buf(),
        error,
    }
}

/// COMMAND as found (as given when it has a `/`, else found in `PATH` the
/// way `exec` will find it) and as a canonical path.
pub(super) fn resolve_command(c: &OsStr) -> Result<(PathBuf, PathBuf), RunRefusal> {
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
    let found = found.ok_or_else(|| RunRefusal::NotInPath {
        command: p.to_path_buf(),
    })?;
    let canonical = found.canonicalize().map_err(file_error(&found))?;
    Ok((found, canonical))
}

/// `--target NAME|PATH`.
pub(super) fn target_of(t: &OsStr) -> Result<Target, RunRefusal> {
    let text = t.to_str().ok_or(RunRefusal::TargetNotUtf8)?;
    if text.contains('/') {
        let p = Path::new(text)
            .canonicalize()
            .map_err(|error| RunRefusal::TargetPath {
                target: text.to_owned(),
                error,
            })?;
        if p.to_str().is_none() {
            return Err(RunRefusal::TargetPathNotUtf8);
        }
        Ok(Target::Path(p))
    } else if text.is_empty() || text.len() > 255 {
        Err(RunRefusal::TargetName)
    } else {
        Ok(Target::Name(text.to_owned()))
    }
}

/// The file's ELF headers (its first 64 KiB), read from a regular file
/// (`hugeshm_sys::OpenCheck`: a FIFO is refused, not waited on).
fn executable(p: &Path) -> Result<Executable, RunRefusal> {
    let mut buf = Vec::new();
    let f = hugeshm_sys::OpenCheck::read()
        .open(p)
        .map_err(RunRefusal::Open)?;
    std::fs::File::from(f.into_fd())
        .take(64 << 10)
        .read_to_end(&mut buf)
        .map_err(file_error(p))?;
    elf::parse(&buf).map_err(|e| RunRefusal::NotExecutable {
        path: p.to_path_buf(),
        message: e.message,
    })
}

/// What makes the loader ignore `LD_PRELOAD` (secure execution): setuid,
/// setgid, file capabilities.
fn secure_exec(p: &Path) -> Result<Option<SecureExec>, RunRefusal> {
    let md = p.metadata().map_err(file_error(p))?;
    if md.mode() & 0o4000 != 0 {
        return Ok(Some(SecureExec::Setuid));
    }
    if md.mode() & 0o2000 != 0 && md.mode() & 0o010 != 0 {
        return Ok(Some(SecureExec::Setgid));
    }
    if rustix::fs::getxattr(p, "security.capability", &mut [0u8; 64][..]).is_ok() {
        return Ok(Some(SecureExec::Capabilities));
    }
    Ok(None)
}

/// COMMAND: the loader must pass the environment on (not secure
/// execution); when it is the target, it must also load the library.
pub(super) fn check_command(c: &Path, target: &Target) -> Result<(), RunRefusal> {
    if let Some(why) = secure_exec(c)? {
        return Err(RunRefusal::SecureCommand {
            path: c.to_path_buf(),
            why,
        });
    }
    let is_target = target.matches(c.as_os_str().as_encoded_bytes());
    match executable(c)? {
        Executable::Script(interpreter) if is_target => Err(RunRefusal::ScriptCommand {
            path: c.to_path_buf(),
            interpreter,
        }),
        Executable::Script(_) => Ok(()),
        Executable::Elf(_) if !is_target => Ok(()),
        Executable::Elf(_) => check_loadable(c, FileRole::Command),
    }
}

/// The target's executable: a dynamically linked x86-64 ELF, not secure.
pub(super) fn check_loadable(p: &Path, role: FileRole) -> Result<(), RunRefusal> {
    let path = p.to_path_buf();
    if let Some(why) = secure_exec(p)? {
        return Err(RunRefusal::Secure { role, path, why });
    }
    match executable(p)? {
        Executable::Script(interpreter) => Err(RunRefusal::Script {
            role,
            path,
            interpreter,
        }),
        Executable::Elf(elf) if !(elf.class64 && elf.little_endian && elf.machine == EM_X86_64) => {
            Err(RunRefusal::Machine { role, path, elf })
        }
        Executable::Elf(e) if !e.dynamic => Err(RunRefusal::Static { role, path }),
        Executable::Elf(_) => Ok(()),
    }
}

/// The library: `explicit` (`--library`), else `$HUGESHM_RUN_LIBRARY`
/// (not as root), else beside the running executable
/// (`../lib/hugeshm/libhugeshm-run.so`, or a build tree's
/// `libhugeshm_run.so`), else `/usr/lib/hugeshm/`. The one found, and
/// every directory above it, must belong to root or this user, and none
/// may be writable by others (but a sticky directory).
pub(super) fn find_library(explicit: Option<&Path>) -> Result<PathBuf, RunRefusal> {
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
    let Some(found) = candidates.iter().find(|p| p.is_file()) else {
        return Err(RunRefusal::LibraryNotFound { candidates });
    };
    let lib = found.canonicalize().map_err(file_error(found))?;
    if lib.to_str().is_none_or(|s| s.contains([':', ' ', '\n'])) {
        return Err(RunRefusal::LibraryPath { path: lib });
    }
    // The file, then every directory up to /: each this user's or root's,
    // and none that others can write to (a sticky directory such as /tmp
    // only lets them replace their own entries, which the level below
    // would not accept).
    match replaceable(&lib, FileRole::Library, |uid| uid == 0 || uid == euid)? {
        Some(r) => Err(RunRefusal::LibraryReplaceable(r)),
        None => Ok(lib),
    }
}

/// Why another user could replace the file at `p` (in its `role`), `None`
/// when nobody but `trusted` users can: the file, then every directory
/// above it, each owned by a trusted uid and not writable by group or
/// others (a sticky directory may be: its entries are their owners'
/// alone); a symbolic link on the way (of a path not made canonical)
/// counts by its owner. The first that fails.
fn replaceable(
    p: &Path,
    role: FileRole,
    trusted: impl Fn(u32) -> bool,
) -> Result<Option<Replaceable>, RunRefusal> {
    for (i, p) in p.ancestors().enumerate() {
        if p.as_os_str().is_empty() {
            break;
        }
        let md = std::fs::symlink_metadata(p).map_err(file_error(p))?;
        let part = match i {
            0 => PathPart::File(role),
            _ if md.is_symlink() => PathPart::Link,
            _ => PathPart::Directory,
        };
        let exposure = if !trusted(md.uid()) {
            Exposure::Owner(md.uid())
        } else if md.mode() & 0o022 != 0
            && !(md.is_dir() && md.mode() & 0o1000 != 0)
            && !md.is_symlink()
        {
            Exposure::Writable(md.mode() & 0o7777)
        } else {
            continue;
        };
        return Ok(Some(Replaceable {
            path: p.to_path_buf(),
            part,
            exposure,
        }));
    }
    Ok(None)
}

/// Who other than root, the effective user and the user `sudo` ran
/// hugeshm for could replace the program run (COMMAND, or the `--target`
/// path): `given` as found (its symlinks count) and `canonical`, each file
/// and every directory above it. The server's own binary is the admin's
/// choice: a warning, never a refusal.
pub(super) fn replaceable_program(
    role: FileRole,
    given: &Path,
    canonical: &Path,
) -> Option<Replaceable> {
    let me = rustix::process::geteuid().as_raw();
    let sudo = hugeshm_sys::sudo_uid();
    let trusted = |uid: u32| uid == 0 || uid == me || Some(uid) == sudo;
    let given = std::env::current_dir()
        .map(|d| d.join(given))
        .unwrap_or_else(|_| given.to_path_buf());
    let found = [given.as_path(), canonical]
        .into_iter()
        .find_map(|p| replaceable(p, role, trusted).ok().flatten());
    found
}
