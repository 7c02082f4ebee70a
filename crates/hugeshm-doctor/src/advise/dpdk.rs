//! `advise --dpdk "EAL ARGS"`: what a DPDK application's EAL (22.11)
//! takes of huge pages at start, from its arguments.
//!
//! Outside legacy mode the EAL preallocates `-m` megabytes (spread over the
//! nodes of its lcores) or `--socket-mem` megabytes per node at start, in
//! pages of the sizes it may use (`eal_dynmem_hugepage_init`: the largest
//! size first, then a page more for a remainder), and stops with "EAL: Not
//! enough memory available! Requested: 64MB, available: 62MB" when the
//! pools have fewer. Measured with `dpdk-testpmd --in-memory
//! --single-file-segments -m 64` (and `--socket-mem 64`, and with a
//! hugetlbfs mount instead of `--in-memory`): it starts with 32 free 2 MiB
//! pages, not 31, and maps those 64 MiB. What the application allocates
//! beyond that (its mbuf pools, `rte_malloc` at run time) comes on top,
//! up to `--socket-limit` where one is given: its arguments do not say,
//! so advise cannot know it.

use super::error::SourceError;
use super::model::{Demand, Placement, Skipped};
use hugeshm_parse::dpdk_eal::{self, EalArgs};
use hugeshm_parse::size::{format_bytes, page_size_short, parse_size, MIB};
use hugeshm_probe::HostSnapshot;

/// Demands, what is not counted, and warnings.
type Found = (Vec<Demand>, Vec<Skipped>, Vec<String>);

/// What a DPDK application started with `args` asks of pools of `page`
/// bytes on `host`: its demands, what is not counted, and warnings (a pool
/// too short for it now, in the EAL's words; a hugetlbfs mount it lacks).
pub(super) fn dpdk_demands(
    host: &HostSnapshot,
    args: &str,
    page: u64,
) -> Result<Found, SourceError> {
    let e = dpdk_eal::parse(args)
        .map_err(|err| SourceError::Spec(format!("--dpdk {args:?}: {}", err.message)))?;
    let label = |what: &str| format!("dpdk {what}");
    let mut skipped = Vec::new();
    if !e.ignored.is_empty() {
        skipped.push(Skipped {
            label: label("options"),
            reason: format!("{}: not about memory, not counted", e.ignored.join(" ")),
        });
    }
    if e.no_huge {
        skipped.push(Skipped {
            label: label("--no-huge"),
            reason: "--no-huge: the EAL runs on 4 KiB anonymous memory (-m, 64 MB by default), \
                     no huge pages"
                .into(),
        });
        return Ok((Vec::new(), skipped, Vec::new()));
    }
    let mut warnings = Vec::new();
    let mount = hugetlbfs_mount(host, &e, page);
    if !e.in_memory {
        if let Err(w) = &mount {
            warnings.push(w.clone());
        }
    }
    let how = how_it_maps(&e, mount.as_ref().ok().map(String::as_str));
    let extra = "what the application allocates beyond it (its mbuf pools, rte_malloc at run \
                 time) comes on top and is not in its EAL arguments: add it with --size";
    let limit = match &e.socket_limit_mb {
        Some(l) => format!(
            "; --socket-limit {} caps each node",
            l.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
        ),
        None => String::new(),
    };
    let mut demands = Vec::new();
    if let Some(mb) = e.memory_mb {
        let d = Demand::new(label(&format!("-m {mb}")), mb.saturating_mul(MIB), page).with_note(
            format!(
                "-m {mb}: the EAL preallocates {mb} MB at start over the nodes of its lcores \
                 and stops short of it; {how}; {extra}{limit}"
            ),
        );
        short_by(
            host,
            &d,
            None,
            &format!("! Requested: {mb}MB"),
            &mut warnings,
        );
        demands.push(d);
    } else if let Some(per) = &e.socket_mem_mb {
        for (node, &mb) in per.iter().enumerate().filter(|(_, mb)| **mb > 0) {
            let node = u32::try_from(node).unwrap_or(u32::MAX);
            let d = Demand::new(
                label(&format!("--socket-mem node {node}")),
                mb.saturating_mul(MIB),
                page,
            )
            .placed(Placement::Node(node))
            .with_note(format!(
                "--socket-mem: the EAL preallocates {mb} MB on node {node} at start and stops \
                 short of it; {how}; {extra}{limit}"
            ));
            let said = format!(" on socket {node}! Requested: {mb}MB");
            short_by(host, &d, Some(node), &said, &mut warnings);
            demands.push(d);
        }
    } else {
        skipped.push(Skipped {
            label: label("memory"),
            reason: if e.legacy_mem {
                "--legacy-mem without -m or --socket-mem: the EAL maps every free huge page at \
                 start; give -m or --socket-mem (or --size) to plan for it"
                    .into()
            } else {
                "no -m or --socket-mem: the EAL preallocates nothing and takes pages as the \
                 application allocates, which its arguments do not say; give -m or --socket-mem \
                 (or --size) to plan for it"
                    .into()
            },
        });
    }
    Ok((demands, skipped, warnings))
}

/// How the EAL maps its pages, and what it leaves behind.
fn how_it_maps(e: &EalArgs, mount: Option<&str>) -> String {
    let files = if e.single_file_segments {
        "one file per memory segment list"
    } else {
        "one file per page"
    };
    if e.in_memory {
        return format!("--in-memory: memfds ({files}), no hugetlbfs mount, nothing left at exit");
    }
    let at = mount.unwrap_or("a hugetlbfs mount");
    let prefix = e.file_prefix.as_deref().unwrap_or("rte");
    match e.huge_unlink.as_deref() {
        Some("always") => format!("files in {at} ({files}), unlinked once mapped"),
        _ => format!(
            "files {prefix}map_* in {at} ({files}) that stay after it exits and keep their pages \
             until the next start with --file-prefix {prefix} or their removal \
             (--in-memory leaves none)"
        ),
    }
}

/// The hugetlbfs mount of `page` pages the EAL will use: `--huge-dir`'s,
/// else the first of that page size; Err: a warning that there is none.
fn hugetlbfs_mount(host: &HostSnapshot, e: &EalArgs, page: u64) -> Result<String, String> {
    let default = host.default_page_size();
    let found = host.mounts.iter().find(|m| {
        m.fstype == "hugetlbfs"
            && e.huge_dir.as_deref().is_none_or(|d| m.target == d)
            && m.options
                .iter()
                .find(|(k, _)| k == "pagesize")
                .and_then(|(_, v)| v.as_deref().and_then(parse_size))
                .or(default)
                == Some(page)
    });
    match found {
        Some(m) => Ok(m.target.clone()),
        None => {
            let p = page_size_short(page);
            let dir = e.huge_dir.as_deref().unwrap_or("/dev/hugepages");
            Err(format!(
                "DPDK without --in-memory needs a hugetlbfs mount of {} pages{} and this host \
                 has none: mkdir -p {dir} && mount -t hugetlbfs -o pagesize={p} nodev {dir} \
                 (at boot, an fstab line or systemd's dev-hugepages.mount); or start it with \
                 --in-memory",
                format_bytes(page),
                e.huge_dir
                    .as_deref()
                    .map(|d| format!(" at --huge-dir {d}"))
                    .unwrap_or_default()
            ))
        }
    }
}

/// A warning where `d`'s pool (of `node`, or host-wide) has fewer
/// available pages now (free less reserved) than `d` needs: the EAL would
/// stop at start, with `said` in its message.
fn short_by(
    host: &HostSnapshot,
    d: &Demand,
    node: Option<u32>,
    said: &str,
    warnings: &mut Vec<String>,
) {
    let page = d.page_size_bytes;
    let free = match node {
        None => host
            .pool(page)
            .map(|p| p.free.saturating_sub(p.resv.unwrap_or(0))),
        Some(n) => host
            .node_pools
            .iter()
            .find(|p| p.node == n && p.counters.page_size_bytes == page)
            .map(|p| p.counters.free)
            .or_else(|| {
                (host.nodes.len() <= 1 && n == 0)
                    .then(|| {
                        host.pool(page)
                            .map(|p| p.free.saturating_sub(p.resv.unwrap_or(0)))
                    })
                    .flatten()
            }),
    }
    .unwrap_or(0);
    let need = d.pages_needed();
    if free >= need {
        return;
    }
    let where_ = match node {
        Some(n) => format!("node {n}'s {} pool", format_bytes(page)),
        None => format!("the {} pool", format_bytes(page)),
    };
    let avail_mb = free.saturating_mul(page) / MIB;
    warnings.push(format!(
        "{}: {where_} has {free} free pages now, {need} needed: {} short; started now, DPDK \
         stops with \"EAL: Not enough memory available{said}, available: {avail_mb}MB\" \
         (apply the plan first)",
        d.label,
        need - free
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::testing;
    use hugeshm_parse::hugepages::PoolCounters;

    fn host(free: u64, mount: bool) -> HostSnapshot {
        let mut h = testing::host(1);
        h.pools[0] = PoolCounters::new(2 * MIB, free, free, Some(0), 0, Some(0));
        if mount {
            h.mounts = hugeshm_parse::mounts::parse(
                "nodev /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
            )
            .unwrap();
        }
        h
    }

    #[test]
    fn m_and_socket_mem_are_demands_in_megabytes() {
        let m2 = 2 * MIB;
        let (d, s, w) = dpdk_demands(
            &host(32, false),
            "-l 0-1 --in-memory --single-file-segments -m 64",
            m2,
        )
        .unwrap();
        assert_eq!((d[0].bytes, d[0].pages_needed()), (64 * MIB, 32));
        assert!(w.is_empty(), "{w:?}");
        assert!(s[0].reason.starts_with("-l 0-1:"), "{s:?}");
        let note = d[0].note.as_deref().unwrap();
        assert!(
            note.contains("memfds (one file per memory segment list)"),
            "{note}"
        );
        // One page short, in the EAL's words.
        let (_, _, w) = dpdk_demands(&host(31, false), "--in-memory -m 64", m2).unwrap();
        assert!(
            w[0].contains("31 free pages now, 32 needed: 1 short"),
            "{w:?}"
        );
        assert!(
            w[0].contains("Not enough memory available! Requested: 64MB, available: 62MB"),
            "{w:?}"
        );
        // Per node; a remainder takes a page more.
        let (d, _, w) = dpdk_demands(
            &host(100, true),
            "--socket-mem 0,65 --huge-dir /dev/hugepages",
            m2,
        )
        .unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].placement, d[0].pages_needed()),
            (Placement::Node(1), 33)
        );
        assert!(w[0].contains("on socket 1! Requested: 65MB"), "{w:?}");
        assert!(d[0]
            .note
            .as_deref()
            .unwrap()
            .contains("rtemap_* in /dev/hugepages"));
    }

    #[test]
    fn no_mount_no_size_and_no_huge_are_said() {
        let m2 = 2 * MIB;
        let (_, _, w) = dpdk_demands(&host(64, false), "-m 64", m2).unwrap();
        assert!(
            w[0].contains("needs a hugetlbfs mount of 2 MiB pages"),
            "{w:?}"
        );
        let (d, s, _) = dpdk_demands(&host(64, true), "--file-prefix x", m2).unwrap();
        assert!(
            d.is_empty() && s[0].reason.contains("no -m or --socket-mem"),
            "{s:?}"
        );
        let (d, s, w) = dpdk_demands(&host(0, false), "--no-huge -m 64", m2).unwrap();
        assert!(d.is_empty() && w.is_empty() && s[0].reason.contains("4 KiB"));
        assert!(dpdk_demands(&host(0, false), "-m 64 --socket-mem 64", m2).is_err());
    }
}
