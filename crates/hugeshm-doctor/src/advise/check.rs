//! What `apply` checks of a plan file before it acts as root: that its
//! sums fit in 64 bits, and that its files are exactly what hugeshm
//! writes for its pools on this host.

use super::config::{config_for, valid_memlock_user, valid_systemd_unit};
use super::model::{pool_name, Plan};
use super::plan::kept_bytes;
use crate::checked::{self, TooLarge};
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::HostSnapshot;

/// Checks that a plan counts bytes that fit in 64 bits (a plan file may
/// say anything): each pool's and demotion's pages times its page size, and
/// all of them together.
pub fn check_sums(plan: &Plan) -> Result<(), TooLarge> {
    let mut all = 0u64;
    for p in &plan.pools {
        let what = || format!("{}: bytes", pool_name(p.page_size_bytes, p.node));
        let bytes = checked::mul(p.pages, p.page_size_bytes, what)?;
        all = checked::add(all, bytes, || "the bytes of every pool".to_string())?;
    }
    for d in &plan.demote {
        let what = || {
            format!(
                "the demotion of {} pages: bytes",
                format_bytes(d.page_size_bytes)
            )
        };
        checked::mul(d.pages, d.page_size_bytes, what)?;
    }
    Ok(())
}

/// Checks that a plan's configuration files (read from a plan file that
/// `apply --plan` is to write as root) are exactly what hugeshm writes for
/// the plan's own pools and settings on this host: no other path, no other
/// line (blanks aside), and a memlock limit from what the pools hold, not a
/// number of the file's. A plan edited by hand, made on a host with another
/// default huge page size, or before the host's other pools changed, is
/// refused with the first thing that differs.
pub fn check_plan_files(plan: &Plan, host: &HostSnapshot) -> Result<(), String> {
    // What advise counts: the plan's pools, the host's pools of the sizes
    // it leaves alone, less what its demotions take from them.
    let sizes: Vec<u64> = plan.pools.iter().map(|p| p.page_size_bytes).collect();
    let planned = plan.pools.iter().try_fold(0u64, |a, p| {
        a.checked_add(p.pages.checked_mul(p.page_size_bytes)?)
    });
    let kept = kept_bytes(host, |s| sizes.contains(&s));
    let demoted: u64 = plan
        .demote
        .iter()
        .map(|d| d.pages.saturating_mul(d.page_size_bytes))
        .sum();
    let huge = planned.map(|p| p.saturating_add(kept).saturating_sub(demoted));
    if huge != Some(plan.huge_bytes) {
        return Err(format!(
            "its huge_bytes ({}) is not what its pools and this host's other pools hold ({}): \
             the plan was edited, or the host's pools changed since it was made",
            plan.huge_bytes,
            huge.map_or("more than 2^64 bytes".into(), |h| h.to_string())
        ));
    }
    if let Some(u) = plan
        .config
        .memlock_users
        .iter()
        .find(|u| !valid_memlock_user(u))
    {
        return Err(format!("its memlock user {u:?} is not a limits.conf user"));
    }
    if let Some(u) = plan
        .config
        .systemd_units
        .iter()
        .find(|u| !valid_systemd_unit(u))
    {
        return Err(format!("its systemd unit {u:?} is not a service name"));
    }
    // The one value a plan sets (a plan from before has none).
    if let Some(v) = plan.config.thp_shmem.as_deref().filter(|v| *v != "advise") {
        return Err(format!(
            "its thp_shmem {v:?} is not advise, the one shmem_enabled hugeshm sets"
        ));
    }
    // Plans from before memlock_users had the lines for every user.
    let users = if plan.config.memlock_users.is_empty() {
        vec!["*".to_string()]
    } else {
        plan.config.memlock_users.clone()
    };
    let expected = config_for(
        &plan.pools,
        host.default_page_size(),
        plan.huge_bytes,
        plan.config.hugetlb_shm_group,
        users,
        plan.config.systemd_units.clone(),
        plan.config.thp_shmem.as_deref(),
    )
    .files;
    for f in &plan.config.files {
        match expected.iter().find(|e| e.path == f.path) {
            None => return Err(format!("{} is not a file hugeshm writes", f.path)),
            Some(e) if !same_but_blanks(&e.content, &f.content) => {
                return Err(format!(
                    "{} is not what hugeshm writes for its pools and settings",
                    f.path
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(e) = expected
        .iter()
        .find(|e| !plan.config.files.iter().any(|f| f.path == e.path))
    {
        return Err(format!("it lacks {}, which its pools need", e.path));
    }
    Ok(())
}

/// Whether two files say the same, line by line, runs of blanks aside (the
/// limits.d columns were padded differently before).
fn same_but_blanks(a: &str, b: &str) -> bool {
    let words = |t: &str| -> Vec<Vec<String>> {
        t.lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    words(a) == words(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::testing::{host, host_that_can_demote, M2};
    use crate::advise::{add_demotion, plan, ConfigFile, Demand, PlanDemote, LIMITS_FILE};
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::size::{GIB, MIB};

    /// A plan as `advise` makes it, and the host it was made on.
    fn made() -> (HostSnapshot, Plan) {
        let h = host(1);
        let d = [Demand::new("sga", 64 * MIB, M2)
            .owned_by(26)
            .in_units(vec!["postgresql.service".into()])
            .with_sysv_gid(54321)];
        let p = plan(&h, &d, vec![], 2).unwrap();
        (h, p)
    }

    #[test]
    fn a_plan_as_made_passes_and_blanks_do_not_matter() {
        let (h, mut p) = made();
        assert_eq!(check_plan_files(&p, &h), Ok(()));
        // The limits.d columns padded another way (as older plans were).
        for f in &mut p.config.files {
            f.content = f.content.replace("    ", "\t ");
        }
        assert_eq!(check_plan_files(&p, &h), Ok(()));
        assert!(!same_but_blanks("a b\n", "a\nb\n"));
        assert!(same_but_blanks("a  b\n", "a\tb\n"));
    }

    #[test]
    fn a_host_with_shmem_never_gets_advise_now_and_at_boot() {
        let (mut h, _) = made();
        let with = |h: &HostSnapshot, v: &str| {
            let mut h = h.clone();
            h.thp.shmem_enabled = Some(
                hugeshm_parse::thp::parse_selector("shmem_enabled", &format!("[{v}] advise"))
                    .unwrap(),
            );
            h
        };
        h = with(&h, "never");
        let d = [Demand::new("sga", 64 * MIB, M2).owned_by(26)];
        let p = plan(&h, &d, vec![], 2).unwrap();
        assert_eq!(p.config.thp_shmem.as_deref(), Some("advise"));
        let line = "w /sys/kernel/mm/transparent_hugepage/shmem_enabled - - - - advise";
        let tmpfiles = p
            .config
            .files
            .iter()
            .find(|f| f.path == "/etc/tmpfiles.d/60-hugeshm.conf")
            .expect("a tmpfiles.d file");
        assert!(tmpfiles.content.contains(line), "{}", tmpfiles.content);
        assert!(p
            .config
            .runtime
            .iter()
            .any(|r| r.starts_with("echo advise > ")));
        assert_eq!(check_plan_files(&p, &h), Ok(()));
        // Another value is no plan of hugeshm's; the line without the
        // setting is an edited file.
        let mut e = p.clone();
        e.config.thp_shmem = Some("always".into());
        assert!(check_plan_files(&e, &h)
            .unwrap_err()
            .contains("is not advise"));
        let mut old = p.clone();
        old.config.thp_shmem = None;
        assert!(check_plan_files(&old, &h)
            .unwrap_err()
            .contains("tmpfiles.d"));
        // Settings that align big mappings already, and deny, are left.
        for v in ["advise", "always", "within_size", "deny"] {
            let p = plan(&with(&h, v), &d, vec![], 2).unwrap();
            assert_eq!(p.config.thp_shmem, None, "{v}");
        }
    }

    #[test]
    fn an_edited_plan_file_is_refused_with_what_differs() {
        let (h, p) = made();
        let refused = |edit: &dyn Fn(&mut Plan)| {
            let mut e = p.clone();
            edit(&mut e);
            check_plan_files(&e, &h).unwrap_err()
        };
        let e = refused(&|e| e.huge_bytes += M2);
        assert!(
            e.starts_with(&format!(
                "its huge_bytes ({}) is not what its pools and this host's other pools hold ({})",
                p.huge_bytes + M2,
                p.huge_bytes
            )),
            "{e}"
        );
        // Pools whose bytes pass 64 bits.
        let e = refused(&|e| e.pools[0].pages = u64::MAX);
        assert!(e.contains("(more than 2^64 bytes)"), "{e}");
        let e = refused(&|e| {
            e.config.files.push(ConfigFile {
                path: "/etc/cron.d/hugeshm".into(),
                content: "* * * * * root /tmp/x\n".into(),
            })
        });
        assert_eq!(e, "/etc/cron.d/hugeshm is not a file hugeshm writes");
        let e = refused(&|e| {
            let f = e.config.files.iter_mut().find(|f| f.path == LIMITS_FILE);
            f.unwrap()
                .content
                .push_str("*        hard    memlock    unlimited\n");
        });
        assert_eq!(
            e,
            format!("{LIMITS_FILE} is not what hugeshm writes for its pools and settings")
        );
        let e = refused(&|e| e.config.files.retain(|f| !f.path.contains("sysctl.d")));
        assert_eq!(
            e,
            "it lacks /etc/sysctl.d/60-hugeshm.conf, which its pools need"
        );
        let e = refused(&|e| e.config.memlock_users = vec!["root hard".into()]);
        assert_eq!(
            e,
            "its memlock user \"root hard\" is not a limits.conf user"
        );
        // A group the file names that the plan does not.
        let e = refused(&|e| e.config.hugetlb_shm_group = Some(0));
        assert!(
            e.ends_with("is not what hugeshm writes for its pools and settings"),
            "{e}"
        );
    }

    #[test]
    fn a_plan_from_a_host_whose_other_pools_changed_is_refused() {
        let (mut h, p) = made();
        // Two 1 GiB pages appeared since: the plan's memlock limit is too low.
        h.pools[1] = PoolCounters::new(GIB, 2, 2, Some(0), 0, Some(0));
        let e = check_plan_files(&p, &h).unwrap_err();
        assert!(e.starts_with("its huge_bytes"), "{e}");
    }

    #[test]
    fn a_plan_with_a_demotion_counts_the_demoted_pages_out() {
        let h = host_that_can_demote();
        let mut p = plan(&h, &[Demand::new("sga", 1200 * MIB, M2)], vec![], 2).unwrap();
        add_demotion(&mut p, &h, true);
        assert_eq!(p.demote.len(), 1);
        assert_eq!(check_plan_files(&p, &h), Ok(()));
        p.demote.clear();
        assert!(check_plan_files(&p, &h)
            .unwrap_err()
            .starts_with("its huge_bytes"));
    }

    #[test]
    fn sums_that_do_not_fit_are_refused_with_their_numbers() {
        let (_, mut p) = made();
        assert_eq!(check_sums(&p), Ok(()));
        p.pools[0].pages = u64::MAX / 2;
        let e = check_sums(&p).unwrap_err();
        assert_eq!(
            (e.what.as_str(), e.a, e.op, e.b),
            ("the 2 MiB pool (host-wide): bytes", u64::MAX / 2, '*', M2)
        );
        // Each pool fits; together they do not.
        let mut p2 = p.clone();
        p2.pools[0].pages = u64::MAX / M2;
        p2.pools.push(p2.pools[0].clone());
        let e = check_sums(&p2).unwrap_err();
        assert_eq!((e.what.as_str(), e.op), ("the bytes of every pool", '+'));
        let mut p3 = made().1;
        p3.demote.push(PlanDemote {
            page_size_bytes: GIB,
            to_page_size_bytes: M2,
            pages: u64::MAX,
        });
        let e = check_sums(&p3).unwrap_err();
        assert_eq!(e.what, "the demotion of 1 GiB pages: bytes");
    }
}
