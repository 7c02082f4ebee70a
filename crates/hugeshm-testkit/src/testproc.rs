//! Running the `hugeshm-testproc` helper binary from tests.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Environment variable that, when set, names the `hugeshm-testproc`
/// binary to run (skipping the lookup and the on-demand build).
pub const TESTPROC_ENV: &str = "HUGESHM_TESTPROC";

const BIN_NAME: &str = "hugeshm-testproc";

/// How long [`TestProc::spawn`] waits for the JSON report line.
const REPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long [`TestProc`] waits for the process to exit after closing its
/// stdin before killing it.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// One shared-memory object created by `hugeshm-testproc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestObject {
    /// The kind from the command line, e.g. `sysv-huge`, `devshm`.
    pub kind: String,
    /// The System V shmid (sysv kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmid: Option<i32>,
    /// The System V key (0 = `IPC_PRIVATE`; sysv kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<i32>,
    /// Address of the mapping/attachment in the test process.
    #[serde(with = "hex_addr")]
    pub addr: u64,
    /// Size in bytes: segment size (sysv), file size (memfd, devshm) or
    /// mapping length (anonymous).
    pub size: u64,
    /// Page size the object was asked to use: the huge page size for
    /// `*-huge` kinds, the base page size otherwise.
    pub page_size: u64,
    /// File path (`/dev/shm/NAME` for devshm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl TestObject {
    /// True for the `*-huge` kinds.
    pub fn is_huge(&self) -> bool {
        self.kind.ends_with("-huge")
    }
}

/// The JSON line `hugeshm-testproc` prints once everything is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestProcReport {
    /// Pid of the test process.
    pub pid: u32,
    /// The objects, in command-line order.
    pub objects: Vec<TestObject>,
    /// The children `--forks` started (they end when the process does);
    /// absent from a report without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<u32>,
}

mod hex_addr {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(addr: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{addr:#x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        let hex = s
            .strip_prefix("0x")
            .ok_or_else(|| serde::de::Error::custom(format!("address {s:?} lacks 0x")))?;
        u64::from_str_radix(hex, 16).map_err(serde::de::Error::custom)
    }
}

/// Where `hugeshm-testproc` is expected: `$HUGESHM_TESTPROC` if set,
/// otherwise next to the running test executable, i.e.
/// `target/<profile>/hugeshm-testproc` for a test in `target/<profile>/deps/`.
pub fn testproc_path() -> PathBuf {
    if let Some(p) = std::env::var_os(TESTPROC_ENV) {
        return PathBuf::from(p);
    }
    profile_dir().join(BIN_NAME)
}

/// `target/<profile>` of the running executable.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir.pop();
    }
    dir
}

/// The `hugeshm-testproc` binary, built first when running under cargo
/// (for a test that ships it elsewhere, such as into the test guest).
pub fn testproc_built() -> Result<PathBuf, String> {
    ensure_built()
}

/// Returns the binary, building it first (once per process) when running
/// under cargo: `cargo test -p <other crate>` does not build the binaries of
/// its dependencies, and a stale binary would test old code.
fn ensure_built() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let path = testproc_path();
            if std::env::var_os(TESTPROC_ENV).is_some() {
                return Ok(path);
            }
            cargo_build(&["--bin", BIN_NAME, "-p", "hugeshm-testkit"], &path).map_err(|e| {
                format!("{e}; build it with `cargo build -p hugeshm-testkit --bin {BIN_NAME}` or point ${TESTPROC_ENV} at it")
            })
        })
        .clone()
}

/// `libhugeshm_run.so` (the `hugeshm-run-preload` crate) in
/// `target/<profile>/`, beside the `hugeshm` binary that finds it there,
/// built first (once per process) when running under cargo: no test
/// depends on a cdylib, so `cargo test` alone would not build it.
pub fn run_library_built() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let path = profile_dir().join("libhugeshm_run.so");
            cargo_build(&["-p", "hugeshm-run-preload"], &path)
                .map_err(|e| format!("{e}; build it with `cargo build -p hugeshm-run-preload`"))
        })
        .clone()
}

/// `cargo build ARGS` into this test's target directory and profile, when
/// running under cargo; then `path` must exist.
fn cargo_build(args: &[&str], path: &Path) -> Result<PathBuf, String> {
    if let Some(cargo) = std::env::var_os("CARGO") {
        let profile = profile_dir();
        let mut cmd = Command::new(cargo);
        cmd.arg("build")
            .arg("--quiet")
            .args(args)
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        if let Some(target_dir) = profile.parent() {
            cmd.arg("--target-dir").arg(target_dir);
        }
        match profile.file_name().and_then(OsStr::to_str) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        match cmd.stdin(Stdio::null()).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "hugeshm-testkit: cargo build {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!(
                "hugeshm-testkit: could not run cargo build {}: {e}",
                args.join(" ")
            ),
        }
    }
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        Err(format!("{} not found", path.display()))
    }
}

/// A running `hugeshm-testproc`, holding the objects it reported until
/// [`TestProc::finish`] or drop (which close its stdin and wait for it;
/// after 10 s it is killed).
///
/// Its stderr is collected (see [`TestProc::stderr`]) and echoed to the
/// test's stderr with a `[testproc PID]` prefix.
#[derive(Debug)]
pub struct TestProc {
    child: Child,
    stdin: Option<ChildStdin>,
    report: TestProcReport,
    stderr: Arc<Mutex<String>>,
    stderr_thread: Option<JoinHandle<()>>,
    done: bool,
}

impl TestProc {
    /// Runs `hugeshm-testproc ARGS...` and waits (up to 60 s) for its JSON
    /// report. If it exits without reporting, the error carries its exit
    /// status and stderr.
    pub fn spawn<I, S>(args: I) -> Result<TestProc, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let path = ensure_built()?;
        let args: Vec<_> = args
            .into_iter()
            .map(|a| a.as_ref().to_os_string())
            .collect();
        let shown = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = Command::new(&path)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn {} {shown}: {e}", path.display()))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_thread = child.stderr.take().map(|err| {
            let sink = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("[testproc {pid}] {line}");
                    if let Ok(mut s) = sink.lock() {
                        s.push_str(&line);
                        s.push('\n');
                    }
                }
            })
        });
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(out);
                let mut line = String::new();
                let res = reader.read_line(&mut line).map(|_| line);
                // Keep draining so a chatty child never blocks on stdout.
                let _ = tx.send(res);
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
            });
        }
        let mut proc_ = TestProc {
            child,
            stdin,
            report: TestProcReport {
                pid,
                objects: Vec::new(),
                children: Vec::new(),
            },
            stderr,
            stderr_thread,
            done: false,
        };
        let line = match rx.recv_timeout(REPORT_TIMEOUT) {
            Ok(Ok(line)) if !line.trim().is_empty() => line,
            Ok(Ok(_)) | Ok(Err(_)) | Err(_) => {
                let status = proc_.close_and_wait();
                let status = match status {
                    Ok(s) => s.to_string(),
                    Err(e) => e,
                };
                return Err(format!(
                    "{BIN_NAME} {shown}: no report ({status}); stderr:\n{}",
                    proc_.stderr()
                ));
            }
        };
        match serde_json::from_str::<TestProcReport>(line.trim()) {
            Ok(report) => {
                proc_.report = report;
                Ok(proc_)
            }
            Err(e) => Err(format!(
                "{BIN_NAME} {shown}: bad report {:?}: {e}",
                line.trim()
            )),
        }
    }

    /// Pid of the test process.
    pub fn pid(&self) -> u32 {
        self.report.pid
    }

    /// The objects it created, in command-line order.
    pub fn objects(&self) -> &[TestObject] {
        &self.report.objects
    }

    /// The whole report.
    pub fn report(&self) -> &TestProcReport {
        &self.report
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Closes stdin (the process then cleans up and exits) and waits for
    /// it, killing it after 10 s (an error then).
    pub fn finish(mut self) -> Result<ExitStatus, String> {
        self.close_and_wait()
    }

    fn close_and_wait(&mut self) -> Result<ExitStatus, String> {
        self.done = true;
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let result = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let status = self.child.wait();
                    break Err(format!(
                        "{BIN_NAME} pid {} did not exit within {EXIT_TIMEOUT:?} of stdin closing; killed ({status:?})",
                        self.child.id()
                    ));
                }
                Err(e) => break Err(format!("wait for {BIN_NAME} pid {}: {e}", self.child.id())),
            }
        };
        if let Some(t) = self.stderr_thread.take() {
            let _ = t.join();
        }
        result
    }
}

impl Drop for TestProc {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Err(e) = self.close_and_wait() {
            eprintln!("WARNING hugeshm-testkit: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_roundtrips_with_hex_addresses() {
        let json = r#"{"pid":42,"objects":[{"kind":"sysv-huge","shmid":7,"key":0,"addr":"0x7f0000200000","size":2097152,"page_size":2097152},{"kind":"devshm","addr":"0x1000","size":4096,"page_size":4096,"path":"/dev/shm/x"}]}"#;
        let r: TestProcReport = serde_json::from_str(json).unwrap();
        assert_eq!(r.pid, 42);
        assert_eq!(r.objects[0].addr, 0x7f00_0020_0000);
        assert!(r.objects[0].is_huge());
        assert_eq!(r.objects[1].shmid, None);
        assert_eq!(r.objects[1].path.as_deref(), Some("/dev/shm/x"));
        assert_eq!(serde_json::to_string(&r).unwrap(), json);
        assert!(serde_json::from_str::<TestObject>(
            r#"{"kind":"x","addr":"12","size":1,"page_size":1}"#
        )
        .is_err());
    }

    #[test]
    fn path_is_next_to_profile_dir() {
        let p = testproc_path();
        if std::env::var_os(TESTPROC_ENV).is_none() {
            assert_eq!(p.file_name(), Some(OsStr::new(BIN_NAME)));
            assert_ne!(
                p.parent().and_then(Path::file_name),
                Some(OsStr::new("deps"))
            );
        }
    }
}
