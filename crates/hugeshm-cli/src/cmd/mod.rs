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

/// The SysV regions made to be kept that nobody holds, as `hugeshm ls`
/// finds them over `probe` ([`RegionInfo::is_kept_unattached`]): only this
/// user's own and root's have their header read (another user's segment is
/// listed `untrusted`, never kept), and only on the live host. What
/// `segments`, `status` and the exporter report as `kept-unattached`
/// rather than `orphan`; none where the regions cannot be listed. Root's
/// segments this user may not read (`unreadable`: the exporter's dynamic
/// user) go with them, for the info `unattached-unreadable` rather than
/// `orphan`.
///
/// [`RegionInfo::is_kept_unattached`]: hugeshm_region::RegionInfo::is_kept_unattached
pub(crate) fn kept_regions(probe: &hugeshm_probe::Probe) -> hugeshm_doctor::segments::KeptRegions {
    let mut kept = hugeshm_doctor::segments::KeptRegions::default();
    // SysV only: no listing of /dev/shm (what other users create there).
    for r in hugeshm_region::list_sysv_regions_on(probe).unwrap_or_default() {
        let hugeshm_region::NamedObject::Sysv { key, shmid, .. } = &r.object else {
            continue;
        };
        if r.is_kept_unattached() {
            let page = r.header.as_ref().map(|h| h.page_size_bytes);
            kept.add_sysv(*shmid, *key, r.name.as_str(), page);
        } else if r.state == hugeshm_region::RegionState::Unreadable {
            kept.add_unreadable_sysv(*shmid, *key);
        }
    }
    kept
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
