//! # hugeshm-testkit
//!
//! Dev-only helpers for hugeshm integration tests that touch real, global
//! host state (the huge page pool, System V segments, `/dev/shm`):
//!
//! * [`is_root`] / [`skip_unless_root`]: tests that reserve huge pages need
//!   root and skip (pass with a `SKIP` line) otherwise.
//! * [`PoolLock`]: a cross-process exclusive lock (`flock` on
//!   [`POOL_LOCK_PATH`]) held by every test that touches the global pool or
//!   compares [`HostState`] snapshots, so such tests never overlap, neither
//!   between threads nor between test processes.
//! * [`PoolGuard`]: records every huge page pool setting, raises the pool on
//!   demand ([`PoolGuard::ensure_free`]) and restores the exact recorded
//!   values on drop. Holds a [`PoolLock`].
//! * [`HostState`]: a snapshot of shared-memory state; [`HostState::diff`]
//!   lists what changed (leaks).
//! * [`TestProc`]: runs the `hugeshm-testproc` binary of this crate, which
//!   creates shared-memory objects of the kinds asked for on its command
//!   line, reports them as JSON and holds them until its stdin closes.
//! * [`guest`]: a 2-node NUMA QEMU guest (with an optional NVDIMM) that
//!   boots the test binaries and runs a scenario script
//!   (`scripts/guest/`), for what this host's kernel cannot show.
//!
//! A typical test:
//!
//! ```no_run
//! use hugeshm_testkit::{skip_unless_root, HostState, PoolGuard, TestProc};
//!
//! if skip_unless_root("my_test") {
//!     return;
//! }
//! let pool = PoolGuard::new().unwrap();
//! pool.ensure_free(2 << 20, 4).unwrap();
//! let before = HostState::capture().unwrap();
//! let proc_ = TestProc::spawn(["sysv-huge:4M", "--touch"]).unwrap();
//! // ... inspect proc_.objects(), /proc/<pid>/smaps ...
//! assert!(proc_.finish().unwrap().success());
//! let leaks = before.diff(&HostState::capture().unwrap());
//! assert!(leaks.is_empty(), "{leaks:#?}");
//! pool.restore().unwrap();
//! ```

#![forbid(unsafe_code)]

pub mod cgroup;
pub mod dpdk;
pub mod guest;
mod host;
mod pool;
pub mod postgres;
mod tempdir;
mod testproc;

pub use cgroup::TestCgroup;
pub use host::{HostState, PoolCounts, SysvSegment};
pub use pool::{PoolGuard, PoolLock, HUGEPAGES_SYSFS, NODE_SYSFS, POOL_LOCK_PATH};
pub use tempdir::TempDir;
pub use testproc::{
    run_library_built, testproc_built, testproc_path, TestObject, TestProc, TestProcReport,
    TESTPROC_ENV,
};

/// True when running with effective uid 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Returns true (and prints a `SKIP` line) when the test cannot run because
/// it is not root; use as `if skip_unless_root("name") { return; }`.
pub fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    println!(
        "SKIP {test}: needs root to reserve huge pages (running as uid {})",
        rustix::process::geteuid().as_raw()
    );
    true
}
