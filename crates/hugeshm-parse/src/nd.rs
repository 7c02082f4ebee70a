//! The one-value attribute files of persistent memory in sysfs:
//! `/sys/bus/nd/devices/{regionX,namespaceX.Y,pfnX.Y,daxX.Y}/{mode,size,align,numa_node,...}`
//! and `/sys/bus/dax/devices/daxX.Y/{size,align,target_node}`.

use crate::error::ParseError;
use serde::{Deserialize, Serialize};

/// What a namespace is used as (`ndctl create-namespace --mode`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum NamespaceMode {
    /// A block device whose pages DAX filesystems map (sysfs says `fsdax` or `memory`).
    Fsdax,
    /// A character device `/dev/daxX.Y` mapped whole (`devdax` or `dax`).
    Devdax,
    /// A block device with atomic sector updates (BTT), no DAX.
    Sector,
    /// A plain block device, no DAX (`raw`).
    Raw,
    /// Another word the kernel printed.
    Other(String),
}

impl NamespaceMode {
    /// The ndctl word for it (`fsdax`, `devdax`, `sector`, `raw`).
    pub fn as_str(&self) -> &str {
        match self {
            NamespaceMode::Fsdax => "fsdax",
            NamespaceMode::Devdax => "devdax",
            NamespaceMode::Sector => "sector",
            NamespaceMode::Raw => "raw",
            NamespaceMode::Other(s) => s,
        }
    }
}

fn one_line<'a>(path: &str, text: &'a str) -> Result<&'a str, ParseError> {
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(ParseError::file(path, "empty file, expected one value"));
    }
    Ok(line)
}

/// Parses a namespace's (or pfn/dax device's) `mode`.
pub fn parse_mode(path: &str, text: &str) -> Result<NamespaceMode, ParseError> {
    let w = one_line(path, text)?;
    if w.contains(char::is_whitespace) {
        return Err(ParseError::at(
            path,
            1,
            format!("expected one word, found {w:?}"),
        ));
    }
    Ok(match w {
        "fsdax" | "memory" | "pmem" => NamespaceMode::Fsdax,
        "devdax" | "dax" => NamespaceMode::Devdax,
        "sector" | "safe" => NamespaceMode::Sector,
        "raw" => NamespaceMode::Raw,
        other => NamespaceMode::Other(other.to_string()),
    })
}

/// Parses a size or alignment: decimal (`251658240`) or hex (`0x1000000`).
pub fn parse_number(path: &str, text: &str) -> Result<u64, ParseError> {
    let w = one_line(path, text)?;
    let r = match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => w.parse::<u64>(),
    };
    r.map_err(|_| ParseError::at(path, 1, format!("expected a number, found {w:?}")))
}

/// Parses `numa_node` or `target_node`: a node id, or `-1` for none.
pub fn parse_node(path: &str, text: &str) -> Result<Option<u32>, ParseError> {
    let w = one_line(path, text)?;
    if w == "-1" {
        return Ok(None);
    }
    w.parse::<u32>()
        .map(Some)
        .map_err(|_| ParseError::at(path, 1, format!("expected a node id or -1, found {w:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        // The 6.1 guest's namespace0.0 after `ndctl create-namespace --mode=fsdax`.
        assert_eq!(parse_mode("m", "memory\n").unwrap(), NamespaceMode::Fsdax);
        assert_eq!(parse_mode("m", "pmem\n").unwrap(), NamespaceMode::Fsdax);
        assert_eq!(parse_mode("m", "fsdax\n").unwrap(), NamespaceMode::Fsdax);
        assert_eq!(parse_mode("m", "dax\n").unwrap(), NamespaceMode::Devdax);
        assert_eq!(parse_mode("m", "raw\n").unwrap(), NamespaceMode::Raw);
        assert_eq!(parse_mode("m", "safe").unwrap(), NamespaceMode::Sector);
        assert_eq!(
            parse_mode("m", "weird").unwrap(),
            NamespaceMode::Other("weird".into())
        );
        let e = parse_mode("/sys/x/mode", "\n").unwrap_err();
        assert!(e.to_string().contains("/sys/x/mode"), "{e}");
        assert!(parse_mode("m", "two words").is_err());
    }

    #[test]
    fn numbers_and_nodes() {
        assert_eq!(parse_number("s", "251658240\n").unwrap(), 251_658_240);
        assert_eq!(parse_number("a", "0x1000000\n").unwrap(), 16 << 20);
        let e = parse_number("/sys/a/size", "12k").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(e.to_string().contains("\"12k\""), "{e}");
        assert!(parse_number("s", "0xZZ").is_err());
        assert!(parse_number("s", "99999999999999999999999").is_err());
        assert!(parse_number("s", "").is_err());
        assert_eq!(parse_node("n", "1\n").unwrap(), Some(1));
        assert_eq!(parse_node("n", "-1\n").unwrap(), None);
        assert!(parse_node("n", "-2").is_err());
        assert!(parse_node("n", "x").is_err());
    }
}
