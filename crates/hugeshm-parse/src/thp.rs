//! `/sys/kernel/mm/transparent_hugepage/{enabled,defrag,shmem_enabled}` and
//! `khugepaged/defrag`.

use crate::error::ParseError;
use serde::{Deserialize, Serialize};

/// A sysfs selector file such as `always [madvise] never`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Selector {
    /// The value in brackets.
    pub selected: String,
    /// Every value the kernel offers, in order.
    pub options: Vec<String>,
}

/// Parses a selector; exactly one value must be in brackets.
pub fn parse_selector(path: &str, text: &str) -> Result<Selector, ParseError> {
    let line = text.lines().next().unwrap_or("");
    let mut selected = None;
    let mut options = Vec::new();
    for tok in line.split_whitespace() {
        if let Some(inner) = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            if selected.is_some() {
                return Err(ParseError::at(
                    path,
                    1,
                    format!("two selected values in {line:?}"),
                ));
            }
            selected = Some(inner.to_string());
            options.push(inner.to_string());
        } else {
            options.push(tok.to_string());
        }
    }
    match selected {
        Some(selected) if !selected.is_empty() => Ok(Selector { selected, options }),
        _ => Err(ParseError::at(
            path,
            1,
            format!("no selected [value] in {line:?}"),
        )),
    }
}

/// Parses `khugepaged/defrag` (`0` or `1`).
pub fn parse_flag(path: &str, text: &str) -> Result<bool, ParseError> {
    match text.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(ParseError::at(
            path,
            1,
            format!("expected 0 or 1, found {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let s = parse_selector("enabled", "always [madvise] never\n").unwrap();
        assert_eq!(s.selected, "madvise");
        assert_eq!(s.options, vec!["always", "madvise", "never"]);
        let s = parse_selector(
            "shmem_enabled",
            "always within_size advise [never] deny force\n",
        )
        .unwrap();
        assert_eq!(s.selected, "never");
        assert!(parse_selector("x", "always madvise never").is_err());
        assert!(parse_selector("x", "[always] [never]").is_err());
        assert!(parse_selector("x", "").is_err());
        assert!(parse_selector("x", "[]").is_err());
        assert!(parse_flag("d", "1\n").unwrap());
        assert!(!parse_flag("d", "0").unwrap());
        assert!(parse_flag("d", "2").is_err());
    }
}
