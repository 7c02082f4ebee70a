//! The text of a file a user named for a plan (`--spec`, `--plan`), and
//! what of it an error may show. The front end reads the file (it knows
//! who is asking: hugeshm-cli's `cmd/input_file.rs`) and says whether its
//! text may be quoted; a file of another user, or one the caller's real
//! uid could not read, is never quoted: an error then says the line and
//! column and the parser's reason without the text (anything it quotes
//! dropped).

use serde::de::DeserializeOwned;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// The text of a file a user named, with what may be shown of it.
#[derive(Debug, Clone)]
pub struct InputText {
    path: PathBuf,
    text: String,
    /// Why its text is not shown in errors; `None` when it may be.
    withheld: Option<String>,
}

impl InputText {
    /// `text`, read from `path`; `withheld`: why nothing of it may be shown
    /// in an error (`it belongs to uid 1000, neither root nor uid 0`),
    /// `None` when it may be.
    pub fn new(path: PathBuf, text: String, withheld: Option<String>) -> InputText {
        InputText {
            path,
            text,
            withheld,
        }
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text parsed as TOML; an error says the file `is not {what}`.
    pub fn toml<T: DeserializeOwned>(&self, what: &str) -> Result<T, String> {
        toml::from_str(&self.text).map_err(|e| {
            let head = format!("{} is not {what}", self.path.display());
            match &self.withheld {
                None => format!("{head}: {e}"),
                Some(why) => {
                    let at = e
                        .span()
                        .map(|s| line_column(&self.text, s.start))
                        .map(|(l, c)| format!("line {l}, column {c}: "))
                        .unwrap_or_default();
                    format!(
                        "{head}: {at}{} (the text is not shown: {why})",
                        without_quotes(e.message())
                    )
                }
            }
        })
    }

    /// The text as a plan that `advise --json` wrote: the document of JSON
    /// schema `schema` (`"schema"` beside the plan's fields), or a bare plan
    /// (before the envelope); an error says the file is not one, and a
    /// later schema that this hugeshm reads only `schema`.
    pub fn plan(&self, schema: u32) -> Result<super::Plan, String> {
        let head = format!(
            "{} is not a plan from hugeshm advise --json",
            self.path.display()
        );
        let v: serde_json::Value =
            serde_json::from_str(&self.text).map_err(|e| format!("{head}: {}", self.said(e)))?;
        match v.get("schema") {
            Some(n) if n.as_u64() != Some(u64::from(schema)) => Err(format!(
                "{head}: it has JSON schema {}; this hugeshm reads schema {schema}",
                self.said(n)
            )),
            _ => serde_json::from_value(v).map_err(|e| format!("{head}: {}", self.said(e))),
        }
    }

    /// A string of the file (a name it gives) in an error: `"name"`, or
    /// `"…"` when its text is not shown.
    pub fn quoted(&self, s: &str) -> String {
        match self.withheld {
            None => format!("{s:?}"),
            Some(_) => "\"…\"".to_owned(),
        }
    }

    /// A message made from the file's content (a value it holds, a
    /// parser's message about it): as it is, or without what it quotes
    /// and saying why.
    pub fn said(&self, msg: impl Display) -> String {
        match &self.withheld {
            None => msg.to_string(),
            Some(why) => format!(
                "{} (the text is not shown: {why})",
                without_quotes(&msg.to_string())
            ),
        }
    }
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
