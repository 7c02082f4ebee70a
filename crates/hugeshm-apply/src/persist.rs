//! Writing a plan's configuration files: atomically (a new file of a random
//! name renamed over the old, `hugeshm_sys::DirHandle::write_atomic`),
//! keeping the previous version as a backup with its own mode, never
//! through a symlink, and idempotently (a second run changes nothing).

use hugeshm_doctor::advise::Plan;
use hugeshm_sys::DirHandle;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PersistAction {
    /// It did not exist.
    Created,
    /// It existed with other contents (now in the backup).
    Updated,
    /// It already held exactly this.
    Unchanged,
}

/// One persisted file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PersistedFile {
    /// The path written (under the root).
    pub path: String,
    /// What happened.
    pub action: PersistAction,
    /// The previous version, when there was one.
    pub backup: Option<String>,
}

/// Suffix of the backup kept next to a replaced file.
pub const BACKUP_SUFFIX: &str = ".hugeshm-backup";

/// The mode of every file written (root's configuration, readable by all).
const FILE_MODE: u32 = 0o644;
/// An existing configuration file larger than this is not ours to back up.
const MAX_EXISTING_BYTES: u64 = 1 << 20;

/// Why [`persist`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    /// A directory on the way to a file (under the root, or the root and
    /// those above it) is not safe to write under: another user's, one
    /// others can write, a symlink of another user. Checked for every file
    /// before the first is written: nothing was written.
    #[error("{0}; nothing was written")]
    Refused(std::io::Error),
    /// Writing failed: the files before it in the plan's list may have
    /// been written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Writes every file of the plan's configuration under `root` (`/` on a host).
///
/// First, for every file, the directories on its way are walked as
/// `hugeshm_sys::DirHandle::open_output` walks them (from `/`, a symlink
/// not followed unless root's, this user's or `also_trust`'s): each must be
/// root's, this user's or `also_trust`'s, none writable by others unless
/// sticky, and the file's own directory writable by nobody else; a missing
/// one is made later. One that is not is [`PersistError::Refused`] before
/// anything is written. Then each file is written through a new file of a
/// random name in its directory (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644
/// whatever the umask) renamed over it; missing directories are made 0755.
/// The file it replaces is read without following a symlink and kept
/// beside it with its own mode (a 0600 file gets a 0600 backup). A target
/// or backup name that is a symlink, or not a regular file, is refused:
/// nothing is written through it.
pub fn persist(
    plan: &Plan,
    root: &Path,
    also_trust: Option<u32>,
) -> Result<Vec<PersistedFile>, PersistError> {
    let paths: Vec<PathBuf> = plan
        .config
        .files
        .iter()
        .map(|f| root.join(f.path.trim_start_matches('/')))
        .collect();
    for path in &paths {
        let Some(dir) = path.parent() else { continue };
        match DirHandle::open_output(dir, false, also_trust) {
            Ok(_) => {}
            // Missing from here down: made below, by this user.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(PersistError::Refused(std::io::Error::new(
                    e.kind(),
                    format!("{e} (on the way to {})", path.display()),
                )))
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut out = Vec::new();
    for (f, path) in plan.config.files.iter().zip(paths) {
        let ctx = |e: std::io::Error, what: &str| {
            std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
        };
        let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            return Err(ctx(std::io::ErrorKind::InvalidInput.into(), "not a file name:").into());
        };
        let dir = DirHandle::open_output(dir, true, also_trust)
            .map_err(|e| ctx(e, "open the directory of"))?;
        let old = dir
            .read_regular(name, MAX_EXISTING_BYTES)
            .map_err(|e| ctx(e, "read"))?;
        if old.as_ref().map(|(b, _)| b.as_slice()) == Some(f.content.as_bytes()) {
            out.push(PersistedFile {
                path: path.display().to_string(),
                action: PersistAction::Unchanged,
                backup: None,
            });
            continue;
        }
        let mut backup = None;
        if let Some((old, owner)) = &old {
            let b = format!("{name}{BACKUP_SUFFIX}");
            dir.write_atomic(&b, old, owner.mode & 0o777)
                .map_err(|e| ctx(e, "back up"))?;
            backup = Some(format!("{}{BACKUP_SUFFIX}", path.display()));
        }
        dir.write_atomic(name, f.content.as_bytes(), FILE_MODE)
            .map_err(|e| ctx(e, "write"))?;
        out.push(PersistedFile {
            path: path.display().to_string(),
            action: if old.is_some() {
                PersistAction::Updated
            } else {
                PersistAction::Created
            },
            backup,
        });
    }
    Ok(out)
}
