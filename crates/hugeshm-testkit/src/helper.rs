//! Child processes of a test that run its own test binary: the child's
//! entry point is an `#[ignore]`d test (a helper, not counted as a test),
//! run by its parent alone with `--exact NAME --ignored` and a variable
//! that carries what it should do.
//!
//! ```no_run
//! # use hugeshm_testkit::{helper_command, helper_spec, test_name};
//! const CHILD_ENV: &str = "MY_CHILD";
//!
//! #[test]
//! #[ignore = "helper: run by parent"]
//! fn child() {
//!     let Some(spec) = helper_spec(CHILD_ENV) else { return };
//!     // ... act on spec ...
//! }
//!
//! #[test]
//! fn parent() {
//!     // The helper's name as libtest knows it: this module's path, then `child`.
//!     let name = test_name!().replace("parent", "child");
//!     let out = helper_command(&name, CHILD_ENV, "spec").output().unwrap();
//!     assert!(out.status.success());
//! }
//! ```

use std::process::Command;

/// The arguments that make the running test binary run only the ignored
/// helper test `name` (libtest's full name, e.g. `module::child`), its
/// output not captured.
pub fn helper_args(name: &str) -> [&str; 5] {
    [
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]
}

/// The running test binary, running only helper `name` with `env=spec`.
pub fn helper_command(name: &str, env: &str, spec: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the running test binary"));
    c.args(helper_args(name)).env(env, spec);
    c
}

/// In a helper: what its parent asked for in `env`; `None` when it runs
/// without a parent (`cargo test -- --ignored`), after a line saying so:
/// the helper then returns at once.
pub fn helper_spec(env: &str) -> Option<String> {
    match std::env::var(env) {
        Ok(spec) => Some(spec),
        Err(_) => {
            println!("a helper of another test, which sets {env}: nothing to do alone");
            None
        }
    }
}
