//! Shared helpers of the live tests: root check, pool guard, temporary
//! mounts (always unmounted), leak check, unique names.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use hugeshm_testkit::{skip_unless_root, HostState, PoolGuard};

pub const MIB2: u64 = 2 << 20;
pub const GIB: u64 = 1 << 30;

/// Root + the pool lock, or `None` (SKIP printed).
pub fn pool_guard(test: &str) -> Option<PoolGuard> {
    if skip_unless_root(test) {
        return None;
    }
    Some(PoolGuard::new().expect("pool guard"))
}

/// Reserves 1 GiB pages if the kernel can; prints SKIP for that size
/// otherwise.
pub fn try_gigantic(pool: &PoolGuard, test: &str, pages: u64) -> bool {
    if !pool.page_sizes().contains(&GIB) {
        println!("SKIP {test} [1 GiB]: the kernel offers no 1 GiB pages");
        return false;
    }
    match pool.ensure_free(GIB, pages) {
        Ok(()) => true,
        Err(e) => {
            println!("SKIP {test} [1 GiB]: cannot reserve {pages} x 1 GiB: {e}");
            false
        }
    }
}

/// A unique region name for this test process.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "t-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A file system mounted on a fresh directory for the life of the value;
/// unmounted (lazily if busy) and the directory removed on drop, also when
/// the test panics.
pub struct TempMount {
    pub dir: PathBuf,
}

impl TempMount {
    pub fn new(fstype: &str, options: &str) -> TempMount {
        let dir = std::env::temp_dir().join(unique(&format!("mnt-{fstype}")));
        std::fs::create_dir_all(&dir).expect("mkdir mount point");
        let st = Command::new("mount")
            .args(["-t", fstype, "-o", options, "none"])
            .arg(&dir)
            .status()
            .expect("run mount");
        if !st.success() {
            let _ = std::fs::remove_dir(&dir);
            panic!(
                "mount -t {fstype} -o {options} {} failed: {st}",
                dir.display()
            );
        }
        TempMount { dir }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Entries in the mounted directory.
    pub fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TempMount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("umount {} failed; detaching lazily", self.dir.display());
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Asserts that the host state is as captured in `before`.
#[track_caller]
pub fn assert_no_leak(before: &HostState, what: &str) {
    let after = HostState::capture().expect("capture host state");
    let diff = before.diff(&after);
    assert!(diff.is_empty(), "{what}: left behind: {diff:#?}");
}

/// `(nr, free, resv)` of a page size from sysfs.
pub fn pool_counts(page: u64) -> (u64, u64, u64) {
    let dir = format!("/sys/kernel/mm/hugepages/hugepages-{}kB", page / 1024);
    let rd = |f: &str| -> u64 {
        std::fs::read_to_string(format!("{dir}/{f}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (
        rd("nr_hugepages"),
        rd("free_hugepages"),
        rd("resv_hugepages"),
    )
}

/// Removes a named region on drop (ignoring "not found"), so a failing
/// assertion never leaves a segment or file behind. Declare it before the
/// region: locals drop in reverse order, so the region is unmapped first.
pub struct RemoveOnDrop(pub Option<hugeshm_region::Locator>);

impl RemoveOnDrop {
    pub fn new(name: &str, backend: hugeshm_region::Backend, dir: Option<&Path>) -> Self {
        if !backend.is_named() {
            return RemoveOnDrop(None);
        }
        let mut l = hugeshm_region::Locator::new(name, backend);
        if let Some(d) = dir {
            l = l.directory(d);
        }
        RemoveOnDrop(Some(l))
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(l) = self.0.take() {
            match l.remove() {
                Ok(objs) if std::thread::panicking() => {
                    eprintln!("cleanup after panic: removed {objs:?}")
                }
                _ => {}
            }
        }
    }
}
