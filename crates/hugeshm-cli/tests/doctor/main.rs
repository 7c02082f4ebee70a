//! The doctor's commands (`status`, `segments`, `advise`, `apply`,
//! `exporter`, `generate`) and what `contrib/` ships, run as the `hugeshm`
//! binary: on fixture trees, on the live host, against real PostgreSQL,
//! DPDK, Prometheus and systemd, and inside a hugetlb cgroup; the command
//! line's vocabulary and usage errors (`cli_usage`), the exporter as
//! Grafana queries it (`exporter_grafana`), owner names through NSS
//! (`users`) and the commands the docs show (`docs`).
//!
//! One test binary with a module per former test file (each module's docs
//! say what it covers). One module alone:
//! `cargo test -p hugeshm --test doctor exporter::`.

#[path = "../common/mod.rs"]
mod common;

mod advise_limits;
mod ansible;
mod apply;
mod cgroup;
mod cli_usage;
mod contrib;
mod docs;
mod dpdk;
mod exporter;
mod exporter_grafana;
mod fixtures;
mod generate;
mod jvm;
mod kubelet;
mod live;
mod mariadb;
mod oracle;
mod planted_inputs;
mod postgres;
mod users;
