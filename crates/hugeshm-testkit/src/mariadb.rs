//! A private MariaDB server for the doctor's tests: a data directory made
//! by `mariadb-install-db --no-defaults` in a temporary directory, an
//! option file beside it (`my.cnf`: the data directory, a socket there,
//! no network, `user = root`, and the test's own lines under
//! `[mariadbd]`), and `mariadbd --defaults-file=my.cnf`. The server is
//! killed and the directory removed on drop, panics included.

use crate::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server binary, where Debian's `mariadb-server` installs it.
pub fn mariadbd_path() -> Option<PathBuf> {
    ["/usr/sbin/mariadbd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file() && Path::new("/usr/bin/mariadb-install-db").is_file())
}

/// Returns true (after [`crate::skip`]) when MariaDB is not installed.
pub fn skip_unless_mariadb(test: &str) -> bool {
    if mariadbd_path().is_some() {
        return false;
    }
    crate::skip(
        test,
        "mariadbd or mariadb-install-db is not installed (Debian package mariadb-server)",
    );
    true
}

/// A private MariaDB server (see the module's text).
#[derive(Debug)]
pub struct MariaDb {
    server: Option<Child>,
    dir: TempDir,
}

impl MariaDb {
    /// A fresh data directory and an option file whose `[mariadbd]` group
    /// holds `lines` after the private settings.
    pub fn init(lines: &str) -> Result<MariaDb, String> {
        let dir = TempDir::new("mariadb");
        let data = dir.join("data");
        let out = Command::new("/usr/bin/mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
            ])
            .arg(format!("--datadir={}", data.display()))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("mariadb-install-db: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mariadb-install-db: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cnf = format!(
            "[mariadbd]\ndatadir = {}\nsocket = {}\npid-file = {}\nlog-error = {}\n\
             skip-networking\nuser = root\n{lines}",
            data.display(),
            dir.join("mysqld.sock").display(),
            dir.join("mysqld.pid").display(),
            dir.join("error.log").display(),
        );
        std::fs::write(dir.join("my.cnf"), cnf).map_err(|e| format!("my.cnf: {e}"))?;
        Ok(MariaDb { server: None, dir })
    }

    /// The option file the server is started with.
    pub fn option_file(&self) -> PathBuf {
        self.dir.join("my.cnf")
    }

    /// The server's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// Starts `mariadbd --defaults-file=my.cnf` and waits (60 s at most)
    /// until its socket is there: all it maps at start is mapped. Its pid.
    pub fn start(&mut self) -> Result<u32, String> {
        self.stop();
        let sock = self.dir.join("mysqld.sock");
        let child = Command::new(mariadbd_path().ok_or("no mariadbd")?)
            .arg(format!("--defaults-file={}", self.option_file().display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("mariadbd: {e}"))?;
        let pid = child.id();
        self.server = Some(child);
        let t0 = Instant::now();
        while !sock.exists() {
            if let Some(Ok(Some(status))) = self.server.as_mut().map(|c| c.try_wait()) {
                self.server = None;
                return Err(format!("mariadbd exited ({status}): {}", self.error_log()));
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!("no socket after 60 s: {}", self.error_log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(pid)
    }

    /// Kills the server (it holds nothing the test keeps) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.dir.join("mysqld.sock"));
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
    }
}
