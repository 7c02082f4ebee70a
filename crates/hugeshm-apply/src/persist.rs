//! Writing a plan's configuration files: atomically (temporary file and
//! rename), keeping the previous version as a backup, and idempotently (a
//! second run changes nothing).

use hugeshm_doctor::advise::Plan;
use serde::{Deserialize, Serialize};
use std::io::Write;
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

/// Writes every file of the plan's configuration under `root` (`/` on a host).
pub fn persist(plan: &Plan, root: &Path) -> std::io::Result<Vec<PersistedFile>> {
    let mut out = Vec::new();
    for f in &plan.config.files {
        let path = root.join(f.path.trim_start_matches('/'));
        let ctx = |e: std::io::Error, what: &str| {
            std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
        };
        let old = match std::fs::read(&path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ctx(e, "read")),
        };
        if old.as_deref() == Some(f.content.as_bytes()) {
            out.push(PersistedFile {
                path: path.display().to_string(),
                action: PersistAction::Unchanged,
                backup: None,
            });
            continue;
        }
        let dir = path.parent().unwrap_or(root);
        std::fs::create_dir_all(dir).map_err(|e| ctx(e, "create the directory of"))?;
        let mut backup = None;
        if let Some(old) = &old {
            let b = format!("{}{BACKUP_SUFFIX}", path.display());
            write_atomic(Path::new(&b), old).map_err(|e| ctx(e, "back up"))?;
            backup = Some(b);
        }
        write_atomic(&path, f.content.as_bytes()).map_err(|e| ctx(e, "write"))?;
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

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.hugeshm-tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
