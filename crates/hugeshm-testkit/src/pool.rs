//! The global huge page pool: a cross-process lock and a save/raise/restore
//! guard.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

/// The lock file every pool-touching test `flock`s.
pub const POOL_LOCK_PATH: &str = "/tmp/hugeshm-test-pool.lock";

/// Per-size pool settings: `hugepages-<kB>kB/{nr_hugepages,...}`.
pub const HUGEPAGES_SYSFS: &str = "/sys/kernel/mm/hugepages";

/// Per-node pools: `node<N>/hugepages/hugepages-<kB>kB/nr_hugepages`.
pub const NODE_SYSFS: &str = "/sys/devices/system/node";

/// An exclusive `flock` on [`POOL_LOCK_PATH`] (or another file), released on
/// drop.
///
/// `flock` locks belong to the open file description, so two threads of one
/// test binary exclude each other just like two processes do.
#[derive(Debug)]
pub struct PoolLock {
    _file: File,
    path: PathBuf,
}

impl PoolLock {
    /// Blocks until the lock on [`POOL_LOCK_PATH`] is held.
    pub fn acquire() -> Result<PoolLock, String> {
        Self::acquire_at(Path::new(POOL_LOCK_PATH))
    }

    /// Blocks until the lock on `path` (created if missing) is held.
    pub fn acquire_at(path: &Path) -> Result<PoolLock, String> {
        let file = open_lock_file(path)?;
        loop {
            match rustix::fs::flock(&file, FlockOperation::LockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(format!(
                        "flock({}, LOCK_EX): {}",
                        path.display(),
                        std::io::Error::from(e)
                    ))
                }
            }
        }
        Ok(PoolLock {
            _file: file,
            path: path.to_owned(),
        })
    }

    /// Takes the lock on `path` if nobody holds it; `Ok(None)` if busy.
    pub fn try_acquire_at(path: &Path) -> Result<Option<PoolLock>, String> {
        let file = open_lock_file(path)?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(PoolLock {
                _file: file,
                path: path.to_owned(),
            })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(format!(
                "flock({}, LOCK_EX|LOCK_NB): {}",
                path.display(),
                std::io::Error::from(e)
            )),
        }
    }

    /// The locked file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Opens (creating, world-writable) a lock file; falls back to read-only
/// for a file another user created (`flock` works on any open mode).
fn open_lock_file(path: &Path) -> Result<File, String> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o666)
        .open(path)
    {
        Ok(file) => {
            // Undo the umask so other users can lock it too; best effort.
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
            Ok(file)
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            File::open(path).map_err(|e| format!("open {}: {e}", path.display()))
        }
        Err(e) => Err(format!("open {}: {e}", path.display())),
    }
}

fn read_u64(path: &Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|e| format!("parse {} ({:?}): {e}", path.display(), text.trim()))
}

fn write_u64(path: &Path, value: u64) -> Result<(), String> {
    std::fs::write(path, format!("{value}\n"))
        .map_err(|e| format!("write {value} to {}: {e}", path.display()))
}

/// `hugepages-2048kB` -> 2048.
fn parse_size_dir(name: &str) -> Option<u64> {
    hugeshm_parse::size::hugepages_dir_size(name).map(|bytes| bytes / 1024)
}

/// The page sizes (in kB) under a `hugepages` directory, sorted.
fn list_sizes(dir: &Path) -> Result<Vec<u64>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("read_dir {}: {e}", dir.display()))?;
    let mut sizes: Vec<u64> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| parse_size_dir(&e.file_name().to_string_lossy()))
        .collect();
    sizes.sort_unstable();
    Ok(sizes)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SizeRecord {
    kb: u64,
    nr: u64,
    overcommit: u64,
    surplus: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeRecord {
    node: u32,
    kb: u64,
    nr: u64,
}

/// Why [`PoolGuard::ensure_free`] could not make the pages available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFree {
    /// The host has no such pages to give: no pool of the size, none
    /// allocated at run time, or fewer granted than asked (1 GiB pages on a
    /// fragmented host). The one reason a test may skip for.
    NoSuchPages(String),
    /// The pool's files could not be read or written (not root, a file
    /// missing or malformed): the test fails.
    Sysfs(String),
}

impl NotFree {
    /// Whether the host has no such pages to give ([`NotFree::NoSuchPages`]).
    pub fn host_has_none(&self) -> bool {
        matches!(self, NotFree::NoSuchPages(_))
    }

    /// A refused write of `nr_hugepages`: EINVAL is the kernel allocating
    /// no pages of the size at run time (1 GiB pages without
    /// CONFIG_CONTIG_ALLOC); anything else (EACCES: not root) is the test's.
    fn of_write(text: String, e: &std::io::Error) -> NotFree {
        if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) {
            NotFree::NoSuchPages(text)
        } else {
            NotFree::Sysfs(text)
        }
    }
}

impl std::fmt::Display for NotFree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotFree::NoSuchPages(s) | NotFree::Sysfs(s) => f.write_str(s),
        }
    }
}

/// Saves the whole huge page pool configuration, lets a test raise it, and
/// restores it exactly on drop (or on [`PoolGuard::restore`]).
///
/// Recorded at creation: `nr_hugepages`, `nr_overcommit_hugepages` and
/// `surplus_hugepages` of every size under [`HUGEPAGES_SYSFS`], and
/// `nr_hugepages` of every size of every NUMA node under [`NODE_SYSFS`]. On a
/// multi-node host the restore writes the per-node files (so each node gets
/// back exactly its own count); on a single node the global file.
///
/// A `PoolGuard` holds a [`PoolLock`] for its whole life, so tests that use
/// one are serialized, across threads and processes.
#[derive(Debug)]
pub struct PoolGuard {
    hugepages_root: PathBuf,
    node_root: PathBuf,
    sizes: Vec<SizeRecord>,
    nodes: Vec<NodeRecord>,
    // Declared last: dropped after the restore in `Drop::drop` ran.
    _lock: PoolLock,
}

impl PoolGuard {
    /// Takes the [`PoolLock`] (blocking) and records the live pool.
    pub fn new() -> Result<PoolGuard, String> {
        let lock = PoolLock::acquire()?;
        Self::with_roots(Path::new(HUGEPAGES_SYSFS), Path::new(NODE_SYSFS), lock)
    }

    /// Records the pool described under other roots (a fake sysfs tree in
    /// the testkit's own tests), holding the given lock.
    pub fn with_roots(
        hugepages_root: &Path,
        node_root: &Path,
        lock: PoolLock,
    ) -> Result<PoolGuard, String> {
        let mut sizes = Vec::new();
        for kb in list_sizes(hugepages_root)? {
            let dir = hugepages_root.join(format!("hugepages-{kb}kB"));
            sizes.push(SizeRecord {
                kb,
                nr: read_u64(&dir.join("nr_hugepages"))?,
                overcommit: read_u64(&dir.join("nr_overcommit_hugepages"))?,
                surplus: read_u64(&dir.join("surplus_hugepages"))?,
            });
        }
        let mut nodes = Vec::new();
        // A host without NUMA sysfs simply has no per-node records.
        if let Ok(rd) = std::fs::read_dir(node_root) {
            let mut ids: Vec<u32> = rd
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_prefix("node")?
                        .parse()
                        .ok()
                })
                .collect();
            ids.sort_unstable();
            for node in ids {
                let hp = node_root.join(format!("node{node}/hugepages"));
                let Ok(node_sizes) = list_sizes(&hp) else {
                    continue;
                };
                for kb in node_sizes {
                    let nr = read_u64(&hp.join(format!("hugepages-{kb}kB/nr_hugepages")))?;
                    nodes.push(NodeRecord { node, kb, nr });
                }
            }
        }
        Ok(PoolGuard {
            hugepages_root: hugepages_root.to_owned(),
            node_root: node_root.to_owned(),
            sizes,
            nodes,
            _lock: lock,
        })
    }

    fn size_dir(&self, kb: u64) -> PathBuf {
        self.hugepages_root.join(format!("hugepages-{kb}kB"))
    }

    fn node_file(&self, node: u32, kb: u64) -> PathBuf {
        self.node_root.join(format!(
            "node{node}/hugepages/hugepages-{kb}kB/nr_hugepages"
        ))
    }

    /// The recorded `nr_hugepages` of a page size (bytes), if it exists.
    pub fn recorded_nr_hugepages(&self, page_size_bytes: u64) -> Option<u64> {
        let kb = page_size_bytes / 1024;
        self.sizes.iter().find(|s| s.kb == kb).map(|s| s.nr)
    }

    /// Page sizes (bytes) the host supports, from the recorded pool.
    pub fn page_sizes(&self) -> Vec<u64> {
        self.sizes.iter().map(|s| s.kb * 1024).collect()
    }

    /// Raises the pool of `page_size_bytes` pages until at least `pages` are
    /// available (`free_hugepages - resv_hugepages >= pages`).
    ///
    /// Fails with the numbers when the host has no such pages to give (no
    /// pool of the size, no allocation of it at run time, or the kernel
    /// grants fewer: fragmentation, too little memory), and with the file
    /// when the pool's files cannot be read or written (not root): see
    /// [`NotFree`]. Whatever was changed is restored by the guard.
    pub fn ensure_free(&self, page_size_bytes: u64, pages: u64) -> Result<(), NotFree> {
        let kb = page_size_bytes / 1024;
        if page_size_bytes == 0
            || page_size_bytes % 1024 != 0
            || !self.sizes.iter().any(|s| s.kb == kb)
        {
            let have: Vec<String> = self.sizes.iter().map(|s| format!("{}kB", s.kb)).collect();
            return Err(NotFree::NoSuchPages(format!(
                "no huge page pool for page size {page_size_bytes} bytes (host has: {})",
                have.join(", ")
            )));
        }
        let dir = self.size_dir(kb);
        let available = |dir: &Path| -> Result<(u64, u64, u64), NotFree> {
            let free = read_u64(&dir.join("free_hugepages")).map_err(NotFree::Sysfs)?;
            let resv = read_u64(&dir.join("resv_hugepages")).map_err(NotFree::Sysfs)?;
            let nr = read_u64(&dir.join("nr_hugepages")).map_err(NotFree::Sysfs)?;
            Ok((free, resv, nr))
        };
        let (free, resv, nr) = available(&dir)?;
        let avail = free.saturating_sub(resv);
        if avail >= pages {
            return Ok(());
        }
        let target = nr + (pages - avail);
        let path = dir.join("nr_hugepages");
        if let Err(e) = std::fs::write(&path, format!("{target}\n")) {
            return Err(NotFree::of_write(
                format!("write {target} to {}: {e}", path.display()),
                &e,
            ));
        }
        let (free2, resv2, nr2) = available(&dir)?;
        let avail2 = free2.saturating_sub(resv2);
        if avail2 < pages {
            return Err(NotFree::NoSuchPages(format!(
                "hugepages-{kb}kB: need {pages} available pages; raised nr_hugepages {nr} -> {target} \
                 but the kernel granted nr_hugepages={nr2} (free {free2} - reserved {resv2} = {avail2} available)"
            )));
        }
        Ok(())
    }

    /// Makes exactly `pages` pages of `page_size_bytes` available (free
    /// less reserved), growing or shrinking the pool (pages in use stay):
    /// what a test of "one page too few" needs. Restored by the guard.
    pub fn set_available(&self, page_size_bytes: u64, pages: u64) -> Result<(), NotFree> {
        self.ensure_free(page_size_bytes, pages)?;
        let dir = self.size_dir(page_size_bytes / 1024);
        let read = |f: &str| read_u64(&dir.join(f)).map_err(NotFree::Sysfs);
        let avail = read("free_hugepages")?.saturating_sub(read("resv_hugepages")?);
        let target = read("nr_hugepages")?.saturating_sub(avail.saturating_sub(pages));
        write_u64(&dir.join("nr_hugepages"), target).map_err(NotFree::Sysfs)?;
        let now = read("free_hugepages")?.saturating_sub(read("resv_hugepages")?);
        if now != pages {
            return Err(NotFree::NoSuchPages(format!(
                "{} bytes: wanted {pages} available pages, have {now}",
                page_size_bytes
            )));
        }
        Ok(())
    }

    /// Restores the recorded pool now and reports whether it took: an error
    /// lists every value that differs afterwards (e.g. pages still in use
    /// by a leaked segment show up as surplus).
    ///
    /// The guard, and so the lock, lives on: a check of the host's state
    /// after the restore still runs alone (a guard consumed here let another
    /// test raise the pool between the restore and that check). The drop
    /// restores again, writing only what differs.
    pub fn restore(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        let node_ids: BTreeSet<u32> = self.nodes.iter().map(|n| n.node).collect();
        if node_ids.len() > 1 {
            for n in &self.nodes {
                let path = self.node_file(n.node, n.kb);
                match read_u64(&path) {
                    Ok(cur) if cur == n.nr => {}
                    Ok(_) => {
                        if let Err(e) = write_u64(&path, n.nr) {
                            problems.push(e);
                        }
                    }
                    Err(e) => problems.push(e),
                }
            }
        } else {
            for s in &self.sizes {
                let path = self.size_dir(s.kb).join("nr_hugepages");
                match read_u64(&path) {
                    Ok(cur) if cur == s.nr => {}
                    Ok(_) => {
                        if let Err(e) = write_u64(&path, s.nr) {
                            problems.push(e);
                        }
                    }
                    Err(e) => problems.push(e),
                }
            }
        }
        for s in &self.sizes {
            let path = self.size_dir(s.kb).join("nr_overcommit_hugepages");
            match read_u64(&path) {
                Ok(cur) if cur == s.overcommit => {}
                Ok(_) => {
                    if let Err(e) = write_u64(&path, s.overcommit) {
                        problems.push(e);
                    }
                }
                Err(e) => problems.push(e),
            }
        }
        // Verify.
        for s in &self.sizes {
            let dir = self.size_dir(s.kb);
            for (file, want) in [
                ("nr_hugepages", s.nr),
                ("nr_overcommit_hugepages", s.overcommit),
                ("surplus_hugepages", s.surplus),
            ] {
                match read_u64(&dir.join(file)) {
                    Ok(got) if got == want => {}
                    Ok(got) => {
                        problems.push(format!("hugepages-{}kB/{file} is {got}, was {want}", s.kb))
                    }
                    Err(e) => problems.push(e),
                }
            }
        }
        for n in &self.nodes {
            match read_u64(&self.node_file(n.node, n.kb)) {
                Ok(got) if got == n.nr => {}
                Ok(got) => problems.push(format!(
                    "node{}/hugepages-{}kB/nr_hugepages is {got}, was {}",
                    n.node, n.kb, n.nr
                )),
                Err(e) => problems.push(e),
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "huge page pool not restored: {}",
                problems.join("; ")
            ))
        }
    }
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("WARNING hugeshm-testkit: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeSys {
        root: PathBuf,
    }

    impl FakeSys {
        fn new(tag: &str) -> FakeSys {
            let root =
                std::env::temp_dir().join(format!("hugeshm-testkit-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            for kb in [2048u64, 1048576] {
                let d = root.join(format!("mm/hugepages-{kb}kB"));
                std::fs::create_dir_all(&d).unwrap();
                for (f, v) in [
                    ("nr_hugepages", 1),
                    ("nr_overcommit_hugepages", 0),
                    ("surplus_hugepages", 0),
                    ("free_hugepages", 1),
                    ("resv_hugepages", 0),
                ] {
                    std::fs::write(d.join(f), format!("{v}\n")).unwrap();
                }
                for node in [0, 1] {
                    let n = root.join(format!("node/node{node}/hugepages/hugepages-{kb}kB"));
                    std::fs::create_dir_all(&n).unwrap();
                    std::fs::write(n.join("nr_hugepages"), format!("{node}\n")).unwrap();
                }
            }
            std::fs::write(root.join("node/online"), "0-1\n").unwrap();
            FakeSys { root }
        }
        fn mm(&self) -> PathBuf {
            self.root.join("mm")
        }
        fn node(&self) -> PathBuf {
            self.root.join("node")
        }
        fn lock(&self) -> PoolLock {
            PoolLock::acquire_at(&self.root.join("lock")).unwrap()
        }
    }

    impl Drop for FakeSys {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn parses_size_dirs() {
        assert_eq!(parse_size_dir("hugepages-2048kB"), Some(2048));
        assert_eq!(parse_size_dir("hugepages-1048576kB"), Some(1048576));
        assert_eq!(parse_size_dir("hugepages-x"), None);
        assert_eq!(parse_size_dir("online"), None);
    }

    #[test]
    fn records_and_restores_fake_pool() {
        let fake = FakeSys::new("restore");
        let guard = PoolGuard::with_roots(&fake.mm(), &fake.node(), fake.lock()).unwrap();
        assert_eq!(guard.page_sizes(), vec![2 << 20, 1 << 30]);
        assert_eq!(guard.recorded_nr_hugepages(2 << 20), Some(1));
        assert_eq!(guard.nodes.len(), 4);
        // Already available: no write.
        guard.ensure_free(2 << 20, 1).unwrap();
        // The fake kernel grants nothing: error with numbers, value written;
        // the host has no such pages, as it has none of a size it lacks.
        let err = guard.ensure_free(2 << 20, 3).unwrap_err();
        assert!(err.host_has_none(), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("raised nr_hugepages 1 -> 3"), "{err}");
        assert!(err.contains("free 1 - reserved 0 = 1 available"), "{err}");
        let err = guard.ensure_free(4096, 1).unwrap_err();
        assert!(err.host_has_none(), "{err:?}");
        assert!(err.to_string().contains("no huge page pool"), "{err}");
        // Mess with per-node and overcommit values, then restore (2 nodes:
        // per-node files are written).
        let n1 = fake
            .node()
            .join("node1/hugepages/hugepages-2048kB/nr_hugepages");
        std::fs::write(&n1, "9\n").unwrap();
        let oc = fake
            .mm()
            .join("hugepages-1048576kB/nr_overcommit_hugepages");
        std::fs::write(&oc, "5\n").unwrap();
        // Global nr stays 3 in the fake (no kernel recomputes it): reported.
        let err = guard.restore().unwrap_err();
        assert!(
            err.contains("hugepages-2048kB/nr_hugepages is 3, was 1"),
            "{err}"
        );
        assert_eq!(read_u64(&n1).unwrap(), 1);
        assert_eq!(read_u64(&oc).unwrap(), 0);
    }

    #[test]
    fn a_pool_file_that_cannot_be_read_or_written_is_no_lack_of_pages() {
        let fake = FakeSys::new("unreadable");
        let guard = PoolGuard::with_roots(&fake.mm(), &fake.node(), fake.lock()).unwrap();
        let dir = fake.mm().join("hugepages-1048576kB");
        std::fs::write(dir.join("free_hugepages"), "many\n").unwrap();
        let err = guard.ensure_free(1 << 30, 2).unwrap_err();
        assert!(matches!(err, NotFree::Sysfs(_)), "{err:?}");
        assert!(err.to_string().contains("parse"), "{err}");
        // A refused write is the test's failure, unless the kernel says
        // it has no such pages at run time.
        let of = |errno: rustix::io::Errno| {
            NotFree::of_write("w".into(), &std::io::Error::from(errno)).host_has_none()
        };
        assert!(!of(rustix::io::Errno::ACCESS));
        assert!(!of(rustix::io::Errno::ROFS));
        assert!(of(rustix::io::Errno::INVAL));
    }

    #[test]
    fn single_node_restores_global_file_on_drop() {
        let fake = FakeSys::new("single");
        std::fs::remove_dir_all(fake.node().join("node1")).unwrap();
        let nr = fake.mm().join("hugepages-2048kB/nr_hugepages");
        {
            let guard = PoolGuard::with_roots(&fake.mm(), &fake.node(), fake.lock()).unwrap();
            guard.ensure_free(2 << 20, 4).unwrap_err();
            assert_eq!(read_u64(&nr).unwrap(), 4);
        }
        assert_eq!(read_u64(&nr).unwrap(), 1);
    }

    #[test]
    fn restore_keeps_the_lock_until_the_guard_drops() {
        let fake = FakeSys::new("keep-lock");
        std::fs::remove_dir_all(fake.node().join("node1")).unwrap();
        let path = fake.root.join("lock");
        let guard = PoolGuard::with_roots(&fake.mm(), &fake.node(), fake.lock()).unwrap();
        guard.restore().unwrap();
        // A check of the host after the restore still runs alone.
        assert!(PoolLock::try_acquire_at(&path).unwrap().is_none());
        drop(guard);
        assert!(PoolLock::try_acquire_at(&path).unwrap().is_some());
    }

    #[test]
    fn lock_excludes_second_holder() {
        let path =
            std::env::temp_dir().join(format!("hugeshm-testkit-lock-{}", std::process::id()));
        let first = PoolLock::acquire_at(&path).unwrap();
        assert!(PoolLock::try_acquire_at(&path).unwrap().is_none());
        drop(first);
        let again = PoolLock::try_acquire_at(&path).unwrap();
        assert!(again.is_some());
        drop(again);
        let _ = std::fs::remove_file(&path);
    }
}
