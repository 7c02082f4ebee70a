//! The `anon` backend: `MAP_SHARED|MAP_ANONYMOUS` (with `MAP_HUGETLB` for
//! huge pages), shared with `fork`ed children only. It has no name, so
//! nothing to open, inspect, list or remove.

use hugeshm_probe::Probe;
use hugeshm_sys as sys;

use super::{BackendOps, Inspected, Made, Object, Opened, Place, Spec};
use crate::error::RegionError;
use crate::holders::Holders;
use crate::inspect::RegionInfo;
use crate::model::{Expect, Trust};
use crate::pool::{self, Backing};

/// The `anon` backend's operations ([`BackendOps`]).
pub(crate) struct Anon;

/// Its one instance.
pub(crate) static ANON: Anon = Anon;

fn unnamed() -> RegionError {
    RegionError::Unsupported(
        "anon regions cannot be found by name: anon memory is shared with fork()ed children only"
            .to_owned(),
    )
}

impl BackendOps for Anon {
    fn create(&self, spec: &Spec<'_>) -> Result<Made, RegionError> {
        let plan = spec.plan;
        let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
        let mem = sys::MapOptions::new(plan.size_bytes as usize)
            .shared()
            .huge(huge)
            .align(spec.align)
            .map_anon()
            .map_err(|e| pool::map_refused(spec.probe, e, huge, plan.size_bytes))?;
        Ok(Made {
            mem,
            object: Object::Anon,
        })
    }

    fn open(&self, _: &Place<'_>, _: &Holders<'_>) -> Result<Option<Opened>, RegionError> {
        Err(unnamed())
    }

    fn map(&self, _: Opened, _: &Expect) -> Result<(Made, Option<u64>), RegionError> {
        Err(unnamed())
    }

    fn inspect(&self, _: &Place<'_>, _: &Holders<'_>) -> Result<Vec<Inspected>, RegionError> {
        Err(unnamed())
    }

    fn remove(&self, _: Inspected) -> Result<(), RegionError> {
        Err(unnamed())
    }

    fn list(&self, _: &Holders<'_>, _: &Trust) -> Vec<RegionInfo> {
        Vec::new()
    }

    fn looked(&self, _: &Place<'_>, _: &Probe) -> String {
        String::new()
    }
}
