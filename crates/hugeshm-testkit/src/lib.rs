//! # hugeshm-testkit
//!
//! Dev-only helpers for hugeshm integration tests that touch real, global
//! host state (the huge page pool, System V segments, `/dev/shm`):
//!
//! * [`live!`] / [`Live`]: the live-test harness. A test begins with
//!   `let Some(pool) = live!() else { return };`: named after its function
//!   ([`test_name!`]), skipped unless root, holding the [`PoolGuard`] and
//!   the [`HostState`] of its start; its end (or [`Live::finish`]) restores
//!   the pool and asserts that nothing was left behind
//!   ([`assert_no_leaks`], the one leak check).
//! * [`skip`] / [`skip_lacking`] ([`skip_part`], [`Live::skip_part`] for
//!   a part of a test): the one way to skip, printed where CI's
//!   log shows it and recorded in [`skips_file`]; with
//!   `HUGESHM_TEST_STRICT=1` a skip fails unless the allow-list ([`Lack`])
//!   names what the test lacks.
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
//! * [`helper_command`]: runs an `#[ignore]`d helper test of the running
//!   test binary (a child process's entry point) with its variable set.
//! * [`guest`]: a 2-node NUMA QEMU guest (with an optional NVDIMM) that
//!   boots the test binaries and runs a scenario script
//!   (`scripts/guest/`), for what this host's kernel cannot show.
//!
//! A typical test:
//!
//! ```no_run
//! use hugeshm_testkit::{live, TestProc};
//!
//! # fn main() {
//! let Some(pool) = live!() else { return };
//! pool.ensure_free(2 << 20, 4).unwrap();
//! let proc_ = TestProc::spawn(["sysv-huge:4M", "--touch"]).unwrap();
//! // ... inspect proc_.objects(), /proc/<pid>/smaps ...
//! assert!(proc_.finish().unwrap().success());
//! pool.finish(); // the pool restored, nothing left behind
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod cgroup;
pub mod dpdk;
pub mod guest;
mod helper;
mod host;
pub mod jvm;
pub mod live;
mod logged;
pub mod mariadb;
mod mount;
mod pool;
pub mod postgres;
pub mod run_servers;
mod skip;
mod tempdir;
mod testproc;

pub use cgroup::TestCgroup;
pub use helper::{helper_args, helper_command, helper_spec};
pub use host::{HostState, PoolCounts, SysvSegment};
pub use live::{assert_no_leaks, Live};
pub use mount::HugetlbfsMount;
pub use pool::{NotFree, PoolGuard, PoolLock, HUGEPAGES_SYSFS, NODE_SYSFS, POOL_LOCK_PATH};
pub use skip::{
    skip, skip_lacking, skip_part, skips_file, strict, Lack, SKIPS_FILE_ENV, STRICT_ENV,
};
pub use tempdir::TempDir;
pub use testproc::{
    run_library_built, testproc_built, testproc_path, TestObject, TestProc, TestProcReport,
    TESTPROC_ENV,
};

/// True when running with effective uid 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Returns true (after [`skip`]) when the test cannot run because it is
/// not root; use as `if skip_unless_root(test_name!()) { return; }` in a
/// test that needs root but not the [`Live`] harness.
pub fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    skip(
        test,
        format_args!(
            "needs root (running as uid {})",
            rustix::process::geteuid().as_raw()
        ),
    );
    true
}
