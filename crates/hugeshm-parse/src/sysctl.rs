//! One-value files under `/proc/sys` (`vm.nr_hugepages`, `kernel.shmmax`, ...).

use crate::error::{parse_i64, parse_u64, ParseError};

/// Parses an unsigned one-number file.
pub fn parse_u64_value(path: &str, text: &str) -> Result<u64, ParseError> {
    let line = text.lines().next().unwrap_or("");
    if line.trim().is_empty() {
        return Err(ParseError::file(path, "empty file, expected a number"));
    }
    parse_u64(path, 1, "value", line)
}

/// Parses a signed one-number file (`vm.overcommit_memory`, `vm.min_free_kbytes`).
pub fn parse_i64_value(path: &str, text: &str) -> Result<i64, ParseError> {
    let line = text.lines().next().unwrap_or("");
    if line.trim().is_empty() {
        return Err(ParseError::file(path, "empty file, expected a number"));
    }
    parse_i64(path, 1, "value", line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(
            parse_u64_value("shmmax", "18446744073692774399\n").unwrap(),
            18446744073692774399
        );
        assert_eq!(parse_i64_value("overcommit_memory", "0\n").unwrap(), 0);
        assert!(parse_u64_value("x", "").is_err());
        assert!(parse_u64_value("x", "12 kB").is_err());
        assert!(parse_i64_value("x", "").is_err());
    }
}
