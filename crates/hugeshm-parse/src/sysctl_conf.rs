//! `sysctl.conf` / `sysctl.d/*.conf` and the `w` lines of `tmpfiles.d/*.conf`:
//! the settings that take effect at the next boot.

use crate::error::ParseError;
use serde::{Deserialize, Serialize};

/// One `key = value` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Setting {
    /// The key with dots (`vm.nr_hugepages`; `vm/nr_hugepages` is normalised).
    pub key: String,
    /// The value as written.
    pub value: String,
    /// 1-based line.
    pub line: usize,
}

/// Parses a sysctl configuration file. Comments (`#`, `;`) and blank lines are
/// skipped; a leading `-` (ignore errors) is dropped.
pub fn parse(path: &str, text: &str) -> Result<Vec<Setting>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        let (k, v) = l.split_once('=').ok_or_else(|| {
            ParseError::at(
                path,
                i + 1,
                format!("expected \"key = value\", found {l:?}"),
            )
        })?;
        let key = k.trim().trim_start_matches('-').replace('/', ".");
        if key.is_empty() {
            return Err(ParseError::at(path, i + 1, "empty key"));
        }
        out.push(Setting {
            key,
            value: v.trim().to_string(),
            line: i + 1,
        });
    }
    Ok(out)
}

/// One `w` (write) line of a tmpfiles.d file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TmpfilesWrite {
    /// The file written (e.g. a sysfs `nr_hugepages`).
    pub path: String,
    /// What is written.
    pub value: String,
    /// 1-based line.
    pub line: usize,
}

/// The `w`/`w+` lines of a tmpfiles.d file (other types are ignored).
pub fn parse_tmpfiles_writes(text: &str) -> Vec<TmpfilesWrite> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let f: Vec<&str> = raw.split_whitespace().collect();
        if f.len() >= 7 && (f[0] == "w" || f[0] == "w+") {
            out.push(TmpfilesWrite {
                path: f[1].to_string(),
                value: f[6..].join(" "),
                line: i + 1,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl() {
        let s = parse(
            "f",
            "# pools\nvm.nr_hugepages = 512\n; x\n-kernel/shmmax=1024\n\n",
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].key, "vm.nr_hugepages");
        assert_eq!(s[0].value, "512");
        assert_eq!(s[0].line, 2);
        assert_eq!(s[1].key, "kernel.shmmax");
        let e = parse("/etc/sysctl.d/x.conf", "vm.nr_hugepages 512\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(parse("f", " = 3").is_err());
    }

    #[test]
    fn tmpfiles() {
        let w = parse_tmpfiles_writes("# x\nw /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages - - - - 512\nd /run/x 0755 root root -\nw+ /a - - - - b c\nw short\n");
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].value, "512");
        assert_eq!(w[1].value, "b c");
    }
}
