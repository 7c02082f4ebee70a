//! Running the PostgreSQL programs: as whom, with which environment, in
//! which cgroup.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::PG_USER;

/// Who runs the PostgreSQL programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunAs {
    /// The current (non-root) user.
    Current,
    /// Another user, through `setpriv` (we are root).
    User { uid: u32, gid: u32 },
}

/// `id -u NAME` / `id -g NAME` (goes through NSS like everything else).
pub(super) fn lookup_user(name: &str) -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new(find_tool("id")?)
            .args([flag, name])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run id {flag} {name}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "no OS user {name:?} ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .parse()
            .map_err(|e| format!("id {flag} {name}: {e} in {:?}", text.trim()))
    };
    Ok((id("-u")?, id("-g")?))
}

/// Finds a system tool in the usual directories (the child environment is
/// cleared, so we never rely on the caller's `PATH` alone).
pub(super) fn find_tool(name: &str) -> Result<PathBuf, String> {
    let mut dirs: Vec<PathBuf> = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} not found (util-linux/coreutils)"))
}

pub(super) fn run_as() -> Result<RunAs, String> {
    if crate::is_root() {
        let (uid, gid) = lookup_user(PG_USER)?;
        Ok(RunAs::User { uid, gid })
    } else {
        Ok(RunAs::Current)
    }
}

/// Builds the command line for `program args...` run as `who`, with a clean
/// environment, in `cwd`.
pub(super) fn pg_command(who: RunAs, program: &Path, cwd: &Path) -> Result<Command, String> {
    pg_command_in(who, program, cwd, None)
}

/// [`pg_command`], started inside the cgroup whose `cgroup.procs` is
/// `cgroup_procs` (through `sh`, which moves itself in, then execs).
pub(super) fn pg_command_in(
    who: RunAs,
    program: &Path,
    cwd: &Path,
    cgroup_procs: Option<&Path>,
) -> Result<Command, String> {
    let mut cmd = match cgroup_procs {
        Some(procs) => {
            let mut c = Command::new(find_tool("sh")?);
            c.arg("-c")
                .arg("echo $$ > \"$0\" && shift && exec \"$@\"")
                .arg(procs)
                .arg("--");
            c
        }
        None => match who {
            RunAs::Current => Command::new(program),
            RunAs::User { .. } => Command::new(find_tool("setpriv")?),
        },
    };
    match (who, cgroup_procs) {
        (RunAs::Current, None) => {}
        (RunAs::Current, Some(_)) => {
            cmd.arg(program);
        }
        (RunAs::User { uid, gid }, procs) => {
            if procs.is_some() {
                cmd.arg(find_tool("setpriv")?);
            }
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--init-groups")
                .arg("--")
                .arg(program);
        }
    }
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .env("HOME", cwd)
        .env("PGCONNECT_TIMEOUT", "10")
        .current_dir(cwd)
        .stdin(Stdio::null());
    Ok(cmd)
}

/// Runs a command to completion; `Err` with status, stdout and stderr when
/// it fails.
pub(super) fn run_output(mut cmd: Command, what: &str) -> Result<String, String> {
    let out: Output = cmd.output().map_err(|e| format!("{what}: spawn: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "{what} failed ({}): {}{}{}",
        out.status,
        stderr.trim(),
        if stderr.trim().is_empty() || stdout.trim().is_empty() {
            ""
        } else {
            " | stdout: "
        },
        stdout.trim()
    ))
}

/// Single-quotes a value for `postgresql.conf`.
pub(super) fn conf_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// Setting names are plain identifiers (`SHOW`/`-C` arguments, conf keys).
pub(super) fn check_setting_name(name: &str) -> Result<(), String> {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        Ok(())
    } else {
        Err(format!("invalid setting name {name:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_conf_values() {
        assert_eq!(conf_quote("128MB"), "'128MB'");
        assert_eq!(conf_quote(""), "''");
        assert_eq!(conf_quote("a'b\\c"), "'a''b\\\\c'");
        assert!(check_setting_name("shared_memory_size_in_huge_pages").is_ok());
        assert!(check_setting_name("x; DROP").is_err());
        assert!(check_setting_name("").is_err());
    }
}
