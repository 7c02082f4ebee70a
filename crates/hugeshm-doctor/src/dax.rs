//! DAX mappings for `segments`: files on `-o dax` mounts and device-dax
//! (`/dev/daxX.Y`) mapped by processes, with the fault size the kernel
//! really used, judged from `/proc/PID/pagemap` (see
//! [`hugeshm_parse::pagemap`] for why that and not `smaps`), and the
//! `dax-4k-faults` finding.
//!
//! Imports nothing of `segments` (which imports this).

use crate::finding::{Finding, Severity};
use hugeshm_fix::{DaxCause, Fix};
use hugeshm_parse::mounts::Mount;
use hugeshm_parse::size::format_bytes;
pub use hugeshm_probe::{FileDax, FileDaxReader};
use hugeshm_probe::{PidFiles, PmemSnapshot};
use serde::{Deserialize, Serialize};

const M2: u64 = 2 << 20;
const PAGE: u64 = 4096;

/// How a DAX mapping's touched memory is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DaxFaults {
    /// Every touched 2 MiB window by one PMD entry.
    Pmd,
    /// Some (or all) touched windows by 4 KiB PTEs.
    Pte,
    /// Nothing touched yet.
    Untouched,
    /// Not DAX at all: a file on a `dax=inode` mount without the flag in
    /// force, in the page cache (see [`FileDax`]).
    PageCache,
    /// The pagemap could not be read.
    Unknown,
}

/// One process's mapping of a DAX file or device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DaxMapping {
    /// The process.
    pub pid: u32,
    /// Start address.
    pub start: u64,
    /// Bytes mapped.
    pub size_bytes: u64,
    /// File offset of the start.
    pub offset: u64,
    /// 2 MiB-aligned windows wholly inside the mapping.
    pub windows: u64,
    /// Windows whose pagemap was read (all of them up to 1 GiB).
    pub windows_read: u64,
    /// Of those: mapped by one PMD entry each.
    pub pmd_windows: u64,
    /// Of those: mapped by 4 KiB PTEs.
    pub pte_windows: u64,
    /// Bytes present (extrapolated from the windows read when sampled).
    pub resident_bytes: Option<u64>,
    /// Present pages with `PM_FILE` among those read: all of them on PMD
    /// entries, none on PTEs up to Linux 6.14 (see [`hugeshm_parse::pagemap`]).
    pub file_pages: u64,
    /// Whether page frame numbers were visible (root), so that frame
    /// alignment could be checked as well as `PM_FILE`.
    pub frames_visible: bool,
    /// The verdict.
    pub faults: DaxFaults,
    /// Why it is on 4 KiB faults (empty when it is not).
    pub causes: Vec<DaxCause>,
    /// Page-table bytes its 4 KiB entries cost this process (one 4 KiB
    /// page-table page per 2 MiB window on PTEs).
    pub pte_table_bytes: u64,
    /// Why the pagemap could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a `dax` segment sits on, and how each sampled process maps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DaxInfo {
    /// The DAX mount the file is on (`None` for device-dax).
    pub mount: Option<String>,
    /// The mount's file system.
    pub fstype: Option<String>,
    /// The mount's `dax=` (`always`, `inode`).
    pub dax: Option<String>,
    /// The block device (`pmem0`) or device-dax (`dax0.0`).
    pub device: Option<String>,
    /// Its NVDIMM namespace.
    pub namespace: Option<String>,
    /// The alignment of the namespace (fsdax) or device-dax.
    pub align_bytes: Option<u64>,
    /// The NUMA node the memory is on.
    pub numa_node: Option<u32>,
    /// On a `dax=inode` mount: the file's own DAX state (`None` on other
    /// mounts and device-dax, where every file is DAX).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileDax>,
    /// The sampled processes' mappings.
    pub mappings: Vec<DaxMapping>,
}

/// The DAX state of a file on a `dax=inode` mount mapped by `pid` at
/// `start..end`, read by the probe's [`FileDaxReader`] on the live host;
/// unknown without one, and on fixture trees.
pub fn file_dax(
    probe: &hugeshm_probe::Probe,
    pid: u32,
    start: u64,
    end: u64,
    path: &str,
) -> FileDax {
    let Some(reader) = probe.file_dax_reader().filter(|_| probe.roots.is_live()) else {
        return FileDax::default();
    };
    let by_map = probe.proc_path(&format!("{pid}/map_files/{start:x}-{end:x}"));
    let by_root = probe.proc_path(&format!("{pid}/root{path}"));
    reader
        .read(&by_map)
        .or_else(|| reader.read(&by_root))
        .unwrap_or_default()
}

/// A file on a `dax=inode` mount that the kernel does not serve by DAX:
/// its mappings are marked [`DaxFaults::PageCache`] (the pagemap verdict
/// does not apply: page-cache pages are 4 KiB pages of DRAM).
pub fn mark_page_cache(info: &mut DaxInfo) {
    if info.file.and_then(|f| f.dax) != Some(false) {
        return;
    }
    for m in &mut info.mappings {
        m.faults = DaxFaults::PageCache;
        m.causes.clear();
        m.pte_table_bytes = 0;
    }
}

/// `/dev/daxX.Y`: the device name.
pub fn device_dax_name(path: &str) -> Option<&str> {
    let name = path.strip_prefix("/dev/")?;
    let rest = name.strip_prefix("dax")?;
    let (a, b) = rest.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    (digits(a) && digits(b)).then_some(name)
}

/// A mount that maps its files directly (`dax`, `dax=always`, `dax=inode`;
/// not `dax=never`).
pub fn is_dax_mount(m: &Mount) -> bool {
    matches!(m.option("dax"), Some(d) if d != "never")
}

/// Where a DAX path's memory comes from: its mount (longest match among
/// the DAX mounts), block device, namespace, alignment and node.
pub fn info_for(path: &str, mounts: &[&Mount], pmem: &PmemSnapshot) -> DaxInfo {
    if let Some(dev) = device_dax_name(path) {
        let d = pmem.dax_devices.iter().find(|d| d.name == dev);
        let ns = pmem
            .namespaces
            .iter()
            .find(|n| n.dax_device.as_deref() == Some(dev));
        return DaxInfo {
            device: Some(dev.to_string()),
            namespace: ns.map(|n| n.name.clone()),
            align_bytes: d
                .and_then(|d| d.align_bytes)
                .or(ns.and_then(|n| n.align_bytes)),
            numa_node: ns
                .and_then(|n| n.numa_node)
                .or(d.and_then(|d| d.target_node)),
            ..DaxInfo::default()
        };
    }
    let m = mounts
        .iter()
        .filter(|m| {
            m.target == "/"
                || path
                    .strip_prefix(m.target.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
        .max_by_key(|m| m.target.len());
    let device = m.and_then(|m| m.source.strip_prefix("/dev/").map(str::to_string));
    // pmem0, or a partition of it (pmem0p1).
    let ns = device.as_deref().and_then(|d| {
        pmem.namespaces.iter().find(|n| {
            n.blockdev.as_deref().is_some_and(|b| {
                d == b
                    || d.strip_prefix(b)
                        .is_some_and(|p| p.starts_with('p') && p[1..].parse::<u32>().is_ok())
            })
        })
    });
    DaxInfo {
        mount: m.map(|m| m.target.clone()),
        fstype: m.map(|m| m.fstype.clone()),
        dax: m.and_then(|m| m.option("dax")).map(|d| {
            if d.is_empty() {
                "always".to_string()
            } else {
                d.to_string()
            }
        }),
        device,
        namespace: ns.map(|n| n.name.clone()),
        align_bytes: ns.and_then(|n| n.align_bytes),
        numa_node: ns.and_then(|n| n.numa_node),
        file: m.filter(|m| m.is_dax_inode()).map(|_| FileDax::default()),
        mappings: Vec::new(),
    }
}

/// Reads one mapping's pagemap and judges it. `align` is the namespace's
/// (or device-dax's) alignment, where known.
pub fn judge(
    files: &PidFiles,
    start: u64,
    end: u64,
    offset: u64,
    align: Option<u64>,
) -> DaxMapping {
    let size = end.saturating_sub(start);
    let first = start.div_ceil(M2) * M2;
    let windows = if end >= first { (end - first) / M2 } else { 0 };
    let mut m = DaxMapping {
        pid: files.pid,
        start,
        size_bytes: size,
        offset,
        windows,
        windows_read: 0,
        pmd_windows: 0,
        pte_windows: 0,
        resident_bytes: None,
        file_pages: 0,
        frames_visible: false,
        faults: DaxFaults::Unknown,
        causes: Vec::new(),
        pte_table_bytes: 0,
        error: None,
    };
    let (t, full) = match files.pagemap_tally(start, end, offset) {
        Ok(r) => r,
        Err(e) => {
            m.error = Some(e.to_string());
            return m;
        }
    };
    let present = t.present;
    m.windows_read = t.windows;
    m.pmd_windows = t.pmd;
    m.pte_windows = t.pte;
    m.file_pages = t.file_pages;
    m.frames_visible = t.frames_visible;
    let unaligned_frames = t.pte_off_grid > 0;
    // Pages read: all of them, or the sampled windows.
    let read_bytes = if full { size } else { t.windows * M2 };
    m.resident_bytes = Some(if full || read_bytes == 0 {
        present * PAGE
    } else {
        ((present as u128 * PAGE as u128 * size as u128) / read_bytes as u128) as u64
    });
    let scale = |n: u64| (n * m.windows).checked_div(m.windows_read).unwrap_or(0);
    m.faults = if m.pte_windows > 0 {
        DaxFaults::Pte
    } else if m.pmd_windows > 0 {
        DaxFaults::Pmd
    } else if present > 0 {
        // Touched, but not in a whole 2 MiB window: a PMD cannot map it.
        DaxFaults::Pte
    } else {
        DaxFaults::Untouched
    };
    m.pte_table_bytes = scale(m.pte_windows) * PAGE;
    if m.faults == DaxFaults::Pte {
        if m.pte_table_bytes == 0 {
            // Touched pages outside whole windows: one table page per 2 MiB touched.
            m.pte_table_bytes = (present * PAGE).div_ceil(M2) * PAGE;
        }
        m.causes = causes(
            start,
            offset,
            windows,
            align,
            unaligned_frames,
            m.frames_visible,
        );
    }
    m
}

/// Why a mapping got 4 KiB faults, from what can be known: the offset
/// and address (maps), the namespace alignment (sysfs), the frames
/// (pagemap, as root); the file's extents are what is left.
fn causes(
    start: u64,
    offset: u64,
    windows: u64,
    align: Option<u64>,
    unaligned_frames: bool,
    frames_visible: bool,
) -> Vec<DaxCause> {
    let mut c = Vec::new();
    if offset % M2 != 0 {
        c.push(DaxCause::FileOffset);
    } else if start % M2 != 0 || windows == 0 {
        c.push(DaxCause::Address);
    }
    if align.is_some_and(|a| a < M2) {
        c.push(DaxCause::NamespaceAlign);
    }
    if c.is_empty() && (unaligned_frames || !frames_visible) {
        c.push(DaxCause::Extents);
    }
    if c.is_empty() {
        // Frames line up and nothing else is off: still the blocks (a
        // file written piecemeal, holes filled 4 KiB at a time).
        c.push(DaxCause::Extents);
    }
    c
}

/// The segment's page size from its mappings: 4 KiB when any touched
/// window is on PTEs, 2 MiB when every touched one is a PMD; with the
/// source text.
pub fn page_size(info: &DaxInfo) -> (Option<u64>, String) {
    let pids = |f: DaxFaults| {
        info.mappings
            .iter()
            .filter(|m| m.faults == f)
            .map(|m| m.pid.to_string())
            .collect::<Vec<_>>()
    };
    let judged: u64 = info.mappings.iter().map(|m| m.windows_read).sum();
    let how = |pids: Vec<String>| {
        format!(
            "pagemap of pid {} ({judged} 2 MiB windows; smaps shows no DAX pages)",
            pids.join(",")
        )
    };
    let pte = pids(DaxFaults::Pte);
    if !pte.is_empty() {
        return (Some(PAGE), how(pte));
    }
    let pmd = pids(DaxFaults::Pmd);
    if !pmd.is_empty() {
        return (Some(M2), how(pmd));
    }
    if info
        .mappings
        .iter()
        .any(|m| m.faults == DaxFaults::Untouched)
    {
        return (
            None,
            "unknown: not touched yet (DAX pages are mapped at the first touch)".to_string(),
        );
    }
    match info.mappings.iter().find_map(|m| m.error.as_ref()) {
        Some(e) => (None, format!("unknown: {e}")),
        None => (
            None,
            "unknown: no process mapping it could be read".to_string(),
        ),
    }
}

/// `dax-page-cache`: a file on a `dax=inode` mount that the kernel serves
/// from the page cache, with why (the flag missing, or set and not in
/// force) and the fix.
fn page_cache_finding(label: &str, path: Option<&str>, info: &DaxInfo) -> Option<Finding> {
    let file = info.file.filter(|f| f.dax == Some(false))?;
    let pids: Vec<String> = info.mappings.iter().map(|m| m.pid.to_string()).collect();
    let flag = match file.flag {
        Some(true) => {
            "its DAX flag is set but not in force: the kernel applies it when it loads the inode again"
        }
        Some(false) => "it has no DAX flag",
        None => "its DAX flag could not be read",
    };
    let message = format!(
        "{label} is on the dax=inode mount {} and is not DAX ({flag}): {} map{} it through the page cache, \
         a copy of its blocks in DRAM on 4 KiB pages; no MAP_SYNC, and writes reach persistent \
         memory only with msync or fsync",
        info.mount.as_deref().unwrap_or("?"),
        if pids.is_empty() {
            "processes".to_string()
        } else {
            format!("pid {}", pids.join(","))
        },
        if pids.len() == 1 { "s" } else { "" },
    );
    let fix = Fix::DaxFlag {
        path: path.unwrap_or(label).to_string(),
        fstype: info.fstype.clone().unwrap_or_default(),
        flag_set: file.flag == Some(true),
    };
    Some(Finding::new(
        Severity::Warning,
        "dax-page-cache",
        message,
        Some(fix.render(hugeshm_fix::Renderer::Cli)),
    ))
}

/// `dax-4k-faults`: each sampled mapping on 4 KiB faults (one finding per
/// segment, naming the first), with what its page tables cost and the fix;
/// or `dax-page-cache` for a file that is not DAX at all.
pub fn findings(label: &str, path: Option<&str>, info: &DaxInfo) -> Vec<Finding> {
    if let Some(f) = page_cache_finding(label, path, info) {
        return vec![f];
    }
    let bad: Vec<&DaxMapping> = info
        .mappings
        .iter()
        .filter(|m| m.faults == DaxFaults::Pte)
        .collect();
    let Some(first) = bad.first() else {
        return Vec::new();
    };
    let cost: u64 = bad.iter().map(|m| m.pte_table_bytes).sum();
    let full_cost = first.size_bytes / 512;
    let others = match bad.len() {
        1 => String::new(),
        n => format!(
            " (and {} more mapping{})",
            n - 1,
            if n > 2 { "s" } else { "" }
        ),
    };
    let windows = if first.windows_read > 0 {
        format!(
            "in {} of {} windows of 2 MiB",
            first.pte_windows, first.windows_read
        )
    } else {
        "no whole 2 MiB window in it".to_string()
    };
    let message = format!(
        "{label} is mapped by pid {} at file offset {} with 4 KiB page-table entries, not 2 MiB ones \
         ({windows}, pagemap){others}: its page tables take {} now and {} per process that touches \
         all {} of it (2 KiB per MiB; 2 MiB entries take none), and every 4 KiB is a TLB entry",
        first.pid,
        first.offset,
        format_bytes(cost),
        format_bytes(full_cost),
        format_bytes(first.size_bytes),
    );
    let mut causes: Vec<DaxCause> = bad.iter().flat_map(|m| m.causes.iter().copied()).collect();
    causes.sort();
    causes.dedup();
    let fix = Fix::AlignDax {
        causes,
        path: path.unwrap_or(label).to_string(),
        offset: first.offset,
        namespace: info.namespace.clone(),
        region: false,
    };
    vec![Finding::new(
        Severity::Warning,
        "dax-4k-faults",
        message,
        Some(fix.render(hugeshm_fix::Renderer::Cli)),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_dax_names() {
        assert_eq!(device_dax_name("/dev/dax0.0"), Some("dax0.0"));
        assert_eq!(device_dax_name("/dev/dax12.3"), Some("dax12.3"));
        assert_eq!(device_dax_name("/dev/dax0"), None);
        assert_eq!(device_dax_name("/dev/daxx.0"), None);
        assert_eq!(device_dax_name("/mnt/dax0.0"), None);
    }

    #[test]
    fn a_path_finds_its_mount_device_namespace_and_node() {
        let pmem: PmemSnapshot = serde_json::from_value(serde_json::json!({
            "namespaces": [
                {"name": "namespace0.0", "region": "region0", "mode": "fsdax",
                 "size_bytes": 1, "align_bytes": 2097152, "numa_node": 1, "target_node": null,
                 "holder": "pfn0.1", "blockdev": "pmem0", "dax_device": null},
                {"name": "namespace1.0", "region": "region1", "mode": "devdax",
                 "size_bytes": 1, "align_bytes": 4096, "numa_node": 0, "target_node": 3,
                 "holder": "dax1.0", "blockdev": null, "dax_device": "dax1.0"}],
            "dax_devices": [{"name": "dax1.0", "size_bytes": 1, "align_bytes": 4096,
                             "target_node": 3, "driver": "device_dax"}],
            "tiers": [], "problems": []
        }))
        .unwrap();
        let mounts = hugeshm_parse::mounts::parse(
            "/dev/pmem0p1 /mnt/pmem xfs rw,dax 0 0\n\
             /dev/pmem0 /mnt/pmem/inner ext4 rw,dax=inode 0 0\n\
             /dev/sda1 / ext4 rw 0 0\n",
        )
        .unwrap();
        let dax: Vec<&Mount> = mounts.iter().filter(|m| is_dax_mount(m)).collect();
        assert_eq!(dax.len(), 2);
        // A partition of pmem0, a bare `dax` option.
        let i = info_for("/mnt/pmem/db/file", &dax, &pmem);
        assert_eq!(i.mount.as_deref(), Some("/mnt/pmem"));
        assert_eq!(i.device.as_deref(), Some("pmem0p1"));
        assert_eq!(i.namespace.as_deref(), Some("namespace0.0"));
        assert_eq!((i.dax.as_deref(), i.numa_node), (Some("always"), Some(1)));
        // The longest mount wins.
        assert_eq!(i.file, None, "dax=always: every file is DAX");
        let i = info_for("/mnt/pmem/inner/f", &dax, &pmem);
        assert_eq!(i.mount.as_deref(), Some("/mnt/pmem/inner"));
        assert_eq!(i.dax.as_deref(), Some("inode"));
        // dax=inode: the file's own state, unknown until read.
        assert_eq!(i.file, Some(FileDax::default()));
        // A device-dax: its namespace's node and the device's alignment.
        let i = info_for("/dev/dax1.0", &dax, &pmem);
        assert_eq!(i.mount, None);
        assert_eq!(i.namespace.as_deref(), Some("namespace1.0"));
        assert_eq!((i.align_bytes, i.numa_node), (Some(4096), Some(0)));
        // dax=never is no DAX mount.
        let never = hugeshm_parse::mounts::parse("/dev/pmem0 /m ext4 rw,dax=never 0 0\n").unwrap();
        assert!(!is_dax_mount(&never[0]));
    }

    #[test]
    fn causes_in_order_of_what_can_be_known() {
        let c = |start, offset, windows, align, unaligned, visible| {
            causes(start, offset, windows, align, unaligned, visible)
        };
        assert_eq!(
            c(M2 * 8, 4096, 31, Some(M2), false, true),
            [DaxCause::FileOffset]
        );
        assert_eq!(
            c(M2 * 8 + 4096, 0, 31, Some(M2), false, true),
            [DaxCause::Address]
        );
        assert_eq!(c(M2 * 8, 0, 0, Some(M2), false, true), [DaxCause::Address]);
        assert_eq!(
            c(M2 * 8, 0, 32, Some(4096), false, true),
            [DaxCause::NamespaceAlign]
        );
        assert_eq!(c(M2 * 8, 0, 32, Some(M2), true, true), [DaxCause::Extents]);
        assert_eq!(c(M2 * 8, 0, 32, None, false, false), [DaxCause::Extents]);
    }

    /// A mapping judged from a pagemap: 4 KiB entries in all 32 windows.
    fn pte_mapping() -> DaxMapping {
        DaxMapping {
            pid: 42,
            start: M2 * 8,
            size_bytes: 64 << 20,
            offset: 0,
            windows: 32,
            windows_read: 32,
            pmd_windows: 0,
            pte_windows: 32,
            resident_bytes: Some(64 << 20),
            file_pages: 16384,
            frames_visible: true,
            faults: DaxFaults::Pte,
            causes: vec![DaxCause::Extents],
            pte_table_bytes: 128 << 10,
            error: None,
        }
    }

    fn inode_info(file: Option<FileDax>) -> DaxInfo {
        DaxInfo {
            mount: Some("/mnt/pmem".into()),
            fstype: Some("ext4".into()),
            dax: Some("inode".into()),
            file,
            mappings: vec![pte_mapping()],
            ..DaxInfo::default()
        }
    }

    fn codes(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.code.as_str()).collect()
    }

    #[test]
    fn a_dax_inode_file_without_the_flag_is_page_cache_not_4k_faults() {
        let mut i = inode_info(Some(FileDax::new(Some(false), Some(false))));
        mark_page_cache(&mut i);
        let m = &i.mappings[0];
        assert_eq!(m.faults, DaxFaults::PageCache);
        assert!(m.causes.is_empty());
        assert_eq!(m.pte_table_bytes, 0);
        let f = findings("/mnt/pmem/plain", Some("/mnt/pmem/plain"), &i);
        assert_eq!(codes(&f), ["dax-page-cache"]);
        assert!(
            f[0].message.contains(
                "/mnt/pmem/plain is on the dax=inode mount /mnt/pmem and is not DAX (it has no DAX flag): pid 42 maps it through the page cache"
            ),
            "{}",
            f[0].message
        );
        let fix = f[0].fix.as_deref().unwrap();
        assert!(
            fix.starts_with("set its DAX flag: chattr +x /mnt/pmem/plain"),
            "{fix}"
        );
        // The flag set, not in force: the fix is the reload only.
        let mut i = inode_info(Some(FileDax::new(Some(false), Some(true))));
        mark_page_cache(&mut i);
        let f = findings("/mnt/pmem/late", Some("/mnt/pmem/late"), &i);
        assert!(
            f[0].message
                .contains("its DAX flag is set but not in force"),
            "{}",
            f[0].message
        );
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .starts_with("its DAX flag is set but not in force"));
    }

    #[test]
    fn a_dax_inode_file_with_the_flag_or_unknown_keeps_the_pagemap_verdict() {
        for file in [
            Some(FileDax::new(Some(true), Some(true))),
            Some(FileDax::default()),
            None,
        ] {
            let mut i = inode_info(file);
            mark_page_cache(&mut i);
            assert_eq!(i.mappings[0].faults, DaxFaults::Pte, "{file:?}");
            assert_eq!(
                codes(&findings("f", Some("f"), &i)),
                ["dax-4k-faults"],
                "{file:?}"
            );
        }
    }

    #[test]
    fn the_file_state_in_json() {
        let i = inode_info(Some(FileDax::new(Some(false), Some(true))));
        let v = serde_json::to_value(&i).unwrap();
        assert_eq!(v["file"], serde_json::json!({"dax": false, "flag": true}));
        let unknown = serde_json::to_value(inode_info(Some(FileDax::default()))).unwrap();
        assert_eq!(
            unknown["file"],
            serde_json::json!({"dax": null, "flag": null})
        );
        // Other mounts: no field.
        let always = serde_json::to_value(inode_info(None)).unwrap();
        assert!(always.get("file").is_none());
        let mut pc = pte_mapping();
        pc.faults = DaxFaults::PageCache;
        assert_eq!(serde_json::to_value(&pc).unwrap()["faults"], "page-cache");
        let back: DaxInfo = serde_json::from_value(v).unwrap();
        assert_eq!(back.file, Some(FileDax::new(Some(false), Some(true))));
    }

    /// A reader that answers for some paths and keeps the paths it was
    /// asked for, in place of the binary's statx.
    struct Fake {
        answers: Vec<(std::path::PathBuf, FileDax)>,
        asked: std::sync::Mutex<Vec<std::path::PathBuf>>,
    }

    impl Fake {
        fn answering(answers: &[(&str, FileDax)]) -> std::sync::Arc<Fake> {
            std::sync::Arc::new(Fake {
                answers: answers.iter().map(|(p, f)| (p.into(), *f)).collect(),
                asked: Default::default(),
            })
        }

        fn asked(&self) -> Vec<std::path::PathBuf> {
            self.asked.lock().unwrap().clone()
        }
    }

    impl FileDaxReader for Fake {
        fn read(&self, path: &std::path::Path) -> Option<FileDax> {
            self.asked.lock().unwrap().push(path.to_owned());
            self.answers
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, f)| *f)
        }
    }

    /// The probe's reader decides between the pagemap verdict (a file the
    /// kernel serves by DAX) and the page cache (one it does not): through
    /// the mapping's map_files entry, else the path under the process's
    /// root, else unknown.
    #[test]
    fn the_probe_s_reader_says_dax_or_page_cache() {
        let (pid, start, end) = (42, M2 * 8, M2 * 8 + (64 << 20));
        let by_map = "/proc/42/map_files/1000000-5000000";
        let by_root = "/proc/42/root/mnt/pmem/f";
        let state = |fake: &std::sync::Arc<Fake>| {
            let live = hugeshm_probe::Probe::new(hugeshm_probe::Roots::default())
                .with_file_dax(fake.clone());
            file_dax(&live, pid, start, end, "/mnt/pmem/f")
        };
        let verdict = |file: FileDax| {
            let mut i = inode_info(Some(file));
            mark_page_cache(&mut i);
            let codes = codes(&findings("/mnt/pmem/f", Some("/mnt/pmem/f"), &i))
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            (i.mappings[0].faults, codes)
        };

        // DAX, read through map_files: the 4 KiB faults stand.
        let dax = FileDax::new(Some(true), Some(true));
        let fake = Fake::answering(&[(by_map, dax)]);
        assert_eq!(state(&fake), dax);
        assert_eq!(fake.asked(), [std::path::PathBuf::from(by_map)]);
        assert_eq!(verdict(dax), (DaxFaults::Pte, vec!["dax-4k-faults".into()]));

        // map_files unreadable, the root path says no DAX and no flag:
        // page cache, and the fix sets the flag.
        let plain = FileDax::new(Some(false), Some(false));
        let fake = Fake::answering(&[(by_root, plain)]);
        assert_eq!(state(&fake), plain);
        assert_eq!(
            fake.asked(),
            [by_map, by_root].map(std::path::PathBuf::from)
        );
        assert_eq!(
            verdict(plain),
            (DaxFaults::PageCache, vec!["dax-page-cache".into()])
        );

        // Neither readable: unknown, the pagemap verdict stands.
        let fake = Fake::answering(&[]);
        assert_eq!(state(&fake), FileDax::default());
        assert_eq!(fake.asked().len(), 2);
        assert_eq!(verdict(state(&fake)).0, DaxFaults::Pte);
    }

    #[test]
    fn the_file_state_is_unknown_off_the_live_host_or_without_a_reader() {
        let fake = Fake::answering(&[(
            "/nonexistent/proc/1/map_files/0-200000",
            FileDax::new(Some(true), Some(true)),
        )]);
        let fixture = hugeshm_probe::Probe::new(hugeshm_probe::Roots::fixture(
            std::path::Path::new("/nonexistent"),
        ))
        .with_file_dax(fake.clone());
        assert_eq!(
            file_dax(&fixture, 1, 0, M2, "/mnt/pmem/f"),
            FileDax::default()
        );
        assert!(fake.asked().is_empty());
        let bare = hugeshm_probe::Probe::new(hugeshm_probe::Roots::default());
        assert_eq!(file_dax(&bare, 1, 0, M2, "/mnt/pmem/f"), FileDax::default());
    }
}
