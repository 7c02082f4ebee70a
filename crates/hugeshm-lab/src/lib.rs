//! hugeshm's lab: the benchmarks (`prefault`, `attach`, `pagetables`,
//! `numa`, `scan`, `oltp`, `dmbc`) and the field reports' measurements
//! reproduced on this host, as data.
//!
//! Each bench takes its options and a [`Steps`] plan (told each step as it
//! begins, for a caller's progress line) and returns its report, the
//! `Serialize` value `--json` shows; the crate prints nothing. What a run
//! takes from the host (pool pages, regions, data files) is given back
//! when it ends, and registered with the program's [`guard::Keeper`] first,
//! so that an interrupted or killed run gives it back too
//! (docs/trust.md).
#![forbid(unsafe_code)]

pub mod attach;
pub mod common;
pub mod dmbc;
pub mod guard;
pub mod lab;
pub mod numa;
pub mod oltp;
pub mod pagetables;
pub mod prefault;
pub mod region_failed;
pub mod scan;
pub mod steps;

pub use steps::Steps;

/// An error in the options a caller passed (a duration of no seconds, a
/// block size that is not a power of two): the CLI exits 2 for it.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// An error and its causes on one line, `outer: cause: cause`, leaving
/// out a cause whose text the line already holds (an error that prints
/// its source would otherwise repeat it: `path: No such file or
/// directory (os error 2): No such file or directory (os error 2)`).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}
