//! Processes of the clusters in `/proc`, and the sweep of clusters whose
//! test process died.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::command::{pg_command, run_as, run_output, RunAs};
use super::{pg_bin_dir, TEMP_PREFIX, TEMP_ROOT};

/// True if `/proc/PID` exists and is not a zombie.
pub(super) fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat_fields(&stat).first(), Some(&"Z") | Some(&"X")),
        Err(_) => false,
    }
}

/// The fields of `/proc/PID/stat` after `(comm)`: state, ppid, ...
pub(super) fn stat_fields(stat: &str) -> Vec<&str> {
    match stat.rfind(')') {
        Some(i) => stat[i + 1..].split_whitespace().collect(),
        None => Vec::new(),
    }
}

/// Pids whose parent is `parent`, sorted.
pub(super) fn children_of(parent: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_fields(&s).get(1)?.parse::<u32>().ok())
                == Some(parent)
                && pid_alive(*pid)
        })
        .collect();
    out.sort_unstable();
    out
}

/// `/proc/PID/cmdline` with NULs as spaces, trimmed.
pub(super) fn process_title(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    Some(text.trim().to_owned())
}

/// `SIGKILL`s a process and waits (up to 10 s) until it is gone.
pub(super) fn kill_and_wait(pid: u32) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the server of a leftover cluster directory (if one runs) and
/// removes the directory; best effort.
pub(super) fn remove_cluster_dir(root: &Path, who: RunAs) {
    let datadir = root.join("data");
    let pm = std::fs::read_to_string(datadir.join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next()?.trim().parse::<u32>().ok())
        .filter(|pid| pid_alive(*pid));
    if let Some(pid) = pm {
        let stopped = pg_bin_dir()
            .ok_or_else(|| "no PostgreSQL".to_owned())
            .and_then(|bin| {
                let mut cmd = pg_command(who, &bin.join("pg_ctl"), Path::new("/"))?;
                cmd.arg("-D")
                    .arg(&datadir)
                    .args(["-m", "immediate", "-w", "-t", "30", "stop"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                run_output(cmd, "pg_ctl stop -m immediate")
            });
        if stopped.is_err() || pid_alive(pid) {
            kill_and_wait(pid);
        }
    }
    let _ = std::fs::remove_dir_all(root);
}

/// Removes cluster directories (`/tmp/hugeshm-pg-<pid>-<n>`) whose creating
/// process is gone, stopping their server first (a test killed before its
/// `Drop` ran leaves a running postmaster holding shared memory and huge
/// pages). Returns one line per directory removed. [`PgCluster::init`]
/// calls it.
pub fn sweep_stale_clusters() -> Vec<String> {
    let mut done = Vec::new();
    let Ok(rd) = std::fs::read_dir(TEMP_ROOT) else {
        return done;
    };
    let who = run_as().unwrap_or(RunAs::Current);
    for entry in rd.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(owner) = name
            .strip_prefix(TEMP_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, n)| {
                n.parse::<u32>().ok()?;
                pid.parse::<u32>().ok()
            })
        else {
            continue;
        };
        if owner == std::process::id() || pid_alive(owner) {
            continue;
        }
        let path = entry.path();
        remove_cluster_dir(&path, who);
        done.push(format!(
            "removed stale PostgreSQL test cluster {} (process {owner} is gone)",
            path.display()
        ));
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_skip_comm() {
        let f = stat_fields("123 (postgres: a) b) S 77 123 123 0");
        assert_eq!(f[0], "S");
        assert_eq!(f[1], "77");
    }
}
