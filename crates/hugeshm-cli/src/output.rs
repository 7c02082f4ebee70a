//! Terminal-aware output: colour only on a tty (the decision is
//! `anstream`'s: `NO_COLOR`, `CLICOLOR`, `CLICOLOR_FORCE`, `TERM=dumb`),
//! simple aligned tables (hand-written: see docs/cli.md), the `--json`
//! envelope every command prints its report in, and a broken pipe that is
//! not an error (progress on stderr is progress.rs's).
//!
//! Every human line goes through [`Out::line`], which makes it safe for a
//! terminal ([`crate::terminal`]: control characters in names a user
//! chose are shown escaped, the tool's own colours kept); `--json`
//! ([`Out::json_doc`]) and other machine text ([`Out::exact`]) are written
//! as they are.

use crate::terminal;
use crate::ColorChoice;
use anstyle::{AnsiColor, Style};
use hugeshm_doctor::Severity;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::io::Write;

/// The version of the shape of every `--json` document (the `"schema"` key).
/// Raised when a key is removed or renamed or changes type or meaning in any
/// command's document; adding a key does not raise it.
pub const JSON_SCHEMA: u32 = 1;

/// What every `--json` output is: one object, `"schema"` first, then the
/// keys of the command's own report (flattened, so they stay where they were
/// before the envelope).
#[derive(Debug, Serialize)]
pub struct Envelope<'a, T: ?Sized> {
    /// [`JSON_SCHEMA`].
    pub schema: u32,
    /// The command's report.
    #[serde(flatten)]
    pub body: &'a T,
}

impl<'a, T: ?Sized> Envelope<'a, T> {
    /// `body` under the current schema.
    pub fn new(body: &'a T) -> Self {
        Envelope {
            schema: JSON_SCHEMA,
            body,
        }
    }
}

/// A value under one key: `{"regions": [...]}`, for a command whose report
/// is a list.
pub struct Keyed<'a, T: ?Sized>(pub &'static str, pub &'a T);

impl<T: Serialize + ?Sized> Serialize for Keyed<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.0, self.1)?;
        m.end()
    }
}

/// Where a command writes.
pub struct Out {
    color: bool,
    buf: std::io::BufWriter<Box<dyn Write + Send>>,
}

impl Out {
    /// Stdout with the colour choice resolved.
    pub fn new(choice: ColorChoice) -> Self {
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                anstream::AutoStream::choice(&stdout()) != anstream::ColorChoice::Never
            }
        };
        Out {
            color,
            buf: std::io::BufWriter::new(Box::new(stdout())),
        }
    }

    /// An `Out` that writes into the returned buffer, without colour (a
    /// printer's unit test).
    #[cfg(test)]
    pub fn captured() -> (Self, Captured) {
        let text = Captured::default();
        let out = Out {
            color: false,
            buf: std::io::BufWriter::new(Box::new(text.clone())),
        };
        (out, text)
    }

    /// Writes a line of human text: one line, made safe for a terminal
    /// (a newline or escape sequence inside it is shown escaped).
    pub fn line(&mut self, s: impl AsRef<str>) -> anyhow::Result<()> {
        writeln!(self.buf, "{}", terminal::render(s.as_ref()))?;
        Ok(())
    }

    /// Writes machine-readable text exactly as it is, and a newline (the
    /// Prometheus text of `exporter --once`, a child's protocol line).
    pub fn exact(&mut self, s: &str) -> anyhow::Result<()> {
        writeln!(self.buf, "{s}")?;
        Ok(())
    }

    /// Writes the `--json` document of a command: `body`'s keys in one object
    /// after `"schema": JSON_SCHEMA` (pretty), and a newline. `body` must
    /// serialize as an object (a struct or a map); a list goes under a key
    /// ([`Keyed`]).
    pub fn json_doc<T: Serialize + ?Sized>(&mut self, body: &T) -> anyhow::Result<()> {
        serde_json::to_writer_pretty(&mut self.buf, &Envelope::new(body))?;
        writeln!(self.buf)?;
        self.flush()
    }

    /// Flushes.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.buf.flush()?;
        Ok(())
    }

    /// Bold text (a heading).
    pub fn bold(&self, s: &str) -> String {
        self.paint(s, Style::new().bold())
    }

    /// Dim text.
    pub fn dim(&self, s: &str) -> String {
        self.paint(s, Style::new().dimmed())
    }

    /// A severity tag in its colour.
    pub fn severity(&self, s: Severity) -> String {
        let (text, style) = match s {
            Severity::Error => ("ERROR", AnsiColor::Red.on_default().bold()),
            Severity::Warning => ("WARN ", AnsiColor::Yellow.on_default().bold()),
            Severity::Info => ("info ", AnsiColor::Cyan.on_default()),
        };
        self.paint(text, style)
    }

    /// Green or red text for good / bad values.
    pub fn good(&self, s: &str, good: bool) -> String {
        let c = if good {
            AnsiColor::Green
        } else {
            AnsiColor::Red
        };
        self.paint(s, c.on_default())
    }

    fn paint(&self, s: &str, style: Style) -> String {
        if self.color {
            terminal::styled(style, s)
        } else {
            s.to_string()
        }
    }
}

/// What an [`Out::captured`] wrote.
#[cfg(test)]
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(test)]
impl Captured {
    /// The text written so far (after [`Out::flush`]).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[cfg(test)]
impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Stdout: the only handle on it is [`Out`]'s.
#[allow(clippy::disallowed_methods)]
fn stdout() -> std::io::Stdout {
    std::io::stdout()
}

/// Stdout for a hidden child's protocol with its parent (a bench worker's
/// answers): machine text, not for a terminal.
pub fn protocol_stdout() -> std::io::StdoutLock<'static> {
    stdout().lock()
}

/// Whether an error is a closed stdout (`hugeshm status | head`).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

pub use hugeshm_lab::{error_text, Usage};

/// An error and its fix, which the error printer puts on a line of its
/// own below it (`  to fix: FIX`).
#[derive(Debug)]
pub struct WithFix {
    /// The error's text.
    pub error: String,
    /// The fix, rendered for the CLI.
    pub fix: String,
}

impl std::fmt::Display for WithFix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

impl std::error::Error for WithFix {}

/// The exit status of a failed command: 2 for a [`Usage`] error, else 3.
pub fn error_status(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<Usage>()) {
        2
    } else {
        3
    }
}

/// Prints an error on stderr: `hugeshm: error: ` and [`error_text`], then
/// the fix of a [`WithFix`] in its chain on a line of its own.
pub fn print_error(e: &anyhow::Error) {
    terminal::eprintln(format_args!("hugeshm: error: {}", error_text(e)));
    if let Some(w) = e.chain().find_map(|c| c.downcast_ref::<WithFix>()) {
        terminal::eprintln(format_args!("  to fix: {}", w.fix));
    }
}

/// A table of left- or right-aligned columns (numbers right-aligned).
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers; a header starting with `>` is right-aligned.
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header
                .iter()
                .map(|h| h.trim_start_matches('>').to_string())
                .collect(),
            right: header.iter().map(|h| h.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders with two spaces between columns, `indent` before each line.
    pub fn render(&self, out: &mut Out, indent: &str) -> anyhow::Result<()> {
        let n = self.header.len();
        let mut w = vec![0usize; n];
        for r in std::iter::once(&self.header).chain(self.rows.iter()) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(terminal::width(c));
            }
        }
        let fmt = |r: &[String]| -> String {
            let mut s = String::from(indent);
            for (i, width) in w.iter().enumerate() {
                let c = r.get(i).map(String::as_str).unwrap_or("");
                let pad = width.saturating_sub(terminal::width(c));
                if self.right[i] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    if i + 1 < n {
                        s.push_str(&" ".repeat(pad));
                    }
                }
                if i + 1 < n {
                    s.push_str("  ");
                }
            }
            s.trim_end().to_string()
        };
        let head = fmt(&self.header);
        out.line(out.bold(&head))?;
        for r in &self.rows {
            out.line(fmt(r))?;
        }
        Ok(())
    }
}

/// Prints findings: severity, code, message, and the fix on its own line.
pub fn findings(
    out: &mut Out,
    findings: &[hugeshm_doctor::Finding],
    indent: &str,
) -> anyhow::Result<()> {
    for f in findings {
        let sev = out.severity(f.severity);
        out.line(format!("{indent}{sev} {}: {}", f.code, f.message))?;
        if let Some(fix) = &f.fix {
            out.line(format!("{indent}      {} {fix}", out.dim("fix:")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_text_does_not_repeat_a_cause_the_message_holds() {
        #[derive(Debug)]
        struct Io(std::io::Error);
        impl std::fmt::Display for Io {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "/sys/x: {}", self.0)
            }
        }
        impl std::error::Error for Io {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        // ENOENT.
        let io = || std::io::Error::from_raw_os_error(2);
        let e = anyhow::Error::new(Io(io())).context("reading the pools");
        assert_eq!(
            super::error_text(&e),
            "reading the pools: /sys/x: No such file or directory (os error 2)"
        );
    }

    use super::*;

    #[derive(Serialize)]
    struct Report {
        name: &'static str,
        pages: Vec<u64>,
        node: Option<u32>,
    }

    #[test]
    fn envelope_puts_schema_first_and_keeps_the_keys() {
        let r = Report {
            name: "sga",
            pages: vec![1, 2],
            node: None,
        };
        let text = serde_json::to_string(&Envelope::new(&r)).unwrap();
        assert_eq!(
            text,
            r#"{"schema":1,"name":"sga","pages":[1,2],"node":null}"#
        );
    }

    #[test]
    fn a_list_goes_under_its_key() {
        let text = serde_json::to_string(&Envelope::new(&Keyed("regions", &[1, 2][..]))).unwrap();
        assert_eq!(text, r#"{"schema":1,"regions":[1,2]}"#);
        let empty: Vec<u8> = Vec::new();
        let text = serde_json::to_string(&Envelope::new(&Keyed("removed", &empty))).unwrap();
        assert_eq!(text, r#"{"schema":1,"removed":[]}"#);
    }

    #[test]
    fn a_bare_list_is_refused() {
        assert!(serde_json::to_string(&Envelope::new(&[1, 2][..])).is_err());
    }
}
