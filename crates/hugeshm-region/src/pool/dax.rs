//! A `dax` region's plan: a file on a `-o dax` mount (2 MiB-aligned for
//! PMD faults), or a device-dax, whose alignment is the page size and
//! whose capacity bounds the size. No pool: the memory is the device's.

use std::path::PathBuf;

use hugeshm_fix::Fix;
use hugeshm_parse::mounts::mount_of;
use hugeshm_probe::HostSnapshot;

use super::{size_for, Backing, HostExtra, Plan, Request};
use crate::error::RegionError;
use crate::model::{PageSize, Policy};

/// The alignment that lets the kernel map a DAX file with PMD entries.
pub(crate) const DAX_PMD: u64 = 2 << 20;

/// A DAX region: a file on a `-o dax` mount (the directory given, else the
/// first such mount), 2 MiB-aligned and -sized unless base pages are asked
/// for (PMD faults need both). No pool: the memory is the device's.
pub(super) fn dax_plan(
    req: &Request,
    host: &HostSnapshot,
    extra: &HostExtra,
) -> Result<Plan, RegionError> {
    if let Some(dev) = &req.device {
        return device_plan(req, dev);
    }
    let page = match req.page_size {
        PageSize::Base => extra.base,
        PageSize::Largest => DAX_PMD,
        PageSize::Huge(p) if p == extra.base || p == DAX_PMD => p,
        PageSize::Huge(p) => {
            return Err(RegionError::UnsupportedPageSize {
                page_size_bytes: p,
                offered: vec![extra.base, DAX_PMD],
            })
        }
    };
    let page = if req.policy == Policy::Off {
        extra.base
    } else {
        page
    };
    // dax=always first: every file there is DAX; on dax=inode the region's
    // file gets the flag (backend/file/dax.rs).
    let mut dax_mounts: Vec<&hugeshm_parse::mounts::Mount> =
        host.mounts.iter().filter(|m| m.may_dax()).collect();
    dax_mounts.sort_by_key(|m| !m.is_dax());
    let dir = match &req.directory {
        Some((d, _)) => {
            match mount_of(&host.mounts, d) {
                Some(m) if m.may_dax() => {}
                other => {
                    return Err(RegionError::UnsuitableDirectory {
                        path: d.display().to_string(),
                        reason: format!(
                            "not on a DAX file system ({}): dax regions live on persistent memory mounted with -o dax",
                            other
                                .map(|m| format!("{} is {} without dax", m.target, m.fstype))
                                .unwrap_or_else(|| "no mount found".to_owned())
                        ),
                    })
                }
            }
            d.clone()
        }
        None => {
            match dax_mounts.first() {
                Some(m) => PathBuf::from(&m.target),
                None => return Err(RegionError::Unsupported(
                    "no DAX file system is mounted: put a file system on persistent memory and \
                     mount it with -o dax (ndctl create-namespace --mode=fsdax --align 2M; \
                     mkfs.ext4 -b 4096 /dev/pmem0; mount -o dax /dev/pmem0 /mnt/pmem), or give \
                     its directory"
                        .to_owned(),
                )),
            }
        }
    };
    Ok(Plan {
        page_size: page,
        size_bytes: size_for(req.requested_bytes, page)?,
        backing: Backing::Dax,
        dir: Some(dir),
        fallback: None,
        warnings: Vec::new(),
    })
}

/// A device-dax character device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DevDax {
    /// The device node (`/dev/dax0.0`).
    pub path: PathBuf,
    /// `dax0.0`.
    pub name: String,
    /// Its capacity.
    pub size_bytes: u64,
    /// Its fault and mapping granularity (sysfs `align`).
    pub align_bytes: u64,
}

/// The size of a region of `requested` bytes on a device of `size_bytes`
/// faulting `align` bytes at a time: rounded up to `align`, or `Err` with
/// the rounded size when the device cannot hold it.
pub(crate) fn region_size(requested: u64, align: u64, size_bytes: u64) -> Result<u64, u64> {
    let align = align.max(1);
    let rounded = requested
        .checked_next_multiple_of(align)
        .unwrap_or(u64::MAX);
    if rounded > size_bytes {
        Err(rounded)
    } else {
        Ok(rounded)
    }
}

/// A region too large for the device: the numbers, and the fix.
pub(crate) fn too_big(dev: &DevDax, needed: u64) -> RegionError {
    RegionError::NoSpace {
        path: dev.path.display().to_string(),
        fstype: "device-dax".to_owned(),
        needed_bytes: needed,
        free_bytes: dev.size_bytes,
        fix: Box::new(Fix::GrowDeviceDax {
            device: dev.path.display().to_string(),
            size_bytes: dev.size_bytes,
            align_bytes: dev.align_bytes,
            missing_bytes: needed.saturating_sub(dev.size_bytes),
        }),
    }
}

/// A DAX region on a device-dax: the device faults (and maps) in units
/// of its alignment, so that is the page size whatever was asked, and the
/// size is rounded up to it; a region larger than the device is `NoSpace`
/// with the numbers, before anything is opened.
fn device_plan(req: &Request, dev: &DevDax) -> Result<Plan, RegionError> {
    let align = dev.align_bytes;
    match req.page_size {
        PageSize::Largest => {}
        PageSize::Huge(p) if p == align => {}
        PageSize::Huge(p) => {
            return Err(RegionError::UnsupportedPageSize {
                page_size_bytes: p,
                offered: vec![align],
            })
        }
        PageSize::Base => {
            return Err(RegionError::UnsupportedPageSize {
                page_size_bytes: hugeshm_sys::base_page_size() as u64,
                offered: vec![align],
            })
        }
    }
    let size = region_size(req.requested_bytes, align, dev.size_bytes)
        .map_err(|needed| too_big(dev, needed))?;
    Ok(Plan {
        page_size: align,
        size_bytes: size,
        backing: Backing::Dax,
        dir: Some(dev.path.clone()),
        fallback: None,
        warnings: Vec::new(),
    })
}
