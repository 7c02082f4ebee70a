//! Writing a plan's configuration files: atomically (a new file of a random
//! name renamed over the old, `hugeshm_sys::DirHandle::write_atomic`),
//! keeping the previous version as a backup with its own mode, never
//! through a symlink, and idempotently (a second run changes nothing).

use hugeshm_doctor::advise::Plan;
use hugeshm_sys::DirHandle;
use serde::{Deserialize, Serialize};
use std::path::Path;

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
/// The mode of every directory created.
const DIR_MODE: u32 = 0o755;
/// An existing configuration file larger than this is not ours to back up.
const MAX_EXISTING_BYTES: u64 = 1 << 20;

/// Writes every file of the plan's configuration under `root` (`/` on a host).
///
/// Each file is written through a new file of a random name in its
/// directory (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644 whatever the
/// umask) renamed over it; missing directories are made 0755. The file it
/// replaces is read without following a symlink and kept beside it with its
/// own mode (a 0600 file gets a 0600 backup). A target or backup name that
/// is a symlink, or not a regular file, is refused: nothing is written
/// through it.
pub fn persist(plan: &Plan, root: &Path) -> std::io::Result<Vec<PersistedFile>> {
    let mut out = Vec::new();
    for f in &plan.config.files {
        let path = root.join(f.path.trim_start_matches('/'));
        let ctx = |e: std::io::Error, what: &str| {
            std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
        };
        let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            return Err(ctx(
                std::io::ErrorKind::InvalidInput.into(),
                "not a file name:",
            ));
        };
        let dir =
            DirHandle::create_all(dir, DIR_MODE).map_err(|e| ctx(e, "create the directory of"))?;
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
