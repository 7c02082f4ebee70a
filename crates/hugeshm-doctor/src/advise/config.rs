//! The configuration that realises a plan: the runtime commands and the
//! files `apply --persist` writes (sysctl.d, tmpfiles.d, limits.d, the
//! systemd drop-ins, the GRUB snippet), the memlock limit they say, and
//! the syntax of the names they hold.

use super::model::{ConfigFile, Demand, PlanConfig, PlanPool};
use hugeshm_fix::{nr_hugepages_path, pool_command};
use hugeshm_parse::size::{page_size_short, GIB};

pub(super) fn config_for(
    pools: &[PlanPool],
    default: Option<u64>,
    huge_bytes: u64,
    gid: Option<u32>,
    memlock_users: Vec<String>,
    systemd_units: Vec<String>,
    thp_shmem: Option<&str>,
) -> PlanConfig {
    let mut runtime = Vec::new();
    let mut sysctl = Vec::new();
    let mut tmpfiles = Vec::new();
    let mut cmdline: Vec<String> = Vec::new();
    let sizes: std::collections::BTreeSet<u64> = pools.iter().map(|p| p.page_size_bytes).collect();
    for size in sizes {
        let rows: Vec<&PlanPool> = pools.iter().filter(|p| p.page_size_bytes == size).collect();
        let host_row = rows.iter().find(|p| p.node.is_none());
        let is_default = Some(size) == default;
        match host_row {
            Some(r) => {
                runtime.push(pool_command(size, r.pages, is_default, None));
                if is_default {
                    sysctl.push(format!("vm.nr_hugepages = {}", r.pages));
                } else {
                    tmpfiles.push(format!(
                        "w {} - - - - {}",
                        nr_hugepages_path(size, None),
                        r.pages
                    ));
                }
                if size >= GIB {
                    cmdline.push(format!(
                        "hugepagesz={} hugepages={}",
                        page_size_short(size),
                        r.pages
                    ));
                }
            }
            None => {
                let mut split = Vec::new();
                for r in &rows {
                    let n = r.node.unwrap_or(0);
                    runtime.push(pool_command(size, r.pages, is_default, r.node));
                    tmpfiles.push(format!(
                        "w {} - - - - {}",
                        nr_hugepages_path(size, r.node),
                        r.pages
                    ));
                    split.push(format!("{n}:{}", r.pages));
                }
                if size >= GIB {
                    cmdline.push(format!(
                        "hugepagesz={} hugepages={}",
                        page_size_short(size),
                        split.join(",")
                    ));
                }
            }
        }
    }
    // Never below the kernel's default (8 MiB since Linux 5.16): the
    // limits.d file applies to every user, and a small plan would take
    // away what other programs lock today.
    let memlock_kib = memlock_kib_for(huge_bytes);
    let mut files = Vec::new();
    let mut sysctl_text =
        String::from("# Written by hugeshm apply --persist: huge page pools and SysV access.\n");
    for l in &sysctl {
        sysctl_text.push_str(l);
        sysctl_text.push('\n');
    }
    if let Some(g) = gid {
        sysctl_text.push_str(&format!("vm.hugetlb_shm_group = {g}\n"));
    }
    if !sysctl.is_empty() || gid.is_some() {
        files.push(ConfigFile {
            path: "/etc/sysctl.d/60-hugeshm.conf".into(),
            content: sysctl_text,
        });
    }
    if let Some(v) = thp_shmem {
        runtime.push(format!("echo {v} > {SHMEM_ENABLED}"));
        tmpfiles.push(format!(
            "# shmem_enabled={v}: big shared mappings 2 MiB-aligned (hugeshm collapse can move\n\
             # a server that fell back to 4 KiB pages); THP only where asked for.\n\
             w {SHMEM_ENABLED} - - - - {v}"
        ));
    }
    if !tmpfiles.is_empty() {
        let mut t = String::from("# Written by hugeshm apply --persist: per-size and per-node huge page pools at boot.\n");
        for l in &tmpfiles {
            t.push_str(l);
            t.push('\n');
        }
        files.push(ConfigFile {
            path: "/etc/tmpfiles.d/60-hugeshm.conf".into(),
            content: t,
        });
    }
    files.push(limits_file(&memlock_users, memlock_kib));
    files.extend(systemd_units.iter().map(|u| dropin_file(u, memlock_kib)));
    let kernel_cmdline = (!cmdline.is_empty()).then(|| cmdline.join(" "));
    if let Some(k) = &kernel_cmdline {
        files.push(ConfigFile {
            path: "/etc/default/grub.d/60-hugeshm.cfg".into(),
            content: format!(
                "# Written by hugeshm apply --persist: huge pages reserved at boot (run update-grub).\nGRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX {k}\"\n"
            ),
        });
    }
    PlanConfig {
        runtime,
        files,
        kernel_cmdline,
        memlock_kib,
        memlock_users,
        systemd_units,
        systemd: limit_memlock(memlock_kib),
        hugetlb_shm_group: gid,
        thp_shmem: thp_shmem.map(str::to_owned),
        memlock_not_needed: None,
        thp: "madvise".into(),
        thp_reason: "shared memory on hugetlb pages does not need THP; 'always' makes khugepaged and fault-time compaction stall database processes and bloats their private memory, while 'madvise' keeps THP for programs that ask".into(),
    }
}

/// Where the THP setting of shared memory is.
pub(super) const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// The `shmem_enabled` a plan sets on a host that has `current`: `advise`
/// in place of `never` (big shared mappings aligned, THP only where asked
/// for); nothing otherwise (`advise`, `always`, `within_size` and `force`
/// align them already; `deny` is an admin's choice).
pub(super) fn thp_shmem_for(current: Option<&str>) -> Option<&'static str> {
    (current == Some("never")).then_some("advise")
}

/// The memlock limit for pools of `huge_bytes` in all, KiB: never below
/// the kernel's default (8 MiB since Linux 5.16), as the limits.d file may
/// apply to every user, and a small plan would take away what other
/// programs lock today.
fn memlock_kib_for(huge_bytes: u64) -> u64 {
    huge_bytes.div_ceil(1024).max(DEFAULT_MEMLOCK_KIB)
}

/// systemd's setting for a memlock limit of `memlock_kib` KiB.
fn limit_memlock(memlock_kib: u64) -> String {
    format!("LimitMEMLOCK={}", memlock_kib.saturating_mul(1024))
}

/// Where the limits.d memlock lines go.
pub const LIMITS_FILE: &str = "/etc/security/limits.d/60-hugeshm.conf";

/// The limits.d file: a soft and a hard memlock line per domain.
fn limits_file(users: &[String], memlock_kib: u64) -> ConfigFile {
    let mut content = String::from(
        "# Written by hugeshm apply --persist: let servers lock their shared memory.\n",
    );
    for u in users {
        content.push_str(&format!(
            "{u:<8} soft    memlock    {memlock_kib}\n{u:<8} hard    memlock    {memlock_kib}\n"
        ));
    }
    ConfigFile {
        path: LIMITS_FILE.into(),
        content,
    }
}

/// Where the drop-ins of systemd services go.
const SYSTEMD_DIR: &str = "/etc/systemd/system/";

/// A service's drop-in: its memlock limit (`LimitMEMLOCK=`, bytes).
fn dropin_file(unit: &str, memlock_kib: u64) -> ConfigFile {
    ConfigFile {
        path: format!("{SYSTEMD_DIR}{unit}.d/60-hugeshm.conf"),
        content: format!(
            "# Written by hugeshm apply --persist: let {unit} lock its shared memory\n\
             # (limits.d does not apply to services). Then: systemctl daemon-reload,\n\
             # and restart {unit} when it suits.\n[Service]\n{}\n",
            limit_memlock(memlock_kib)
        ),
    }
}

/// Whether `s` names a systemd service hugeshm may write a drop-in for:
/// `NAME.service` or `NAME@INSTANCE.service` of unit-name characters (no
/// `/`, so the drop-in stays under /etc/systemd/system).
pub fn valid_systemd_unit(s: &str) -> bool {
    // "UNIT.d" must fit a file name (255 bytes); systemd allows one '@'.
    s.len() <= 253
        && s.matches('@').count() <= 1
        && s.strip_suffix(".service").is_some_and(|n| {
            !n.is_empty()
                && !n.starts_with(['.', '-', '@'])
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ":_.@-\\".contains(c))
        })
}

/// Who the memlock lines name: the non-root owners of the demands, as
/// exact-uid domains (`:UID`), where every demand's owner is known and
/// one is not root; otherwise every user (`*`, which pam_limits does not
/// apply to root: root locks with `CAP_IPC_LOCK`).
pub(super) fn memlock_users(demands: &[Demand]) -> Vec<String> {
    let owners: Option<std::collections::BTreeSet<u32>> =
        demands.iter().map(|d| d.owner_uid).collect();
    match owners.map(|o| o.into_iter().filter(|u| *u != 0).collect::<Vec<_>>()) {
        Some(uids) if !uids.is_empty() => uids.iter().map(|u| format!(":{u}")).collect(),
        _ => vec!["*".into()],
    }
}

/// Whether `s` can stand as a limits.conf domain for memlock: a login name,
/// `@group`, `:UID`, `@:GID` or `*` (no blanks, no `#`, no `%`, which is
/// for maxlogins only).
pub fn valid_memlock_user(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && (s == "*"
            || s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-@:$".contains(c))
                && !s.starts_with('-'))
}

/// `s` where `valid` holds, else "`s` is not WHAT".
fn accept(s: &str, valid: fn(&str) -> bool, what: &str) -> Result<String, String> {
    valid(s)
        .then(|| s.to_string())
        .ok_or_else(|| format!("{s:?} is not {what}"))
}

/// A systemd service as an option or a spec names it (`NAME.service`,
/// `NAME@INSTANCE.service`), or why it is not one.
pub fn parse_systemd_unit(s: &str) -> Result<String, String> {
    accept(
        s,
        valid_systemd_unit,
        "a systemd service: give NAME.service or NAME@INSTANCE.service",
    )
}

/// A memlock user as an option or a spec names it (a login name,
/// `@group`, `:UID`, `*`), or why it is not one.
pub fn parse_memlock_user(s: &str) -> Result<String, String> {
    accept(
        s,
        valid_memlock_user,
        "a limits.conf user: give a login name, @group, :UID or *",
    )
}

impl PlanConfig {
    /// Names the memlock lines' domains; rewrites the limits.d file.
    pub fn set_memlock_users(&mut self, users: Vec<String>) {
        self.memlock_users = users;
        self.rewrite_limits_file();
    }

    /// Names the services that get a drop-in; rewrites the drop-ins.
    pub fn set_systemd_units(&mut self, units: Vec<String>) {
        self.files.retain(|f| !f.path.starts_with(SYSTEMD_DIR));
        self.files
            .extend(units.iter().map(|u| dropin_file(u, self.memlock_kib)));
        self.systemd_units = units;
    }

    /// Replaces each `:UID` domain with the login name `name` gives it
    /// (from the host's user database), where it gives one.
    pub fn name_memlock_users(&mut self, name: impl Fn(u32) -> Option<String>) {
        let users = self
            .memlock_users
            .iter()
            .map(|u| {
                u.strip_prefix(':')
                    .and_then(|n| n.parse().ok())
                    .and_then(&name)
                    .filter(|n| valid_memlock_user(n) && n != "*" && !n.starts_with(['@', ':']))
                    .unwrap_or_else(|| u.clone())
            })
            .collect();
        self.set_memlock_users(users);
    }

    /// Sets the memlock limit for pools of `huge_bytes` in all, and
    /// rewrites the files that say it.
    pub fn set_memlock_for(&mut self, huge_bytes: u64) {
        self.memlock_kib = memlock_kib_for(huge_bytes);
        self.systemd = limit_memlock(self.memlock_kib);
        self.rewrite_limits_file();
        self.set_systemd_units(self.systemd_units.clone());
    }

    /// No memlock lines (limits.d, the drop-ins): every server the plan
    /// counts maps its pages so that no memlock limit binds it (`why`).
    pub fn without_memlock(&mut self, why: String) {
        self.files
            .retain(|f| f.path != LIMITS_FILE && !f.path.starts_with(SYSTEMD_DIR));
        self.memlock_users.clear();
        self.systemd_units.clear();
        self.memlock_not_needed = Some(why);
    }

    fn rewrite_limits_file(&mut self) {
        let file = limits_file(&self.memlock_users, self.memlock_kib);
        match self.files.iter_mut().find(|f| f.path == LIMITS_FILE) {
            Some(f) => *f = file,
            None => self.files.push(file),
        }
    }
}

/// `RLIMIT_MEMLOCK`'s default since Linux 5.16, KiB: the least a plan's
/// memlock setting says.
pub const DEFAULT_MEMLOCK_KIB: u64 = 8 * 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::testing::{host, M2};
    use crate::advise::{check_plan_files, plan, Plan};
    use hugeshm_parse::size::MIB;

    #[test]
    fn memlock_never_below_the_kernel_default() {
        let h = host(1);
        // 2 MiB of pools: the limits.d file for every user says 8 MiB,
        // not 2 MiB, which would take away what others lock today.
        let p = plan(&h, &[Demand::new("tiny", 4096, M2)], vec![], 0).unwrap();
        assert_eq!(p.huge_bytes, M2);
        assert_eq!(p.config.memlock_kib, DEFAULT_MEMLOCK_KIB);
        assert_eq!(p.config.systemd, "LimitMEMLOCK=8388608");
        let limits = p
            .config
            .files
            .iter()
            .find(|f| f.path.ends_with("limits.d/60-hugeshm.conf"))
            .unwrap();
        assert!(
            limits.content.contains("soft    memlock    8192\n"),
            "{}",
            limits.content
        );
        // Above it, the pools' size.
        let p = plan(&h, &[Demand::new("sga", 64 * MIB, M2)], vec![], 0).unwrap();
        assert_eq!(p.config.memlock_kib, p.huge_bytes / 1024);
    }

    fn limits(p: &Plan) -> &str {
        &p.config
            .files
            .iter()
            .find(|f| f.path == LIMITS_FILE)
            .unwrap()
            .content
    }

    #[test]
    fn memlock_lines_name_the_owners_where_all_are_known() {
        let h = host(1);
        // Two servers' segments, owned by uids 105 and 26 (and one root's):
        // a line pair for each non-root owner, nobody else's limit raised.
        let d = [
            Demand::new("a", 64 * MIB, M2).owned_by(105),
            Demand::new("b", 64 * MIB, M2).owned_by(26),
            Demand::new("c", 64 * MIB, M2).owned_by(0),
        ];
        let p = plan(&h, &d, vec![], 0).unwrap();
        assert_eq!(p.config.memlock_users, [":26", ":105"]);
        let kib = p.config.memlock_kib;
        assert!(
            limits(&p).contains(&format!(":26      soft    memlock    {kib}\n")),
            "{}",
            limits(&p)
        );
        assert!(limits(&p).contains(&format!(":105     hard    memlock    {kib}\n")));
        assert!(!limits(&p).contains('*'));
        // One owner unknown (a --size region): every user.
        let p = plan(
            &h,
            &[d[0].clone(), Demand::new("new", 64 * MIB, M2)],
            vec![],
            0,
        )
        .unwrap();
        assert_eq!(p.config.memlock_users, ["*"]);
        let kib = p.config.memlock_kib;
        assert!(limits(&p).contains(&format!("*        soft    memlock    {kib}\n")));
        // Only root's: root locks by CAP_IPC_LOCK; the lines stay for everyone.
        let p = plan(&h, &[d[2].clone()], vec![], 0).unwrap();
        assert_eq!(p.config.memlock_users, ["*"]);
    }

    #[test]
    fn memlock_users_named_and_set() {
        let h = host(1);
        let d = [
            Demand::new("a", 64 * MIB, M2).owned_by(105),
            Demand::new("b", 64 * MIB, M2).owned_by(7),
        ];
        let mut p = plan(&h, &d, vec![], 0).unwrap();
        p.config
            .name_memlock_users(|uid| (uid == 105).then(|| "postgres".to_string()));
        // A uid the host has no name for stays `:UID`.
        assert_eq!(p.config.memlock_users, [":7", "postgres"]);
        // So does one whose name limits.conf would misread.
        let mut q = plan(&h, &d, vec![], 0).unwrap();
        q.config.name_memlock_users(|_| Some("db admin".into()));
        assert_eq!(q.config.memlock_users, [":7", ":105"]);
        q.config.name_memlock_users(|_| Some("@wheel".into()));
        assert_eq!(q.config.memlock_users, [":7", ":105"]);
        assert!(
            limits(&p).contains("postgres soft    memlock"),
            "{}",
            limits(&p)
        );
        p.config.set_memlock_users(vec!["@dba".into()]);
        assert!(limits(&p).contains("@dba     hard    memlock"));
        assert!(!limits(&p).contains("postgres"));
        // Exactly one limits.d file still.
        let n = p
            .config
            .files
            .iter()
            .filter(|f| f.path == LIMITS_FILE)
            .count();
        assert_eq!(n, 1);
    }

    #[test]
    fn services_get_a_memlock_drop_in() {
        let h = host(1);
        let pg = "postgresql@16-main.service".to_string();
        let d = [
            Demand::new("a", 64 * MIB, M2).in_units(vec![pg.clone()]),
            Demand::new("b", 64 * MIB, M2).in_units(vec![pg.clone(), "ora.service".into()]),
            // Not a service name hugeshm writes under: left out.
            Demand::new("c", 64 * MIB, M2).in_units(vec!["../../x.service".into()]),
        ];
        let p = plan(&h, &d, vec![], 0).unwrap();
        assert_eq!(p.config.systemd_units, ["ora.service", pg.as_str()]);
        let bytes = p.config.memlock_kib * 1024;
        let dropin = |p: &Plan, u: &str| {
            p.config
                .files
                .iter()
                .find(|f| f.path == format!("/etc/systemd/system/{u}.d/60-hugeshm.conf"))
                .map(|f| f.content.clone())
        };
        let text = dropin(&p, &pg).expect("drop-in");
        assert!(
            text.ends_with(&format!("[Service]\nLimitMEMLOCK={bytes}\n")),
            "{text}"
        );
        assert!(dropin(&p, "ora.service").is_some());
        assert_eq!(check_plan_files(&p, &h), Ok(()));
        // --systemd-unit replaces them.
        let mut p2 = p.clone();
        p2.config.set_systemd_units(vec!["mysql.service".into()]);
        assert!(dropin(&p2, &pg).is_none() && dropin(&p2, "mysql.service").is_some());
        assert_eq!(check_plan_files(&p2, &h), Ok(()));
        // A plan file's unit that would write elsewhere is refused.
        let mut p3 = p.clone();
        p3.config.systemd_units = vec!["../../cron.d/x.service".into()];
        assert!(check_plan_files(&p3, &h)
            .unwrap_err()
            .contains("is not a service name"));
        // No services: no drop-in.
        let p4 = plan(&h, &[Demand::new("a", 64 * MIB, M2)], vec![], 0).unwrap();
        assert!(p4.config.systemd_units.is_empty());
        assert!(!p4.config.files.iter().any(|f| f.path.contains("systemd")));
    }

    #[test]
    fn systemd_unit_syntax() {
        // "UNIT.d" must fit a file name.
        let long = format!("{}.service", "a".repeat(245));
        assert_eq!(long.len(), 253);
        assert!(valid_systemd_unit(&long));
        assert!(!valid_systemd_unit(&format!("a{long}")));
        for ok in [
            "postgresql.service",
            "postgresql@16-main.service",
            "oracle-ohasd.service",
            "a:b_c.d\\x2d.service",
        ] {
            assert!(valid_systemd_unit(ok), "{ok}");
        }
        for bad in [
            "",
            ".service",
            "x.scope",
            "x",
            "../x.service",
            "a/b.service",
            ".hidden.service",
            "a b.service",
            "x.service\n",
            "a@b@c.service",
        ] {
            assert!(!valid_systemd_unit(bad), "{bad:?}");
        }
    }

    #[test]
    fn memlock_user_syntax() {
        for ok in [
            "postgres", "oracle", "@dba", ":26", "@:54321", "*", "svc-db", "a.b_c$",
        ] {
            assert!(valid_memlock_user(ok), "{ok}");
        }
        for bad in ["", "a b", "x#y", "%grp", "-x", "a\nb", "ü", &"a".repeat(65)] {
            assert!(!valid_memlock_user(bad), "{bad:?}");
        }
    }

    #[test]
    fn hugetlb_shm_group() {
        let h = host(1);
        let p = plan(
            &h,
            &[Demand::new("s", 8 * M2, M2).with_sysv_gid(54321)],
            vec![],
            0,
        )
        .unwrap();
        assert_eq!(p.config.hugetlb_shm_group, Some(54321));
        let sysctl = p
            .config
            .files
            .iter()
            .find(|f| f.path.ends_with("sysctl.d/60-hugeshm.conf"))
            .unwrap();
        assert!(sysctl.content.contains("vm.hugetlb_shm_group = 54321"));
    }
}
