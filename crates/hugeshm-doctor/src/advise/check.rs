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
