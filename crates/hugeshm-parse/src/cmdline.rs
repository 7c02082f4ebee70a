//! `/proc/cmdline`: the huge page settings made at boot.
//!
//! `hugepages=` applies to the page size named by the `hugepagesz=` before it,
//! or to the default size when none precedes it. Since Linux 5.16 the count
//! may be given per node: `hugepages=0:512,1:512`.

use crate::error::ParseError;
use crate::size::parse_size;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const PATH: &str = "/proc/cmdline";

/// One `hugepages=` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BootPool {
    /// The page size from the preceding `hugepagesz=`; `None` = the default size.
    pub page_size_bytes: Option<u64>,
    /// Pages asked for on the whole host (the sum of the nodes for the per-node form).
    pub pages: u64,
    /// The per-node form's counts, node → pages (empty for the plain form).
    pub per_node: BTreeMap<u32, u64>,
}

/// The huge page settings on the kernel command line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KernelCmdline {
    /// Every `hugepages=` request, in order.
    pub pools: Vec<BootPool>,
    /// Every `hugepagesz=` value.
    pub hugepagesz: Vec<u64>,
    /// `default_hugepagesz=`.
    pub default_hugepagesz: Option<u64>,
    /// `hugetlb_cma=` as written (a size or a per-node list).
    pub hugetlb_cma: Option<String>,
    /// `transparent_hugepage=` (always, madvise, never).
    pub transparent_hugepage: Option<String>,
    /// `transparent_hugepage_shmem=` (6.14+).
    pub transparent_hugepage_shmem: Option<String>,
}

impl KernelCmdline {
    /// Pages asked for at boot of one size; `default_size` resolves `hugepages=`
    /// given without a `hugepagesz=` before it. Later requests for the same size win.
    pub fn boot_pages(&self, page_size: u64, default_size: u64) -> Option<&BootPool> {
        self.pools
            .iter()
            .rev()
            .find(|p| p.page_size_bytes.unwrap_or(default_size) == page_size)
    }
}

/// Splits a command line into words, honouring double quotes.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// Parses `/proc/cmdline`. Words after `--` belong to init and are ignored.
pub fn parse(text: &str) -> Result<KernelCmdline, ParseError> {
    let mut c = KernelCmdline::default();
    let mut current_size: Option<u64> = None;
    for w in words(text) {
        if w == "--" {
            break;
        }
        let Some((key, value)) = w.split_once('=') else {
            continue;
        };
        let bad = |what: &str| ParseError::at(PATH, 1, format!("{key}={value}: {what}"));
        match key {
            "hugepagesz" => {
                let s = parse_size(value).ok_or_else(|| bad("expected a size such as 2M or 1G"))?;
                c.hugepagesz.push(s);
                current_size = Some(s);
            }
            "default_hugepagesz" => {
                c.default_hugepagesz =
                    Some(parse_size(value).ok_or_else(|| bad("expected a size such as 2M or 1G"))?);
            }
            "hugepages" => {
                let mut per_node = BTreeMap::new();
                let pages = if value.contains(':') {
                    let mut sum: u64 = 0;
                    for part in value.split(',') {
                        let (n, p) = part
                            .split_once(':')
                            .ok_or_else(|| bad("expected node:pages"))?;
                        let n: u32 = n.parse().map_err(|_| bad("bad node number"))?;
                        let p: u64 = p.parse().map_err(|_| bad("bad page count"))?;
                        per_node.insert(n, p);
                        sum = sum
                            .checked_add(p)
                            .ok_or_else(|| bad("page count overflows"))?;
                    }
                    sum
                } else {
                    value.parse().map_err(|_| bad("expected a page count"))?
                };
                c.pools.push(BootPool {
                    page_size_bytes: current_size,
                    pages,
                    per_node,
                });
            }
            "hugetlb_cma" => c.hugetlb_cma = Some(value.to_string()),
            "transparent_hugepage" => c.transparent_hugepage = Some(value.to_string()),
            "transparent_hugepage_shmem" => c.transparent_hugepage_shmem = Some(value.to_string()),
            _ => {}
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    const G: u64 = 1 << 30;
    const M2: u64 = 2 << 20;

    #[test]
    fn sizes_and_counts() {
        let c = parse("BOOT_IMAGE=/vmlinuz root=UUID=x ro default_hugepagesz=1G hugepagesz=1G hugepages=4 hugepagesz=2M hugepages=0:512,1:256 transparent_hugepage=never quiet -- hugepages=99\n").unwrap();
        assert_eq!(c.default_hugepagesz, Some(G));
        assert_eq!(c.hugepagesz, vec![G, M2]);
        assert_eq!(c.pools.len(), 2);
        assert_eq!(c.pools[0].page_size_bytes, Some(G));
        assert_eq!(c.pools[0].pages, 4);
        assert_eq!(c.pools[1].pages, 768);
        assert_eq!(c.pools[1].per_node.get(&1), Some(&256));
        assert_eq!(c.transparent_hugepage.as_deref(), Some("never"));
        assert_eq!(c.boot_pages(G, M2).unwrap().pages, 4);
        assert!(c.boot_pages(4096, M2).is_none());
    }

    #[test]
    fn default_size_and_quotes() {
        let c = parse("hugepages=100 init=\"/bin/sh -c x\" hugetlb_cma=0:1G,1:1G").unwrap();
        assert_eq!(c.pools[0].page_size_bytes, None);
        assert_eq!(c.boot_pages(M2, M2).unwrap().pages, 100);
        assert_eq!(c.hugetlb_cma.as_deref(), Some("0:1G,1:1G"));
        assert_eq!(parse("").unwrap(), KernelCmdline::default());
    }

    #[test]
    fn malformed() {
        assert!(parse("hugepages=lots").is_err());
        assert!(parse("hugepagesz=huge").is_err());
        assert!(parse("hugepages=0:1,x").is_err());
        assert!(parse("hugepages=0:18446744073709551615,1:1").is_err());
        let e = parse("hugepages=-1").unwrap_err();
        assert!(e.to_string().contains("/proc/cmdline"));
    }
}
