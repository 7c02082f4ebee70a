//! A test hook that stops `create` at a named step, so a test can SIGKILL
//! the creator there and check what is left (the fault-injection suite,
//! `crates/hugeshm-cli/tests/region/faults.rs`).
//!
//! Only with the `test-hooks` feature, which only tests enable (the
//! `hugeshm` CLI's dev-dependency on this crate): a release build, the
//! `hugeshm` binary and libhugeshm.so have no hook, and `checkpoint` is
//! an empty function there (scripts/build-deb.sh checks that the name of
//! the variable is in none of them).
//!
//! With `HUGESHM_TEST_STOP_AT=STEP:FILE` in the environment, a `create`
//! that reaches STEP writes STEP to FILE and waits there until the test
//! kills it, or removes FILE to let it go on (e.g. after shrinking the
//! pool under it). The
//! steps, in order: `name-claimed` (the name is taken: segment, linked
//! file or memfd record), `mapped` (memory reserved and mapped),
//! `header-written` (state *initializing*), `prefaulting` (after the first
//! pre-fault chunk), `verified`, `ready`. Without the variable this costs
//! one environment lookup per step.

/// The environment variable: `STEP:FILE`.
#[cfg(feature = "test-hooks")]
pub const STOP_AT_ENV: &str = "HUGESHM_TEST_STOP_AT";

/// Stops here when the test hook names `step`, until FILE is removed.
#[cfg(feature = "test-hooks")]
pub(crate) fn checkpoint(step: &str) {
    let Some(spec) = std::env::var_os(STOP_AT_ENV) else {
        return;
    };
    let spec = spec.to_string_lossy();
    let Some((at, file)) = spec.split_once(':') else {
        return;
    };
    if at != step {
        return;
    }
    if std::fs::write(file, step).is_err() {
        return;
    }
    while std::path::Path::new(file).exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Without the `test-hooks` feature: nothing, whatever the environment.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn checkpoint(_step: &str) {}
