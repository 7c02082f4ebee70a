//! Files a command reads because its user named them (`advise --spec`,
//! `apply --plan`). Root's hugeshm may be pointed at a path another user
//! prepared: a symbolic link to a root-only file, a FIFO that never sends
//! anything, a file of hundreds of megabytes. So the file is opened through
//! `hugeshm_sys::OpenCheck` (`O_NOFOLLOW | O_NONBLOCK`, a regular file
//! checked with `fstat` on the descriptor), read only up to
//! [`MAX_INPUT_BYTES`], and its lines are quoted in an error only when the
//! caller's real uid could read it and it belongs to root, the caller or
//! the user who ran `sudo`: otherwise the error says the line and column
//! and the parser's reason without the text (anything it quotes dropped).
//! Every refusal is a usage error (exit 2).

use std::fmt::Display;
use std::path::{Path, PathBuf};

use hugeshm_parse::size::format_bytes;
use serde::de::DeserializeOwned;

use crate::output::Usage;

/// The most a spec or a plan may hold: they are kilobytes.
pub(crate) const MAX_INPUT_BYTES: u64 = 1 << 20;

/// A file read for an option (`--spec`), with what may be shown of it.
pub(crate) struct InputFile {
    path: PathBuf,
    text: String,
    /// Why its text is not shown in errors; `None` when it may be.
    withheld: Option<String>,
}

impl InputFile {
    /// Reads `path` for `flag`, a file holding `what` (`a spec`).
    pub(crate) fn read(flag: &str, path: &Path, what: &str) -> Result<InputFile, Usage> {
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
        Ok(InputFile {
            path: path.to_owned(),
            text,
            withheld,
        })
    }

    /// The path as given.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The file parsed as TOML; an error says the file `is not {what}`.
    pub(crate) fn toml<T: DeserializeOwned>(&self, what: &str) -> Result<T, Usage> {
        toml::from_str(&self.text).map_err(|e| {
            let head = format!("{} is not {what}", self.path.display());
            match &self.withheld {
                None => Usage(format!("{head}: {e}")),
                Some(why) => {
                    let at = e
                        .span()
                        .map(|s| line_column(&self.text, s.start))
                        .map(|(l, c)| format!("line {l}, column {c}: "))
                        .unwrap_or_default();
                    Usage(format!(
                        "{head}: {at}{} (the text is not shown: {why})",
                        without_quotes(e.message())
                    ))
                }
            }
        })
    }

    /// The file parsed as JSON; an error says the file `is not {what}`.
    pub(crate) fn json(&self, what: &str) -> Result<serde_json::Value, Usage> {
        serde_json::from_str(&self.text).map_err(|e| {
            Usage(format!(
                "{} is not {what}: {}",
                self.path.display(),
                self.said(e)
            ))
        })
    }

    /// A string of the file (a name it gives) in an error: `"name"`, or
    /// `"…"` when its text is not shown.
    pub(crate) fn quoted(&self, s: &str) -> String {
        match self.withheld {
            None => format!("{s:?}"),
            Some(_) => "\"…\"".to_owned(),
        }
    }

    /// A message made from the file's content (a value it holds, a
    /// parser's message about it): as it is, or without what it quotes
    /// and saying why.
    pub(crate) fn said(&self, msg: impl Display) -> String {
        match &self.withheld {
            None => msg.to_string(),
            Some(why) => format!(
                "{} (the text is not shown: {why})",
                without_quotes(&msg.to_string())
            ),
        }
    }
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

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// `msg` with what it quotes (between backticks or double quotes, `\`
/// escapes included) replaced by `…`, on one line, at most 200 characters:
/// a parser's reason without the file's text.
fn without_quotes(msg: &str) -> String {
    let mut out = String::new();
    let mut chars = msg.chars();
    while let Some(c) = chars.next() {
        match c {
            '`' | '"' => {
                let mut closed = false;
                while let Some(d) = chars.next() {
                    if d == '\\' {
                        chars.next();
                    } else if d == c {
                        closed = true;
                        break;
                    }
                }
                out.push(c);
                out.push('…');
                if closed {
                    out.push(c);
                }
            }
            '\n' => out.push_str("; "),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    if out.chars().count() > 200 {
        out = out.chars().take(199).chain(['…']).collect();
    }
    out
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

    #[test]
    fn quotes_are_dropped_escapes_and_all() {
        assert_eq!(
            without_quotes("invalid string\nexpected `\"`, `'`"),
            "invalid string; expected `…`, `…`"
        );
        assert_eq!(
            without_quotes(r#"invalid type: string "a\"secret", expected u64"#),
            r#"invalid type: string "…", expected u64"#
        );
        assert_eq!(without_quotes("unknown field `tok"), "unknown field `…");
        let long = without_quotes(&"x".repeat(500));
        assert_eq!(long.chars().count(), 200);
    }

    #[test]
    fn line_and_column_count_characters() {
        assert_eq!(line_column("a = 1\nbé = x", 11), (2, 5));
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("abc", 99), (1, 4));
    }
}
