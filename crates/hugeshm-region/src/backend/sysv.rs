//! The `sysv` backend: a System V segment under the key of the name
//! ([`sysv_key`]), `SHM_HUGETLB` for huge pages, reserved at `shmget`.
//! Holders: `shm_nattch`, and the `/SYSV<key>` lines of `/proc/PID/maps`.

use hugeshm_fix::Fix;
use hugeshm_probe::Probe;
use hugeshm_sys::{self as sys, ShmFlags, SysError, PMD_SHARE_ALIGN};

use super::{
    foreign_handle, BackendOps, Handle, Inspected, Made, Object, Opened, OpenedInner, Place, Spec,
};
use crate::error::RegionError;
use crate::header::{self, liveness, Decoded, Liveness, STATE_OFFSET, USED_BYTES};
use crate::holders::Holders;
use crate::inspect::{classify, info_from, RegionInfo};
use crate::model::{Backend, Expect, NamedObject, Owner, RegionState, Trust};
use crate::naming::sysv_key;
use crate::pool::{self, Backing};
use crate::verify;

/// The `sysv` backend's operations ([`BackendOps`]).
pub(crate) struct Sysv;

/// Its one instance.
pub(crate) static SYSV: Sysv = Sysv;

/// The segment of a region this process holds.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Its shmid.
    pub shmid: i32,
    /// Its key (0 for an anonymous region).
    pub key: i32,
    /// Whether it is marked for removal already (anonymous regions are,
    /// from the start: the segment dies with its last attachment).
    pub removed: bool,
}

impl Segment {
    pub(crate) fn destroy(&mut self) -> Result<(), RegionError> {
        if self.removed {
            return Ok(());
        }
        match sys::shm_remove(self.shmid) {
            Err(e) if !matches!(e.errno(), Some(libc::EINVAL) | Some(libc::EIDRM)) => Err(e.into()),
            _ => {
                self.removed = true;
                Ok(())
            }
        }
    }

    pub(crate) fn describe(&self) -> String {
        describe(self.key, self.shmid)
    }
}

/// `shmget`'s `ENOSPC`: every segment id is taken (`kernel.shmmni`), or
/// the segment would take the system past `kernel.shmall` pages.
fn kernel_limit(spec: &Spec<'_>, size: u64, e: SysError) -> RegionError {
    let segments = spec.probe.sysv_segments().unwrap_or_default();
    let sysctl = &spec.host.sysctl;
    let count = segments.len() as u64;
    match (sysctl.shmmni, sysctl.shmall) {
        (Some(mni), _) if count >= mni => RegionError::KernelLimit {
            what: "a new SysV segment".to_owned(),
            limit: format!("kernel.shmmni = {mni}"),
            in_use: count,
            fix: Box::new(Fix::Sysctl {
                key: "kernel.shmmni".to_owned(),
                value: (mni.max(1) * 2).max(4096).to_string(),
            }),
        },
        (_, Some(all)) => {
            let page = sys::base_page_size() as u64;
            let used: u64 = segments.iter().map(|s| s.size_bytes.div_ceil(page)).sum();
            RegionError::KernelLimit {
                what: format!("a SysV segment of {size} bytes"),
                limit: format!("kernel.shmall = {all} pages"),
                in_use: used,
                fix: Box::new(Fix::Sysctl {
                    key: "kernel.shmall".to_owned(),
                    value: (used + size.div_ceil(page)).max(all).to_string(),
                }),
            }
        }
        _ => RegionError::Sys(e),
    }
}

/// The segment's owner and permission bits, from `IPC_STAT`.
fn owner_of(stat: &sys::ShmStat) -> Owner {
    sysv_owner(stat.uid, stat.cuid, stat.mode)
}

/// Whose a segment is, for trust: its owner (`shm_perm.uid`), unless a
/// user other than root created it (`cuid`). The creator keeps the owner's
/// rights (write it, `IPC_SET`, `IPC_RMID`) whoever it gives the segment
/// to, so a segment uid 65534 made and gave to root (`IPC_SET`) is still
/// uid 65534's.
fn sysv_owner(uid: u32, cuid: u32, mode: u32) -> Owner {
    Owner {
        uid: if cuid == uid || cuid == 0 { uid } else { cuid },
        mode: mode & 0o777,
    }
}

/// Why `trust` refuses the segment of owner `uid`, creator `cuid` and
/// `mode` (see [`sysv_owner`]); `None` when it is trusted.
fn refusal(trust: &Trust, uid: u32, cuid: u32, mode: u32) -> Option<String> {
    let reason = trust.refuses(sysv_owner(uid, cuid, mode))?;
    Some(if sysv_owner(uid, cuid, mode).uid == uid {
        reason
    } else {
        format!("{reason} (uid {cuid} created it and keeps an owner's rights; its shm_perm.uid says uid {uid})")
    })
}

fn describe(key: i32, shmid: i32) -> String {
    format!("SysV key {:#010x}, shmid {shmid}", key as u32)
}

/// An inspected segment.
#[derive(Debug)]
pub(crate) struct Found {
    shmid: i32,
}

/// Removes a segment on drop unless disarmed.
struct UndoShm(Option<i32>);

impl UndoShm {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for UndoShm {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            if let Err(e) = sys::shm_remove(id) {
                log::warn!("cleanup: {e}");
            }
        }
    }
}

fn errno_is(e: &SysError, errnos: &[i32]) -> bool {
    e.errno().is_some_and(|n| errnos.contains(&n))
}

/// The shmid under the key of `name`; `None` when the key has none.
fn shmid_of(name: &str, what: &str) -> Result<Option<i32>, RegionError> {
    let key = sysv_key(name);
    let flags = ShmFlags {
        mode: 0,
        ..ShmFlags::default()
    };
    match sys::shm_get(key, 0, flags) {
        Ok(id) => Ok(Some(id)),
        Err(e) if errno_is(&e, &[libc::ENOENT]) => Ok(None),
        Err(e) => Err(RegionError::sys_or_permission(
            || {
                format!(
                    "{what} SysV segment key {:#010x} (region {name:?})",
                    key as u32
                )
            },
            e,
        )),
    }
}

/// Inspects segment `shmid` (key `key`): the region `expect_name`, or
/// whatever its header says. Its header is read only when `trust` accepts
/// its owner (see [`untrusted_info`]).
fn inspect_shmid(
    shmid: i32,
    key: i32,
    expect_name: Option<&str>,
    holders: &Holders<'_>,
    trust: &Trust,
) -> Result<Inspected, RegionError> {
    let object_text = describe(key, shmid);
    let stat = sys::shm_stat(shmid)
        .map_err(|e| RegionError::sys_or_permission(|| format!("inspect {object_text}"), e))?;
    let object = NamedObject::Sysv {
        key,
        shmid,
        size_bytes: stat.size,
        nattch: stat.nattch,
    };
    let owner = owner_of(&stat);
    let cpid = u32::try_from(stat.cpid).ok().filter(|p| *p != 0);
    if let Some(reason) = refusal(trust, stat.uid, stat.cuid, stat.mode) {
        let name = expect_name
            .map(str::to_owned)
            .unwrap_or_else(|| key_name(key));
        let info = untrusted_info(&name, object, owner, reason, cpid, holders);
        return Ok(Inspected {
            info,
            handle: Handle::Sysv(Found { shmid }),
        });
    }
    let mut buf = [0u8; USED_BYTES];
    let peeked = if stat.size >= USED_BYTES as u64 {
        sys::shm_peek(shmid, &mut buf, true).map_err(|e| {
            RegionError::sys_or_permission(|| format!("read the header of {object_text}"), e)
        })?
    } else {
        false
    };
    let decoded = if peeked {
        header::decode(&buf)
    } else {
        Decoded::Unwritten
    };
    let cpid_live = cpid.map(|p| liveness(p, None)).unwrap_or(Liveness::Unknown);
    let c = classify(decoded, expect_name, (cpid, cpid_live));
    let name = expect_name
        .map(str::to_owned)
        .or_else(|| c.header.as_ref().and_then(|h| h.name.clone()))
        .unwrap_or_else(|| key_name(key));
    let mut info = info_from(
        &name,
        Backend::Sysv,
        object,
        c,
        holders.shm(shmid),
        stat.nattch > 0,
        Some(stat.nattch),
    );
    info.owner = Some(owner);
    Ok(Inspected {
        info,
        handle: Handle::Sysv(Found { shmid }),
    })
}

/// `key-XXXXXXXX`: the name of a segment whose header is not known.
fn key_name(key: i32) -> String {
    format!("key-{:08x}", key as u32)
}

/// A segment whose owner the caller does not trust, as the kernel
/// describes it (`IPC_STAT`, `/proc/sysvipc/shm`), its header unread:
/// reading it would attach another user's segment (changing its
/// `shm_nattch`, `shm_lpid` and `shm_atime`, which its users and their
/// reclaim checks read, and faulting its memory), and a header anyone can
/// write proves nothing.
fn untrusted_info(
    name: &str,
    object: NamedObject,
    owner: Owner,
    reason: String,
    cpid: Option<u32>,
    holders: &Holders<'_>,
) -> RegionInfo {
    let (shmid, nattch) = match object {
        NamedObject::Sysv { shmid, nattch, .. } => (shmid, nattch),
        _ => (0, 0),
    };
    RegionInfo::untrusted(
        name,
        Backend::Sysv,
        object,
        owner,
        format!("{reason}; hugeshm does not attach another user's segment to read its header"),
        holders.shm(shmid),
        Some(nattch),
        cpid,
        None,
    )
}

/// Root's segment that this user may not read (`IPC_STAT` and `shmat`
/// refused: mode 0600), as `/proc/sysvipc/shm` describes it: trusted, but
/// whether it is a hugeshm region, and which, only root can tell.
fn unreadable_info(
    name: &str,
    object: NamedObject,
    owner: Owner,
    cpid: Option<u32>,
    holders: &Holders<'_>,
) -> RegionInfo {
    let mut info = untrusted_info(name, object, owner, String::new(), cpid, holders);
    info.state = RegionState::Unreadable;
    info.detail = Some(format!(
        "uid {} may not read root's segment, so whether it holds a region made to be kept or \
         one left behind only root can tell (hugeshm ls as root)",
        rustix::process::geteuid().as_raw()
    ));
    info
}

impl BackendOps for Sysv {
    fn create(&self, spec: &Spec<'_>) -> Result<Made, RegionError> {
        let plan = spec.plan;
        let size = plan.size_bytes;
        let huge = (plan.backing == Backing::Hugetlb).then_some(plan.page_size);
        let key = spec.name.map(sysv_key).unwrap_or(sys::IPC_PRIVATE);
        let flags = ShmFlags {
            create: true,
            exclusive: true,
            huge_page_size: huge,
            mode: spec.mode,
        };
        let shmid = sys::shm_get(key, size, flags).map_err(|e| match e.errno() {
            Some(libc::EEXIST) => RegionError::AlreadyExists {
                name: spec.name.unwrap_or_default().to_owned(),
                backend: Backend::Sysv,
                object: format!("SysV key {:#010x}", key as u32),
                holders: Vec::new(),
                state: None,
            },
            Some(libc::ENOMEM) if huge.is_some() => {
                pool::refused(spec.probe, plan.page_size, size / plan.page_size, e)
            }
            Some(libc::EPERM) if huge.is_some() => RegionError::Permission {
                what: "SysV shared memory on huge pages (shmget SHM_HUGETLB)".to_owned(),
                fix: Box::new(crate::memlock::shm_hugetlb_fix(size)),
                source: Some(e),
            },
            Some(libc::ENOSPC) => kernel_limit(spec, size, e),
            Some(libc::EINVAL) if spec.host.sysctl.shmmax.is_some_and(|max| size > max) => {
                RegionError::InvalidSize {
                    requested_bytes: size,
                    reason: format!(
                        "larger than kernel.shmmax ({})",
                        spec.host.sysctl.shmmax.unwrap_or(0)
                    ),
                    fix: Some(Box::new(hugeshm_fix::Fix::Sysctl {
                        key: "kernel.shmmax".to_owned(),
                        value: size.to_string(),
                    })),
                }
            }
            _ => RegionError::Sys(e),
        })?;
        let undo = UndoShm(Some(shmid));
        crate::testhook::checkpoint("name-claimed");
        let mem = sys::shm_attach_placed(shmid, spec.align)?;
        let anonymous = spec.name.is_none();
        if anonymous {
            // Destroyed when the last attachment goes (children that
            // inherit it over fork keep it alive).
            sys::shm_remove(shmid)?;
        }
        undo.disarm();
        Ok(Made {
            mem,
            object: Object::Sysv(Segment {
                shmid,
                key,
                removed: anonymous,
            }),
        })
    }

    fn open(&self, place: &Place<'_>, _: &Holders<'_>) -> Result<Option<Opened>, RegionError> {
        match shmid_of(place.name, "attach")? {
            Some(shmid) => open_shmid(
                shmid,
                Some(place.name.to_owned()),
                place.pmd_sharing,
                &place.trust,
            )
            .map(Some),
            None => Ok(None),
        }
    }

    fn map(&self, opened: Opened, _: &Expect) -> Result<(Made, Option<u64>), RegionError> {
        let OpenedInner::Sysv(made) = opened.inner else {
            return Err(foreign_handle("sysv"));
        };
        let v = verify::verify_range(made.mem.addr() as u64, made.mem.len() as u64, None)?;
        Ok((*made, v.hugetlb.then_some(v.kernel_page_size_bytes)))
    }

    fn inspect(
        &self,
        place: &Place<'_>,
        holders: &Holders<'_>,
    ) -> Result<Vec<Inspected>, RegionError> {
        match shmid_of(place.name, "open")? {
            Some(shmid) => Ok(vec![inspect_shmid(
                shmid,
                sysv_key(place.name),
                Some(place.name),
                holders,
                &place.trust,
            )?]),
            None => Ok(Vec::new()),
        }
    }

    fn remove(&self, found: Inspected) -> Result<(), RegionError> {
        let Handle::Sysv(Found { shmid }) = found.handle else {
            return Err(foreign_handle("sysv"));
        };
        let gone = |e: &SysError| errno_is(e, &[libc::EINVAL, libc::EIDRM]);
        let st = match sys::shm_stat(shmid) {
            Ok(st) => st,
            Err(e) if gone(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if st.nattch > 0 {
            return Err(super::in_use(&found.info, Some(st.nattch)));
        }
        match sys::shm_remove(shmid) {
            Ok(()) => Ok(()),
            Err(e) if gone(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Segments that `trust` accepts (this user's or the one it names, and
    /// root's) with a hugeshm header (read through a read-only
    /// attachment), and every other user's named segment from
    /// `/proc/sysvipc/shm` alone, as [`RegionState::Untrusted`]; root's
    /// that this user may not read, from there too, as
    /// [`RegionState::Unreadable`].
    fn list(&self, holders: &Holders<'_>, trust: &Trust) -> Vec<RegionInfo> {
        let mut out = Vec::new();
        let Ok(segments) = holders.probe().sysv_segments() else {
            return out;
        };
        // Trusted segments, whatever their mode, are attached read-only
        // for a moment: their own user's `ls` does the same, and another
        // user's is attached only where `--owner` named it. Root's moves
        // its `shm_nattch` for that moment, no longer than root's own `ls`
        // does. Only on the live host: a captured /proc's shmids and uids
        // say nothing about this kernel's segments.
        let live = holders.probe().roots.is_live();
        for seg in segments {
            // Named regions only.
            if seg.key == 0 || seg.size_bytes < USED_BYTES as u64 {
                continue;
            }
            let owner = sysv_owner(seg.uid, seg.cuid, seg.perms);
            let object = NamedObject::Sysv {
                key: seg.key,
                shmid: seg.shmid,
                size_bytes: seg.size_bytes,
                nattch: seg.nattch,
            };
            let cpid = Some(seg.cpid).filter(|p| *p != 0);
            if let Some(reason) = refusal(trust, seg.uid, seg.cuid, seg.perms) {
                out.push(untrusted_info(
                    &key_name(seg.key),
                    object,
                    owner,
                    reason,
                    cpid,
                    holders,
                ));
                continue;
            }
            // The owner again, from the kernel, just before attaching.
            let stat = if live {
                sys::shm_stat(seg.shmid)
            } else {
                continue;
            };
            // The header, read through a read-only attachment (a segment
            // never touched has none yet: its creator may have died right
            // after shmget; nothing to read).
            let mut buf = [0u8; USED_BYTES];
            let read = match stat {
                Ok(st) if trust.refuses(owner_of(&st)).is_none() => {
                    if seg.rss_bytes == Some(0) {
                        Ok(true)
                    } else {
                        sys::shm_peek(seg.shmid, &mut buf, true)
                    }
                }
                Ok(_) => continue,
                Err(e) => Err(e),
            };
            match read {
                Ok(true) => {}
                // Root's segment this user may not stat or attach.
                Err(e) if errno_is(&e, &[libc::EACCES]) && owner.uid == 0 => {
                    out.push(unreadable_info(
                        &key_name(seg.key),
                        object,
                        owner,
                        cpid,
                        holders,
                    ));
                    continue;
                }
                _ => continue,
            }
            let name = match header::decode(&buf) {
                Decoded::Valid(h) => match h.name {
                    Some(n) => n,
                    None => continue,
                },
                Decoded::Newer { .. } | Decoded::Damaged(_) => key_name(seg.key),
                // A header never written: a creator that died between
                // shmget and the header (its name is not known yet, only
                // its key). Shown for idle segments only: an empty segment
                // of another program looks the same.
                Decoded::Unwritten if seg.nattch == 0 => key_name(seg.key),
                Decoded::Unwritten | Decoded::Foreign { .. } => continue,
            };
            let expect = (sysv_key(&name) == seg.key).then_some(name.as_str());
            if let Ok(mut ins) = inspect_shmid(seg.shmid, seg.key, expect, holders, trust) {
                if expect.is_none() && ins.info.state == RegionState::Ready {
                    ins.info.state = RegionState::Collision;
                    ins.info.detail = Some(format!(
                        "hugeshm region {name:?} under key {:#010x}, which is not its key",
                        seg.key as u32
                    ));
                }
                out.push(ins.info);
            }
        }
        out
    }

    fn looked(&self, place: &Place<'_>, _: &Probe) -> String {
        format!("SysV key {:#010x}", sysv_key(place.name) as u32)
    }
}

/// Attaches segment `shmid` read-write (1 GiB-aligned for page-table
/// sharing when `pmd_sharing` and it is at least 1 GiB) and reads its
/// header. `name`: the region it should hold, for messages. A segment
/// whose owner or mode `trust` refuses is refused before it is attached
/// ([`RegionError::Untrusted`]).
pub(crate) fn open_shmid(
    shmid: i32,
    name: Option<String>,
    pmd_sharing: bool,
    trust: &Trust,
) -> Result<Opened, RegionError> {
    let stat = sys::shm_stat(shmid).map_err(|e| {
        RegionError::sys_or_permission(
            || match &name {
                Some(n) => format!(
                    "attach SysV segment key {:#010x}, shmid {shmid} (region {n:?})",
                    sysv_key(n) as u32
                ),
                None => format!("attach SysV segment shmid {shmid}"),
            },
            e,
        )
    })?;
    let object = describe(stat.key, shmid);
    RegionError::check_trust(
        trust,
        owner_of(&stat),
        &object,
        name.as_deref().unwrap_or_default(),
        Backend::Sysv,
    )?;
    let align = (pmd_sharing && stat.size >= PMD_SHARE_ALIGN as u64)
        .then_some(PMD_SHARE_ALIGN)
        .or(crate::pool::block_align(stat.size));
    let mem = sys::shm_attach_placed(shmid, align)
        .map_err(|e| RegionError::sys_or_permission(|| format!("attach {object}"), e))?;
    let mut head = vec![0u8; USED_BYTES.min(mem.len())];
    if head.len() >= STATE_OFFSET + 4 {
        // The first page may not exist (a foreign segment, or a creator
        // that died before the header): fault it in as an error, not
        // SIGBUS.
        let first = sys::base_page_size().min(mem.len());
        mem.populate_read_range(0, first).map_err(|e| {
            RegionError::sys_or_permission(|| format!("read the header of {object}"), e)
        })?;
        let state = mem.load_u32_acquire(STATE_OFFSET)?;
        mem.read_at(0, &mut head)?;
        head[STATE_OFFSET..STATE_OFFSET + 4].copy_from_slice(&state.to_le_bytes());
    }
    let cpid = u32::try_from(stat.cpid).ok().filter(|p| *p != 0);
    let creator = (
        cpid,
        cpid.map(|p| liveness(p, None)).unwrap_or(Liveness::Unknown),
    );
    Ok(Opened {
        object_text: object,
        size: stat.size,
        head,
        creator,
        generation: None,
        owner: owner_of(&stat),
        inner: OpenedInner::Sysv(Box::new(Made {
            mem,
            object: Object::Sysv(Segment {
                shmid,
                key: stat.key,
                removed: stat.marked_for_removal(),
            }),
        })),
    })
}
