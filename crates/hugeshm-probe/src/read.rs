//! Reading one file and turning every failure into a typed, reportable error.

use hugeshm_parse::ParseError;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

/// Why a file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file does not exist (often: the kernel lacks the feature).
    #[error("{path}: not present")]
    NotFound {
        /// The path.
        path: String,
    },
    /// Permission denied.
    #[error("{path}: permission denied")]
    PermissionDenied {
        /// The path.
        path: String,
    },
    /// Another I/O error.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// The text could not be parsed.
    #[error("{0}")]
    Parse(#[from] ParseError),
}

impl ReadError {
    /// Whether this is "file absent" (as opposed to unreadable or malformed).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::NotFound { .. })
    }

    /// The path the error is about.
    pub fn path(&self) -> &str {
        match self {
            ReadError::NotFound { path }
            | ReadError::PermissionDenied { path }
            | ReadError::Io { path, .. } => path,
            ReadError::Parse(p) => &p.path,
        }
    }

    /// This error as a [`Problem`] for reports.
    pub fn to_problem(&self) -> Problem {
        Problem {
            path: self.path().to_string(),
            kind: self.kind(),
            reason: self.to_string(),
        }
    }

    /// What went wrong, in one word.
    pub fn kind(&self) -> ProblemKind {
        match self {
            ReadError::NotFound { .. } => ProblemKind::NotFound,
            ReadError::PermissionDenied { .. } => ProblemKind::Permission,
            ReadError::Io { .. } => ProblemKind::Io,
            ReadError::Parse(_) => ProblemKind::Malformed,
        }
    }
}

/// The kind of a [`Problem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// The file vanished (a process exited mid-scan).
    NotFound,
    /// Permission denied.
    Permission,
    /// Another I/O error (e.g. a directory where a file should be).
    Io,
    /// The kernel text could not be parsed.
    Malformed,
}

/// A file that could not be read or parsed, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Problem {
    /// The path.
    pub path: String,
    /// What went wrong.
    pub kind: ProblemKind,
    /// Why, in full.
    pub reason: String,
}

impl Problem {
    /// A problem with a path, a kind and a reason.
    pub fn new(path: impl Into<String>, kind: ProblemKind, reason: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            kind,
            reason: reason.into(),
        }
    }

    /// The fix to print for it; `self_uid` is the uid hugeshm runs as.
    pub fn fix(&self, self_uid: Option<u32>) -> String {
        match self.kind {
            ProblemKind::Permission if self_uid == Some(0) => "already root: the file is protected by the ptrace access check (another user or pid namespace, or a Yama/LSM policy); run hugeshm in the namespace of that process".to_string(),
            ProblemKind::Permission => "run hugeshm as root (sudo hugeshm ...)".to_string(),
            ProblemKind::Malformed => format!("hugeshm cannot parse {}: please report it with the output of scripts/capture-fixture.sh", self.path),
            ProblemKind::Io | ProblemKind::NotFound => format!("check that {} is a readable file", self.path),
        }
    }
}

/// Reads a whole file as text (lossy UTF-8: kernel text may hold odd bytes in names).
pub(crate) fn read_text(path: &Path) -> Result<String, ReadError> {
    let p = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
        Err(e) => Err(io_error(p, e)),
    }
}

thread_local! {
    /// The buffer [`read_parse_reused`] reads into, kept per thread.
    static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(64 << 10));
}

/// Reads the file at `path` to its end, appending to `buf`, with plain
/// `read` calls: `File::read_to_end` first asks for the size (`statx`)
/// and the position (`lseek`), two system calls per file that tell
/// nothing about a /proc file (its size is 0).
pub(crate) fn read_plain(path: &Path, buf: &mut Vec<u8>) -> io::Result<usize> {
    use std::io::Read;
    /// A `File` seen only as a reader: `read_to_end` without size hints.
    struct Plain(std::fs::File);
    impl Read for Plain {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.0.read(b)
        }
    }
    Plain(std::fs::File::open(path)?).read_to_end(buf)
}

/// [`read_parse`] through one buffer per thread that is reused from call
/// to call: no allocation per file and no size query (`statx`) first,
/// for the files a scan reads once per process (`maps`, `status`).
pub(crate) fn read_parse_reused<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, ReadError> {
    let parse_at = |text: &str| {
        parse(text).map_err(|e| ReadError::Parse(e.with_path(path.display().to_string())))
    };
    BUF.with(|cell| {
        let Ok(mut buf) = cell.try_borrow_mut() else {
            // Re-entered from `parse` (not done today): a fresh buffer.
            let text = read_text(path)?;
            return parse_at(&text);
        };
        buf.clear();
        if let Err(e) = read_plain(path, &mut buf) {
            return Err(io_error(path.display().to_string(), e));
        }
        match std::str::from_utf8(&buf) {
            Ok(text) => parse_at(text),
            Err(_) => parse_at(&String::from_utf8_lossy(&buf)),
        }
    })
}

pub(crate) fn io_error(path: String, e: io::Error) -> ReadError {
    match e.kind() {
        io::ErrorKind::NotFound => ReadError::NotFound { path },
        io::ErrorKind::PermissionDenied => ReadError::PermissionDenied { path },
        _ if e.raw_os_error() == Some(3) => ReadError::NotFound { path }, // ESRCH: process gone
        _ => ReadError::Io { path, source: e },
    }
}

/// Reads and parses a file, relabelling parse errors with the real path.
pub(crate) fn read_parse<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, ParseError>,
) -> Result<T, ReadError> {
    let text = read_text(path)?;
    parse(&text).map_err(|e| ReadError::Parse(e.with_path(path.display().to_string())))
}

/// Like [`read_parse`] for parsers that take the path themselves.
pub(crate) fn read_parse_at<T>(
    path: &Path,
    parse: impl FnOnce(&str, &str) -> Result<T, ParseError>,
) -> Result<T, ReadError> {
    let text = read_text(path)?;
    let p = path.display().to_string();
    parse(&p, &text).map_err(ReadError::Parse)
}
