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
//!
//! # The public API
//!
//! - One module per bench, each with its `Options`, `measure(probe,
//!   &Options, &Steps) -> Report` (and `planned_steps` where the count
//!   depends on the host) and the report's parts, which `--json` shows as
//!   they are: [`prefault`] (`Report`, `Row`, `PeerRow`, `Baseline`,
//!   `Growth`; [`prefault::sample`], one create and pre-fault, the memset
//!   ceiling), [`attach`], [`pagetables`] (`Report`, `Row`, `Growth`),
//!   [`numa`], [`scan`], [`oltp`], [`dmbc`]. The workers a bench starts
//!   are the calling program re-executed (`current_exe`) with a hidden
//!   command, whose work is here too: [`attach::child_line`],
//!   [`pagetables::child_attach`], [`scan::attach_child`],
//!   [`oltp::serve_attached`].
//! - [`lab`]: [`lab::run`] over [`lab::all`]'s reproductions into a
//!   [`lab::model::LabReport`]; [`lab::plot::svg`] and
//!   [`lab::html::report`] render it ([`lab::html::write_out`] writes them).
//! - [`Steps`] ([`steps`]): a long job's plan, told to the caller's hook.
//! - [`guard`]: what a run takes ([`guard::Taken`]), registered with
//!   [`guard::undo`] (its [`guard::Undo`] forgets the entry when dropped),
//!   and the program's [`guard::Keeper`] that gives it back when the run
//!   is cut short;
//!   [`keeper`], that keeper for a program (Ctrl-C handler, watchdog
//!   process): [`keeper::install`] with its [`keeper::Setup`],
//!   [`keeper::wait_if_interrupted`], and the hidden commands' parts
//!   [`keeper::finish`] and [`keeper::watch`].
//! - [`common::Skipped`] (a page size not measured), the option checks
//!   [`common::check_duration`] and [`common::check_block_size`],
//!   [`common::die_with_parent`] for a worker; [`Usage`], [`error_text`],
//!   [`region_failed::RegionFailed`].
//! - With the feature `samples` (tests of a caller's printers): reports
//!   made by hand, `prefault::by_hand` (`report`, `row`, `baseline`, `M2`,
//!   `MIB256`) and `oltp::sample`.
#![forbid(unsafe_code)]

pub mod attach;
pub mod common;
pub mod dmbc;
pub mod guard;
pub mod keeper;
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
