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

/// Every finding code the doctor reports, with the severities it reports
/// it at, in the order of docs/findings.md. The one list: the
/// exporter serves a 0 for each (code, severity) not found in a scrape,
/// so that an alert on a finding resolves and a graph drops when it
/// clears (a test reads the doctor's sources and checks that every
/// `Finding::new` uses a code and severity listed here, and every code
/// here is used).
pub const CODES: &[(&str, &[Severity])] = {
    use Severity::{Error, Info, Warning};
    &[
        ("no-hugetlb", &[Error]),
        ("unreadable-file", &[Warning]),
        ("pool-short", &[Warning]),
        ("pool-unused", &[Info, Warning]),
        ("boot-pool-short", &[Warning]),
        ("pool-surplus", &[Info]),
        ("pool-one-node", &[Info]),
        ("pool-uneven", &[Warning]),
        ("pool-not-persisted", &[Warning]),
        ("persisted-differs", &[Warning]),
        ("pool-demote", &[Info]),
        ("gigantic-runtime", &[Info, Warning]),
        ("min-free-kbytes-low", &[Info]),
        ("hvo-off", &[Info]),
        ("thp-always", &[Warning]),
        ("thp-split", &[Info]),
        ("shmmax-small", &[Warning]),
        ("shmall-small", &[Warning]),
        ("memlock-small", &[Warning]),
        ("tmpfs-no-mpol", &[Info, Warning]),
        ("segment-findings", &[Warning]),
        ("silent-fallback", &[Warning]),
        ("shm-file-4k", &[Info]),
        ("oracle-amm", &[Warning]),
        ("oracle-sga-4k", &[Warning]),
        ("jvm-base-pages", &[Warning]),
        ("mariadb-base-pages", &[Warning]),
        ("page-tables", &[Info]),
        ("thp-shmem", &[Info]),
        ("reserved-untouched", &[Info]),
        ("orphan", &[Warning]),
        ("kept-unattached", &[Info]),
        ("unattached-unreadable", &[Info]),
        ("orphan-file", &[Warning]),
        ("misplaced", &[Warning]),
        ("single-node", &[Warning]),
        ("processes-unreadable", &[Info, Warning]),
        ("mount-listing-cut", &[Warning]),
        ("cgroup-limit-short", &[Warning]),
        ("cgroup-rsvd-unset", &[Warning]),
        ("cgroup-faults-refused", &[Warning]),
        ("cgroup-fallback", &[Warning]),
        ("segment-cgroup-short", &[Warning]),
        ("kubelet-capacity-stale", &[Info, Warning]),
        ("kubelet-capacity-held", &[Warning]),
        ("run-record-ignored", &[Warning]),
        ("run-pages-moved", &[Warning]),
        ("run-pool-shrunk", &[Warning]),
        ("dax-page-cache", &[Warning]),
        ("dax-4k-faults", &[Warning]),
        ("pmem-align-small", &[Warning]),
    ]
};

/// One thing the doctor found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// A stable, kebab-case code scripts can match on (documented in docs/findings.md).
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The text of every source file under `dir`.
    fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push((
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                ));
            }
        }
    }

    /// The first two arguments of each `Finding::new(` call in `text`,
    /// outside its tests: (severity, code), each as written.
    fn calls(text: &str) -> Vec<(String, String)> {
        let code = text.split("#[cfg(test)]").next().unwrap_or(text);
        code.split("Finding::new(")
            .skip(1)
            .map(|call| {
                let mut depth = 0;
                let mut args = vec![String::new()];
                for c in call.chars() {
                    match c {
                        '(' | '{' | '[' => depth += 1,
                        ')' | '}' | ']' if depth == 0 => break,
                        ')' | '}' | ']' => depth -= 1,
                        ',' if depth == 0 => {
                            args.push(String::new());
                            continue;
                        }
                        _ => {}
                    }
                    args.last_mut().unwrap().push(c);
                }
                let arg = |i: usize| args.get(i).map(|a| a.trim().to_owned()).unwrap_or_default();
                (arg(0), arg(1))
            })
            .collect()
    }

    #[test]
    fn codes_lists_every_code_the_doctor_reports_and_no_other() {
        let mut files = Vec::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut used = std::collections::BTreeSet::new();
        for (path, text) in &files {
            for (sev, code) in calls(text) {
                let code = code
                    .strip_prefix('"')
                    .and_then(|c| c.strip_suffix('"'))
                    .unwrap_or_else(|| {
                        panic!("{path}: a finding whose code is {code}, not a literal")
                    });
                let Some((_, severities)) = CODES.iter().find(|(c, _)| *c == code) else {
                    panic!("{path}: finding code {code:?} is not in finding::CODES");
                };
                // A literal severity must be listed; one computed must be
                // one of several listed.
                let literal = [Severity::Info, Severity::Warning, Severity::Error]
                    .into_iter()
                    .find(|s| sev == format!("Severity::{s:?}"));
                match literal {
                    Some(s) => assert!(severities.contains(&s), "{path}: {code} at {s:?}"),
                    None => assert!(
                        severities.len() > 1 || code == "segment-findings",
                        "{path}: {code}'s severity is computed ({sev}): list each it can be"
                    ),
                }
                used.insert(code.to_owned());
            }
        }
        let listed: std::collections::BTreeSet<String> =
            CODES.iter().map(|(c, _)| (*c).to_owned()).collect();
        assert_eq!(listed.len(), CODES.len(), "a code listed twice");
        let unused: Vec<_> = listed.difference(&used).collect();
        assert!(unused.is_empty(), "listed, never reported: {unused:?}");
    }
}
