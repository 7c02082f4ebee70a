//! `/proc/PID/limits`.
//!
//! A table: a header (`Limit  Soft Limit  Hard Limit  Units`) then one row per
//! resource. The limit names contain spaces and are padded to a column, the
//! values are a number or `unlimited`, the unit column may be empty. hugeshm
//! only needs `Max locked memory` (`RLIMIT_MEMLOCK`), which bounds
//! `SHM_LOCK`/`mlock` and, for users outside `hugetlb_shm_group`, `SHM_HUGETLB`.

use crate::error::{parse_u64, ParseError};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/PID/limits";

/// The row name of `RLIMIT_MEMLOCK`.
const MEMLOCK: &str = "Max locked memory";

/// The limits hugeshm uses. `None` means `unlimited`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PidLimits {
    /// Soft `RLIMIT_MEMLOCK` in bytes; `None` = unlimited.
    pub memlock_soft_bytes: Option<u64>,
    /// Hard `RLIMIT_MEMLOCK` in bytes; `None` = unlimited.
    pub memlock_hard_bytes: Option<u64>,
}

/// Reads one limit value: a number, or `unlimited` (`None`).
fn limit_value(line: usize, what: &str, text: &str) -> Result<Option<u64>, ParseError> {
    if text == "unlimited" {
        Ok(None)
    } else {
        parse_u64(PATH, line, what, text).map(Some)
    }
}

/// Parses `/proc/PID/limits`. Fails when the `Max locked memory` row is
/// missing or cannot be read.
pub fn parse(text: &str) -> Result<PidLimits, ParseError> {
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let rest = match raw.strip_prefix(MEMLOCK) {
            // The name must end at a column gap, not run on ("Max locked memoryX").
            Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => rest,
            _ => continue,
        };
        let mut cols = rest.split_whitespace();
        let (soft, hard) = match (cols.next(), cols.next()) {
            (Some(s), Some(h)) => (s, h),
            _ => {
                return Err(ParseError::at(
                    PATH,
                    n,
                    format!(
                        "{MEMLOCK}: expected soft and hard limits, found {:?}",
                        rest.trim()
                    ),
                ))
            }
        };
        match (cols.next(), cols.next()) {
            (None, None) | (Some("bytes"), None) => {}
            _ => {
                return Err(ParseError::at(
                    PATH,
                    n,
                    format!(
                        "{MEMLOCK}: expected the unit \"bytes\", found {:?}",
                        rest.trim()
                    ),
                ))
            }
        }
        return Ok(PidLimits {
            memlock_soft_bytes: limit_value(n, "Max locked memory (soft)", soft)?,
            memlock_hard_bytes: limit_value(n, "Max locked memory (hard)", hard)?,
        });
    }
    Err(ParseError::file(PATH, format!("no \"{MEMLOCK}\" row")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/limits` on Linux 6.18 (trailing blanks as the kernel prints them).
    const REAL: &str =
        "Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max file size             unlimited            unlimited            bytes     
Max data size             unlimited            unlimited            bytes     
Max stack size            8388608              unlimited            bytes     
Max core file size        0                    unlimited            bytes     
Max resident set          unlimited            unlimited            bytes     
Max processes             96365                96365                processes 
Max open files            20000                20000                files     
Max locked memory         8388608              8388608              bytes     
Max address space         unlimited            unlimited            bytes     
Max file locks            unlimited            unlimited            locks     
Max pending signals       96365                96365                signals   
Max msgqueue size         819200               819200               bytes     
Max nice priority         0                    0                    
Max realtime priority     0                    0                    
Max realtime timeout      unlimited            unlimited            us        
";

    #[test]
    fn real_text() {
        let l = parse(REAL).unwrap();
        assert_eq!(l.memlock_soft_bytes, Some(8 << 20));
        assert_eq!(l.memlock_hard_bytes, Some(8 << 20));
    }

    #[test]
    fn unlimited() {
        let text = REAL.replace(
            "Max locked memory         8388608              8388608 ",
            "Max locked memory         65536                unlimited ",
        );
        let l = parse(&text).unwrap();
        assert_eq!(l.memlock_soft_bytes, Some(65536));
        assert_eq!(l.memlock_hard_bytes, None);
        let l = parse("Max locked memory  unlimited  unlimited  bytes\n").unwrap();
        assert_eq!(l.memlock_soft_bytes, None);
        assert_eq!(l.memlock_hard_bytes, None);
        // Without the unit column.
        let l = parse("Max locked memory  0  0\n").unwrap();
        assert_eq!(l.memlock_soft_bytes, Some(0));
    }

    #[test]
    fn missing_row() {
        let text: String = REAL
            .lines()
            .filter(|l| !l.starts_with(MEMLOCK))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = parse(&text).unwrap_err();
        assert_eq!(e.path, "/proc/PID/limits");
        assert_eq!(e.line, None);
        assert!(parse("").is_err());
        // A longer name that starts the same way is another row.
        assert!(parse("Max locked memoryx  1  1  bytes\n").is_err());
    }

    #[test]
    fn malformed_row() {
        for bad in [
            "Max locked memory\n",
            "Max locked memory         8388608\n",
            "Max locked memory         lots                 8388608              bytes\n",
            "Max locked memory         -1                   8388608              bytes\n",
            "Max locked memory         1                    99999999999999999999 bytes\n",
            "Max locked memory         1                    1                    pages\n",
            "Max locked memory         1                    1                    bytes  extra\n",
        ] {
            let text = format!("Limit                     Soft Limit           Hard Limit           Units     \n{bad}");
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, Some(2), "{bad:?}: {e}");
            assert!(e.to_string().contains("Max locked memory"), "{e}");
        }
    }

    #[test]
    fn truncated() {
        // Cut inside the row: the hard limit is missing.
        let cut = &REAL[..REAL.find("Max locked memory").unwrap() + 30];
        assert_eq!(parse(cut).unwrap_err().line, Some(10));
        for end in 0..=REAL.len() {
            let _ = parse(&REAL[..end]);
        }
    }
}
