//! The host doctor: what the huge page pools hold, which shared memory really
//! sits on huge pages, and what is wrong, as plain serializable reports.
//!
//! Every report is built from a [`hugeshm_probe::Probe`], so it runs the same on
//! the live host and on a captured fixture tree; printers (tables, JSON) live
//! in the CLI.
//!
//! ```no_run
//! use hugeshm_probe::{Probe, Roots};
//! let probe = Probe::new(Roots::from_env());
//! // The regions made to be kept (their headers tell): a SysV segment of
//! // one that nobody attaches is waiting for its server, not an orphan.
//! let kept = hugeshm_doctor::segments::KeptRegions::find(&probe);
//! let status = hugeshm_doctor::status::build(&probe, &kept);
//! for f in &status.findings {
//!     println!("{:?} {}: {}", f.severity, f.code, f.message);
//! }
//! let segs = hugeshm_doctor::segments::build(&probe, &kept);
//! for s in &segs.segments {
//!     println!("{} {:?} {:?}", s.kind, s.size_bytes, s.page_size_bytes);
//! }
//! ```
//!
//! A report is plain data with public fields, and so are its rows: they
//! are the API its users (the CLI's printers, the exporter) read. For
//! example [`status::StatusReport`] holds its pools as [`status::PoolRow`]s,
//! its nodes as [`status::NodeRow`]s and its mounts as [`status::MountRow`]s;
//! [`segments::SegmentsReport`] its segments as [`segments::Segment`]s.
//! [`metrics::registry`] makes the two reports Prometheus metrics (text, for
//! the exporter to serve), with a sample for each of [`finding::CODES`].
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod advise;
pub mod cgroup;
pub mod checked;
pub mod collapse;
pub mod dax;
pub mod finding;
mod jvm;
pub mod kubelet;
pub mod metrics;
pub mod numa;
pub mod pmem;
pub mod scrape;
pub mod segments;
pub mod status;
pub mod tuning;

#[cfg(test)]
mod fixture;

pub use finding::{Finding, Severity};
