//! Scratch directories for tests, removed on drop (panics included).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh directory under the system temp dir, named
/// `hugeshm-WHAT-PID-N` (N counts within the process), removed with all
/// it holds when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory (panics where it cannot: a test helper).
    pub fn new(what: &str) -> TempDir {
        TempDir::under(&std::env::temp_dir(), what)
    }

    /// [`TempDir::new`] below `parent` (a tmpfs such as /dev/shm, say).
    pub fn under(parent: &Path, what: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = parent.join(format!("hugeshm-{what}-{}-{n}", std::process::id()));
        // A directory left by an earlier process with the same pid.
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        TempDir(p)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `path/rel`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_dirs_differ_and_vanish_on_drop() {
        let a = TempDir::new("tempdir-test");
        let b = TempDir::new("tempdir-test");
        assert_ne!(a.path(), b.path());
        std::fs::write(a.join("f"), b"x").unwrap();
        let p = a.path().to_path_buf();
        drop(a);
        assert!(!p.exists());
        assert!(b.path().is_dir());
    }
}
