//! What is behind a region's name, from its header bytes and its holders:
//! the classification every backend's inspection shares, and
//! [`RegionInfo`], the data model of `hugeshm ls`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::RegionError;
use crate::header::{self, Decoded, Liveness, RegionHeader, USED_BYTES};
use crate::model::{directory_hint, Backend, NamedObject, Owner, RegionState};
use crate::naming::sysv_key;
use hugeshm_fix::Fix;

/// A named region as found on the host, without attaching it read-write:
/// the data model of `hugeshm ls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RegionInfo {
    /// The region's name.
    pub name: String,
    /// Its backend.
    pub backend: Backend,
    /// The kernel object (or memfd record).
    pub object: NamedObject,
    /// What is there.
    pub state: RegionState,
    /// The header, when it could be read and is valid.
    pub header: Option<RegionHeader>,
    /// Why the state is what it is, for `foreign`, `collision`, `newer`,
    /// `damaged` (and a few odd cases).
    pub detail: Option<String>,
    /// Whether a live process holds it (see the interlock, `hugeshm_region::interlock`).
    pub held: bool,
    /// Pids that map it (or create it), ascending.
    pub holders: Vec<u32>,
    /// SysV attachment count.
    pub nattch: Option<u64>,
    /// The creator's pid, when known.
    pub creator_pid: Option<u32>,
    /// Whether the creator runs.
    pub creator: Option<Liveness>,
    /// The header's layout version (also for a `newer` one).
    pub layout_version: Option<u32>,
    /// Who owns the object (a memfd region: its record), and its mode.
    #[serde(default)]
    pub owner: Option<Owner>,
    /// The page size the kernel backs the object with, as its file system
    /// says (hugetlbfs: its page size; tmpfs without `huge=`: the base
    /// page), where the header is not read (`untrusted`); `None` where the
    /// kernel does not tell without attaching it (SysV, memfd, DAX, tmpfs
    /// with huge pages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_page_size_bytes: Option<u64>,
    /// What to do about an orphan: reuse, recreate or remove it by name
    /// (and directory), or `ipcrm` a SysV segment whose creator died
    /// before writing its header. `None` for a region in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<Fix>,
}

impl RegionInfo {
    /// Exists, nobody holds it, and it is hugeshm's: what a crashed or
    /// departed owner leaves behind.
    pub fn is_orphaned(&self) -> bool {
        !self.held
            && matches!(
                self.state,
                RegionState::Ready | RegionState::Crashed | RegionState::Stale
            )
    }

    /// Ready, nobody holds it, and made to be kept
    /// ([`RegionHeader::kept`]): a region waiting for its users, as
    /// `hugeshm create` leaves one. Normal, not a finding.
    pub fn is_kept_unattached(&self) -> bool {
        self.is_orphaned()
            && self.state == RegionState::Ready
            && self.header.as_ref().is_some_and(|h| h.kept)
    }

    /// Orphaned ([`is_orphaned`](RegionInfo::is_orphaned)) and not
    /// [kept](RegionInfo::is_kept_unattached): its creation crashed, or the
    /// process that created it as its own (a server through the library)
    /// is gone. A finding.
    pub fn is_abandoned(&self) -> bool {
        self.is_orphaned() && !self.is_kept_unattached()
    }

    /// The object's bytes and the header's size, when the object is
    /// smaller than its header says (someone truncated its file).
    pub fn truncated(&self) -> Option<(u64, u64)> {
        let object_bytes = match &self.object {
            NamedObject::Sysv { size_bytes, .. }
            | NamedObject::File { size_bytes, .. }
            | NamedObject::Memfd { size_bytes, .. } => *size_bytes,
        };
        let header_bytes = self.header.as_ref()?.size_bytes;
        (object_bytes > 0 && header_bytes > object_bytes).then_some((object_bytes, header_bytes))
    }

    /// Something at a region's name that is not a hugeshm region (a file
    /// of another kind, a record that is no record), as `ls` lists it:
    /// state `foreign`, why in `detail`.
    pub(crate) fn foreign(
        name: String,
        backend: Backend,
        path: String,
        reason: String,
        owner: Option<Owner>,
    ) -> RegionInfo {
        RegionInfo {
            name,
            backend,
            object: NamedObject::File {
                path,
                size_bytes: 0,
            },
            state: RegionState::Foreign,
            header: None,
            detail: Some(reason),
            held: false,
            holders: Vec::new(),
            nattch: None,
            creator_pid: None,
            creator: None,
            layout_version: None,
            owner,
            kernel_page_size_bytes: None,
            fix: None,
        }
    }

    /// An object whose owner (`owner`) the caller does not trust, as the
    /// kernel describes it, its header unread: state `untrusted`, why in
    /// `detail`, no fix. `holders`: the pids that map it; `nattch`: SysV's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn untrusted(
        name: &str,
        backend: Backend,
        object: NamedObject,
        owner: Owner,
        detail: String,
        holders: Vec<u32>,
        nattch: Option<u64>,
        creator_pid: Option<u32>,
        kernel_page_size_bytes: Option<u64>,
    ) -> RegionInfo {
        let c = Classified {
            version: None,
            state: RegionState::Untrusted,
            header: None,
            detail: Some(detail),
            creator_pid,
            creator: None,
        };
        let attached = nattch.is_some_and(|n| n > 0);
        let mut info = info_from(name, backend, object, c, holders, attached, nattch);
        info.owner = Some(owner);
        info.kernel_page_size_bytes = kernel_page_size_bytes;
        info
    }

    /// The [`fix`](RegionInfo::fix) of this region as found.
    fn orphan_fix(&self) -> Option<Fix> {
        if !self.is_orphaned() {
            return None;
        }
        Some(match &self.object {
            // Its name is not known, only its id.
            NamedObject::Sysv { shmid, .. } if self.header.is_none() => {
                Fix::IpcRm { shmid: *shmid }
            }
            object => Fix::Reclaim {
                name: self.name.clone(),
                backend: self.backend.to_string(),
                dir: directory_hint(&self.name, self.backend, &object.to_string()),
                keep_contents: self.state == RegionState::Ready && self.truncated().is_none(),
            },
        })
    }
}

/// State, header, detail and creator from the header bytes.
pub(crate) struct Classified {
    pub version: Option<u32>,
    pub state: RegionState,
    pub header: Option<RegionHeader>,
    pub detail: Option<String>,
    pub creator_pid: Option<u32>,
    pub creator: Option<Liveness>,
}

/// `unwritten_creator`: for a header not written yet, who is creating the
/// object and whether it runs (SysV `shm_cpid`; files: a lock holder).
pub(crate) fn classify(
    decoded: Decoded,
    expect_name: Option<&str>,
    unwritten_creator: (Option<u32>, Liveness),
) -> Classified {
    let plain = |state, detail: String| Classified {
        version: None,
        state,
        header: None,
        detail: Some(detail),
        creator_pid: None,
        creator: None,
    };
    match decoded {
        Decoded::Unwritten => {
            let (pid, live) = unwritten_creator;
            Classified {
                version: None,
                state: if live.maybe_alive() {
                    RegionState::Initializing
                } else {
                    RegionState::Crashed
                },
                header: None,
                detail: Some("header not written".to_owned()),
                creator_pid: pid,
                creator: Some(live),
            }
        }
        Decoded::Foreign { magic } => plain(
            RegionState::Foreign,
            format!("no hugeshm header (first bytes {magic})"),
        ),
        Decoded::Newer { version } => Classified {
            version: Some(version),
            ..plain(
                RegionState::Newer,
                format!(
                    "header layout version {version}, newer than {}",
                    header::LAYOUT_VERSION
                ),
            )
        },
        Decoded::Damaged(why) => plain(RegionState::Damaged, format!("damaged header: {why}")),
        Decoded::Valid(h) => {
            let live = h.creator_liveness();
            let pid = Some(h.creator_pid);
            if let Some(want) = expect_name {
                if h.name.as_deref() != Some(want) {
                    let other = h.name.clone().unwrap_or_default();
                    return Classified {
                        version: Some(h.layout_version),
                        state: RegionState::Collision,
                        detail: Some(format!(
                            "it holds hugeshm region {other:?}, not {want:?} (both names hash to \
                             SysV key {:#010x}); pick another name",
                            sysv_key(want) as u32
                        )),
                        header: Some(h),
                        creator_pid: pid,
                        creator: Some(live),
                    };
                }
            }
            let state = match h.state {
                header::HeaderState::Ready => RegionState::Ready,
                header::HeaderState::Initializing if live.maybe_alive() => {
                    RegionState::Initializing
                }
                header::HeaderState::Initializing => RegionState::Crashed,
            };
            Classified {
                version: Some(h.layout_version),
                state,
                header: Some(h),
                detail: None,
                creator_pid: pid,
                creator: Some(live),
            }
        }
    }
}

pub(crate) fn info_from(
    name: &str,
    backend: Backend,
    object: NamedObject,
    c: Classified,
    mut holders: Vec<u32>,
    other_evidence: bool,
    nattch: Option<u64>,
) -> RegionInfo {
    if c.state == RegionState::Initializing {
        if let Some(p) = c.creator_pid.filter(|p| *p != 0) {
            holders.push(p);
        }
    }
    holders.sort_unstable();
    holders.dedup();
    let held = other_evidence || !holders.is_empty() || c.state == RegionState::Initializing;
    // A region's own backend, when the header knows it (a hugetlbfs
    // region that fell back to /dev/shm is still a hugetlbfs region).
    let backend = c.header.as_ref().map(|h| h.backend).unwrap_or(backend);
    let mut info = RegionInfo {
        name: name.to_owned(),
        backend,
        object,
        state: c.state,
        header: c.header,
        detail: c.detail,
        held,
        holders,
        nattch,
        creator_pid: c.creator_pid,
        creator: c.creator,
        layout_version: c.version,
        owner: None,
        kernel_page_size_bytes: None,
        fix: None,
    };
    if let Some((object_bytes, header_bytes)) = info.truncated() {
        info.detail = Some(format!(
            "truncated: the object has {object_bytes} bytes, its header says {header_bytes} \
             (past the end a process would get SIGBUS): its contents cannot be reused"
        ));
    }
    info.fix = info.orphan_fix();
    info
}

/// Reads up to [`USED_BYTES`] from the start of a file without changing it
/// (a hole reads as zeros and allocates nothing).
pub(crate) fn read_head(
    fd: std::os::fd::BorrowedFd<'_>,
    what: &Path,
) -> Result<Vec<u8>, RegionError> {
    let mut buf = vec![0u8; USED_BYTES];
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::pread(fd, &mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(RegionError::io(what.display().to_string(), e.into())),
        }
    }
    buf.truncate(got);
    Ok(buf)
}
