//! The benches (`bench oltp`, `bench dmbc`) and `hugeshm lab` for real on
//! small sizes, and what a bench gives back when it is interrupted.
//!
//! One test binary with a module per former test file (each module's docs
//! say what it covers). One module alone:
//! `cargo test -p hugeshm --test bench_lab lab:: -- --nocapture`.

#[path = "../common/mod.rs"]
mod common;

mod bench_dmbc;
mod bench_oltp;
mod interrupt;
mod lab;
mod lab_pictures;
