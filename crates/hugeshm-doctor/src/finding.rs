//! Findings: what the doctor has to say, each with a stable code and a fix.

use serde::{Deserialize, Serialize};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Memory is wasted or at risk; fix it.
    Warning,
    /// Something does not work.
    Error,
}

impl Severity {
    /// `info`, `warning`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One thing the doctor found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// A stable, kebab-case code scripts can match on (documented in the README).
    pub code: String,
    /// What is wrong, with the numbers.
    pub message: String,
    /// The exact command or configuration line that fixes it, if there is one.
    pub fix: Option<String>,
}

impl Finding {
    /// A finding.
    pub fn new(
        severity: Severity,
        code: &str,
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Self {
        Finding {
            severity,
            code: code.to_string(),
            message: message.into(),
            fix,
        }
    }
}

/// Whether any finding is a warning or an error (for `--check`).
pub fn any_actionable(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity >= Severity::Warning)
}

/// The command that sets the pool of one page size to `pages` at runtime.
pub fn pool_fix(page_size: u64, default_size: Option<u64>, pages: u64) -> String {
    hugeshm_fix::pool_command(page_size, pages, default_size == Some(page_size), None)
}

/// `1 process`, `2 processes`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
