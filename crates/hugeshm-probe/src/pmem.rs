//! Persistent memory and memory tiers: NVDIMM namespaces (`/sys/bus/nd/devices`),
//! device-dax devices (`/sys/bus/dax/devices`) and memory tiers
//! (`/sys/devices/virtual/memory_tiering`), all under the `/sys` root.

use crate::read::{read_parse_at, read_text, Problem, ReadError};
use crate::Probe;
use hugeshm_parse::nd::{self, NamespaceMode};
use hugeshm_parse::node;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// An NVDIMM namespace in use (size above zero).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Namespace {
    /// `namespaceX.Y`.
    pub name: String,
    /// Its region (`regionX`).
    pub region: Option<String>,
    /// fsdax, devdax, sector or raw (from the device that claims it, else its own `mode`).
    pub mode: NamespaceMode,
    /// Usable bytes (of the claiming pfn/dax device where there is one).
    pub size_bytes: Option<u64>,
    /// The page alignment of the claiming device (`ndctl --align`): 2 MiB lets PMD faults happen.
    pub align_bytes: Option<u64>,
    /// The NUMA node the memory is attached to.
    pub numa_node: Option<u32>,
    /// The node its memory becomes when onlined as system RAM.
    pub target_node: Option<u32>,
    /// The device that claims it (`pfnX.Y`, `daxX.Y`, `bttX.Y`).
    pub holder: Option<String>,
    /// Its block device (`pmem0`), fsdax, sector and raw.
    pub blockdev: Option<String>,
    /// Its device-dax device (`dax0.0`), devdax.
    pub dax_device: Option<String>,
}

/// A device-dax device (`/dev/daxX.Y`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DaxDevice {
    /// `daxX.Y`.
    pub name: String,
    /// Bytes.
    pub size_bytes: Option<u64>,
    /// Fault granularity.
    pub align_bytes: Option<u64>,
    /// The node its memory is or would be when online as system RAM.
    pub target_node: Option<u32>,
    /// The driver bound (`device_dax`: a character device; `kmem`: online as system RAM).
    pub driver: Option<String>,
}

impl DaxDevice {
    /// Whether it is online as system RAM (bound to `kmem`).
    pub fn is_system_ram(&self) -> bool {
        self.driver.as_deref() == Some("kmem")
    }
}

/// A memory tier (`memory_tierN`): lower numbers are faster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryTier {
    /// N of `memory_tierN`.
    pub tier: u32,
    /// Its nodes.
    pub nodes: Vec<u32>,
}

/// Everything about persistent memory and tiers on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PmemSnapshot {
    /// Namespaces with a size, by name.
    pub namespaces: Vec<Namespace>,
    /// Device-dax devices, by name.
    pub dax_devices: Vec<DaxDevice>,
    /// Memory tiers, fastest first (empty before Linux 6.1 or without tiering).
    pub tiers: Vec<MemoryTier>,
    /// Files that could not be read or parsed.
    pub problems: Vec<Problem>,
}

/// Sorted entry names of a directory that start with `prefix`; empty when absent.
fn entries(dir: &Path, prefix: &str) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort_by_key(|n| natural_key(n));
    v
}

/// `namespace0.10` after `namespace0.2`.
fn natural_key(n: &str) -> (String, Vec<u64>) {
    let head: String = n.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let nums = n[head.len()..]
        .split('.')
        .map(|p| p.parse().unwrap_or(u64::MAX))
        .collect();
    (head, nums)
}

struct Keep<'a>(&'a mut Vec<Problem>);

impl Keep<'_> {
    fn get<T>(&mut self, r: Result<T, ReadError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                self.0.push(e.to_problem());
                None
            }
        }
    }
}

impl Probe {
    /// Reads NVDIMM namespaces, device-dax devices and memory tiers.
    pub fn pmem(&self) -> PmemSnapshot {
        let mut snap = PmemSnapshot::default();
        let mut problems = Vec::new();
        let mut k = Keep(&mut problems);

        let nd_dir = self.sys_path("bus/nd/devices");
        for name in entries(&nd_dir, "namespace") {
            let d = nd_dir.join(&name);
            let own_size = k.get(read_parse_at(&d.join("size"), nd::parse_number));
            if own_size.unwrap_or(0) == 0 {
                continue; // an idle seed namespace
            }
            let holder = k
                .get(read_text(&d.join("holder")))
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty());
            let hd = holder.as_ref().map(|h| nd_dir.join(h));
            let mode = match (&holder, &hd) {
                (Some(h), _) if h.starts_with("pfn") => Some(NamespaceMode::Fsdax),
                (Some(h), _) if h.starts_with("dax") => Some(NamespaceMode::Devdax),
                (Some(h), _) if h.starts_with("btt") => Some(NamespaceMode::Sector),
                _ => k.get(read_parse_at(&d.join("mode"), nd::parse_mode)),
            };
            let Some(mode) = mode else { continue };
            let (size, align) = match &hd {
                Some(hd) => (
                    k.get(read_parse_at(&hd.join("size"), nd::parse_number))
                        .or(own_size),
                    k.get(read_parse_at(&hd.join("align"), nd::parse_number)),
                ),
                None => (own_size, None),
            };
            let blockdev = entries(&d.join("block"), "")
                .into_iter()
                .chain(hd.iter().flat_map(|hd| entries(&hd.join("block"), "")))
                .next();
            let dax_device = hd
                .iter()
                .flat_map(|hd| entries(hd, "dax"))
                .find(|n| n.contains('.'));
            let region = std::fs::read_link(&d)
                .ok()
                .and_then(|l| {
                    l.parent()
                        .and_then(|p| p.file_name())
                        .map(|f| f.to_string_lossy().into_owned())
                })
                .filter(|r| r.starts_with("region"));
            snap.namespaces.push(Namespace {
                name,
                region,
                mode,
                size_bytes: size,
                align_bytes: align,
                numa_node: k
                    .get(read_parse_at(&d.join("numa_node"), nd::parse_node))
                    .flatten(),
                target_node: k
                    .get(read_parse_at(&d.join("target_node"), nd::parse_node))
                    .flatten(),
                holder,
                blockdev,
                dax_device,
            });
        }

        let dax_dir = self.sys_path("bus/dax/devices");
        for name in entries(&dax_dir, "dax") {
            let d = dax_dir.join(&name);
            let driver = std::fs::read_link(d.join("driver"))
                .ok()
                .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
            snap.dax_devices.push(DaxDevice {
                size_bytes: k.get(read_parse_at(&d.join("size"), nd::parse_number)),
                align_bytes: k.get(read_parse_at(&d.join("align"), nd::parse_number)),
                target_node: k
                    .get(read_parse_at(&d.join("target_node"), nd::parse_node))
                    .flatten(),
                name,
                driver,
            });
        }

        let tier_dir = self.sys_path("devices/virtual/memory_tiering");
        for name in entries(&tier_dir, "memory_tier") {
            let Ok(tier) = name["memory_tier".len()..].parse::<u32>() else {
                continue;
            };
            if let Some(nodes) = k.get(read_parse_at(
                &tier_dir.join(&name).join("nodelist"),
                node::parse_list,
            )) {
                snap.tiers.push(MemoryTier { tier, nodes });
            }
        }
        snap.tiers.sort_by_key(|t| t.tier);
        snap.problems = problems;
        snap
    }
}
