//! Step 1, a region of the same name: what `create` does with it (the
//! table in [`interlock`](crate::interlock)): refuse, remove and create
//! again, or attach an orphan that is `ready` and keep its contents.

use std::time::Instant;

use crate::attach::{bytes_text, size_matches, Locator};
use crate::backend::{self, Inspected};
use crate::error::RegionError;
use crate::handle::Region;
use crate::header::{self, RegionHeader};
use crate::inspect::RegionInfo;
use crate::memlock;
use crate::model::{Fallback, NamedObject, Policy, Reclaim, RegionState};
use crate::prefault;
use crate::report::{AllocationReport, Reclaimed};
use crate::verify;

use super::plan::{fault_method, fault_threads};
use super::publish::ReportParts;
use super::RegionBuilder;

/// What the interlock's table says to do with a region of the same name
/// nobody holds, and what it was.
#[derive(Debug, PartialEq)]
enum Decision {
    /// Remove it; `create` then makes a new one.
    Remove(Reclaimed),
    /// Attach it and keep its contents.
    Reuse(Reclaimed),
}

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

    /// Deals with a region of the same name: refused, or removed (then
    /// `create` makes a new one), or reused. Another user's (or one others
    /// may write) is refused before anything else.
    pub(super) fn resolve(&self, found: Inspected, t0: Instant) -> Result<Resolved, RegionError> {
        // Never reuse or remove what another user owns or may write.
        if let Some(l) = self.locator() {
            l.check_trust(&found.info)?;
        }
        match self.decide(&found.info)? {
            Decision::Remove(previous) => {
                backend::remove_unheld(found)?;
                Ok(Resolved::Removed(previous))
            }
            Decision::Reuse(previous) => {
                // Release the probe's lock before attaching.
                drop(found);
                self.reuse(previous, t0)
                    .map(|done| Resolved::Reused(Box::new(done)))
            }
        }
    }

    /// The table in [`interlock`](crate::interlock) for a region of the
    /// same name (`info`) under this builder's [`Reclaim`]: the error that
    /// refuses it, or whether it is removed or reused, with what it was.
    fn decide(&self, info: &RegionInfo) -> Result<Decision, RegionError> {
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
        let previous = |action, previous_state, previous_object| Reclaimed {
            action,
            previous_state,
            previous_object,
            previous_header: info.header.clone(),
        };
        match (self.reclaim, info.state) {
            // A memfd record whose memfd is gone: there is nothing left to
            // reclaim, so it is replaced without being asked.
            (Reclaim::Refuse, RegionState::Stale) => Ok(Decision::Remove(previous(
                Reclaim::Recreate,
                RegionState::Stale,
                object,
            ))),
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
                kept: info.header.as_ref().is_some_and(|h| h.kept),
            }),
            (Reclaim::Reuse, RegionState::Ready) => Ok(Decision::Reuse(previous(
                Reclaim::Reuse,
                info.state,
                object,
            ))),
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
                Ok(Decision::Remove(previous(Reclaim::Recreate, state, object)))
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
        self.check_reused(&h, region.object_text())?;
        if self.mlock {
            memlock::check_memlock(h.size_bytes)?;
        }
        let setup_seconds = t0.elapsed().as_secs_f64();
        let threads = fault_threads(self.prefault_threads, &[]);
        let method = fault_method(threads);
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
        let base = hugeshm_sys::base_page_size() as u64;
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
                    age_text(h.created().elapsed().map(|d| d.as_secs()).unwrap_or(0))
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

    /// Whether an orphan's header (`h`, of `object`) is the region asked
    /// for: its size, and its page size (under `try` base pages too; under
    /// `off` base pages only).
    fn check_reused(&self, h: &RegionHeader, object: String) -> Result<(), RegionError> {
        if !size_matches(self.size, h) {
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
        Ok(())
    }
}

/// An age in seconds, in the unit that reads best.
fn age_text(s: u64) -> String {
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, PageSize};

    const OBJECT: &str = "/dev/shm/hugeshm.db";

    fn builder(reclaim: Reclaim) -> RegionBuilder {
        RegionBuilder::new(8 << 20)
            .name("db")
            .backend(Backend::Posix)
            .reclaim(reclaim)
    }

    /// A region `db` found in `state`, held by a live process or not.
    fn found(state: RegionState, held: bool) -> RegionInfo {
        let mut info = RegionInfo::foreign(
            "db".to_owned(),
            Backend::Posix,
            OBJECT.to_owned(),
            "not a hugeshm region".to_owned(),
            None,
        );
        info.state = state;
        info.held = held;
        info.holders = if held { vec![77] } else { Vec::new() };
        info.creator_pid = Some(4242);
        info
    }

    fn removed(action: Reclaim, state: RegionState) -> Decision {
        Decision::Remove(Reclaimed {
            action,
            previous_state: state,
            previous_object: OBJECT.to_owned(),
            previous_header: None,
        })
    }

    #[test]
    fn a_held_foreign_or_newer_region_is_refused_whatever_reclaim_says() {
        for reclaim in [Reclaim::Refuse, Reclaim::Reuse, Reclaim::Recreate] {
            let b = builder(reclaim);
            match b.decide(&found(RegionState::Ready, true)).unwrap_err() {
                RegionError::AlreadyExists { holders, state, .. } => {
                    assert_eq!(holders, vec![77]);
                    assert_eq!(state, Some(RegionState::Ready));
                }
                e => panic!("{reclaim:?}: {e}"),
            }
            let e = b.decide(&found(RegionState::Foreign, false)).unwrap_err();
            assert!(
                matches!(&e, RegionError::NotOurs { object, reason }
                    if object == OBJECT && reason == "not a hugeshm region"),
                "{e}"
            );
            let e = b.decide(&found(RegionState::Newer, false)).unwrap_err();
            assert!(matches!(e, RegionError::NewerLayout { .. }), "{e}");
        }
    }

    #[test]
    fn an_orphan_is_refused_removed_or_reused_as_reclaim_says() {
        let refuse = builder(Reclaim::Refuse);
        for state in [RegionState::Ready, RegionState::Crashed] {
            match refuse.decide(&found(state, false)).unwrap_err() {
                RegionError::Orphaned {
                    state: s,
                    creator_pid,
                    ..
                } => {
                    assert_eq!(s, state);
                    assert_eq!(creator_pid, Some(4242));
                }
                e => panic!("{state}: {e}"),
            }
        }
        // A memfd record without its memfd goes without being asked.
        assert_eq!(
            refuse.decide(&found(RegionState::Stale, false)).unwrap(),
            removed(Reclaim::Recreate, RegionState::Stale)
        );

        let reuse = builder(Reclaim::Reuse);
        assert_eq!(
            reuse.decide(&found(RegionState::Ready, false)).unwrap(),
            Decision::Reuse(Reclaimed {
                action: Reclaim::Reuse,
                previous_state: RegionState::Ready,
                previous_object: OBJECT.to_owned(),
                previous_header: None,
            })
        );
        match reuse
            .decide(&found(RegionState::Crashed, false))
            .unwrap_err()
        {
            RegionError::Incomplete {
                creator_alive,
                header_written,
                ..
            } => assert!(!creator_alive && !header_written),
            e => panic!("{e}"),
        }
        let e = reuse.decide(&found(RegionState::Stale, false)).unwrap_err();
        assert!(
            matches!(
                e,
                RegionError::Stale {
                    creator_pid: 4242,
                    ..
                }
            ),
            "{e}"
        );

        let recreate = builder(Reclaim::Recreate);
        for state in [RegionState::Ready, RegionState::Crashed, RegionState::Stale] {
            assert_eq!(
                recreate.decide(&found(state, false)).unwrap(),
                removed(Reclaim::Recreate, state)
            );
        }
    }

    #[test]
    fn an_orphan_shorter_than_its_header_is_refused_as_damaged() {
        let mut info = found(RegionState::Ready, false);
        info.header = Some(header::new_header(
            Some("db"),
            Backend::Posix,
            16 << 20,
            16 << 20,
            4096,
            1,
        ));
        info.object = NamedObject::File {
            path: OBJECT.to_owned(),
            size_bytes: 8 << 20,
        };
        let e = builder(Reclaim::Refuse).decide(&info).unwrap_err();
        assert!(
            matches!(
                e,
                RegionError::Orphaned {
                    state: RegionState::Damaged,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_reused_region_must_have_the_size_and_page_size_asked() {
        let base = hugeshm_sys::base_page_size() as u64;
        let header =
            |page: u64| header::new_header(Some("db"), Backend::Posix, 8 << 20, 8 << 20, page, 1);
        let asked = |size: u64, page: PageSize, policy: Policy| {
            RegionBuilder::new(size).page_size(page).policy(policy)
        };
        let field = |r: Result<(), RegionError>| match r {
            Err(RegionError::HeaderMismatch { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let huge = header(2 << 20);
        asked(8 << 20, PageSize::HUGE_2M, Policy::Only)
            .check_reused(&huge, OBJECT.to_owned())
            .unwrap();
        asked(8 << 20, PageSize::Largest, Policy::Only)
            .check_reused(&huge, OBJECT.to_owned())
            .unwrap();
        assert_eq!(
            field(
                asked(16 << 20, PageSize::HUGE_2M, Policy::Only)
                    .check_reused(&huge, OBJECT.to_owned())
            ),
            "size"
        );
        assert_eq!(
            field(
                asked(8 << 20, PageSize::Huge(1 << 30), Policy::Only)
                    .check_reused(&huge, OBJECT.to_owned())
            ),
            "page size"
        );
        // On base pages: what `try` may have made, and what `off` asks for.
        let small = header(base);
        asked(8 << 20, PageSize::HUGE_2M, Policy::Try)
            .check_reused(&small, OBJECT.to_owned())
            .unwrap();
        asked(8 << 20, PageSize::HUGE_2M, Policy::Off)
            .check_reused(&small, OBJECT.to_owned())
            .unwrap();
        assert_eq!(
            field(
                asked(8 << 20, PageSize::HUGE_2M, Policy::Only)
                    .check_reused(&small, OBJECT.to_owned())
            ),
            "page size"
        );
        assert_eq!(
            field(
                asked(8 << 20, PageSize::HUGE_2M, Policy::Off)
                    .check_reused(&huge, OBJECT.to_owned())
            ),
            "page size"
        );
    }

    #[test]
    fn ages_read_in_seconds_minutes_or_hours() {
        assert_eq!(age_text(0), "0 s");
        assert_eq!(age_text(119), "119 s");
        assert_eq!(age_text(120), "2 min");
        assert_eq!(age_text(7199), "119 min");
        assert_eq!(age_text(7200), "2 h");
    }
}
