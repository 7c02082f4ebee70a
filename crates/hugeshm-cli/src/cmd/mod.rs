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
pub mod bench_scan;
pub mod collapse;
pub mod exporter;
pub mod exporter_http;
pub mod generate;
mod input_file;
pub mod lab;
pub mod region;
pub mod run;
pub mod segments;
pub mod share;
pub mod sources;
pub mod status;
pub mod status_pmem;
pub mod status_tuning;

/// The probe of the commands that scan segments (`segments`, `status`,
/// `exporter`, `advise`, `apply`, `bench scan`): over `roots`, reading a
/// `dax=inode` file's own DAX state with `statx` through hugeshm-sys
/// (`hugeshm_probe::SysFileDax`; the doctor uses it on the live host only).
pub(crate) fn doctor_probe(roots: &hugeshm_probe::Roots) -> hugeshm_probe::Probe {
    hugeshm_probe::Probe::new(roots.clone())
        .with_file_dax(std::sync::Arc::new(hugeshm_probe::SysFileDax))
}

/// Opens the output directory `dir` of `flag` (`--out`), made 0755 if
/// missing, refused if it or a directory or symlink on its path belongs to
/// another user or others can write it (`hugeshm_sys::DirHandle::open_output`):
/// root's files never land where another user pointed them.
pub(crate) fn out_dir(dir: &std::path::Path, flag: &str) -> anyhow::Result<hugeshm_sys::DirHandle> {
    use anyhow::Context;
    // The error names the directory (or the one above it) refused.
    hugeshm_sys::DirHandle::open_output(dir, true, sudo_uid()).with_context(|| flag.to_owned())
}

pub(crate) use hugeshm_sys::sudo_uid;
