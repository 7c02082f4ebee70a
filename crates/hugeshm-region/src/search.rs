//! A region found by name in whichever backend holds it: what `hugeshm
//! attach` and `hugeshm rm` do without `--backend`.

use crate::{AttachReport, Backend, Locator, NamedObject, Region, RegionError};

/// The backends a name is looked for in when none is given, in order:
/// posix before hugetlbfs (a hugetlbfs region's `try` fall-back lives in
/// /dev/shm too, and says so in its header).
pub const SEARCH_ORDER: [Backend; 5] = [
    Backend::Sysv,
    Backend::Posix,
    Backend::Hugetlbfs,
    Backend::Memfd,
    Backend::Dax,
];

impl Locator {
    /// [`SEARCH_ORDER`]; only the file backends (posix, hugetlbfs, dax)
    /// where a directory is given.
    fn search_order(&self) -> impl Iterator<Item = Locator> + '_ {
        SEARCH_ORDER
            .into_iter()
            .filter(|b| {
                self.directory.is_none()
                    || matches!(b, Backend::Posix | Backend::Hugetlbfs | Backend::Dax)
            })
            .map(|backend| {
                let mut l = self.clone();
                l.backend = backend;
                l
            })
    }

    /// The region of this name in the first backend of [`SEARCH_ORDER`]
    /// that has it (this locator's own backend aside; with a directory, the
    /// file backends only), attached, with its report. A backend without
    /// it, or with another backend's region at the same path (a hugetlbfs
    /// region's fall-back in /dev/shm), is looked past; any other error is
    /// returned. None has it: [`RegionError::NotFoundAnywhere`].
    pub fn attach_any(&self) -> Result<(Region, AttachReport), RegionError> {
        let mut looked = Vec::new();
        for l in self.search_order() {
            match l.attach_with_report() {
                Err(RegionError::NotFound { looked: at, .. }) => looked.push(at),
                Err(RegionError::HeaderMismatch { field, object, .. }) if field == "backend" => {
                    looked.push(object)
                }
                other => return other,
            }
        }
        Err(self.nowhere(&looked))
    }

    /// Removes the region of this name (`per_node`: every part of the
    /// per-node set) from every backend of [`SEARCH_ORDER`] that has it
    /// (with a directory, the file backends only); what was removed, by
    /// backend. The first error other than not found is returned; none
    /// has it: [`RegionError::NotFoundAnywhere`].
    pub fn remove_any(&self, per_node: bool) -> Result<Vec<(Backend, NamedObject)>, RegionError> {
        let (mut removed, mut looked) = (Vec::new(), Vec::new());
        for l in self.search_order() {
            let result = if per_node {
                l.remove_per_node()
            } else {
                l.remove()
            };
            match result {
                Ok(objs) => removed.extend(objs.into_iter().map(|o| (l.backend, o))),
                Err(RegionError::NotFound { looked: at, .. }) => looked.push(at),
                Err(e) => return Err(e),
            }
        }
        if removed.is_empty() {
            return Err(self.nowhere(&looked));
        }
        Ok(removed)
    }

    /// Not found in any backend: every place `looked` lists, each once.
    fn nowhere(&self, looked: &[String]) -> RegionError {
        let mut seen = Vec::new();
        for part in looked.iter().flat_map(|l| l.split(", ")) {
            if !part.is_empty() && !seen.contains(&part) {
                seen.push(part);
            }
        }
        RegionError::NotFoundAnywhere {
            name: self.name.clone(),
            looked: seen.join(", "),
        }
    }
}
