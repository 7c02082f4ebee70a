//! One module per subcommand.

pub mod advise;
pub mod apply;
pub mod bench;
pub mod bench_attach;
pub mod bench_common;
pub mod bench_dmbc;
pub mod bench_numa;
pub mod bench_oltp;
pub mod bench_pagetables;
pub mod bench_prefault;
pub mod exporter;
pub mod generate;
pub mod lab;
pub mod region;
pub mod run;
pub mod segments;
pub mod share;
pub mod status;
pub mod status_pmem;
pub mod status_tuning;
