//! The `Persistent memory and tiers` section of `hugeshm status`.

use crate::output::{Out, Table};
use hugeshm_doctor::pmem::PmemReport;
use hugeshm_parse::size::{format_bytes, page_size_short};

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// Prints the section (nothing when the host has none of it).
pub fn print(r: Option<&PmemReport>, out: &mut Out) -> anyhow::Result<()> {
    let Some(r) = r else { return Ok(()) };
    out.line(out.bold("Persistent memory and tiers"))?;
    if !r.namespaces.is_empty() {
        let mut t = Table::new(&["namespace", "mode", ">size", "align", "node", "device"]);
        for n in &r.namespaces {
            t.row(vec![
                n.name.clone(),
                n.mode.as_str().to_string(),
                n.size_bytes.map(format_bytes).unwrap_or_else(|| "-".into()),
                n.align_bytes
                    .map(page_size_short)
                    .unwrap_or_else(|| "-".into()),
                opt(n.numa_node),
                n.blockdev
                    .as_ref()
                    .or(n.dax_device.as_ref())
                    .map(|d| format!("/dev/{d}"))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        t.render(out, "  ")?;
    }
    for m in &r.dax_mounts {
        let stripe = m
            .stripe_blocks
            .map(|s| format!(", stripe={s}"))
            .unwrap_or_default();
        out.line(format!(
            "  dax mount  {} ({} on {}, dax={}{stripe})",
            m.target, m.fstype, m.source, m.dax
        ))?;
    }
    for d in &r.dax_devices {
        let what = if d.is_system_ram() {
            "online as system RAM (kmem)".to_string()
        } else {
            format!("character device /dev/{}", d.name)
        };
        out.line(format!(
            "  device-dax {} {}, align {}, node {}: {what}",
            d.name,
            d.size_bytes.map(format_bytes).unwrap_or_else(|| "-".into()),
            d.align_bytes
                .map(page_size_short)
                .unwrap_or_else(|| "-".into()),
            opt(d.target_node),
        ))?;
    }
    for m in &r.mapped {
        let how = match m.page_size_bytes {
            Some(p) if p > 4096 => format!("on {} (PMD) entries", page_size_short(p)),
            Some(_) => "on 4 KiB entries (see hugeshm segments)".to_string(),
            None => "page size unknown".to_string(),
        };
        let pids: Vec<String> = m.pids.iter().map(u32::to_string).collect();
        out.line(format!(
            "  mapped     {} ({}) {how}, by pid {}",
            m.path,
            format_bytes(m.size_bytes),
            pids.join(",")
        ))?;
    }
    for n in &r.memory_only_nodes {
        out.line(format!(
            "  node {}     memory only (no CPU): {} ({} free){}",
            n.node,
            n.mem_total_bytes
                .map(format_bytes)
                .unwrap_or_else(|| "-".into()),
            n.mem_free_bytes
                .map(format_bytes)
                .unwrap_or_else(|| "-".into()),
            n.tier
                .map(|t| format!(", memory tier {t}"))
                .unwrap_or_default()
        ))?;
    }
    if r.tiers.len() > 1 || !r.memory_only_nodes.is_empty() {
        let tiers: Vec<String> = r
            .tiers
            .iter()
            .map(|t| {
                let nodes: Vec<String> = t.nodes.iter().map(|n| n.to_string()).collect();
                format!("tier {}: nodes {}", t.tier, nodes.join(","))
            })
            .collect();
        if !tiers.is_empty() {
            out.line(format!(
                "  tiers      {} (lower is faster)",
                tiers.join("; ")
            ))?;
        }
    }
    out.line("")
}
