//! A server the tests start with its output in a log file and its stdin a
//! pipe: waited for until its log says it is ready, stopped by closing
//! stdin (killed after 10 s). The JVM and testpmd harnesses use it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// A child whose stdout and stderr go to `log`.
pub(crate) struct LoggedChild {
    pub(crate) child: Child,
    log: PathBuf,
}

impl LoggedChild {
    /// `child`, writing to `log`.
    pub(crate) fn new(child: Child, log: &Path) -> LoggedChild {
        LoggedChild {
            child,
            log: log.to_owned(),
        }
    }

    /// What it printed so far.
    pub(crate) fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Waits up to 60 s for `ready(log)`; an error (naming `what`, with the
    /// log) if it exits first or the time runs out.
    pub(crate) fn wait_ready(
        &mut self,
        what: &str,
        ready: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!("{what} exited ({st}): {}", self.log()));
            }
            if ready(&self.log()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("{what} not ready after 60 s: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Closes its stdin and waits up to 10 s for it to end; kills it if it
    /// does not.
    pub(crate) fn stop(&mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
