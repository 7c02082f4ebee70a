//! `/proc/vmstat`: the kernel's event counters, since boot.

use crate::error::{parse_u64, ParseError};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/vmstat";

/// The counters of `/proc/vmstat` hugeshm uses; `None` when the kernel
/// does not print one (a kernel without THP prints no `thp_*` lines).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Vmstat {
    /// `thp_split_page`: transparent huge pages split into base pages
    /// (memory pressure, swap, a hole punched in a tmpfs file).
    pub thp_split_page: Option<u64>,
    /// `thp_collapse_alloc`: huge pages allocated to collapse into
    /// (khugepaged and `MADV_COLLAPSE`).
    pub thp_collapse_alloc: Option<u64>,
}

/// Parses `/proc/vmstat` (`name value` lines).
pub fn parse(text: &str) -> Result<Vmstat, ParseError> {
    let mut v = Vmstat::default();
    let mut lines = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let (key, num) = raw.split_once(' ').ok_or_else(|| {
            ParseError::at(PATH, n, format!("expected \"name value\", found {raw:?}"))
        })?;
        lines += 1;
        let target = match key {
            "thp_split_page" => &mut v.thp_split_page,
            "thp_collapse_alloc" => &mut v.thp_collapse_alloc,
            _ => continue,
        };
        *target = Some(parse_u64(PATH, n, key, num.trim())?);
    }
    if lines == 0 {
        return Err(ParseError::file(PATH, "empty"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_thp_counters_and_refuses_garbage() {
        let v = parse("nr_free_pages 12\nthp_split_page 3\nthp_collapse_alloc 5578\n").unwrap();
        assert_eq!(
            (v.thp_split_page, v.thp_collapse_alloc),
            (Some(3), Some(5578))
        );
        assert_eq!(parse("nr_free_pages 1\n").unwrap(), Vmstat::default());
        let e = parse("thp_split_page x\n").unwrap_err().to_string();
        assert!(e.starts_with("/proc/vmstat:1:"), "{e}");
        assert!(parse("garbage\n").is_err());
        assert!(parse("").is_err());
    }
}
