//! `hugeshm advise`: how many pages of each size each NUMA node needs, and
//! the configuration that realises it.
//!
//! The arithmetic is the classic one made exact: every region needs
//! `ceil(bytes / page_size)` pages of its page size; a plan adds a spare per
//! pool (default [`DEFAULT_SPARE_PAGES`]; per node where it splits a size
//! over the nodes) for the odd page a server maps on top of its main area;
//! node-bound regions land on their node, spread ones are split evenly (the
//! remainder on the lowest nodes), and the rest goes to the host-wide pool,
//! which the kernel spreads itself. Where a size is split per node, a live
//! segment is counted on the nodes its pages sit on now.
//!
//! A plan made only of new regions (`--size`, `--spec`) does not count the
//! huge pages live segments use; [`Sources::plan`] marks it so that
//! `apply` refuses a pool that would not hold both.
//!
//! The rooms, in the order a plan is made and used:
//!
//! - `sources`: what a plan counts ([`Sources`]: a size, PostgreSQL, a
//!   spec, the live segments, spare, demotion, memlock users, systemd
//!   units) and the one function that makes it ([`Sources::plan`]); `spec`
//!   reads a spec file from its text ([`InputText`], `input`: what of a
//!   file a user named an error may quote); `error`: [`SourceError`].
//! - `model`: the plan's types ([`Demand`] in, [`Plan`] out, the pod's
//!   [`ContainerAdvice`]) and its words ([`pool_name`], [`summary`]);
//!   imports nothing of the module.
//! - `plan`: demands → pools (the live segments' demands, [`plan`]),
//!   demotion, room for live segments ([`crowded_pools`]).
//! - `config`: the files that realise a plan (sysctl.d, tmpfiles.d,
//!   limits.d, systemd drop-ins, GRUB), the memlock limit, and the syntax
//!   of the names those files hold ([`parse_systemd_unit`],
//!   [`parse_memlock_user`]).
//! - `check`: what `apply` checks of a plan file ([`check_plan_files`],
//!   [`check_sums`]).
//! - `container`: what a Kubernetes pod needs ([`container_advice`]).

mod check;
mod config;
mod container;
mod dpdk;
mod error;
mod input;
mod jvm;
mod mariadb;
mod model;
mod oracle;
mod plan;
mod sources;
mod spec;
#[cfg(test)]
mod testing;

pub use crate::checked::TooLarge;
pub use check::{check_plan_files, check_sums};
pub use config::{parse_memlock_user, parse_systemd_unit, DEFAULT_MEMLOCK_KIB, LIMITS_FILE};
pub use container::container_advice;
pub use error::SourceError;
pub use input::InputText;
pub(crate) use mariadb::{mariadb_parts, Server};
pub use model::{
    pool_name, summary, ConfigFile, ContainerAdvice, Counted, Demand, Placement, Plan, PlanConfig,
    PlanDemote, PlanPool, PodResource, Skipped,
};
pub use oracle::{granule, parse_oracle_sid};
pub(crate) use plan::{add_demotion, demands_from_segments, keep_room_for_live, live_pages};
pub use plan::{crowded_pools, min_left_bytes, plan, DEFAULT_SPARE_PAGES};
pub use sources::Sources;

/// The sysfs file that holds the pool of one size, host-wide or on a node.
pub use hugeshm_fix::nr_hugepages_path;
