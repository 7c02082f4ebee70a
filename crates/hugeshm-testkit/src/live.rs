//! The live-test harness: one prologue and one epilogue for every test
//! that touches (or compares) the host's shared-memory state.
//!
//! ```no_run
//! # use hugeshm_testkit::live;
//! #[test]
//! fn creates_and_removes() {
//!     let Some(pool) = live!() else { return };
//!     pool.ensure_free(2 << 20, 4).expect("4 free 2 MiB pages");
//!     // ... the test's own assertions ...
//!     pool.finish(); // or at drop: restore the pool, then the leak check
//! }
//! ```
//!
//! [`live!`](crate::live!) names the test after its function
//! ([`test_name!`](crate::test_name!), as libtest names it), skips it
//! (through [`crate::skip`]) when not root, takes the [`PoolGuard`] (so
//! the pool lock) and captures the [`HostState`]. [`Live::finish`], or the
//! drop when the test ends without it, restores the pool and asserts that
//! the host is as it was ([`assert_no_leaks`]): no System V segment, no
//! file in `/dev/shm` or a hugetlbfs mount, no page of a pool left behind.
//! A [`Live`] derefs to its [`PoolGuard`] (`ensure_free`, `page_sizes`).

use std::ops::Deref;

use crate::{HostState, PoolGuard};

/// The test function this is used in, as libtest names it (its module path
/// without the crate, then the function: what `--exact` takes), from the
/// type name of a function item declared in it.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        $crate::live::test_name_of(::std::any::type_name_of_val(&here))
    }};
}

/// [`Live::begin`] for the test function it is used in: `None` (after a
/// [`crate::skip`]) when not root.
#[macro_export]
macro_rules! live {
    () => {
        $crate::Live::begin($crate::test_name!())
    };
}

/// [`Live::observe`] for the test function it is used in.
#[macro_export]
macro_rules! observe {
    () => {
        $crate::Live::observe($crate::test_name!())
    };
}

/// `crate::module::test::here` (possibly with `::{{closure}}` parts) ->
/// `module::test`.
#[doc(hidden)]
pub fn test_name_of(type_name: &'static str) -> &'static str {
    let mut s = type_name.strip_suffix("::here").unwrap_or(type_name);
    while let Some(rest) = s.strip_suffix("::{{closure}}") {
        s = rest;
    }
    s.split_once("::").map_or(s, |(_, path)| path)
}

/// Asserts that the host is as `before` shows it: [`HostState::diff`]
/// against a capture now is empty. The one leak check of the live tests.
#[track_caller]
pub fn assert_no_leaks(before: &HostState, what: &str) {
    let after = HostState::capture().expect("capture host state");
    let diff = before.diff(&after);
    assert!(diff.is_empty(), "{what}: left behind: {diff:#?}");
}

/// A running live test: holds the pool guard (and so the pool lock) and
/// the host's state from its start. See the [module docs](self).
#[derive(Debug)]
pub struct Live {
    name: &'static str,
    before: HostState,
    finished: bool,
    // Last: the pool is restored (and the lock released) after the check.
    pool: PoolGuard,
}

impl Live {
    /// Root, the pool guard and the host's state for test `name`; `None`
    /// after [`crate::skip`] when not root.
    pub fn begin(name: &'static str) -> Option<Live> {
        if !crate::is_root() {
            crate::skip(
                name,
                format_args!(
                    "needs root to reserve huge pages (running as uid {})",
                    rustix::process::geteuid().as_raw()
                ),
            );
            return None;
        }
        Some(Self::observe(name))
    }

    /// The pool guard and the host's state for test `name`, as any user:
    /// for a test that changes no pool but creates or compares host state.
    pub fn observe(name: &'static str) -> Live {
        let pool = PoolGuard::new().unwrap_or_else(|e| panic!("{name}: pool guard: {e}"));
        let before = HostState::capture().unwrap_or_else(|e| panic!("{name}: capture: {e}"));
        Live {
            name,
            before,
            finished: false,
            pool,
        }
    }

    /// The test's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The pool guard.
    pub fn pool(&self) -> &PoolGuard {
        &self.pool
    }

    /// The host's state when the test began.
    pub fn before(&self) -> &HostState {
        &self.before
    }

    /// Takes the host's state again as the test's start: after removing
    /// what killed earlier runs left behind (never this test's own), so
    /// that its end does not count their removal.
    pub fn rebase(&mut self) {
        self.before =
            HostState::capture().unwrap_or_else(|e| panic!("{}: capture: {e}", self.name));
    }

    /// Skips the rest of the test for `reason` ([`crate::skip`]); the pool
    /// is restored and checked as at the end.
    #[track_caller]
    pub fn skip(self, reason: impl std::fmt::Display) {
        crate::skip(self.name, reason);
    }

    /// Skips the rest of the test, which lacks `lack`
    /// ([`crate::skip_lacking`]).
    pub fn skip_lacking(self, lack: crate::Lack, detail: impl std::fmt::Display) {
        crate::skip_lacking(self.name, lack, detail);
    }

    /// Skips a part of the test, which lacks `lack`; the test goes on.
    pub fn skip_part(&self, part: &str, lack: crate::Lack, detail: impl std::fmt::Display) {
        crate::skip_lacking(&format!("{} [{part}]", self.name), lack, detail);
    }

    /// Restores the pool (asserting that it took) and asserts that the host
    /// is as it was when the test began.
    #[track_caller]
    pub fn finish(mut self) {
        self.finished = true;
        self.check();
    }

    /// Restores the pool and compares the host with its state when the
    /// test began: `Err` lists what was left behind and what of the pool
    /// could not be restored. [`Live::finish`] and the drop assert it.
    pub fn leaks(&self) -> Result<(), String> {
        let restored = self.pool.restore();
        let after = HostState::capture()?;
        let diff = self.before.diff(&after);
        if restored.is_ok() && diff.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{}: left behind: {diff:#?}; {}",
            self.name,
            restored
                .err()
                .unwrap_or_else(|| "the pool was restored".into())
        ))
    }

    #[track_caller]
    fn check(&self) {
        if let Err(e) = self.leaks() {
            panic!("{e}");
        }
    }
}

impl Deref for Live {
    type Target = PoolGuard;

    fn deref(&self) -> &PoolGuard {
        &self.pool
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // A failing test keeps its own message; the guard still restores.
        if !self.finished && !std::thread::panicking() {
            self.check();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file left in /dev/shm is a leak, and gone again it is none.
    #[test]
    fn a_file_left_in_dev_shm_is_a_leak() {
        let t = observe!();
        let path = std::path::PathBuf::from(format!(
            "/dev/shm/hugeshm-testkit-leak-{}",
            std::process::id()
        ));
        std::fs::write(&path, b"x").unwrap();
        let found = t.leaks();
        std::fs::remove_file(&path).unwrap();
        let err = found.expect_err("a new file in /dev/shm");
        assert!(
            err.contains(&format!("new /dev/shm file {}", path.display())),
            "{err}"
        );
        assert!(
            err.starts_with("live::tests::a_file_left_in_dev_shm_is_a_leak: "),
            "{err}"
        );
        t.finish();
    }

    #[test]
    fn names_come_from_the_function() {
        assert_eq!(test_name!(), "live::tests::names_come_from_the_function");
        let in_closure = || test_name!();
        assert_eq!(in_closure(), "live::tests::names_come_from_the_function");
        assert_eq!(test_name_of("krate::f::here"), "f");
        assert_eq!(test_name_of("krate::m::f::{{closure}}::here"), "m::f");
    }
}
