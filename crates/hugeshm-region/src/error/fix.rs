//! [`RegionError::fix`]: what to do about an error, as a typed [`Fix`]
//! that each front end renders in its own words.

use hugeshm_fix::Fix;

use super::RegionError;
use crate::model::{Backend, RegionState};

impl RegionError {
    /// What to do about it, for errors that have a remedy.
    pub fn fix(&self) -> Option<Fix> {
        let region = |name: &str, backend: &Backend| (name.to_owned(), backend.to_string());
        let dir = |name: &str, backend: &Backend, object: &str| {
            crate::model::directory_hint(name, *backend, object)
        };
        match self {
            RegionError::Lost {
                name: Some(named),
                object,
                ..
            } => Some(Fix::Reclaim {
                name: named.0.clone(),
                backend: named.1.to_string(),
                dir: dir(&named.0, &named.1, object),
                keep_contents: false,
            }),
            RegionError::PoolShortfall { shortfall, .. } => Some(shortfall.fix.clone()),
            RegionError::InvalidSize { fix, .. } => fix.as_deref().cloned(),
            RegionError::UnsupportedPageSize {
                page_size_bytes, ..
            } => Some(Fix::BootPageSize {
                page_size_bytes: *page_size_bytes,
            }),
            RegionError::NoHugetlbfsMount { fix, .. }
            | RegionError::ThpUnavailable { fix, .. }
            | RegionError::NoSpace { fix, .. }
            | RegionError::KernelLimit { fix, .. }
            | RegionError::FaultRefused { fix, .. }
            | RegionError::CgroupLimit { fix, .. }
            | RegionError::NodeShortfall { fix, .. }
            | RegionError::DaxSmallFaults { fix, .. }
            | RegionError::Permission { fix, .. } => Some((**fix).clone()),
            RegionError::NotEnoughMemory {
                needed_bytes,
                available_bytes,
                on_demand_possible,
                ..
            } => Some(Fix::FreeMemory {
                missing_bytes: needed_bytes.saturating_sub(*available_bytes),
                on_demand: *on_demand_possible,
            }),
            RegionError::MemlockLimit {
                needed_bytes,
                locked_bytes,
                user,
                ..
            } => Some(Fix::RaiseMemlock {
                user: user.clone(),
                kib: needed_bytes.saturating_add(*locked_bytes).div_ceil(1024),
            }),
            RegionError::AlreadyExists {
                name,
                backend,
                object,
                holders,
                ..
            } => {
                let dir = dir(name, backend, object);
                let (name, backend) = region(name, backend);
                Some(Fix::AttachOrRemove {
                    name,
                    backend,
                    dir,
                    holders: holders.clone(),
                })
            }
            RegionError::Orphaned {
                name,
                backend,
                object,
                state,
                ..
            } => {
                let dir = dir(name, backend, object);
                let (name, backend) = region(name, backend);
                Some(Fix::Reclaim {
                    name,
                    backend,
                    dir,
                    keep_contents: *state == RegionState::Ready,
                })
            }
            RegionError::Incomplete {
                name,
                backend,
                object,
                creator_alive,
                ..
            } => Some(if *creator_alive {
                Fix::WaitUntilReady
            } else {
                let dir = dir(name, backend, object);
                let (name, backend) = region(name, backend);
                Fix::Reclaim {
                    name,
                    backend,
                    dir,
                    keep_contents: false,
                }
            }),
            RegionError::Stale { name, .. } => Some(Fix::Remove {
                name: name.clone(),
                backend: Backend::Memfd.to_string(),
                dir: None,
            }),
            RegionError::NewerLayout { .. } => Some(Fix::NewerHugeshm),
            RegionError::Untrusted {
                name,
                backend,
                object,
                owner,
                ..
            } => {
                let dir = dir(name, backend, object);
                let (name, backend) = region(name, backend);
                Some(Fix::TrustOwner {
                    name,
                    backend,
                    dir,
                    uid: owner.uid,
                    mode: owner.mode,
                })
            }
            _ => None,
        }
    }
}
