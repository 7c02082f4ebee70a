//! The servers `hugeshm run` is tested on that reserve address space, then
//! commit inside it: MariaDB 10.11 (Debian's `mariadb-server`; its buffer
//! pool is a `MAP_FIXED` commit inside an 8 TiB `PROT_NONE` reservation)
//! and OpenJDK 17 (`default-jdk-headless`; its heap is a `MAP_FIXED` commit
//! inside the heap's `PROT_NONE` reservation).
//!
//! [`MariaDb`] is a private instance: a data directory made by
//! `mariadb-install-db --no-defaults` in a [`TempDir`], started with
//! `--no-defaults --skip-networking` and a socket of its own (so it never
//! meets the distribution's service), run as root (`--user=root`), under a
//! wrapper command (`hugeshm run ... --`) the test gives. [`Drop`] kills a
//! server still running and removes the directory. [`JavaProgram`] is a
//! Java source compiled with the JDK's `javac` into a [`TempDir`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::TempDir;

/// Debian's MariaDB server.
pub const MARIADBD: &str = "/usr/sbin/mariadbd";
/// OpenJDK 17 as Debian installs it.
pub const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// Why the MariaDB tests cannot run here (`None`: they can).
pub fn mariadb_unavailable() -> Option<String> {
    let needed = [MARIADBD, "/usr/bin/mariadb-install-db", "/usr/bin/mariadb"];
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "no {missing:?} (Debian: apt-get install mariadb-server)"
        ));
    }
    (!crate::is_root()).then(|| "MariaDB runs here as root (--user=root)".to_owned())
}

/// Why the JVM tests cannot run here (`None`: they can).
pub fn jdk17_unavailable() -> Option<String> {
    ["bin/java", "bin/javac"]
        .iter()
        .any(|b| !Path::new(JDK17).join(b).exists())
        .then(|| {
            format!("no {JDK17}/bin/java and javac (Debian: apt-get install default-jdk-headless)")
        })
}

/// A private MariaDB instance.
#[derive(Debug)]
pub struct MariaDb {
    dir: TempDir,
    child: Option<Child>,
}

impl MariaDb {
    /// A fresh data directory (`mariadb-install-db --no-defaults`).
    pub fn install() -> Result<MariaDb, String> {
        let dir = TempDir::new("mariadb");
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg("--user=root")
            .arg("--auth-root-authentication-method=socket")
            .output()
            .map_err(|e| format!("mariadb-install-db: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mariadb-install-db: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(MariaDb { dir, child: None })
    }

    /// The socket the server listens on.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("mysqld.sock")
    }

    /// The server's log (its stderr and stdout, where `hugeshm run`'s
    /// lines go too).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Starts `mariadbd` under `wrapper` (the words before it: `hugeshm
    /// run ... --`, or nothing) with a buffer pool of `pool` (`256M`) and
    /// the `extra` options, and waits until it answers on its socket (at
    /// most 120 s). Returns how long that took.
    pub fn start(
        &mut self,
        wrapper: &[OsString],
        pool: &str,
        extra: &[&str],
    ) -> Result<Duration, String> {
        let log = std::fs::File::create(self.dir.join("server.log")).map_err(|e| e.to_string())?;
        let mut words: Vec<OsString> = wrapper.to_vec();
        words.push(MARIADBD.into());
        for a in [
            "--no-defaults".to_owned(),
            format!("--datadir={}", self.dir.join("data").display()),
            format!("--socket={}", self.socket().display()),
            format!("--pid-file={}", self.dir.join("mariadbd.pid").display()),
            "--skip-networking".to_owned(),
            "--user=root".to_owned(),
            format!("--innodb-buffer-pool-size={pool}"),
        ] {
            words.push(a.into());
        }
        words.extend(extra.iter().map(OsString::from));
        let t0 = Instant::now();
        let child = Command::new(&words[0])
            .args(&words[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{:?}: {e}", words[0]))?;
        self.child = Some(child);
        while t0.elapsed() < Duration::from_secs(120) {
            if self.query("SELECT 1").is_ok() {
                return Ok(t0.elapsed());
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "mariadbd ended ({st}) before it answered:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("mariadbd did not answer in 120 s:\n{}", self.log()))
    }

    /// The server's pid (`hugeshm run` execs it: the child itself).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `mariadb -N -B -e SQL` over the socket: the rows as text.
    pub fn query(&self, sql: &str) -> Result<String, String> {
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-u", "root", "-N", "-B", "-e", sql])
            .output()
            .map_err(|e| format!("mariadb: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// `mariadb-admin shutdown`, then waits for the server (at most 60 s).
    pub fn shutdown(&mut self) -> Result<ExitStatus, String> {
        let out = Command::new("mariadb-admin")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-u", "root", "shutdown"])
            .output()
            .map_err(|e| format!("mariadb-admin: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let mut child = self.child.take().ok_or("not started")?;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
                return Ok(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err("mariadbd did not stop within 60 s of its shutdown".to_owned())
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id();
            let _ = c.kill();
            let _ = c.wait();
            // What `hugeshm run` recorded for the killed server.
            remove_run_records(pid);
        }
    }
}

/// Removes the `hugeshm run` records of `pid` (a server the test killed:
/// it could not remove them itself).
pub fn remove_run_records(pid: u32) {
    let prefix = format!("hugeshm-run.{pid}.");
    for e in std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A Java program compiled with OpenJDK 17's `javac`.
#[derive(Debug)]
pub struct JavaProgram {
    dir: TempDir,
    class: String,
}

impl JavaProgram {
    /// Compiles `source`, whose public class is `class`.
    pub fn compile(class: &str, source: &str) -> Result<JavaProgram, String> {
        let dir = TempDir::new("java");
        let file = dir.join(format!("{class}.java"));
        std::fs::write(&file, source).map_err(|e| e.to_string())?;
        let out = Command::new(Path::new(JDK17).join("bin/javac"))
            .arg("-d")
            .arg(dir.path())
            .arg(&file)
            .output()
            .map_err(|e| format!("javac: {e}"))?;
        if !out.status.success() {
            return Err(format!("javac: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(JavaProgram {
            dir,
            class: class.to_owned(),
        })
    }

    /// Its directory: run it there, so that a crash report
    /// (`hs_err_pid*.log`, written to the working directory) goes with it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `java JVM_OPTIONS -cp DIR CLASS` as words (after a wrapper).
    pub fn words(&self, jvm_options: &[&str]) -> Vec<OsString> {
        let mut w: Vec<OsString> = vec![Path::new(JDK17).join("bin/java").into()];
        w.extend(jvm_options.iter().map(OsString::from));
        w.push("-cp".into());
        w.push(self.dir.path().into());
        w.push(self.class.clone().into());
        w
    }
}
