//! Asking a running MariaDB server for the settings it runs with, over its
//! socket, with its own client: `/usr/bin/mariadb`, refused unless it is a
//! regular file of root's (or the caller's) that nobody else can write, in
//! directories nobody else can write ([`hugeshm_sys::check_trusted_file`],
//! as the postgres binary is vetted), run with `--no-defaults` (no option
//! file of anyone's is read), only `PATH` and `LC_ALL` in its environment,
//! and the socket only where it belongs to the uid the server process runs
//! as (a socket another user planted at that path is not asked).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The client, where Debian's `mariadb-client` installs it.
pub const CLIENT: &str = "/usr/bin/mariadb";

/// The variables a plan reads, by name, with the server's version
/// (`version`), as `SHOW GLOBAL VARIABLES` gives them.
const VARIABLES: [&str; 7] = [
    "version",
    "large_pages",
    "innodb_buffer_pool_size",
    "innodb_buffer_pool_size_max",
    "innodb_log_buffer_size",
    "key_buffer_size",
    "aria_pagecache_buffer_size",
];

/// The server behind `socket`, run by `server_uid`: its variables that a
/// plan reads, `(name, value)`; `Err` says why it was not asked or did not
/// answer (within 10 s).
pub fn server_variables(socket: &Path, server_uid: u32) -> Result<Vec<(String, String)>, String> {
    let m = std::fs::symlink_metadata(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    if !m.file_type().is_socket() || m.uid() != server_uid {
        return Err(format!(
            "{} is not a socket of uid {server_uid}, the server's: not asked",
            socket.display()
        ));
    }
    hugeshm_sys::check_trusted_file(Path::new(CLIENT))
        .map_err(|e| format!("{CLIENT}: {e}").replace("refusing to run it", "not run"))?;
    let names: Vec<String> = VARIABLES.iter().map(|v| format!("'{v}'")).collect();
    let query = format!(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ({})",
        names.join(",")
    );
    let mut c = Command::new(CLIENT);
    c.arg("--no-defaults")
        .arg("--protocol=socket")
        .arg(format!("--socket={}", socket.display()))
        .args([
            "--user=root",
            "--batch",
            "--skip-column-names",
            "-e",
            &query,
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    hugeshm_sys::in_new_session(&mut c);
    let mut child = c.spawn().map_err(|e| format!("{CLIENT}: {e}"))?;
    let t0 = Instant::now();
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{CLIENT}: no answer within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{CLIENT} --socket={}: {} ({})",
            socket.display(),
            String::from_utf8_lossy(&out.stderr).trim(),
            out.status
        ));
    }
    Ok(parse_variables(&String::from_utf8_lossy(&out.stdout)))
}

/// `name<TAB>value` lines, the names asked for only.
fn parse_variables(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(n, _)| VARIABLES.contains(n))
        .map(|(n, v)| (n.to_owned(), v.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_variables_asked_for_are_kept() {
        let v = parse_variables(
            "innodb_buffer_pool_size\t268435456\nlarge_pages\tON\nsomething\t1\nversion\t10.11.19-MariaDB-0+deb12u1\n",
        );
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], ("innodb_buffer_pool_size".into(), "268435456".into()));
        assert!(server_variables(Path::new("/nonexistent.sock"), 0).is_err());
    }
}
