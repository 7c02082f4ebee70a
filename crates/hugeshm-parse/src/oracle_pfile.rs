//! An Oracle Database text parameter file (`init<SID>.ora`, a pfile, or
//! `CREATE PFILE FROM SPFILE`'s output): the parameters that decide how
//! much of its SGA goes on huge pages.
//!
//! Lines are `[SID|*.]name = value`; `#` starts a comment; a value may be
//! quoted (`'ONLY'`) and a size may end in K, M, G or T (powers of 1024).
//! A `*.` line applies to every instance; a line for one SID overrides it
//! for that instance (`sid` picks one; without it, the `*` values).

use crate::error::ParseError;
use serde::{Deserialize, Serialize};

const PATH: &str = "pfile";

/// The parameters of a pfile hugeshm uses; `None` when not set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OraclePfile {
    /// `sga_max_size`, bytes.
    pub sga_max_size: Option<u64>,
    /// `sga_target`, bytes.
    pub sga_target: Option<u64>,
    /// `memory_target` (AMM), bytes.
    pub memory_target: Option<u64>,
    /// `memory_max_target` (AMM), bytes.
    pub memory_max_target: Option<u64>,
    /// `pga_aggregate_target`, bytes.
    pub pga_aggregate_target: Option<u64>,
    /// `use_large_pages`, upper case (`TRUE`, `ONLY`, `FALSE`, `AUTO`).
    pub use_large_pages: Option<String>,
    /// `_enable_NUMA_support`.
    pub enable_numa_support: Option<bool>,
}

/// Reads the parameters of instance `sid` (the `*` values where `None`).
pub fn parse(text: &str, sid: Option<&str>) -> Result<OraclePfile, ParseError> {
    let mut p = OraclePfile::default();
    // (parameter, value, whether it was for the one SID)
    let mut set: Vec<(String, String, bool)> = Vec::new();
    // A list value may go on over lines that end in a comma.
    let mut continued = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let was_continued = std::mem::replace(&mut continued, line.ends_with(','));
        if was_continued && !line.contains('=') {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| {
            ParseError::at(PATH, n, format!("expected \"name = value\", found {raw:?}"))
        })?;
        let key = key.trim();
        let (scope, name) = match key.rsplit_once('.') {
            Some((s, k)) => (Some(s), k),
            None => (None, key),
        };
        let for_sid = match (scope, sid) {
            (None | Some("*"), _) => false,
            (Some(s), Some(want)) if s.eq_ignore_ascii_case(want) => true,
            // Another instance's line.
            _ => continue,
        };
        let value = value.trim().trim_matches(|c| c == '\'' || c == '"').trim();
        let name = name.to_ascii_lowercase();
        if let Some(e) = set.iter_mut().find(|e| e.0 == name) {
            if for_sid || !e.2 {
                *e = (name, value.to_owned(), for_sid);
            }
        } else {
            set.push((name, value.to_owned(), for_sid));
        }
    }
    for (name, value, _) in set {
        let size = |v: &str| {
            size_of(v).ok_or_else(|| ParseError::file(PATH, format!("{name}: {v:?} is not a size")))
        };
        match name.as_str() {
            "sga_max_size" => p.sga_max_size = Some(size(&value)?),
            "sga_target" => p.sga_target = Some(size(&value)?),
            "memory_target" => p.memory_target = Some(size(&value)?),
            "memory_max_target" => p.memory_max_target = Some(size(&value)?),
            "pga_aggregate_target" => p.pga_aggregate_target = Some(size(&value)?),
            "use_large_pages" => p.use_large_pages = Some(value.to_ascii_uppercase()),
            "_enable_numa_support" => {
                p.enable_numa_support = Some(value.eq_ignore_ascii_case("true"))
            }
            _ => {}
        }
    }
    Ok(p)
}

/// `4G`, `3072M`, `4294967296`: bytes.
fn size_of(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, shift) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 10),
        (i, 'M' | 'm') => (&v[..i], 20),
        (i, 'G' | 'g') => (&v[..i], 30),
        (i, 'T' | 't') => (&v[..i], 40),
        _ => (v, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sizes_switches_and_the_sid_overrides() {
        let text = "\
# orcl's pfile
*.sga_max_size=4G
*.sga_target = 3072M   # ASMM
orcl.sga_target=4294967296
other.sga_target=1G
*.use_large_pages='only'
*._enable_NUMA_support=TRUE
*.pga_aggregate_target=1024m
*.control_files='/u01/control01.ctl',
  '/u02/control02.ctl'
";
        let all = parse(text, None).unwrap();
        assert_eq!(all.sga_max_size, Some(4 << 30));
        assert_eq!(all.sga_target, Some(3 << 30));
        assert_eq!(all.use_large_pages.as_deref(), Some("ONLY"));
        assert_eq!(all.enable_numa_support, Some(true));
        assert_eq!(all.pga_aggregate_target, Some(1 << 30));
        assert_eq!(all.memory_target, None);
        let orcl = parse(text, Some("ORCL")).unwrap();
        assert_eq!(orcl.sga_target, Some(4 << 30));
        assert!(parse("*.sga_target=lots\n", None)
            .unwrap_err()
            .to_string()
            .contains("sga_target"));
        assert!(parse("garbage\n", None).is_err());
        assert_eq!(size_of("18446744073709551615T"), None);
    }
}
