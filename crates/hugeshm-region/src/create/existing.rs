//! Step 1, a region of the same name: what `create` does with it (the
//! table in [`interlock`](crate::interlock)): refuse, remove and create
//! again, or attach an orphan that is `ready` and keep its contents.

use std::time::Instant;

use crate::attach::{bytes_text, size_matches, Locator};
use crate::backend::{self, Inspected};
use crate::error::RegionError;
use crate::handle::Region;
use crate::header;
use crate::memlock;
use crate::model::{Fallback, NamedObject, Policy, PrefaultMethod, Reclaim, RegionState};
use crate::prefault::{self, available_cpus};
use crate::report::{AllocationReport, Reclaimed};
use crate::verify;

use super::publish::ReportParts;
use super::RegionBuilder;

/// What `create` made of a region of the same name nobody held.
pub(super) enum Resolved {
    Reused(Box<(Region, AllocationReport)>),
    Removed(Reclaimed),
}

impl RegionBuilder {
    pub(super) fn locator(&self) -> Option<Locator> {
        let name = self.name.as_deref()?;
        if !self.backend.attachable_by_name() {
            return None;
        }
        let mut l = Locator::new(name, self.backend)
            .pmd_sharing(self.pmd_sharing)
            .probe(self.probe.clone())
            .mode(self.mode);
        if let Some(uid) = self.owner {
            l = l.owner(uid);
        }
        if let Some(d) = &self.directory {
            l = l.directory(d.clone());
        }
        Some(l)
    }

    pub(super) fn inspect_existing(&self) -> Result<Option<Inspected>, RegionError> {
        match self.locator() {
            Some(l) => Ok(l.inspect_all(&l.holders())?.into_iter().next()),
            None => Ok(None),
        }
    }

    /// Decides about a region of the same name (see the table in
    /// [`interlock`](crate::interlock)).
    pub(super) fn resolve(&self, found: Inspected, t0: Instant) -> Result<Resolved, RegionError> {
        let info = &found.info;
        // Never reuse or remove what another user owns or may write.
        if let Some(l) = self.locator() {
            l.check_trust(info)?;
        }
        let object = info.object.to_string();
        let name = info.name.clone();
        match info.state {
            RegionState::Foreign | RegionState::Damaged | RegionState::Collision => {
                return Err(RegionError::NotOurs {
                    object,
                    reason: info.detail.clone().unwrap_or_default(),
                })
            }
            RegionState::Newer => {
                return Err(RegionError::NewerLayout {
                    object,
                    found: info.layout_version.unwrap_or(0),
                    supported: header::LAYOUT_VERSION,
                })
            }
            _ => {}
        }
        if info.held {
            return Err(RegionError::AlreadyExists {
                name,
                backend: self.backend,
                object,
                holders: info.holders.clone(),
                state: Some(info.state),
            });
        }
        match (self.reclaim, info.state) {
            // A memfd record whose memfd is gone: there is nothing left to
            // reclaim, so it is replaced without being asked.
            (Reclaim::Refuse, RegionState::Stale) => {
                let previous = Reclaimed {
                    action: Reclaim::Recreate,
                    previous_state: RegionState::Stale,
                    previous_object: object,
                    previous_header: info.header.clone(),
                };
                backend::remove_unheld(found)?;
                Ok(Resolved::Removed(previous))
            }
            (Reclaim::Refuse, state) => Err(RegionError::Orphaned {
                name,
                backend: self.backend,
                object,
                state: if info.truncated().is_some() {
                    RegionState::Damaged
                } else {
                    state
                },
                creator_pid: info.creator_pid,
            }),
            (Reclaim::Reuse, RegionState::Ready) => {
                let previous = Reclaimed {
                    action: Reclaim::Reuse,
                    previous_state: info.state,
                    previous_object: object,
                    previous_header: info.header.clone(),
                };
                // Release the probe's lock before attaching.
                drop(found);
                self.reuse(previous, t0)
                    .map(|done| Resolved::Reused(Box::new(done)))
            }
            (Reclaim::Reuse, RegionState::Stale) => Err(RegionError::Stale {
                name,
                record: match &info.object {
                    NamedObject::Memfd { record, .. } => record.clone(),
                    other => other.to_string(),
                },
                creator_pid: info.creator_pid.unwrap_or(0),
            }),
            (Reclaim::Reuse, _) => Err(RegionError::Incomplete {
                name,
                backend: self.backend,
                object,
                creator_pid: info.creator_pid,
                creator_alive: false,
                header_written: info.header.is_some(),
            }),
            (Reclaim::Recreate, state) => {
                let previous = Reclaimed {
                    action: Reclaim::Recreate,
                    previous_state: state,
                    previous_object: object,
                    previous_header: info.header.clone(),
                };
                backend::remove_unheld(found)?;
                Ok(Resolved::Removed(previous))
            }
        }
    }

    /// Attaches an orphan whose header is `ready`, keeping its contents,
    /// if it is the region asked for.
    fn reuse(
        &self,
        previous: Reclaimed,
        t0: Instant,
    ) -> Result<(Region, AllocationReport), RegionError> {
        let loc = self.locator().expect("reuse is for named regions");
        let mut region = loc.attach()?;
        let h = region.header.clone();
        let object = region.object_text();
        if !size_matches(self.size, &h) {
            return Err(RegionError::HeaderMismatch {
                object,
                field: "size".to_owned(),
                expected: bytes_text(self.size),
                found: bytes_text(h.size_bytes),
            });
        }
        let base = hugeshm_sys::base_page_size() as u64;
        let page_ok = match self.page_size.bytes() {
            None => true,
            Some(want) => {
                let want = if self.policy == Policy::Off {
                    base
                } else {
                    want
                };
                h.page_size_bytes == want
                    || (self.policy == Policy::Try && h.page_size_bytes == base)
            }
        };
        if !page_ok {
            return Err(RegionError::HeaderMismatch {
                object,
                field: "page size".to_owned(),
                expected: bytes_text(self.page_size.bytes().unwrap_or(0)),
                found: bytes_text(h.page_size_bytes),
            });
        }
        if self.mlock {
            memlock::check_memlock(h.size_bytes)?;
        }
        let setup_seconds = t0.elapsed().as_secs_f64();
        let threads = self.prefault_threads.unwrap_or_else(available_cpus);
        let method = if threads == 0 {
            PrefaultMethod::None
        } else {
            prefault::method_for_kernel()
        };
        // Maps the existing pages into this process; the pre-fault keeps
        // contents even while other processes write.
        let outcome = prefault::prefault(
            region.mapping(),
            h.page_size_bytes as usize,
            threads,
            &[],
            method,
            self.progress.as_ref(),
        )?;
        let v = region.verify_with(verify::pmd_size(&self.probe))?;
        if self.mlock {
            region.mlock()?;
        }
        let fell_back =
            self.page_size.bytes().is_some_and(|b| b > base) && h.page_size_bytes == base;
        region.set_name(loc.name());
        let report = self.report(
            &region,
            &v,
            ReportParts {
                page_size_bytes: h.page_size_bytes,
                fallback: fell_back.then(|| Fallback {
                    reason: "reused an existing region that is on base pages".to_owned(),
                    shortfall: None,
                }),
                node_bytes: verify::node_bytes(region.addr() as u64),
                cpus: Vec::new(),
                warnings: vec![format!(
                    "reused the existing region: created by pid {} {} ago, contents kept",
                    h.creator_pid,
                    age_text(h.created())
                )],
                threads: outcome.threads,
                method: outcome.method,
                setup_seconds,
                prefault_seconds: outcome.seconds,
                reclaimed: Some(previous),
            },
        );
        Ok((region, report))
    }
}

fn age_text(t: std::time::SystemTime) -> String {
    let s = t.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}
