//! Files a command reads because its user named them (`advise --spec`,
//! `apply --plan`). Root's hugeshm may be pointed at a path another user
//! prepared: a symbolic link to a root-only file, a FIFO that never sends
//! anything, a file of hundreds of megabytes. So the file is opened through
//! `hugeshm_sys::OpenCheck` (`O_NOFOLLOW | O_NONBLOCK`, a regular file
//! checked with `fstat` on the descriptor), read only up to
//! [`MAX_INPUT_BYTES`], and its lines are quoted in an error only when the
//! caller's real uid could read it and it belongs to root, the caller or
//! the user who ran `sudo`: otherwise the error says the line and column
//! and the parser's reason without the text (anything it quotes dropped:
//! the doctor's `advise::InputText`, which this module makes). Every
//! refusal is a usage error (exit 2).

use std::path::Path;

use hugeshm_doctor::advise::InputText;
use hugeshm_parse::size::format_bytes;

use crate::output::Usage;

/// The most a spec or a plan may hold: they are kilobytes.
pub(crate) const MAX_INPUT_BYTES: u64 = 1 << 20;

/// Reads `path` for `flag`, a file holding `what` (`a spec`): its text,
/// and whether errors may quote it.
pub(crate) fn read(flag: &str, path: &Path, what: &str) -> Result<InputText, Usage> {
    let fix = format!(
        "{flag} names {what} itself: a regular file of at most {} (a link is not followed)",
        format_bytes(MAX_INPUT_BYTES)
    );
    let f = hugeshm_sys::OpenCheck::read()
        .open(path)
        .map_err(|e| match e {
            hugeshm_sys::SysError::WrongFileType { .. } => Usage(format!("{flag}: {e}; {fix}")),
            e => Usage(format!("{flag}: {e}")),
        })?;
    if f.size() > MAX_INPUT_BYTES {
        return Err(Usage(format!(
            "{flag}: {} is {} bytes ({}, owned by uid {}): more than the {} {what} may hold; \
             not read. {fix}",
            path.display(),
            f.size(),
            format_bytes(f.size()),
            f.uid(),
            format_bytes(MAX_INPUT_BYTES)
        )));
    }
    let bytes = f
        .read_all(MAX_INPUT_BYTES as usize)
        .map_err(|e| Usage(format!("{flag}: {}: {e}; {fix}", path.display())))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Usage(format!(
            "{flag}: {} is not UTF-8 text (byte {} is not): {what} is text",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    let withheld = withheld(
        FileOwner {
            uid: f.uid(),
            gid: f.stat().st_gid,
            mode: f.mode(),
        },
        &Caller::this_process(),
    );
    Ok(InputText::new(path.to_owned(), text, withheld))
}

/// The file parsed as JSON; an error says the file `is not {what}`.
pub(crate) fn json(file: &InputText, what: &str) -> Result<serde_json::Value, Usage> {
    serde_json::from_str(file.text()).map_err(|e| {
        Usage(format!(
            "{} is not {what}: {}",
            file.path().display(),
            file.said(e)
        ))
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
            sudo: crate::cmd::sudo_uid(),
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
