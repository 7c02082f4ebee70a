//! The QEMU test guest: a 2-node NUMA machine (TCG, 1 GiB and one CPU per
//! node) with an optional NVDIMM on node 1, booted from an initramfs that
//! holds busybox, the test binaries, numactl, ndctl, mkfs.ext4 and the
//! NVDIMM and ext4 modules of the Debian guest kernel, and what a test adds
//! ([`Extra`]: files, programs with their libraries, directory trees, as
//! `guest_run.rs` packs PostgreSQL). The scripts that
//! build and boot it are in `scripts/guest/` (usable alone); this module
//! drives them from a test and parses what the guest prints on its serial
//! console (the `@@HUGESHM-GUEST` lines of `scripts/guest/init`).
//!
//! ```no_run
//! use hugeshm_testkit::guest::{Boot, Guest};
//! # use std::path::Path;
//! let guest = match Guest::find() {
//!     Ok(g) => g,
//!     Err(why) => return hugeshm_testkit::skip("my_test", why),
//! };
//! // In an integration test of the hugeshm crate: env!("CARGO_BIN_EXE_hugeshm").
//! let hugeshm = Path::new("target/debug/hugeshm");
//! let build_seconds = guest.build(Path::new("scenario.sh"), &[hugeshm]).unwrap();
//! let run = guest.boot(&Boot::default()).unwrap();
//! // The scenario ran `block status hugeshm status --json`.
//! let status = run.console.json("status").unwrap();
//! ```
//!
//! QEMU is killed on every path: at the boot's timeout (by `timeout(1)` and
//! by this module), and when a [`Guest`] is dropped or a test panics while a
//! boot runs. The guest's files (initramfs, console logs, NVDIMM image)
//! live in a temporary directory removed on drop, kept when
//! `HUGESHM_GUEST_KEEP=1`.

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Keep the guest's directory (initramfs, logs, NVDIMM image) when set to 1.
pub const KEEP_ENV: &str = "HUGESHM_GUEST_KEEP";

/// The prefix of every line the guest's `/init` reports with.
pub const MARKER: &str = "@@HUGESHM-GUEST ";

/// The directory of the guest scripts (`scripts/guest` of the workspace).
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/guest")
}

/// A guest this host can boot: QEMU and a guest kernel were found. Owns a
/// temporary directory for the initramfs, the logs and the NVDIMM image.
pub struct Guest {
    kernel: PathBuf,
    dir: PathBuf,
    boots: std::cell::Cell<u32>,
}

/// How to boot.
#[derive(Debug, Clone)]
pub struct Boot {
    /// Attach the NVDIMM (256 MiB on node 1, backed by [`Guest::nvdimm`],
    /// created on first use and kept across boots of this guest).
    pub nvdimm: bool,
    /// Add node 2: 512 MiB and no CPU (a CXL-like memory-only node).
    pub memory_only_node: bool,
    /// QEMU is killed after this long.
    pub timeout: Duration,
}

impl Default for Boot {
    fn default() -> Boot {
        Boot {
            nvdimm: false,
            memory_only_node: false,
            timeout: Duration::from_secs(240),
        }
    }
}

/// Something else the initramfs holds, installed at an absolute path in
/// the guest (`build-initramfs.sh`'s `-f`, `-e` and `-d`).
#[derive(Debug, Clone, PartialEq)]
pub enum Extra {
    /// A file.
    File(PathBuf, String),
    /// A program at its own path, with the libraries `ldd` lists.
    Program(PathBuf, String),
    /// A directory tree (modes kept, owned by root in the guest).
    Dir(PathBuf, String),
}

/// What one boot did.
#[derive(Debug, Clone)]
pub struct GuestRun {
    /// The console, parsed.
    pub console: Console,
    /// From starting QEMU to the guest's `/init` reporting (firmware, kernel,
    /// initramfs unpack), host time.
    pub boot_seconds: f64,
    /// From `/init` reporting to QEMU's exit, host time.
    pub run_seconds: f64,
    /// QEMU's exit status (0: the guest powered off).
    pub exit_code: Option<i32>,
    /// What QEMU wrote on its stdout and stderr.
    pub qemu_output: String,
}

impl Guest {
    /// The guest, when this host can run it; otherwise the reason, for
    /// [`crate::skip`]: not an x86-64 build, no `qemu-system-x86_64`, or no
    /// guest kernel (`scripts/guest/kernel.sh`). Root is not needed.
    pub fn find() -> Result<Guest, String> {
        if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            return Err("the guest runs x86-64 Linux test binaries".into());
        }
        let qemu = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("qemu-system-x86_64").is_file()))
            .unwrap_or(false);
        if !qemu {
            return Err(
                "qemu-system-x86_64 not found (Debian package qemu-system-x86; .ci/run installs it)"
                    .into(),
            );
        }
        let out = Command::new("bash")
            .arg(scripts_dir().join("kernel.sh"))
            .output()
            .map_err(|e| format!("running scripts/guest/kernel.sh: {e}"))?;
        let kernel = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || kernel.is_empty() {
            return Err(format!(
                "{} (Debian package linux-image-amd64; .ci/run installs it)",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Guest {
            kernel: PathBuf::from(kernel),
            dir: make_dir(),
            boots: std::cell::Cell::new(0),
        })
    }

    /// The guest kernel (`/boot/vmlinuz-VER`).
    pub fn kernel(&self) -> &Path {
        &self.kernel
    }

    /// The guest's temporary directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The NVDIMM's backing file: what reached the NVDIMM stays there
    /// across boots of this guest.
    pub fn nvdimm(&self) -> PathBuf {
        self.dir.join("nvdimm.img")
    }

    /// Builds the initramfs the next boots use, with `scenario` as
    /// `/scenario.sh` and `binaries` in `/usr/local/bin`; returns the host
    /// seconds it took.
    pub fn build(&self, scenario: &Path, binaries: &[&Path]) -> Result<f64, String> {
        self.build_with(scenario, binaries, &[])
    }

    /// [`Guest::build`] with `extras` in the image too.
    pub fn build_with(
        &self,
        scenario: &Path,
        binaries: &[&Path],
        extras: &[Extra],
    ) -> Result<f64, String> {
        let t0 = Instant::now();
        let mut c = Command::new("bash");
        c.arg(scripts_dir().join("build-initramfs.sh"))
            .arg("-o")
            .arg(self.dir.join("initramfs.gz"))
            .arg("-k")
            .arg(&self.kernel)
            .arg("-s")
            .arg(scenario)
            .env("TMPDIR", &self.dir);
        for b in binaries {
            c.arg("-b").arg(b);
        }
        for e in extras {
            let (opt, src, dest) = match e {
                Extra::File(src, dest) => ("-f", src, dest),
                Extra::Program(src, dest) => ("-e", src, dest),
                Extra::Dir(src, dest) => ("-d", src, dest),
            };
            let mut arg = src.clone().into_os_string();
            arg.push(":");
            arg.push(dest);
            c.arg(opt).arg(arg);
        }
        let out = c
            .output()
            .map_err(|e| format!("running build-initramfs.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "build-initramfs.sh failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(t0.elapsed().as_secs_f64())
    }

    /// Boots the last built initramfs and waits for QEMU to end (the guest
    /// powers off after its scenario) or the timeout. An error says why,
    /// with the end of the console; a guest that reported DONE is a
    /// success whatever its scenario printed.
    pub fn boot(&self, b: &Boot) -> Result<GuestRun, String> {
        // One guest at a time in a test process: the tests of several
        // scenarios share one binary and its threads, and QEMU's TCG
        // guests are slow enough alone.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.boots.get() + 1;
        self.boots.set(n);
        let log = self.dir.join(format!("console-{n}.log"));
        let pidfile = self.dir.join(format!("qemu-{n}.pid"));
        let out_path = self.dir.join(format!("qemu-{n}.out"));
        let qemu_out = fs::File::create(&out_path).map_err(|e| format!("{out_path:?}: {e}"))?;
        let qemu_err = qemu_out.try_clone().map_err(|e| e.to_string())?;
        let mut c = Command::new("bash");
        c.arg(scripts_dir().join("boot.sh"))
            .arg("-i")
            .arg(self.dir.join("initramfs.gz"))
            .arg("-l")
            .arg(&log)
            .arg("-p")
            .arg(&pidfile)
            .arg("-k")
            .arg(&self.kernel)
            .arg("-t")
            .arg(b.timeout.as_secs().max(1).to_string())
            .stdin(Stdio::null())
            .stdout(qemu_out)
            .stderr(qemu_err);
        if b.nvdimm {
            c.arg("-n").arg(self.nvdimm());
        }
        if b.memory_only_node {
            c.arg("-c");
        }
        let t0 = Instant::now();
        let child = c.spawn().map_err(|e| format!("running boot.sh: {e}"))?;
        let mut qemu = Qemu { child, pidfile };
        // timeout(1) ends QEMU at b.timeout; this is the backstop.
        let deadline = t0 + b.timeout + Duration::from_secs(15);
        let mut init_at: Option<Instant> = None;
        let status = loop {
            if init_at.is_none()
                && fs::read_to_string(&log)
                    .map(|t| t.contains(&format!("{MARKER}INIT ")))
                    .unwrap_or(false)
            {
                init_at = Some(Instant::now());
            }
            match qemu.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() > deadline => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("waiting for QEMU: {e}")),
            }
        };
        let end = Instant::now();
        drop(qemu);
        let text = fs::read_to_string(&log).unwrap_or_default();
        let console = Console::parse(&text);
        let qemu_output = fs::read_to_string(&out_path).unwrap_or_default();
        let init_at = init_at.unwrap_or(end);
        let run = GuestRun {
            boot_seconds: (init_at - t0).as_secs_f64(),
            run_seconds: (end - init_at).as_secs_f64(),
            exit_code: status.and_then(|s| s.code()),
            qemu_output,
            console,
        };
        let why = match (status, &run.console.done) {
            (None, _) => Some(format!("QEMU still ran after {:?}: killed", end - t0)),
            (Some(s), _) if s.code() == Some(124) => {
                Some(format!("QEMU timed out after {:?}", b.timeout))
            }
            (Some(s), None) => Some(format!("the guest ended without DONE (QEMU: {s})")),
            (Some(_), Some(_)) => None,
        };
        match why {
            Some(why) => Err(format!(
                "{why}\n--- QEMU said:\n{}\n--- end of the console ({}):\n{}",
                run.qemu_output.trim(),
                log.display(),
                run.console.tail(40)
            )),
            None => Ok(run),
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if std::env::var(KEEP_ENV).as_deref() == Ok("1") {
            eprintln!("{KEEP_ENV}=1: guest files kept in {}", self.dir.display());
            return;
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A fresh directory under the temporary directory.
fn make_dir() -> PathBuf {
    let base = std::env::temp_dir();
    for i in 0.. {
        let d = base.join(format!("hugeshm-guest-{}-{i}", std::process::id()));
        match fs::create_dir(&d) {
            Ok(()) => return d,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("creating {}: {e}", d.display()),
        }
    }
    unreachable!()
}

/// boot.sh (then timeout(1), then QEMU) while it runs; killed on drop.
struct Qemu {
    child: Child,
    pidfile: PathBuf,
}

impl Drop for Qemu {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SIGTERM to timeout(1), which passes it to QEMU and exits when QEMU
        // has (so QEMU is reaped).
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Then SIGKILL: QEMU first (timeout(1) killed first would leave it
        // running), checked by name so that a reused pid is never hit.
        let qemu_pid = fs::read_to_string(&self.pidfile)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|p| {
                fs::read_to_string(format!("/proc/{p}/comm"))
                    .map(|c| c.starts_with("qemu-system"))
                    .unwrap_or(false)
            });
        if let Some(pid) = qemu_pid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `block NAME CMD` of the scenario: CMD's stdout and status.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub name: String,
    pub rc: i32,
    /// Guest uptime when CMD started and ended, in seconds.
    pub begin: f64,
    pub end: f64,
    /// CMD's stdout, lines joined with `\n`.
    pub text: String,
}

/// The serial console of one boot, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Console {
    /// The whole console, carriage returns removed.
    pub text: String,
    /// Guest uptime when `/init` started.
    pub init: Option<f64>,
    /// `mark NAME` lines: the name and the guest uptime.
    pub marks: Vec<(String, f64)>,
    pub blocks: Vec<Block>,
    /// The scenario's status and the uptime when it ended.
    pub done: Option<(i32, f64)>,
}

impl Console {
    /// Parses the `@@HUGESHM-GUEST` lines and the blocks between them;
    /// everything else (kernel messages, unmarked output) stays in `text`.
    pub fn parse(raw: &str) -> Console {
        let text = raw.replace('\r', "");
        let mut c = Console {
            text: text.clone(),
            ..Console::default()
        };
        let mut open: Option<(String, f64, Vec<&str>)> = None;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(MARKER) else {
                if let Some((_, _, lines)) = &mut open {
                    lines.push(line);
                }
                continue;
            };
            let words: Vec<&str> = rest.split_whitespace().collect();
            let field = |key: &str| {
                words
                    .iter()
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            };
            let uptime = field("uptime").and_then(|v| v.parse::<f64>().ok());
            match (words.first().copied(), words.get(1)) {
                (Some("INIT"), _) => c.init = uptime,
                (Some("MARK"), Some(name)) => {
                    c.marks.push((name.to_string(), uptime.unwrap_or(0.0)))
                }
                (Some("BEGIN"), Some(name)) => {
                    open = Some((name.to_string(), uptime.unwrap_or(0.0), Vec::new()))
                }
                (Some("END"), Some(name)) => {
                    if let Some((open_name, begin, lines)) = open.take() {
                        if open_name == *name {
                            c.blocks.push(Block {
                                name: open_name,
                                rc: field("rc").and_then(|v| v.parse().ok()).unwrap_or(-1),
                                begin,
                                end: uptime.unwrap_or(begin),
                                text: lines.join("\n"),
                            });
                        }
                    }
                }
                (Some("DONE"), _) => {
                    c.done = Some((
                        field("rc").and_then(|v| v.parse().ok()).unwrap_or(-1),
                        uptime.unwrap_or(0.0),
                    ))
                }
                _ => {}
            }
        }
        c
    }

    /// The block `name`.
    pub fn block(&self, name: &str) -> Option<&Block> {
        self.blocks.iter().find(|b| b.name == name)
    }

    /// The stdout of block `name`, which must have exited 0 (otherwise an
    /// error with its stderr block).
    pub fn ok(&self, name: &str) -> Result<&str, String> {
        let b = self
            .block(name)
            .ok_or_else(|| format!("no block {name} on the console:\n{}", self.tail(30)))?;
        if b.rc != 0 {
            let err = self
                .block(&format!("{name}.stderr"))
                .map(|e| e.text.as_str())
                .unwrap_or("");
            return Err(format!(
                "block {name} exited {}:\n{}\nstderr:\n{err}",
                b.rc, b.text
            ));
        }
        Ok(&b.text)
    }

    /// The stdout of block `name` (exited 0) as one JSON document.
    pub fn json(&self, name: &str) -> Result<Value, String> {
        let text = self.ok(name)?;
        serde_json::from_str(text).map_err(|e| format!("block {name} is not JSON ({e}):\n{text}"))
    }

    /// [`Console::json`], for a test: panics with the reason.
    #[track_caller]
    pub fn expect_json(&self, name: &str) -> Value {
        self.json(name).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Guest seconds from `mark name` to the next mark (or the end of the
    /// scenario).
    pub fn mark_seconds(&self, name: &str) -> Option<f64> {
        let i = self.marks.iter().position(|(m, _)| m == name)?;
        let start = self.marks[i].1;
        let end = self
            .marks
            .get(i + 1)
            .map(|m| m.1)
            .or(self.done.map(|d| d.1))?;
        Some(end - start)
    }

    /// The last `n` lines of the console.
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self.text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_marks_blocks_and_done_among_kernel_lines() {
        let raw = "[    0.1] Linux version 6.1\r\n\
            @@HUGESHM-GUEST INIT uptime=3.47\r\n\
            @@HUGESHM-GUEST MARK pools uptime=4.60\r\n\
            @@HUGESHM-GUEST BEGIN pools.written uptime=4.86\r\n\
            10\r\n20\r\n\
            @@HUGESHM-GUEST END pools.written rc=0 uptime=4.91\r\n\
            @@HUGESHM-GUEST BEGIN bad uptime=5.0\r\n\
            {\r\n\
            @@HUGESHM-GUEST END bad rc=3 uptime=5.5\r\n\
            @@HUGESHM-GUEST BEGIN bad.stderr uptime=5.5\r\n\
            oops\r\n\
            @@HUGESHM-GUEST END bad.stderr rc=0 uptime=5.5\r\n\
            @@HUGESHM-GUEST MARK sysv uptime=5.85\r\n\
            @@HUGESHM-GUEST BEGIN j uptime=6\r\n\
            {\"a\": [1,\r\n 2]}\r\n\
            @@HUGESHM-GUEST END j rc=0 uptime=6.5\r\n\
            @@HUGESHM-GUEST DONE rc=0 uptime=10.75\r\n\
            [   10.7] reboot: Power down";
        let c = Console::parse(raw);
        assert_eq!(c.init, Some(3.47));
        assert_eq!(c.done, Some((0, 10.75)));
        assert_eq!(c.ok("pools.written").unwrap(), "10\n20");
        assert_eq!(c.block("pools.written").unwrap().begin, 4.86);
        let err = c.ok("bad").unwrap_err();
        assert!(err.contains("exited 3") && err.contains("oops"), "{err}");
        assert_eq!(c.json("j").unwrap()["a"][1], 2);
        assert!(c.ok("missing").is_err());
        assert!((c.mark_seconds("pools").unwrap() - 1.25).abs() < 1e-9);
        assert!((c.mark_seconds("sysv").unwrap() - 4.9).abs() < 1e-9);
        assert_eq!(c.tail(1), "[   10.7] reboot: Power down");
    }

    #[test]
    fn a_block_cut_off_by_the_end_of_the_console_is_absent() {
        let c = Console::parse("@@HUGESHM-GUEST BEGIN x uptime=1\n{\"a\":");
        assert!(c.block("x").is_none());
        assert_eq!(c.done, None);
    }
}

/// What booting a scenario gave a test file: its runs, why this host
/// cannot run it, or why the guest failed.
#[derive(Debug)]
pub enum Scenario {
    /// No QEMU or guest kernel here: the tests skip.
    Skip(String),
    /// One run per boot asked for, in order.
    Ran(Vec<GuestRun>),
    /// The initramfs or a boot failed: the tests fail.
    Failed(String),
}

impl Scenario {
    /// Builds an initramfs with `scenario` and `binaries` and boots it
    /// once per entry of `boots`, in one guest (so an NVDIMM image is kept
    /// from one boot to the next); prints the timings.
    pub fn run(scenario: &Path, binaries: &[&Path], boots: &[Boot]) -> Scenario {
        Scenario::run_with(scenario, binaries, &[], boots)
    }

    /// [`Scenario::run`] with `extras` in the image too.
    pub fn run_with(
        scenario: &Path,
        binaries: &[&Path],
        extras: &[Extra],
        boots: &[Boot],
    ) -> Scenario {
        let guest = match Guest::find() {
            Ok(g) => g,
            Err(why) => return Scenario::Skip(why),
        };
        match guest.build_with(scenario, binaries, extras) {
            Ok(seconds) => println!(
                "guest {}: initramfs {} KiB, built in {seconds:.1} s",
                scenario.display(),
                fs::metadata(guest.dir().join("initramfs.gz")).map_or(0, |m| m.len() >> 10)
            ),
            Err(e) => return Scenario::Failed(e),
        }
        let mut runs = Vec::new();
        for b in boots {
            match guest.boot(b) {
                Ok(run) => {
                    println!(
                        "guest {}: boot {:.1} s, run {:.1} s",
                        scenario.display(),
                        run.boot_seconds,
                        run.run_seconds
                    );
                    runs.push(run);
                }
                Err(e) => return Scenario::Failed(e),
            }
        }
        Scenario::Ran(runs)
    }

    /// The runs for test `test`: `None` after [`crate::skip`] where this
    /// host cannot run the guest; panics where the guest failed.
    pub fn runs(&self, test: &str) -> Option<&[GuestRun]> {
        match self {
            Scenario::Skip(why) => {
                crate::skip(test, why);
                None
            }
            Scenario::Ran(runs) => Some(runs),
            Scenario::Failed(why) => panic!("the guest did not run: {why}"),
        }
    }
}
