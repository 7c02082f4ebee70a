//! Placing one mapping of the server: the steps of `create` (plan against
//! the pools, the cgroup and the nodes; map; `mbind`; pre-fault on the
//! nodes' CPUs; verify) without a header or a name, and the record.

use std::time::Instant;

use hugeshm_parse::run_record::{RunObject, RunPrefault as RecordPrefault, RunRecord};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{HostSnapshot, Probe};
use hugeshm_sys::{self as sys, Mapping, MemPolicy, ShmFlags};

use super::settings::{RunPageSize, RunPrefault, Settings};
use super::table::{Entry, Pending};
use super::{Done, MmapRequest, Outcome, ShmRequest};
use crate::create::memory_check;
use crate::error::RegionError;
use crate::model::{Backend, PageSize, Policy, PrefaultMethod};
use crate::pool::{self, Backing, HostExtra, Plan, Request};
use crate::{placement, prefault, verify};

/// How a mapping is pre-faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    None,
    /// `MADV_POPULATE_WRITE` (or touching) with this many threads.
    Threads(PrefaultMethod, usize),
    /// `MAP_POPULATE` on the `mmap` itself.
    MapPopulate,
}

/// What placing a mapping found out.
pub(super) struct Settled {
    method: &'static str,
    threads: usize,
    seconds: f64,
    v: verify::Verification,
    nodes: std::collections::BTreeMap<u32, u64>,
    pub(super) warnings: Vec<String>,
    /// `--fallback thp`: what the collapse made of the base pages.
    thp: Option<String>,
}

/// One placement's context: the settings, one host snapshot, the policy.
pub(super) struct Placer<'a> {
    s: &'a Settings,
    pub(super) probe: Probe,
    host: HostSnapshot,
    pub(super) extra: HostExtra,
    numa: Option<(MemPolicy, String)>,
    mbind: Option<MemPolicy>,
    cpus: Vec<u32>,
    what: String,
}

impl<'a> Placer<'a> {
    pub(super) fn new(s: &'a Settings, what: String) -> Self {
        let probe = Probe::default();
        let host = probe.host_for_regions();
        let extra = HostExtra {
            base: sys::base_page_size() as u64,
            pmd_size: verify::pmd_size(&probe),
        };
        Placer {
            numa: placement::effective_policy(&s.numa, &host),
            mbind: placement::mbind_policy(&s.numa, &host),
            cpus: placement::fault_cpus(&s.numa, &host),
            s,
            probe,
            host,
            extra,
            what,
        }
    }

    /// Whether pages are bound to nodes (`mbind` before the first touch:
    /// no `MAP_POPULATE`).
    pub(super) fn binds(&self) -> bool {
        self.mbind.is_some()
    }

    pub(super) fn base(&self) -> u64 {
        self.extra.base
    }

    /// The page size the server asked for: `log2` from its flags (0: the
    /// default huge page size), `None` for base pages.
    pub(super) fn asked_page(&self, huge_log2: Option<u32>) -> u64 {
        match huge_log2 {
            None => self.base(),
            Some(0) => self.host.default_page_size().unwrap_or(2 << 20),
            Some(l) => 1u64.checked_shl(l).unwrap_or(0),
        }
    }

    pub(super) fn request(&self, backend: Backend, asked_page: u64, bytes: u64) -> Request {
        let want = match self.s.page_size {
            RunPageSize::Keep => asked_page,
            RunPageSize::Default if asked_page > self.base() => asked_page,
            RunPageSize::Default => self.host.default_page_size().unwrap_or(asked_page),
            RunPageSize::Huge(p) => p,
        };
        Request {
            backend,
            page_size: if want <= self.base() {
                PageSize::Base
            } else {
                PageSize::Huge(want)
            },
            policy: self.s.policy,
            requested_bytes: bytes,
            directory: None,
            device: None,
        }
    }

    /// The plan, or the `only` refusal.
    pub(super) fn plan(&self, req: &Request) -> Result<Plan, RegionError> {
        let plan = pool::checked(
            req,
            &self.host,
            &self.extra,
            &self.probe,
            self.numa.as_ref(),
        )?;
        if usize::try_from(plan.size_bytes).is_err() {
            return Err(RegionError::InvalidSize {
                requested_bytes: req.requested_bytes,
                reason: "does not fit in this process's address space".to_owned(),
                fix: None,
            });
        }
        Ok(plan)
    }

    /// How to pre-fault a mapping of `plan` (a `--prefault` that would
    /// drive the host into reclaim is dropped under `try`, with the reason).
    pub(super) fn fault(
        &self,
        plan: &Plan,
        server_populate: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Fault, RegionError> {
        let fault = match self.s.prefault {
            RunPrefault::Off if server_populate => Fault::MapPopulate,
            RunPrefault::Off => Fault::None,
            RunPrefault::Populate => Fault::MapPopulate,
            RunPrefault::Threads(n) => {
                let threads = n.unwrap_or_else(|| {
                    if self.cpus.is_empty() {
                        prefault::available_cpus()
                    } else {
                        self.cpus.len()
                    }
                });
                Fault::Threads(prefault::method_for_kernel(), threads)
            }
        };
        let method = match fault {
            Fault::None => PrefaultMethod::None,
            _ => PrefaultMethod::PopulateWrite,
        };
        match memory_check(plan, Backend::Anon, method, &self.host) {
            Ok(()) => Ok(fault),
            Err(e) if self.s.policy == Policy::Try => {
                warnings.push(format!("not pre-faulted: {e}"));
                Ok(Fault::None)
            }
            Err(e) => Err(e),
        }
    }

    /// Where a shared hugetlb mapping of 1 GiB or more goes: a 1 GiB-aligned
    /// address, so that the processes that inherit it share page tables;
    /// a shared one on base pages of 2 MiB or more: 2 MiB-aligned, so that
    /// its blocks can be collapsed onto 2 MiB pages (now with `--fallback
    /// thp`, or later with `hugeshm collapse`).
    fn align(&self, plan: &Plan, shared: bool) -> Option<usize> {
        plan.pmd_share_align()
            .or_else(|| plan.block_align())
            .filter(|_| shared)
    }

    /// `--fallback thp`: the blocks of a shared mapping that fell back to
    /// base pages collapsed onto 2 MiB transparent huge pages (after the
    /// pre-fault, so that each block has its pages); what came of it.
    fn collapse(&self, map: &Mapping, shared: bool, plan: &Plan) -> Option<String> {
        if !(self.s.fallback_thp
            && shared
            && plan.backing == Backing::Base
            && plan.fallback.is_some())
        {
            return None;
        }
        if map.addr() % sys::COLLAPSE_BLOCK != 0 {
            return Some("not collapsed: the mapping is not 2 MiB-aligned".to_owned());
        }
        let r = map.collapse_blocks();
        let why = r
            .stopped
            .as_ref()
            .or(r.examples.first().map(|(_, e)| e))
            .map(|e| format!(" (the first refused: {e})"))
            .unwrap_or_default();
        Some(format!(
            "{} of {} 2 MiB blocks collapsed onto transparent huge pages (--fallback thp){why}",
            r.collapsed, r.blocks
        ))
    }

    /// `mbind`, pre-fault (a shared mapping from a child: [`super::fault`])
    /// and verify a fresh mapping of `plan`.
    pub(super) fn settle(
        &self,
        map: &Mapping,
        shared: bool,
        plan: &Plan,
        fault: Fault,
        populate_seconds: f64,
    ) -> Result<Settled, RegionError> {
        if let Some(p) = &self.mbind {
            map.mbind(p, matches!(p, MemPolicy::Bind(_)))?;
        }
        let hugetlb = plan.backing == Backing::Hugetlb;
        let (method, threads, seconds) = match fault {
            Fault::None => ("none", 0, 0.0),
            Fault::MapPopulate if self.mbind.is_none() => ("map_populate", 1, populate_seconds),
            Fault::MapPopulate | Fault::Threads(..) => {
                let (m, n) = match fault {
                    Fault::Threads(m, n) => (m, n),
                    _ => (prefault::method_for_kernel(), 1),
                };
                let page = plan.page_size as usize;
                let out = if shared {
                    super::fault::prefault_shared(map, page, n, &self.cpus, m)
                } else {
                    prefault::prefault(map, page, n, &self.cpus, m, None)
                }
                .map_err(|e| {
                    if !hugetlb {
                        return e;
                    }
                    let resident = verify::verify_range(map.addr() as u64, map.len() as u64, None)
                        .map(|v| v.resident_bytes)
                        .unwrap_or(0);
                    pool::fault_refused(&self.probe, plan, resident, e)
                })?;
                (out.method.as_str(), out.threads, out.seconds)
            }
        };
        let thp = self.collapse(map, shared, plan);
        let addr = map.addr() as u64;
        let v = verify::verify_range(addr, map.len() as u64, self.extra.pmd_size)?;
        let mut problems = Vec::new();
        if v.page_size_bytes < plan.page_size {
            problems.push(RegionError::Verification {
                asked_page_size_bytes: plan.page_size,
                verified_page_size_bytes: v.page_size_bytes,
                resident_bytes: v.resident_bytes,
                size_bytes: plan.size_bytes,
                detail: String::new(),
            });
        }
        let faulted = method != "none";
        let nodes = if faulted {
            verify::node_bytes(addr)
        } else {
            Default::default()
        };
        if faulted && !nodes.is_empty() {
            problems.extend(self.misplaced(plan, &nodes));
        }
        let mut warnings = Vec::new();
        for e in problems {
            if self.s.policy == Policy::Only {
                return Err(e);
            }
            warnings.push(e.to_string());
        }
        if faulted && v.resident_bytes < plan.size_bytes {
            warnings.push(format!(
                "only {} of {} bytes resident after the pre-fault",
                v.resident_bytes, plan.size_bytes
            ));
        }
        Ok(Settled {
            method,
            threads,
            seconds,
            v,
            nodes,
            warnings,
            thp,
        })
    }

    /// Pages off the nodes asked for: any for `bind`, more than one page
    /// off each node's share for `interleave`.
    fn misplaced(
        &self,
        plan: &Plan,
        nodes: &std::collections::BTreeMap<u32, u64>,
    ) -> Option<RegionError> {
        let page = plan.page_size.max(1);
        let list = || nodes.iter().map(|(n, b)| (*n, *b)).collect::<Vec<_>>();
        let placement = self.s.numa.to_string();
        let object = self.what.clone();
        match self.mbind.as_ref()? {
            MemPolicy::Bind(want) => {
                let off: u64 = nodes
                    .iter()
                    .filter(|(n, _)| !want.contains(n))
                    .map(|(_, b)| *b)
                    .sum();
                (off > 0).then(|| RegionError::Misplaced {
                    object,
                    placement,
                    misplaced_bytes: off,
                    nodes: list(),
                })
            }
            p @ (MemPolicy::Interleave(want) | MemPolicy::WeightedInterleave(want)) => {
                let weighted = matches!(p, MemPolicy::WeightedInterleave(_));
                let shares =
                    pool::interleave_shares(&self.host, want, weighted, plan.size_bytes / page);
                let off: u64 = shares
                    .iter()
                    .map(|&(n, share)| {
                        let got = nodes.get(&n).copied().unwrap_or(0) / page;
                        got.abs_diff(share).saturating_sub(1) * page
                    })
                    .sum();
                (off > 0).then(|| RegionError::Misplaced {
                    object,
                    placement: format!("{placement} (an even share on each node)"),
                    misplaced_bytes: off,
                    nodes: list(),
                })
            }
            _ => None,
        }
    }

    /// The record of a settled mapping (written; a failure is a warning).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record(
        &self,
        map: (usize, usize),
        object: RunObject,
        plan: &Plan,
        asked: (u64, u64),
        st: &Settled,
        fallback: Option<String>,
        warnings: &mut Vec<String>,
    ) -> bool {
        let rec = RunRecord {
            pid: std::process::id(),
            start_ticks: crate::header::own_start_ticks(),
            uid: rustix::process::geteuid().as_raw(),
            exe: std::fs::read_link("/proc/self/exe")
                .map(|p| printable(&p.display().to_string()))
                .unwrap_or_default(),
            object,
            address: map.0 as u64,
            size_bytes: map.1 as u64,
            requested_bytes: asked.0,
            page_size_asked_bytes: asked.1,
            page_size_bytes: plan.page_size,
            policy: self.s.policy.to_string(),
            numa: self.s.numa.to_string(),
            prefault: (st.method != "none").then(|| RecordPrefault {
                method: st.method.to_owned(),
                threads: st.threads as u32,
                seconds: st.seconds,
            }),
            resident_bytes: st.v.resident_bytes,
            verified_page_size_bytes: st.v.page_size_bytes.max(4096),
            nodes: st.nodes.clone(),
            fallback: fallback.as_deref().map(printable),
            warnings: warnings.iter().map(|w| printable(w)).collect(),
        };
        match super::record::write(&rec) {
            Ok(_) => true,
            Err(e) => {
                warnings.push(format!("no record for the doctor: {e}"));
                false
            }
        }
    }

    /// The `only` refusal: `ENOMEM` (or the call's own errno) and the line
    /// with the numbers and the fix.
    pub(super) fn refuse(&self, e: RegionError) -> Done {
        let errno = match &e {
            RegionError::Sys(s) => s.errno().unwrap_or(libc::ENOMEM),
            _ => libc::ENOMEM,
        };
        let fix = e
            .fix()
            .map(|f| format!("; to fix: {}", f.render(hugeshm_fix::Renderer::Cli)))
            .unwrap_or_default();
        let name = match errno {
            libc::ENOMEM => "ENOMEM".to_owned(),
            libc::EINVAL => "EINVAL".to_owned(),
            libc::EPERM => "EPERM".to_owned(),
            libc::EACCES => "EACCES".to_owned(),
            libc::ENOSPC => "ENOSPC".to_owned(),
            n => format!("errno {n}"),
        };
        Done {
            outcome: Outcome::Refused { errno },
            line: Some(one_line(format!(
                "hugeshm run: {}: failed with {name} (--policy only): {e}{fix}",
                self.what
            ))),
        }
    }

    /// The one line a `try` placement says, if anything.
    pub(super) fn say(&self, fallback: Option<&str>, warnings: &[String]) -> Option<String> {
        let parts: Vec<&str> = fallback
            .into_iter()
            .chain(warnings.iter().map(String::as_str))
            .collect();
        (!parts.is_empty())
            .then(|| one_line(format!("hugeshm run: {}: {}", self.what, parts.join("; "))))
    }
}

/// A record's text: control characters (which the doctor refuses, as it
/// prints texts on terminals) as `?`.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// A line never spans lines.
pub(super) fn one_line(s: String) -> String {
    s.replace(['\n', '\r'], " ")
}

pub(super) fn refused(e: &RegionError) -> bool {
    matches!(
        e,
        RegionError::PoolShortfall { .. } | RegionError::FaultRefused { .. }
    )
}

fn describe(shared: bool, huge: Option<u32>, len: u64) -> String {
    format!(
        "pid {}: mmap({}|MAP_ANONYMOUS{}, {})",
        std::process::id(),
        if shared { "MAP_SHARED" } else { "MAP_PRIVATE" },
        if huge.is_some() { "|MAP_HUGETLB" } else { "" },
        format_bytes(len)
    )
}

/// Places a qualifying `mmap` of the server.
pub(crate) fn place_mmap(s: &Settings, req: &MmapRequest) -> Done {
    let p = Placer::new(s, describe(req.shared, req.huge_log2, req.len as u64));
    let asked_page = p.asked_page(req.huge_log2);
    let preq = p.request(Backend::Anon, asked_page, req.len as u64);
    let mut plan = match p.plan(&preq) {
        Ok(plan) => plan,
        Err(e) => return p.refuse(e),
    };
    let mut warnings = plan.warnings.clone();
    let mut fallback = plan.fallback.as_ref().map(|f| f.reason.clone());
    let mut retried = false;
    loop {
        let fault = match p.fault(&plan, req.populate, &mut warnings) {
            Ok(f) => f,
            Err(e) => return p.refuse(e),
        };
        let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
        let size = plan.size_bytes as usize;
        let t0 = Instant::now();
        let mut options = sys::MapOptions::new(size);
        options.huge(huge);
        if req.shared {
            options.shared();
        }
        if fault == Fault::MapPopulate && p.mbind.is_none() {
            options.populate();
        } else {
            options.align(p.align(&plan, req.shared));
        }
        let mapped = options.map_anon();
        let populate_seconds = t0.elapsed().as_secs_f64();
        let result = mapped
            .map_err(|e| pool::map_refused(&p.probe, e, huge, plan.size_bytes))
            .and_then(|map| {
                let st = p.settle(&map, req.shared, &plan, fault, populate_seconds)?;
                Ok((map, st))
            });
        match result {
            Ok((map, st)) => {
                warnings.extend(st.warnings.iter().cloned());
                if let Some(t) = &st.thp {
                    fallback = fallback.map(|f| format!("{f}; {t}"));
                }
                let object = if req.shared {
                    RunObject::Anon
                } else {
                    RunObject::Private
                };
                let recorded = p.record(
                    (map.addr(), map.len()),
                    object,
                    &plan,
                    (req.len as u64, asked_page),
                    &st,
                    fallback.clone(),
                    &mut warnings,
                );
                let line = p.say(fallback.as_deref(), &warnings);
                let (addr, len) = map.into_raw();
                return Done {
                    outcome: Outcome::Mapped {
                        addr,
                        entry: Entry {
                            start: addr,
                            len,
                            asked_len: req.len,
                            page: plan.page_size as usize,
                            shmid: None,
                            creator: std::process::id(),
                            recorded,
                            pending: None,
                        },
                    },
                    line,
                };
            }
            Err(e) if s.policy == Policy::Try && plan.is_huge() && refused(&e) && !retried => {
                retried = true;
                plan = match pool::fallback_plan(&preq, &p.extra, &e) {
                    Ok(plan) => plan,
                    Err(e) => return p.refuse(e),
                };
                fallback = plan.fallback.as_ref().map(|f| f.reason.clone());
            }
            Err(e) if s.policy == Policy::Try => {
                // Nothing of ours is left: the server's own call decides.
                return Done {
                    outcome: Outcome::Pass,
                    line: p.say(Some(&format!("{e}; left as the server asked")), &warnings),
                };
            }
            Err(e) => return p.refuse(e),
        }
    }
}

/// Creates a qualifying SysV segment of the server (placed at its first
/// `shmat`, [`attach_shm`]).
pub(crate) fn place_shmget(s: &Settings, req: &ShmRequest) -> Done {
    let what = format!(
        "pid {}: shmget(key {:#x}, {})",
        std::process::id(),
        req.key as u32,
        format_bytes(req.size as u64)
    );
    let p = Placer::new(s, what);
    let pass = |line: Option<String>| Done {
        outcome: Outcome::Pass,
        line,
    };
    // A segment that exists is the server's to attach, whatever its size.
    if !req.exclusive && req.key != sys::IPC_PRIVATE {
        let probe = ShmFlags {
            mode: 0,
            ..ShmFlags::default()
        };
        if sys::shm_get(req.key, 0, probe).is_ok() {
            return pass(None);
        }
    }
    let asked_page = p.asked_page(req.huge_log2);
    let preq = p.request(Backend::Sysv, asked_page, req.size as u64);
    let mut plan = match p.plan(&preq) {
        Ok(plan) => plan,
        Err(e) => return p.refuse(e),
    };
    let mut retried = false;
    loop {
        let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
        let flags = ShmFlags {
            create: true,
            exclusive: true,
            huge_page_size: huge,
            mode: req.mode,
        };
        match sys::shm_get(req.key, plan.size_bytes, flags) {
            Ok(shmid) => {
                let line = p.say(
                    plan.fallback.as_ref().map(|f| f.reason.as_str()),
                    &plan.warnings,
                );
                return Done {
                    outcome: Outcome::Created {
                        shmid,
                        entry: Entry {
                            start: 0,
                            len: plan.size_bytes as usize,
                            asked_len: req.size,
                            page: plan.page_size as usize,
                            shmid: Some(shmid),
                            creator: std::process::id(),
                            recorded: false,
                            pending: Some(Box::new(Pending { plan, asked_page })),
                        },
                    },
                    line,
                };
            }
            // Made meanwhile by someone else: the server's own call finds it.
            Err(e) if e.errno() == Some(libc::EEXIST) && !req.exclusive => return pass(None),
            Err(e) if e.errno() == Some(libc::EEXIST) => {
                return Done {
                    outcome: Outcome::Refused {
                        errno: libc::EEXIST,
                    },
                    line: None,
                }
            }
            Err(e) => {
                let e = pool::map_refused(&p.probe, e, huge, plan.size_bytes);
                if s.policy == Policy::Try && plan.is_huge() && refused(&e) && !retried {
                    retried = true;
                    plan = match pool::fallback_plan(&preq, &p.extra, &e) {
                        Ok(plan) => plan,
                        Err(e) => return p.refuse(e),
                    };
                    continue;
                }
                if s.policy == Policy::Try {
                    return pass(p.say(Some(&format!("{e}; left as the server asked")), &[]));
                }
                return p.refuse(e);
            }
        }
    }
}

/// The server's first `shmat` of a segment [`place_shmget`] made: attach,
/// place, pre-fault, verify, record.
pub(crate) fn attach_shm(s: &Settings, mut entry: Entry) -> Done {
    let pass = Done {
        outcome: Outcome::Pass,
        line: None,
    };
    let (Some(shmid), Some(pending)) = (entry.shmid, entry.pending.take()) else {
        return pass;
    };
    let p = Placer::new(
        s,
        format!("pid {}: shmat(shmid {shmid})", std::process::id()),
    );
    let Pending { plan, asked_page } = *pending;
    // The plan's fall-back and warnings were said at shmget: only what
    // comes of the attach is said here (the record has it all).
    let mut warnings = Vec::new();
    let mut fallback = plan.fallback.as_ref().map(|f| f.reason.clone());
    let settled = p.fault(&plan, false, &mut warnings).and_then(|fault| {
        // MAP_POPULATE is mmap's: a segment is faulted by one thread.
        let fault = match fault {
            Fault::MapPopulate => Fault::Threads(prefault::method_for_kernel(), 1),
            f => f,
        };
        let map = sys::shm_attach_placed(shmid, p.align(&plan, true))?;
        let st = p.settle(&map, true, &plan, fault, 0.0)?;
        Ok((map, st))
    });
    match settled {
        Ok((map, st)) => {
            warnings.extend(st.warnings.iter().cloned());
            if let Some(t) = &st.thp {
                fallback = fallback.map(|f| format!("{f}; {t}"));
            }
            let object = RunObject::Sysv {
                shmid: shmid as u64,
            };
            let asked = (entry.asked_len as u64, asked_page);
            let said = plan.warnings.len();
            let mut all = plan.warnings.clone();
            all.extend(warnings.iter().cloned());
            let at = (map.addr(), map.len());
            entry.recorded = p.record(at, object, &plan, asked, &st, fallback, &mut all);
            let line = p.say(st.thp.as_deref(), &all[said..]);
            let (addr, _) = map.into_raw();
            entry.start = addr;
            Done {
                outcome: Outcome::Mapped { addr, entry },
                line,
            }
        }
        Err(e) if s.policy == Policy::Try => Done {
            outcome: Outcome::Pass,
            line: p.say(
                Some(&format!("{e}; attached as the server asked")),
                &warnings,
            ),
        },
        Err(e) => p.refuse(e),
    }
}
