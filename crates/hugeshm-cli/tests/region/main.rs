//! Regions from the command line (`create`, `rm`, `ls`, `attach`, `bench
//! prefault`): on the live host (`ls` telling kept regions from orphans),
//! stopped and killed at every step of creation, with the pre-fault
//! progress bar, and against names and symlinks another user planted.
//!
//! One test binary with a module per former test file (each module's docs
//! say what it covers). One module alone:
//! `cargo test -p hugeshm --test region faults::`.

#[path = "../common/mod.rs"]
mod common;

mod collapse;
mod faults;
mod foreign_headers;
mod hostile_names;
mod lookalike;
mod ls_kept;
mod planted;
mod progress;
mod region;
