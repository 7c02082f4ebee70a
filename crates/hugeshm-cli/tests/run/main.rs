//! `hugeshm run` against real programs: the C probe of `probe.c` (compiled
//! by the tests), an unmodified PostgreSQL, MariaDB and OpenJDK.
//!
//! One test binary with a module per former test file (each module's docs
//! say what it covers). One module alone:
//! `cargo test -p hugeshm --test run run_postgres::`.

#[path = "../common/mod.rs"]
mod common;

mod records;
mod run;
mod run_defaults;
mod run_owner;
mod run_postgres;
mod run_servers;
