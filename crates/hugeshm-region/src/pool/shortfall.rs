//! The pool check and what the kernel's refusals become: a [`Shortfall`]
//! with the numbers (the plan's check, a reservation the kernel refused,
//! a fault it refused), and the hugetlb cgroup's room.

use hugeshm_fix::Fix;
use hugeshm_parse::hugepages::PoolCounters;
use hugeshm_probe::Probe;
use hugeshm_sys::SysError;

use super::{Backing, Plan};
use crate::error::RegionError;
use crate::model::Shortfall;

/// Checks that `required` pages are available (free − reserved) in a
/// host-wide pool; the shortfall otherwise.
pub(crate) fn check_pool(
    pool: &PoolCounters,
    required: u64,
    default_page_size: Option<u64>,
) -> Result<(), Box<Shortfall>> {
    let available = pool.available();
    if available >= required {
        return Ok(());
    }
    let target = pool.nr.saturating_add(required - available);
    Err(Box::new(Shortfall {
        page_size_bytes: pool.page_size_bytes,
        required,
        available,
        free: pool.free,
        reserved: pool.resv.unwrap_or(0),
        nr_hugepages: pool.nr,
        node: None,
        fix: Fix::SetPool {
            page_size_bytes: pool.page_size_bytes,
            node: None,
            pages: target,
            default_size: default_page_size == Some(pool.page_size_bytes),
        },
    }))
}

/// The kernel refused a reservation (`ENOMEM`) of `required` pages: the
/// shortfall of the pool as it is now (read again through `probe`), or,
/// when the pool looks big enough, the refusal with what else can refuse.
pub(crate) fn refused(probe: &Probe, page: u64, required: u64, err: SysError) -> RegionError {
    let host = probe.host_for_regions();
    let default = host.default_page_size();
    let Some(p) = host.pool(page) else {
        return RegionError::Sys(err);
    };
    let shortfall = match check_pool(p, required, default) {
        Err(s) => s,
        Ok(()) => Box::new(Shortfall {
            required,
            fix: Fix::RetryOrCheckLimits {
                page_size_bytes: page,
                available: p.available(),
            },
            ..*check_pool(p, u64::MAX, default).unwrap_err()
        }),
    };
    RegionError::PoolShortfall {
        shortfall,
        refused_by: Some(err.to_string()),
    }
}

/// A pre-fault of hugetlb pages that the kernel refused (`EFAULT`: the
/// fault would have been SIGBUS; `ENOMEM`) becomes
/// [`RegionError::FaultRefused`] with the pages faulted before
/// (`resident_bytes` of the region); other errors pass through.
pub(crate) fn fault_refused(
    probe: &Probe,
    plan: &Plan,
    resident_bytes: u64,
    e: RegionError,
) -> RegionError {
    let RegionError::Prefault {
        offset,
        source,
        method,
    } = e
    else {
        return e;
    };
    if !matches!(source.errno(), Some(libc::EFAULT) | Some(libc::ENOMEM)) {
        return RegionError::Prefault {
            method,
            offset,
            source,
        };
    }
    let page = plan.page_size.max(1);
    // The cgroup limit that refused them, as it reads now.
    let cg = probe.hugetlb_cgroup(None).ok().flatten();
    let size = cg.as_ref().and_then(|c| c.size(plan.page_size));
    let file = size.and_then(|s| s.binding_file.clone());
    let limit = size.and_then(|s| {
        Some(format!(
            "{} allows {} pages",
            s.binding_file.as_ref()?,
            s.effective_limit_bytes? / page
        ))
    });
    RegionError::FaultRefused {
        page_size_bytes: plan.page_size,
        required_pages: plan.size_bytes / page,
        faulted_pages: resident_bytes / page,
        limit,
        source,
        fix: Box::new(Fix::RaiseCgroupLimit {
            page_size_bytes: plan.page_size,
            // What others use, plus the whole region (its own pages
            // faulted so far are in the usage now, and go with it).
            bytes: size
                .map(|s| s.usage_bytes.saturating_sub(resident_bytes))
                .unwrap_or(0)
                .saturating_add(plan.size_bytes),
            file,
        }),
    }
}

/// The hugetlb cgroup check before the system call: an error when the
/// cgroup of this process (read through `probe`) leaves fewer pages than
/// `plan` needs, `None` when it allows them or sets no limit (or cannot be
/// read: the fault-time check, [`fault_refused`], still catches it).
pub(crate) fn cgroup_check(probe: &Probe, plan: &Plan) -> Option<RegionError> {
    if plan.backing != Backing::Hugetlb {
        return None;
    }
    let cg = probe.hugetlb_cgroup(None).ok()??;
    let size = cg.size(plan.page_size)?;
    let allowed = size.new_mapping_pages()?;
    let required = plan.size_bytes / plan.page_size.max(1);
    if allowed >= required {
        return None;
    }
    let file = size
        .binding_file
        .clone()
        .unwrap_or_else(|| cg.limit_file_name(plan.page_size, false));
    Some(RegionError::CgroupLimit {
        page_size_bytes: plan.page_size,
        required_pages: required,
        allowed_pages: allowed,
        fix: Box::new(Fix::RaiseCgroupLimit {
            page_size_bytes: plan.page_size,
            file: Some(file.clone()),
            bytes: size.usage_bytes.saturating_add(plan.size_bytes),
        }),
        file,
    })
}

/// A failed `mmap` of `size` bytes: the kernel's `ENOMEM` on hugetlb
/// pages becomes the shortfall ([`refused`]).
pub(crate) fn map_refused(probe: &Probe, e: SysError, huge: Option<u64>, size: u64) -> RegionError {
    match (e.errno(), huge) {
        (Some(libc::ENOMEM), Some(page)) => refused(probe, page, size / page, e),
        _ => RegionError::Sys(e),
    }
}
