//! One huge page size from the hugetlb pool: its pool checked, and for
//! `hugetlbfs` a mount of that size (the directory given, else the first).

use std::path::PathBuf;

use hugeshm_fix::Fix;
use hugeshm_parse::mounts::Mount;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::HostSnapshot;

use super::shortfall::check_pool;
use super::{size_for, Backing, Plan, Request};
use crate::error::RegionError;
use crate::model::Backend;

/// The hugetlbfs mounts of one page size (no `pagesize=` means the default
/// size), read-only ones excluded, in `/proc/mounts` order.
fn hugetlbfs_mounts(
    mounts: &[Mount],
    page_size: u64,
    default_page_size: Option<u64>,
) -> Vec<&Mount> {
    mounts
        .iter()
        .filter(|m| m.is_hugetlbfs() && m.option("ro").is_none())
        .filter(|m| m.hugetlbfs_page_size().or(default_page_size) == Some(page_size))
        .collect()
}

fn no_mount_fix(page_size: u64, default_page_size: Option<u64>) -> Fix {
    let dir = if default_page_size == Some(page_size) {
        "/dev/hugepages".to_owned()
    } else {
        format!("/dev/hugepages{}", page_size_short(page_size))
    };
    Fix::MountHugetlbfs {
        page_size_bytes: page_size,
        dir,
    }
}

/// Tries one huge page size for a hugetlb backend.
pub(super) fn try_hugetlb(
    req: &Request,
    host: &HostSnapshot,
    size: u64,
    page: u64,
) -> Result<Plan, RegionError> {
    let offered: Vec<u64> = host.pools.iter().map(|p| p.page_size_bytes).collect();
    let Some(pool) = host.pool(page) else {
        return Err(RegionError::UnsupportedPageSize {
            page_size_bytes: page,
            offered,
        });
    };
    let default = host.default_page_size();
    let dir = if req.backend == Backend::Hugetlbfs {
        match &req.directory {
            Some((d, Some(ps))) if *ps == page => Some(d.clone()),
            Some((d, ps)) => {
                return Err(RegionError::UnsuitableDirectory {
                    path: d.display().to_string(),
                    reason: match ps {
                        Some(ps) => format!(
                            "a hugetlbfs mount of {} pages, not {}",
                            format_bytes(*ps),
                            format_bytes(page)
                        ),
                        None => "not on a hugetlbfs mount".to_owned(),
                    },
                })
            }
            None => match hugetlbfs_mounts(&host.mounts, page, default).first() {
                Some(m) => Some(PathBuf::from(&m.target)),
                None => {
                    return Err(RegionError::NoHugetlbfsMount {
                        page_size_bytes: page,
                        fix: Box::new(no_mount_fix(page, default)),
                    })
                }
            },
        }
    } else {
        None
    };
    let size_bytes = size_for(size, page)?;
    let required = size_bytes / page;
    check_pool(pool, required, default).map_err(|shortfall| RegionError::PoolShortfall {
        shortfall,
        refused_by: None,
    })?;
    Ok(Plan {
        page_size: page,
        size_bytes,
        backing: Backing::Hugetlb,
        dir,
        fallback: None,
        warnings: Vec::new(),
    })
}
