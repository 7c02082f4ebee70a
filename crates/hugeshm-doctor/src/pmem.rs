//! The persistent memory section of `status`: NVDIMM namespaces, DAX mounts,
//! device-dax devices, memory-only NUMA nodes (CXL-like) and memory tiers.

use crate::finding::{Finding, Severity};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::{DaxDevice, HostSnapshot, MemoryTier, Namespace, PmemSnapshot, Probe};
use serde::{Deserialize, Serialize};

const M2: u64 = 2 << 20;

/// A mount with a `dax` option (ext4, xfs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DaxMount {
    /// Mount point.
    pub target: String,
    /// Device (`/dev/pmem0`).
    pub source: String,
    /// File system type.
    pub fstype: String,
    /// `always` (also a bare `dax`), `inode` (per-file flag) or `never`.
    pub dax: String,
    /// ext4 `stripe=` in blocks: 512 blocks of 4 KiB keep extents 2 MiB aligned.
    pub stripe_blocks: Option<u64>,
}

/// A NUMA node with memory and no CPU (CXL memory, a kmem-onlined device-dax).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryOnlyNode {
    /// Node id.
    pub node: u32,
    /// Its memory.
    pub mem_total_bytes: Option<u64>,
    /// Its free memory.
    pub mem_free_bytes: Option<u64>,
    /// The memory tier it is in, where the kernel has tiers.
    pub tier: Option<u32>,
}

/// A DAX file or device that processes map (the `dax` segments of
/// `segments`, in short).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PmemMapped {
    /// The file or device.
    pub path: String,
    /// Bytes mapped.
    pub size_bytes: u64,
    /// 2 MiB when every touched window is on PMD entries, 4 KiB when some
    /// are on PTEs, `None` when unknown or untouched.
    pub page_size_bytes: Option<u64>,
    /// The processes mapping it.
    pub pids: Vec<u32>,
}

/// Persistent memory and memory tiers, as `status` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PmemReport {
    /// NVDIMM namespaces in use.
    pub namespaces: Vec<Namespace>,
    /// Mounts with a `dax` option.
    pub dax_mounts: Vec<DaxMount>,
    /// Device-dax devices.
    pub dax_devices: Vec<DaxDevice>,
    /// Nodes with memory and no CPU.
    pub memory_only_nodes: Vec<MemoryOnlyNode>,
    /// Memory tiers, fastest first.
    pub tiers: Vec<MemoryTier>,
    /// DAX files and devices mapped by processes.
    #[serde(default)]
    pub mapped: Vec<PmemMapped>,
}

impl PmemReport {
    /// Whether there is nothing to show.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.dax_mounts.is_empty()
            && self.dax_devices.is_empty()
            && self.memory_only_nodes.is_empty()
            && self.tiers.len() <= 1
    }
}

/// Reads the section; `None` when the host has none of it (one tier of
/// ordinary nodes counts as none). Findings and unreadable files come back too.
pub fn build(
    probe: &Probe,
    host: &HostSnapshot,
) -> (Option<PmemReport>, Vec<Finding>, PmemSnapshot) {
    let mut snap = probe.pmem();
    let report = build_from(host, &mut snap);
    let findings = findings(&report);
    ((!report.is_empty()).then_some(report), findings, snap)
}

/// The section from what was read (pure).
pub fn build_from(host: &HostSnapshot, snap: &mut PmemSnapshot) -> PmemReport {
    let dax_mounts = host
        .mounts
        .iter()
        .filter_map(|m| {
            let dax = m.option("dax")?;
            Some(DaxMount {
                target: m.target.clone(),
                source: m.source.clone(),
                fstype: m.fstype.clone(),
                dax: if dax.is_empty() { "always" } else { dax }.to_string(),
                stripe_blocks: m.option("stripe").and_then(|s| s.parse().ok()),
            })
        })
        .collect();
    let tiers = std::mem::take(&mut snap.tiers);
    let memory_only_nodes = host
        .nodes
        .iter()
        .filter(|n| {
            n.cpus.is_empty()
                && n.meminfo
                    .as_ref()
                    .and_then(|m| m.mem_total_bytes)
                    .is_some_and(|b| b > 0)
        })
        .map(|n| MemoryOnlyNode {
            node: n.node,
            mem_total_bytes: n.meminfo.as_ref().and_then(|m| m.mem_total_bytes),
            mem_free_bytes: n.meminfo.as_ref().and_then(|m| m.mem_free_bytes),
            tier: tiers
                .iter()
                .find(|t| t.nodes.contains(&n.node))
                .map(|t| t.tier),
        })
        .collect();
    PmemReport {
        namespaces: std::mem::take(&mut snap.namespaces),
        dax_mounts,
        dax_devices: std::mem::take(&mut snap.dax_devices),
        memory_only_nodes,
        tiers,
        mapped: Vec::new(),
    }
}

/// `pmem-align-small`: a DAX namespace aligned below 2 MiB serves every fault
/// with 4 KiB pages.
pub fn findings(r: &PmemReport) -> Vec<Finding> {
    r.namespaces
        .iter()
        .filter(|n| n.align_bytes.is_some_and(|a| a < M2))
        .map(|n| {
            Finding::new(
                Severity::Warning,
                "pmem-align-small",
                format!(
                    "{} ({}) is aligned to {}: its DAX mappings can only use 4 KiB page table entries, never 2 MiB (PMD) ones",
                    n.name,
                    n.mode.as_str(),
                    format_bytes(n.align_bytes.unwrap_or(0))
                ),
                Some(format!(
                    "recreate it (its data is lost): ndctl create-namespace -f -e {} --mode={} --align=2M",
                    n.name,
                    n.mode.as_str()
                )),
            )
        })
        .collect()
}
