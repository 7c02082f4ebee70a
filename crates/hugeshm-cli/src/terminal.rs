//! What reaches the terminal. hugeshm runs as root and prints names that
//! any local user chooses: a file in /dev/shm, a process's command line, a
//! region in a spec file. [`terminal_safe`] is the one function that makes
//! such text harmless on a terminal: every C0 and C1 control character,
//! DEL, and the Unicode bidirectional controls (U+061C, U+200E, U+200F,
//! U+202A–U+202E, U+2066–U+2069) are shown as visible escapes (`\x1b`,
//! `\n`, `\u{202e}`) instead of acting on the terminal (setting its title,
//! moving the cursor, forging a line, reordering what the reader sees).
//!
//! It is applied where human text leaves the process, not by each printer:
//! `output::Out::line` passes every line of stdout through
//! [`render`], and [`eprintln`] every line of stderr (the log printer, the
//! error printer, warnings); the crate denies `println!`/`eprintln!` and
//! `std::io::stdout`/`stderr` elsewhere (clippy's `print_stdout`,
//! `print_stderr` and `disallowed_methods`, see `clippy.toml`). The
//! machine-readable outputs (`--json`, the Prometheus text) are written
//! exactly, through their own typed paths; the progress lines on stderr
//! (progress.rs, drawn by indicatif) pass what they show through
//! [`terminal_safe`].
//!
//! The tool's own colours cross the filter in a typed way: [`styled`]
//! wraps the SGR codes it emits between two copies of a per-process
//! secret marker. Text from outside cannot contain the marker (it is drawn
//! from the OS's random source at start and never printed), so [`render`]
//! emits exactly the codes the tool itself made and escapes every other
//! control character, however the line was assembled.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::io::Write as _;
use std::sync::OnceLock;

/// Whether `c` acts on a terminal instead of being shown.
fn acts_on_terminal(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// `s` with every character that acts on a terminal shown as an escape
/// (`\t`, `\n`, `\r`, `\x1b`, `\u{9b}`, `\u{202e}`); borrowed when there
/// is none.
pub fn terminal_safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(acts_on_terminal) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 && acts_on_terminal(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if acts_on_terminal(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The marker around the tool's own SGR codes: a private-use character,
/// 16 hex digits of a random key drawn at start, and another.
fn marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| {
        // std seeds each RandomState from the OS's random source.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        format!("\u{e000}{:016x}\u{e001}", h.finish())
    })
}

/// `text` in `style`: the style's codes marked so that [`render`] emits
/// them; `text` itself is rendered like any other text.
pub fn styled(style: anstyle::Style, text: &str) -> String {
    let m = marker();
    format!("{m}{style}{m}{text}{m}{style:#}{m}")
}

/// Whether `s` is only SGR sequences (`ESC [ params m`), the only codes
/// [`styled`] makes.
fn is_sgr(s: &str) -> bool {
    let mut rest = s;
    while !rest.is_empty() {
        let Some(params) = rest.strip_prefix("\x1b[") else {
            return false;
        };
        let Some(end) = params.find('m') else {
            return false;
        };
        if !params[..end]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b';')
        {
            return false;
        }
        rest = &params[end + 1..];
    }
    true
}

/// The pieces of a line: (text, whether it is the tool's own SGR codes).
fn pieces(line: &str) -> impl Iterator<Item = (&str, bool)> {
    line.split(marker())
        .enumerate()
        .map(|(i, p)| (p, i % 2 == 1 && is_sgr(p)))
}

/// A line as it may reach the terminal: the tool's own colour codes as
/// they are, everything else through [`terminal_safe`].
pub fn render(line: &str) -> Cow<'_, str> {
    if !line.contains(marker()) {
        return terminal_safe(line);
    }
    let mut out = String::with_capacity(line.len());
    for (p, sgr) in pieces(line) {
        if sgr {
            out.push_str(p);
        } else {
            out.push_str(&terminal_safe(p));
        }
    }
    Cow::Owned(out)
}

/// How many characters a line takes on the terminal once rendered (the
/// tool's colour codes take none; an escaped character takes its escape).
pub fn width(line: &str) -> usize {
    pieces(line)
        .filter(|(_, sgr)| !sgr)
        .map(|(p, _)| terminal_safe(p).chars().count())
        .sum()
}

/// Writes a line on stderr, rendered (every human line on stderr goes
/// through here: warnings, errors, the log printer).
pub fn eprintln(line: impl std::fmt::Display) {
    let text = line.to_string();
    #[allow(clippy::disallowed_methods)]
    let mut err = std::io::stderr().lock();
    // Nothing to do about a closed stderr.
    let _ = writeln!(err, "{}", render(&text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_shown_not_obeyed() {
        assert_eq!(terminal_safe("sga-0.db_1"), "sga-0.db_1");
        assert!(matches!(terminal_safe("plain"), Cow::Borrowed(_)));
        assert_eq!(terminal_safe("x\x1b]0;PWNED\x07"), "x\\x1b]0;PWNED\\x07");
        assert_eq!(terminal_safe("a\nb\tc\rd\x7f\0"), "a\\nb\\tc\\rd\\x7f\\x00");
        // C1: CSI as one character, and NEL.
        assert_eq!(terminal_safe("\u{9b}2J\u{85}"), "\\u{9b}2J\\u{85}");
        assert_eq!(
            terminal_safe("abc\u{202e}gpj.exe\u{2066}\u{2069}\u{200f}"),
            "abc\\u{202e}gpj.exe\\u{2066}\\u{2069}\\u{200f}"
        );
        // Printable text outside ASCII stays.
        assert_eq!(terminal_safe("größe ✓ 大"), "größe ✓ 大");
    }

    #[test]
    fn only_the_tools_own_styles_pass_raw() {
        let bold = anstyle::Style::new().bold();
        let line = format!("{} x\x1b[31mred\x1b]0;t\x07", styled(bold, "Find\x1bings"));
        let out = render(&line);
        assert_eq!(
            out,
            "\x1b[1mFind\\x1bings\x1b[0m x\\x1b[31mred\\x1b]0;t\\x07"
        );
        assert_eq!(
            width(&line),
            "Find\\x1bings x\\x1b[31mred\\x1b]0;t\\x07".len()
        );
        // Codes that look like the tool's, typed by hand, are escaped.
        assert_eq!(render("\x1b[1mbold\x1b[0m"), "\\x1b[1mbold\\x1b[0m");
        // A forged marker without the secret is text.
        assert_eq!(
            render("\u{e000}0000000000000000\u{e001}\x1b[1m"),
            "\u{e000}0000000000000000\u{e001}\\x1b[1m"
        );
    }

    #[test]
    fn sgr_codes_are_recognised() {
        assert!(is_sgr("\x1b[1m\x1b[31m"));
        assert!(is_sgr("\x1b[0m"));
        assert!(!is_sgr("\x1b]0;x\x07"));
        assert!(!is_sgr("\x1b[2J"));
        assert!(!is_sgr("text"));
    }
}
