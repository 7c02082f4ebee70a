//! A JVM by name: a running one's options (its `/proc/PID/cmdline` and the
//! option variables of its environment, which the JVM reads too), and
//! `java -XX:+PrintFlagsFinal -version` of a trusted `java` for the
//! defaults a command line leaves out.
//!
//! A process counts as a JVM only where the kernel's exe link names `java`.
//! What root runs is never chosen by another user: the running JVM's own
//! executable only where it passes [`hugeshm_sys::check_trusted_file`] (a
//! regular file of root's or the caller's that nobody else can write, in
//! directories nobody else can write), else a `java` command line's own
//! absolute path, `/usr/bin/java` (resolved) or `/usr/lib/jvm/*/bin/java`,
//! vetted the same way. It runs with an empty environment, in `/`, no
//! standard input, in a session of its own, and with only the options that
//! size the heap, code cache and collector ([`sizing_options`]): an agent, an
//! options file or a log file of the command line never reaches it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The most bytes read of a process's cmdline or environ.
const PROC_TEXT_MAX: u64 = 1 << 20;

/// The environment variables whose options a JVM reads, in the order it
/// reads them (later ones win): `JAVA_TOOL_OPTIONS` and `JDK_JAVA_OPTIONS`
/// come before the command line, `_JAVA_OPTIONS` after it.
pub const OPTION_VARIABLES: [&str; 3] = ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"];

/// A running JVM's options.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunningJvm {
    /// Pid.
    pub pid: u32,
    /// Its executable (the exe link).
    pub exe: PathBuf,
    /// Its command line, the executable's word first.
    pub args: Vec<String>,
    /// `(variable, value)` of the [`OPTION_VARIABLES`] its environment sets.
    pub env_options: Vec<(String, String)>,
    /// Its real uid and its filesystem gid (`/proc/PID/status`).
    pub uid: Option<u32>,
    /// Its filesystem gid.
    pub gid: Option<u32>,
}

/// Why a JVM could not be read or asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JvmError {
    /// No such process, or its exe link is unreadable.
    #[error("pid {pid}: {error}")]
    NoProcess {
        /// Pid.
        pid: u32,
        /// The read's error.
        error: std::io::Error,
    },
    /// Its executable is not named `java`.
    #[error("pid {pid} runs {exe}, not a java: name a JVM's pid or give its command line")]
    NotJava {
        /// Pid.
        pid: u32,
        /// The exe link.
        exe: String,
    },
    /// No `java` hugeshm may run.
    #[error("no trusted java: {0}")]
    NoJava(String),
    /// `java -XX:+PrintFlagsFinal -version` failed.
    #[error("{command}: {output}")]
    Command {
        /// What was run.
        command: String,
        /// What it said.
        output: String,
    },
}

/// `pid`'s options, under the `/proc` root `proc`.
pub fn running_jvm(proc: &Path, pid: u32) -> Result<RunningJvm, JvmError> {
    let dir = proc.join(pid.to_string());
    let exe =
        std::fs::read_link(dir.join("exe")).map_err(|error| JvmError::NoProcess { pid, error })?;
    // A java upgraded under a running JVM reads `…/java (deleted)`.
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    if name.as_deref().map(|n| n.trim_end_matches(" (deleted)")) != Some("java") {
        return Err(JvmError::NotJava {
            pid,
            exe: exe.display().to_string(),
        });
    }
    let words = |name: &str| -> Vec<String> {
        let mut raw = Vec::new();
        let _ = std::fs::File::open(dir.join(name))
            .and_then(|f| f.take(PROC_TEXT_MAX).read_to_end(&mut raw));
        raw.split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect()
    };
    let env_options = words("environ")
        .into_iter()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            OPTION_VARIABLES
                .contains(&k)
                .then(|| (k.to_owned(), v.to_owned()))
        })
        .collect();
    let status =
        crate::read::read_parse(&dir.join("status"), hugeshm_parse::pid_status::parse).ok();
    Ok(RunningJvm {
        pid,
        args: words("cmdline"),
        env_options,
        uid: status.as_ref().and_then(|s| s.uid),
        gid: status.as_ref().and_then(|s| s.fs_gid),
        exe,
    })
}

/// The feature release of the JDK whose `bin/java` is `exe`, from its
/// `release` file (`JAVA_VERSION="17.0.15"`): a regular file, at most
/// 64 KiB read; it only picks which JDK's layout is counted.
pub fn release_major(exe: &Path) -> Option<u32> {
    let release = exe.parent()?.parent()?.join("release");
    // Any user may run a java of their own: no FIFO is waited on, no link
    // followed (OpenCheck: O_NOFOLLOW|O_NONBLOCK, a regular file).
    let f = hugeshm_sys::OpenCheck::read().open(&release).ok()?;
    let mut text = String::new();
    std::fs::File::from(f.into_fd())
        .take(64 << 10)
        .read_to_string(&mut text)
        .ok()?;
    hugeshm_parse::jvm_args::java_major(&text)
}

/// The `java` to ask: `exe` (a running JVM's executable, or a command
/// line's absolute path to a `java`) where it passes the trust check, else
/// `/usr/bin/java` resolved, else the first `/usr/lib/jvm/*/bin/java`, each
/// vetted by [`hugeshm_sys::check_trusted_file`].
pub fn trusted_java(exe: Option<&Path>) -> Result<PathBuf, JvmError> {
    let mut refused = Vec::new();
    let mut try_one = |p: &Path| match hugeshm_sys::check_trusted_file(p) {
        Ok(_) => Some(p.to_path_buf()),
        Err(e) => {
            refused.push(e.to_string());
            None
        }
    };
    if let Some(p) = exe.filter(|p| p.is_absolute() && p.file_name().is_some_and(|n| n == "java")) {
        if let Some(ok) = try_one(p) {
            return Ok(ok);
        }
    }
    if let Ok(p) = std::fs::canonicalize("/usr/bin/java") {
        if let Some(ok) = try_one(&p) {
            return Ok(ok);
        }
    }
    let mut jvms: Vec<PathBuf> = std::fs::read_dir("/usr/lib/jvm")
        .map(|d| d.flatten().map(|e| e.path().join("bin/java")).collect())
        .unwrap_or_default();
    jvms.sort();
    for p in jvms.iter().filter(|p| p.symlink_metadata().is_ok()) {
        if let Some(ok) = try_one(p) {
            return Ok(ok);
        }
    }
    Err(JvmError::NoJava(if refused.is_empty() {
        "none at /usr/bin/java or /usr/lib/jvm/*/bin/java".to_owned()
    } else {
        refused.join("; ")
    }))
}

/// The options of `words` that size a JVM's memory and nothing else: heap
/// and RAM limits, the code cache, tiered compilation, the collector, its
/// region size, the large page size. Each value is plain (letters, digits,
/// `.`): no path, no file, no agent.
pub fn sizing_options<S: AsRef<str>>(words: &[S]) -> Vec<String> {
    const VALUED: [&str; 12] = [
        "-Xmx",
        "-Xms",
        "-XX:MaxHeapSize=",
        "-XX:InitialHeapSize=",
        "-XX:ReservedCodeCacheSize=",
        "-XX:MaxRAM=",
        "-XX:MaxRAMPercentage=",
        "-XX:MaxRAMFraction=",
        "-XX:MinRAMPercentage=",
        "-XX:G1HeapRegionSize=",
        "-XX:LargePageSizeInBytes=",
        "-XX:ActiveProcessorCount=",
    ];
    const SWITCHES: [&str; 9] = [
        "TieredCompilation",
        "UseG1GC",
        "UseSerialGC",
        "UseParallelGC",
        "UseZGC",
        "UseShenandoahGC",
        "SegmentedCodeCache",
        "UseCompressedOops",
        "UseContainerSupport",
    ];
    words
        .iter()
        .map(AsRef::as_ref)
        .filter(|w| {
            VALUED.iter().any(|p| {
                w.strip_prefix(p).is_some_and(|v| {
                    !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
                })
            }) || w
                .strip_prefix("-XX:")
                .and_then(|s| s.strip_prefix(['+', '-']))
                .is_some_and(|s| SWITCHES.contains(&s))
        })
        .map(str::to_owned)
        .collect()
}

/// `java OPTIONS -XX:+PrintFlagsFinal -version`'s output (the flags, then
/// the version lines it prints on standard error), where `OPTIONS`
/// are the [`sizing_options`] of `words` with large pages, pre-touch and
/// the perf data file off (the question reserves and touches nothing).
pub fn flags_final<S: AsRef<str>>(java: &Path, words: &[S]) -> Result<String, JvmError> {
    let mut args = sizing_options(words);
    args.extend(
        [
            "-XX:-UseLargePages",
            "-XX:-AlwaysPreTouch",
            "-XX:-UsePerfData",
            "-XX:+PrintFlagsFinal",
            "-version",
        ]
        .map(str::to_owned),
    );
    let line = format!("{} {}", java.display(), args.join(" "));
    let mut c = Command::new(java);
    c.args(&args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdin(Stdio::null());
    hugeshm_sys::in_new_session(&mut c);
    let out = c.output().map_err(|e| JvmError::Command {
        command: line.clone(),
        output: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(JvmError::Command {
            command: line,
            output: format!(
                "{} ({})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            ),
        });
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_release_fifo_is_not_waited_on() {
        let t = hugeshm_testkit::TempDir::new("jdk-release");
        std::fs::create_dir_all(t.join("bin")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(t.join("release"))
            .status();
        assert!(made.is_ok_and(|s| s.success()));
        assert_eq!(release_major(&t.join("bin/java")), None);
        std::fs::remove_file(t.join("release")).unwrap();
        std::fs::write(t.join("release"), "JAVA_VERSION=\"17.0.15\"\n").unwrap();
        assert_eq!(release_major(&t.join("bin/java")), Some(17));
    }

    #[test]
    fn only_sizing_options_reach_the_java_asked() {
        let words = [
            "-Xmx1g",
            "-javaagent:/home/u/a.jar",
            "-XX:+UseLargePages",
            "-XX:OnError=/bin/sh",
            "-XX:ReservedCodeCacheSize=64m",
            "-XX:+UseParallelGC",
            "-Xlog:gc:file=/etc/x",
            "-XX:MaxRAMPercentage=50.0",
            "-XX:MaxHeapSize=1g/x",
            "-XX:-TieredCompilation",
            "@/home/u/args",
        ];
        assert_eq!(
            sizing_options(&words),
            [
                "-Xmx1g",
                "-XX:ReservedCodeCacheSize=64m",
                "-XX:+UseParallelGC",
                "-XX:MaxRAMPercentage=50.0",
                "-XX:-TieredCompilation"
            ]
        );
    }

    #[test]
    fn a_process_not_named_java_by_its_exe_is_refused() {
        let me = std::process::id();
        match running_jvm(Path::new("/proc"), me) {
            Err(JvmError::NotJava { pid, .. }) => assert_eq!(pid, me),
            other => panic!("{other:?}"),
        }
    }
}
