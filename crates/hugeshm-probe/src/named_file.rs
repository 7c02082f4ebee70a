//! A file a person named on the command line (`advise --spec`, `apply
//! --plan`): root's hugeshm may be pointed at a path another user
//! prepared: a symbolic link to a root-only file, a FIFO that never sends
//! anything, a file of hundreds of megabytes. So it is opened through
//! `hugeshm_sys::OpenCheck` (`O_NOFOLLOW | O_NONBLOCK`, a regular file
//! checked with `fstat` on the descriptor) and read only up to the
//! caller's limit; [`NamedFile::withheld`] says why nothing of it may be
//! quoted back (another user's file, or one the caller's real uid could
//! not read), so that hugeshm's errors never show a file the person
//! running it could not read.

use std::path::{Path, PathBuf};

/// A named file's text, and why none of it may be shown, if so.
#[derive(Debug)]
pub struct NamedFile {
    /// The path as named.
    pub path: PathBuf,
    /// The whole file, UTF-8.
    pub text: String,
    /// Why nothing of the file may be quoted in an error (`None`: it may).
    pub withheld: Option<String>,
}

/// Why a named file was not read.
#[derive(Debug, thiserror::Error)]
pub enum NamedFileError {
    /// Not opened (missing, a link, not a regular file: see the error).
    #[error(transparent)]
    Open(hugeshm_sys::SysError),
    /// Larger than the limit: not read.
    #[error("{} is {size} bytes, owned by uid {uid}: more than {limit} bytes", path.display())]
    TooBig {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
        /// Its owner.
        uid: u32,
        /// The most the caller reads.
        limit: u64,
    },
    /// Reading failed.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading said.
        source: hugeshm_sys::SysError,
    },
    /// Not UTF-8 text: the first byte that is not.
    #[error("{} is not UTF-8 text (byte {at} is not)", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// The offset of the first byte that is not UTF-8.
        at: usize,
    },
}

impl NamedFileError {
    /// Whether the path names something other than a regular file (a
    /// link, a FIFO, a directory).
    pub fn is_wrong_type(&self) -> bool {
        matches!(
            self,
            NamedFileError::Open(hugeshm_sys::SysError::WrongFileType { .. })
        )
    }
}

/// Reads `path`, at most `limit` bytes (see the module's text).
pub fn read_named(path: &Path, limit: u64) -> Result<NamedFile, NamedFileError> {
    let f = hugeshm_sys::OpenCheck::read()
        .open(path)
        .map_err(NamedFileError::Open)?;
    if f.size() > limit {
        return Err(NamedFileError::TooBig {
            path: path.to_owned(),
            size: f.size(),
            uid: f.uid(),
            limit,
        });
    }
    let bytes = f
        .read_all(limit as usize)
        .map_err(|source| NamedFileError::Read {
            path: path.to_owned(),
            source,
        })?;
    let text = String::from_utf8(bytes).map_err(|e| NamedFileError::NotUtf8 {
        path: path.to_owned(),
        at: e.utf8_error().valid_up_to(),
    })?;
    let withheld = withheld(
        FileOwner {
            uid: f.uid(),
            gid: f.stat().st_gid,
            mode: f.mode(),
        },
        &Caller::this_process(),
    );
    Ok(NamedFile {
        path: path.to_owned(),
        text,
        withheld,
    })
}

/// Owner, group and permission bits of a file.
#[derive(Debug, Clone, Copy)]
struct FileOwner {
    uid: u32,
    gid: u32,
    mode: u32,
}

/// Who is asking: the real uid and gid, the groups, and the user who ran
/// `sudo` (whose files count as the caller's, as for output directories).
#[derive(Debug, Clone)]
struct Caller {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    sudo: Option<u32>,
}

impl Caller {
    fn this_process() -> Caller {
        use rustix::process as p;
        Caller {
            uid: p::getuid().as_raw(),
            gid: p::getgid().as_raw(),
            groups: p::getgroups()
                .unwrap_or_default()
                .into_iter()
                .map(|g| g.as_raw())
                .collect(),
            sudo: hugeshm_sys::sudo_uid(),
        }
    }
}

/// Why nothing of a file of `owner` may be shown to `caller`: it belongs
/// to another user (not root, not the caller), or the caller's real uid
/// could not read it (by its permission bits; root reads all). `None`
/// when it may be shown.
fn withheld(owner: FileOwner, caller: &Caller) -> Option<String> {
    let u = owner.uid;
    if u != 0 && u != caller.uid && Some(u) != caller.sudo {
        return Some(format!(
            "it belongs to uid {u}, neither root nor uid {}",
            caller.uid
        ));
    }
    let bit = if caller.uid == 0 {
        return None;
    } else if u == caller.uid {
        0o400
    } else if owner.gid == caller.gid || caller.groups.contains(&owner.gid) {
        0o040
    } else {
        0o004
    };
    (owner.mode & bit == 0).then(|| {
        format!(
            "uid {} cannot read it (mode {:04o}, owner uid {u})",
            caller.uid, owner.mode
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32) -> Caller {
        Caller {
            uid,
            gid: uid,
            groups: vec![],
            sudo: None,
        }
    }

    fn owner(uid: u32, gid: u32, mode: u32) -> FileOwner {
        FileOwner { uid, gid, mode }
    }

    #[test]
    fn shown_only_when_root_or_the_caller_owns_it_and_the_caller_can_read_it() {
        // Root reads all; another user's file is never shown.
        assert_eq!(withheld(owner(0, 0, 0o600), &caller(0)), None);
        assert_eq!(withheld(owner(1000, 1000, 0o644), &caller(1000)), None);
        let w = withheld(owner(65534, 65534, 0o644), &caller(0)).unwrap();
        assert_eq!(w, "it belongs to uid 65534, neither root nor uid 0");
        // ... unless it is the sudo user's.
        let mut sudo = caller(0);
        sudo.sudo = Some(1000);
        assert_eq!(withheld(owner(1000, 1000, 0o600), &sudo), None);
        // A file the real uid could not read (a capability let it open).
        let w = withheld(owner(0, 0, 0o600), &caller(65534)).unwrap();
        assert_eq!(w, "uid 65534 cannot read it (mode 0600, owner uid 0)");
        assert_eq!(withheld(owner(0, 0, 0o644), &caller(65534)), None);
        assert!(withheld(owner(1000, 1000, 0o044), &caller(1000)).is_some());
        // By group: the primary group or a supplementary one.
        let mut c = caller(1000);
        assert!(withheld(owner(0, 42, 0o640), &c).is_some());
        c.groups.push(42);
        assert_eq!(withheld(owner(0, 42, 0o640), &c), None);
    }
}
