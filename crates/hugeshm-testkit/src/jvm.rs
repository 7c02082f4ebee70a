//! A real JVM for the doctor's tests: OpenJDK (Debian package
//! `default-jdk-headless`) running a single-file source program, `Hold.java`,
//! written to a temporary directory, that prints `ready` and holds until its
//! standard input closes. Killed and reaped on drop.

use crate::logged::LoggedChild;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The program the JVM runs.
const HOLD: &str = "public class Hold {\n    public static void main(String[] a) throws Exception {\n        System.out.println(\"ready\");\n        System.out.flush();\n        while (System.in.read() >= 0) {}\n    }\n}\n";

/// The java binary, where it is installed.
pub fn java_path() -> Option<PathBuf> {
    ["/usr/bin/java", "/usr/lib/jvm/default-java/bin/java"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Returns true (after [`crate::skip`]) when no java is installed.
pub fn skip_unless_java(test: &str) -> bool {
    if java_path().is_some() {
        return false;
    }
    crate::skip(
        test,
        "java is not installed (Debian package default-jdk-headless)",
    );
    true
}

/// A running JVM; killed and reaped on drop.
pub struct Jvm {
    child: LoggedChild,
    pid: u32,
    _dir: crate::TempDir,
}

impl Jvm {
    /// `java OPTIONS Hold.java`, waited for (up to 60 s) until it says
    /// `ready`: its heap and code cache are mapped by then.
    pub fn start(options: &[&str]) -> Result<Jvm, String> {
        let java = java_path().ok_or("java is not installed")?;
        let dir = crate::TempDir::new("jvm");
        let src = dir.path().join("Hold.java");
        std::fs::write(&src, HOLD).map_err(|e| format!("write {}: {e}", src.display()))?;
        let log = dir.path().join("jvm.log");
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&java)
            .args(options)
            .arg("-XX:-UsePerfData")
            .arg(&src)
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .env_remove("_JAVA_OPTIONS")
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", java.display()))?;
        let pid = child.id();
        let mut j = Jvm {
            child: LoggedChild::new(child, &log),
            pid,
            _dir: dir,
        };
        j.child
            .wait_ready("java", |log| log.lines().any(|l| l == "ready"))?;
        Ok(j)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What it printed so far (its warnings included).
    pub fn log(&self) -> String {
        self.child.log()
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        self.child.stop();
    }
}
