//! Transparent huge pages for a `posix` (tmpfs) region: the THP size, and
//! whether `shmem_enabled` and the mount's `huge=` option give them.

use std::path::PathBuf;

use hugeshm_fix::Fix;
use hugeshm_parse::mounts::mount_of;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::HostSnapshot;

use super::{base_dir, size_for, Backing, HostExtra, Plan, Request, ThpMode};
use crate::error::RegionError;
use crate::naming::DEFAULT_POSIX_DIR;

/// Tries transparent huge pages of one size for a `posix` region.
pub(super) fn try_thp(
    req: &Request,
    host: &HostSnapshot,
    extra: &HostExtra,
    page: u64,
) -> Result<Plan, RegionError> {
    let dir = base_dir(req).unwrap_or_else(|| PathBuf::from(DEFAULT_POSIX_DIR));
    let unavailable = |reason: String, fix: Fix| RegionError::ThpUnavailable {
        dir: dir.display().to_string(),
        page_size_bytes: page,
        reason,
        fix: Box::new(fix),
    };
    let Some(pmd) = extra.pmd_size else {
        return Err(unavailable(
            "the kernel has no transparent huge pages".to_owned(),
            Fix::OtherBackend {
                page_size_bytes: None,
            },
        ));
    };
    if page != pmd {
        return Err(unavailable(
            format!(
                "tmpfs files can use {} transparent huge pages only",
                format_bytes(pmd)
            ),
            Fix::OtherBackend {
                page_size_bytes: Some(pmd),
            },
        ));
    }
    let shmem = host.thp.shmem_enabled.as_ref().map(|s| s.selected.as_str());
    let mount = mount_of(&host.mounts, &dir);
    let mode = match shmem {
        Some("deny") => {
            return Err(unavailable(
                "shmem_enabled is [deny], which disables huge pages on every tmpfs".to_owned(),
                Fix::ShmemEnabledNever,
            ))
        }
        Some("force") => ThpMode::Always,
        _ => match mount.and_then(|m| m.option("huge")) {
            Some("always") | Some("within_size") => ThpMode::Always,
            Some("advise") => ThpMode::Advise,
            other => {
                let target = mount.map(|m| m.target.as_str()).unwrap_or("/dev/shm");
                return Err(unavailable(
                    format!(
                        "{target} is mounted with huge={} (tmpfs mounts follow their huge= option, not shmem_enabled)",
                        other.unwrap_or("never")
                    ),
                    Fix::RemountTmpfsHuge {
                        mount: target.to_owned(),
                    },
                ));
            }
        },
    };
    Ok(Plan {
        page_size: page,
        size_bytes: size_for(req.requested_bytes, page)?,
        backing: Backing::Thp(mode),
        dir: Some(dir),
        fallback: None,
        warnings: Vec::new(),
    })
}
