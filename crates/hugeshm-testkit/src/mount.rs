//! A hugetlbfs mount for a test, removed whatever the test did.

use std::process::Command;

/// A hugetlbfs mount of 2 MiB pages in a temporary directory, unmounted
/// (its files removed first) on drop.
pub struct HugetlbfsMount {
    dir: crate::TempDir,
}

impl HugetlbfsMount {
    /// Mounts it.
    pub fn new() -> Result<HugetlbfsMount, String> {
        let dir = crate::TempDir::new("hugetlbfs");
        let st = Command::new("mount")
            .args([
                "-t",
                "hugetlbfs",
                "-o",
                "pagesize=2M,mode=0700",
                "hugeshm-test",
            ])
            .arg(dir.path())
            .status()
            .map_err(|e| format!("mount: {e}"))?;
        if !st.success() {
            return Err(format!("mount -t hugetlbfs {}: {st}", dir.path().display()));
        }
        Ok(HugetlbfsMount { dir })
    }

    /// Its mount point.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for HugetlbfsMount {
    fn drop(&mut self) {
        if let Ok(rd) = std::fs::read_dir(self.path()) {
            for e in rd.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let _ = Command::new("umount").arg(self.path()).status();
    }
}
