//! The servers: processes that map huge page shared memory, their memlock
//! limits, and `memlock-small`.

use super::StatusReport;
use crate::finding::{Finding, Severity};
use crate::segments::{self, SegmentsReport};
use hugeshm_parse::size::{format_bytes, BASE_PAGE};
use hugeshm_probe::Probe;
use serde::{Deserialize, Serialize};

/// A process that maps huge page shared memory, and its memlock limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServerLimit {
    /// Pid.
    pub pid: u32,
    /// Process name.
    pub name: Option<String>,
    /// The systemd unit that runs it (from `/proc/PID/cgroup`).
    pub unit: Option<String>,
    /// The user it runs as, as limits.conf names it: the login name from
    /// the host's user database (NSS; a fixture's `etc/passwd`), else `:UID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Bytes of huge page shared memory it maps.
    pub huge_bytes: u64,
    /// Bytes of SysV huge page segments it created: the kernel charges
    /// those to its memlock limit unless it has `CAP_IPC_LOCK` or is in
    /// `vm.hugetlb_shm_group`.
    pub sysv_created_bytes: u64,
    /// Bytes it has locked (`VmLck`). After `mlockall(MCL_FUTURE)` this
    /// also counts address space reserved with `PROT_NONE`, which holds
    /// no memory (DPDK reserves 128 GiB so).
    pub locked_bytes: u64,
    /// Of [`locked_bytes`](Self::locked_bytes), the locked mappings that
    /// can be accessed (not `PROT_NONE`), from its smaps: read only where
    /// `VmLck` exceeds a limit that binds it (`None` otherwise, or where
    /// smaps could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_accessible_bytes: Option<u64>,
    /// Its soft `RLIMIT_MEMLOCK` (`None`: unlimited).
    pub memlock_bytes: Option<u64>,
    /// Whether it has `CAP_IPC_LOCK` (`CapEff`): then `RLIMIT_MEMLOCK`
    /// binds none of its locking and none of its SysV segments.
    #[serde(default)]
    pub cap_ipc_lock: bool,
    /// Whether it has `CAP_IPC_LOCK`, or is in `vm.hugetlb_shm_group`: the
    /// memlock limit does not apply to its SysV huge page segments.
    pub exempt: bool,
}

/// The processes attached to huge page segments, with the huge page bytes
/// each maps and its memlock limit (processes whose limits cannot be read
/// are left out).
pub(super) fn servers(
    probe: &Probe,
    segs: &SegmentsReport,
    shm_group: Option<u64>,
) -> Vec<ServerLimit> {
    let mut by_pid: std::collections::BTreeMap<u32, ServerLimit> = Default::default();
    for s in &segs.segments {
        if s.page_size_bytes.is_none_or(|p| p <= BASE_PAGE) {
            continue;
        }
        for &pid in &s.attached_pids {
            let name = s
                .attached
                .iter()
                .find(|a| a.pid == pid)
                .and_then(|a| a.name.clone());
            let e = by_pid.entry(pid).or_insert_with(|| ServerLimit {
                pid,
                name,
                unit: None,
                user: None,
                huge_bytes: 0,
                sysv_created_bytes: 0,
                locked_bytes: 0,
                locked_accessible_bytes: None,
                memlock_bytes: None,
                cap_ipc_lock: false,
                exempt: false,
            });
            e.huge_bytes = e.huge_bytes.saturating_add(s.size_bytes);
            if s.kind == segments::SegmentKind::Sysv && s.creator_pid == Some(pid) {
                e.sysv_created_bytes = e.sysv_created_bytes.saturating_add(s.size_bytes);
            }
        }
    }
    let users = hugeshm_probe::Users::of(&probe.roots);
    by_pid
        .into_values()
        .filter_map(|mut e| {
            let limits = probe.pid(e.pid).limits().ok()?;
            e.memlock_bytes = limits.memlock_soft_bytes;
            if let Ok(st) = probe.pid(e.pid).status() {
                e.user = st
                    .uid
                    .map(|u| users.name_of(u).unwrap_or_else(|| format!(":{u}")));
                e.locked_bytes = st.vm_lck_bytes.unwrap_or(0);
                e.cap_ipc_lock = st.has_cap_ipc_lock();
                e.exempt = e.cap_ipc_lock
                    || shm_group.is_some_and(|g| u32::try_from(g).is_ok_and(|g| st.in_group(g)));
            }
            // VmLck over a limit that binds: what of it the limit would
            // refuse on the next start (its PROT_NONE reservations hold
            // nothing and mlock of them is not what fails).
            if !e.cap_ipc_lock && e.memlock_bytes.is_some_and(|ml| e.locked_bytes > ml) {
                e.locked_accessible_bytes = probe
                    .pid(e.pid)
                    .smaps()
                    .ok()
                    .map(|sm| locked_accessible(&sm));
            }
            e.unit = std::fs::read_to_string(probe.proc_path(&format!("{}/cgroup", e.pid)))
                .ok()
                .and_then(|t| hugeshm_parse::cgroup::systemd_unit(&t));
            Some(e)
        })
        .collect()
}

/// Bytes of the locked mappings of a process that can be accessed: those
/// with the `lo` flag that are not `PROT_NONE`. hugetlb mappings are never
/// marked locked (mlock skips them).
pub(super) fn locked_accessible(smaps: &[hugeshm_parse::smaps::SmapsEntry]) -> u64 {
    smaps
        .iter()
        .filter(|e| e.vm_flags.iter().any(|f| f == "lo"))
        .filter(|e| e.map.perms.read || e.map.perms.write || e.map.perms.exec)
        .map(|e| e.size_bytes)
        .fold(0, u64::saturating_add)
}

/// What a server needs its memlock limit to cover, where the limit binds
/// it at all (not with `CAP_IPC_LOCK`): the SysV huge page segments it
/// creates (unless in `vm.hugetlb_shm_group`), and what it locks that is
/// accessible (its `VmLck` where smaps was not read).
pub(super) fn memlock_needed(s: &ServerLimit) -> u64 {
    if s.cap_ipc_lock {
        return 0;
    }
    let sysv = if s.exempt { 0 } else { s.sysv_created_bytes };
    sysv.max(s.locked_accessible_bytes.unwrap_or(s.locked_bytes))
}

/// What [`memlock_needed`] counted, in words.
pub(super) fn memlock_reason(s: &ServerLimit, need: u64) -> String {
    let locked = s.locked_accessible_bytes.unwrap_or(s.locked_bytes);
    if locked < need {
        return "its SysV huge page segments, without CAP_IPC_LOCK or vm.hugetlb_shm_group"
            .to_owned();
    }
    match s.locked_accessible_bytes {
        Some(a) if a < s.locked_bytes => format!(
            "its locked mappings that can be accessed; VmLck {} also counts {} of PROT_NONE \
             reservations",
            format_bytes(s.locked_bytes),
            format_bytes(s.locked_bytes - a)
        ),
        Some(_) => "its locked mappings".to_owned(),
        None => "it locks its memory (VmLck)".to_owned(),
    }
}

/// `memlock-small`: a server whose memlock limit is below what it needs:
/// the SysV huge page segments it creates (without CAP_IPC_LOCK or
/// vm.hugetlb_shm_group), or what it locks. A server that maps huge pages
/// through mmap and locks nothing needs none.
pub(super) fn server_findings(r: &StatusReport) -> Vec<Finding> {
    r.servers
        .iter()
        .filter(|s| {
            let need = memlock_needed(s);
            need > 0 && s.memlock_bytes.is_some_and(|ml| ml < need)
        })
        .map(|s| {
            let ml = s.memlock_bytes.unwrap_or(0);
            let need = memlock_needed(s);
            let kib = need.div_ceil(1024);
            let who = format!(
                "pid {} ({}){}",
                s.pid,
                s.name.as_deref().unwrap_or("?"),
                s.unit
                    .as_deref()
                    .map(|u| format!(" of {u}"))
                    .unwrap_or_default()
            );
            Finding::new(
                Severity::Warning,
                "memlock-small",
                format!(
                    "{who} needs {} of locked memory ({}) with a memlock limit of {}, which binds \
                     it (no CAP_IPC_LOCK): its next start fails to {}",
                    format_bytes(need),
                    memlock_reason(s, need),
                    format_bytes(ml),
                    if s.locked_accessible_bytes.unwrap_or(s.locked_bytes) >= need {
                        "lock it"
                    } else {
                        "create them"
                    }
                ),
                Some(match &s.unit {
                    Some(u) if u.ends_with(".service") => format!(
                        "systemctl edit {}: add LimitMEMLOCK={} under [Service], then restart it",
                        hugeshm_fix::shell_quote(u),
                        kib * 1024
                    ),
                    _ => {
                        let (user, whom) = match &s.user {
                            Some(u) => (u.as_str(), "its user"),
                            None => ("<user>", "the user that starts it"),
                        };
                        // Not 60-hugeshm.conf: apply --persist owns that one.
                        format!(
                            "/etc/security/limits.d/99-hugeshm-local.conf: '{user} soft memlock \
                             {kib}' and '{user} hard memlock {kib}' for {whom}, then restart it"
                        )
                    }
                }),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::build_from;
    use crate::status::tests::host;
    use hugeshm_parse::size::GIB;

    #[test]
    fn servers_below_their_huge_memory_get_memlock_small() {
        let mut r = build_from(&host(0, 0, 0), None);
        let server = |pid: u32,
                      name: &str,
                      unit: Option<&str>,
                      sysv: u64,
                      locked: u64,
                      limit: u64,
                      exempt: bool| ServerLimit {
            pid,
            name: Some(name.into()),
            unit: unit.map(str::to_owned),
            user: (pid == 12).then(|| "jboss".into()),
            huge_bytes: GIB.max(locked),
            sysv_created_bytes: sysv,
            locked_bytes: locked,
            locked_accessible_bytes: None,
            memlock_bytes: Some(limit),
            cap_ipc_lock: false,
            exempt,
        };
        r.servers = vec![
            // Creates a 1 GiB SysV huge page segment under a 64 KiB limit.
            server(
                10,
                "oracle",
                Some("oracle-db.service"),
                GIB,
                0,
                64 << 10,
                false,
            ),
            // The same in vm.hugetlb_shm_group (or with CAP_IPC_LOCK): fine.
            server(11, "oracle", None, GIB, 0, 64 << 10, true),
            // mmap'd huge pages, nothing locked (PostgreSQL): fine.
            server(13, "postgres", None, 0, 0, 64 << 10, false),
            // Locks 2 GiB under a 1 GiB limit.
            server(12, "java", None, 0, 2 * GIB, GIB, false),
            // Root's DPDK: mlockall with CAP_IPC_LOCK, VmLck 128 GiB of
            // reservations: the limit does not bind it.
            ServerLimit {
                cap_ipc_lock: true,
                ..server(14, "dpdk-testpmd", None, 0, 128 * GIB, 8 << 20, true)
            },
            // The same as a user: 96 MiB of its VmLck can be accessed.
            ServerLimit {
                locked_accessible_bytes: Some(96 << 20),
                ..server(15, "dpdk-testpmd", None, 0, 128 * GIB, 8 << 20, false)
            },
        ];
        let f = server_findings(&r);
        assert_eq!(f.len(), 3, "{f:#?}");
        assert!(
            f[2].message.starts_with(
                "pid 15 (dpdk-testpmd) needs 96 MiB of locked memory (its locked mappings that \
                 can be accessed; VmLck 128 GiB also counts 128 GiB of PROT_NONE reservations) \
                 with a memlock limit of 8 MiB, which binds it (no CAP_IPC_LOCK): its next start \
                 fails to lock it"
            ),
            "{}",
            f[2].message
        );
        assert!(
            f[0].message.starts_with(
                "pid 10 (oracle) of oracle-db.service needs 1 GiB of locked memory (its SysV"
            ),
            "{}",
            f[0].message
        );
        assert_eq!(
            f[0].fix.as_deref(),
            Some("systemctl edit oracle-db.service: add LimitMEMLOCK=1073741824 under [Service], then restart it")
        );
        assert!(
            f[1].message
                .starts_with("pid 12 (java) needs 2 GiB of locked memory (it locks"),
            "{}",
            f[1].message
        );
        assert_eq!(
            f[1].fix.as_deref(),
            Some(
                "/etc/security/limits.d/99-hugeshm-local.conf: 'jboss soft memlock 2097152' and \
                 'jboss hard memlock 2097152' for its user, then restart it"
            )
        );
    }

    #[test]
    fn servers_are_the_processes_on_huge_pages_with_their_limits() {
        // two-nodes-uneven: PostgreSQL (2001 creates, 2002 and 2003 attach)
        // on a 1 GiB hugetlb segment; Oracle (3001, 3002) on 4 KiB pages.
        let (probe, host) = crate::fixture::tree("two-nodes-uneven");
        let segs = crate::segments::build_with(&probe, &host, &Default::default());
        let s = servers(&probe, &segs, Some(0));
        let pids: Vec<u32> = s.iter().map(|s| s.pid).collect();
        assert_eq!(pids, [2001, 2002, 2003]);
        let pm = &s[0];
        assert_eq!(
            (pm.name.as_deref(), pm.user.as_deref(), pm.unit.as_deref()),
            (
                Some("postgres"),
                Some("postgres"),
                Some("postgresql@16-main.service")
            )
        );
        assert_eq!((pm.huge_bytes, pm.sysv_created_bytes), (GIB, GIB));
        assert_eq!((s[1].huge_bytes, s[1].sysv_created_bytes), (GIB, 0));
        assert_eq!(pm.memlock_bytes, Some(64 << 10));
        assert!(!pm.cap_ipc_lock && !pm.exempt);
        assert_eq!((pm.locked_bytes, pm.locked_accessible_bytes), (0, None));
        // In vm.hugetlb_shm_group 26: exempt.
        assert!(servers(&probe, &segs, Some(26)).iter().all(|s| s.exempt));
        // The postmaster's segment is charged to its 64 KiB limit.
        let f = server_findings(&StatusReport {
            servers: s,
            ..build_from(&host, None)
        });
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message
                .starts_with("pid 2001 (postgres) of postgresql@16-main.service needs 1 GiB"),
            "{}",
            f[0].message
        );
    }
}
