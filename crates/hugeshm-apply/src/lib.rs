//! Changes the host: reserves a [`Plan`]'s huge page pools through sysfs, all
//! or nothing, and persists its configuration files atomically; and
//! ([`collapse`]) moves a running server's shared memory onto 2 MiB pages
//! in place.
//!
//! Every path is taken under the [`hugeshm_probe::Roots`] of the probe passed
//! in (the `/sys` and `/proc` roots for the pools, a file-system root for the
//! persisted files), so tests run it on temporary trees as well as on the host.
//!
//! Writing a large pool takes seconds (the kernel finds and clears the
//! pages; a short pool is compacted and retried): [`ApplyOptions::on_step`]
//! is told each [`ApplyStep`] as it begins, [`planned_steps`] of them when
//! no pool is short, so a caller can show progress (the crate prints
//! nothing).
//!
//! ```no_run
//! use hugeshm_apply::{apply, ApplyOptions};
//! use hugeshm_doctor::advise::{plan, Demand};
//! use hugeshm_probe::{Probe, Roots};
//!
//! let probe = Probe::new(Roots::default());
//! let host = probe.host();
//! let p = plan(&host, &[Demand::new("sga", 8 << 30, 2 << 20)], vec![], 2).unwrap();
//! match apply(&probe, &p, &ApplyOptions::default()) {
//!     Ok(r) => println!("reserved in {:.2} s", r.seconds),
//!     Err(e) => eprintln!("{e}"), // every pool is as it was
//! }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod collapse;
pub mod collapse_file;
mod persist;
mod reserve;

pub use persist::{persist, PersistAction, PersistError, PersistedFile};
pub use reserve::{
    apply, apply_to, planned_steps, ApplyError, ApplyOptions, ApplyReport, ApplyStep, DemoteChange,
    PoolChange, PoolFiles, StepHook, SysfsPools,
};
