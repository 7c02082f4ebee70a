//! The one error type of every parser.

use std::fmt;

/// A line (or whole file) a parser could not read.
///
/// `path` starts as the kernel's canonical name (`/proc/meminfo`,
/// `/proc/PID/smaps`, ...); the live reader replaces it with the path it really
/// read through [`ParseError::with_path`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct ParseError {
    /// The file the text came from.
    pub path: String,
    /// 1-based line number, when the problem is on one line.
    pub line: Option<usize>,
    /// What was wrong, with the offending text.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.path, line, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

impl ParseError {
    /// An error on one line (1-based).
    pub fn at(path: &str, line: usize, message: impl Into<String>) -> Self {
        ParseError {
            path: path.to_string(),
            line: Some(line),
            message: message.into(),
        }
    }

    /// An error about the whole file.
    pub fn file(path: &str, message: impl Into<String>) -> Self {
        ParseError {
            path: path.to_string(),
            line: None,
            message: message.into(),
        }
    }

    /// The same error, naming the path that was really read.
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }
}

/// Parses a decimal `u64`, naming file, line and text on failure.
pub(crate) fn parse_u64(
    path: &str,
    line: usize,
    what: &str,
    text: &str,
) -> Result<u64, ParseError> {
    text.trim().parse::<u64>().map_err(|_| {
        ParseError::at(
            path,
            line,
            format!("{what}: expected a whole number, found {:?}", text.trim()),
        )
    })
}

/// Parses a decimal `i64`, naming file, line and text on failure.
pub(crate) fn parse_i64(
    path: &str,
    line: usize,
    what: &str,
    text: &str,
) -> Result<i64, ParseError> {
    text.trim().parse::<i64>().map_err(|_| {
        ParseError::at(
            path,
            line,
            format!("{what}: expected a number, found {:?}", text.trim()),
        )
    })
}

/// Multiplies kB by 1024, failing instead of overflowing.
pub(crate) fn kb_to_bytes(path: &str, line: usize, what: &str, kb: u64) -> Result<u64, ParseError> {
    kb.checked_mul(1024).ok_or_else(|| {
        ParseError::at(
            path,
            line,
            format!("{what}: {kb} kB does not fit in 64 bits of bytes"),
        )
    })
}

/// Parses `N kB` (as in status, smaps and meminfo) into bytes.
pub(crate) fn parse_kb(path: &str, line: usize, what: &str, text: &str) -> Result<u64, ParseError> {
    let text = text.trim();
    let (num, unit) = match text.split_once(char::is_whitespace) {
        Some((a, b)) => (a, b.trim()),
        None => (text, ""),
    };
    if unit != "kB" {
        return Err(ParseError::at(
            path,
            line,
            format!("{what}: expected \"N kB\", found {text:?}"),
        ));
    }
    let kb = parse_u64(path, line, what, num)?;
    kb_to_bytes(path, line, what, kb)
}
