//! `/proc/PID/cgroup`: the cgroup of a process in each hierarchy.
//!
//! One line per hierarchy, `HIERARCHY-ID:CONTROLLERS:PATH`:
//!
//! ```text
//! 12:hugetlb:/kubepods/burstable/pod1/ctr      cgroup v1, one controller
//! 4:cpu,cpuacct:/user.slice                     cgroup v1, co-mounted controllers
//! 1:name=systemd:/user.slice/session-3.scope    a named v1 hierarchy
//! 0::/system.slice/postgresql.service           the cgroup v2 (unified) hierarchy
//! ```
//!
//! The path is relative to the reader's cgroup namespace (a cgroup outside
//! it shows as `/../..`); v2 marks a removed cgroup with ` (deleted)`.

use crate::error::{parse_u64, ParseError};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/PID/cgroup";

/// One hierarchy a process belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CgroupEntry {
    /// Hierarchy id: 0 for cgroup v2, the v1 hierarchy's number otherwise.
    pub hierarchy_id: u32,
    /// The controllers bound to a v1 hierarchy (`["cpu", "cpuacct"]`,
    /// `["name=systemd"]`); empty for v2.
    pub controllers: Vec<String>,
    /// The cgroup's path in that hierarchy (`/` for the root), without the
    /// ` (deleted)` mark.
    pub path: String,
    /// Whether the kernel marked the cgroup ` (deleted)` (it was removed
    /// while the process, a zombie, was still in it).
    pub deleted: bool,
}

impl CgroupEntry {
    /// Whether this is the cgroup v2 (unified) hierarchy: id 0, no controllers.
    pub fn is_unified(&self) -> bool {
        self.hierarchy_id == 0 && self.controllers.is_empty()
    }

    /// Whether a v1 controller (`hugetlb`, `memory`) is bound to this hierarchy.
    pub fn has_controller(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c == name)
    }
}

/// The entry of the hierarchy that holds `controller`: the v2 line when
/// `unified` (the controller lives in the unified hierarchy), else the v1
/// line naming it.
///
/// ```
/// let e = hugeshm_parse::cgroup::parse("5:hugetlb:/a\n0::/b\n").unwrap();
/// assert_eq!(hugeshm_parse::cgroup::find(&e, "hugetlb", false).unwrap().path, "/a");
/// assert_eq!(hugeshm_parse::cgroup::find(&e, "hugetlb", true).unwrap().path, "/b");
/// ```
pub fn find<'a>(
    entries: &'a [CgroupEntry],
    controller: &str,
    unified: bool,
) -> Option<&'a CgroupEntry> {
    entries.iter().find(|e| {
        if unified {
            e.is_unified()
        } else {
            e.has_controller(controller)
        }
    })
}

/// Whether cgroup `path` is `ancestor` or lies below it (`/a/b` is under
/// `/a` and under `/`, not under `/ab`).
///
/// ```
/// use hugeshm_parse::cgroup::is_within;
/// assert!(is_within("/a/b", "/a"));
/// assert!(is_within("/a", "/a/"));
/// assert!(is_within("/a", "/"));
/// assert!(!is_within("/ab", "/a"));
/// assert!(!is_within("/a", "/a/b"));
/// ```
pub fn is_within(path: &str, ancestor: &str) -> bool {
    let a = ancestor.trim_end_matches('/');
    let p = path.trim_end_matches('/');
    a.is_empty() || p == a || p.strip_prefix(a).is_some_and(|rest| rest.starts_with('/'))
}

/// The cgroups the kubelet puts every pod under, at the root of each
/// hierarchy, with the cgroup driver that names them so: `kubepods.slice`
/// (systemd) and `kubepods` (cgroupfs). The kubelet sets their hugetlb
/// limits to the node's allocatable huge pages when it starts.
pub const KUBEPODS: [(&str, &str); 2] = [("/kubepods.slice", "systemd"), ("/kubepods", "cgroupfs")];

/// The kubelet's cgroup driver that names a cgroup `path` at the root of
/// a hierarchy so, from [`KUBEPODS`]; `None` for any other path.
///
/// ```
/// use hugeshm_parse::cgroup::kubelet_driver;
/// assert_eq!(kubelet_driver("/kubepods.slice"), Some("systemd"));
/// assert_eq!(kubelet_driver("/kubepods/"), Some("cgroupfs"));
/// assert_eq!(kubelet_driver("/kubepods/pod1"), None);
/// ```
pub fn kubelet_driver(path: &str) -> Option<&'static str> {
    let p = path.trim_end_matches('/');
    KUBEPODS.iter().find(|(k, _)| *k == p).map(|(_, d)| *d)
}

/// Parses `/proc/PID/cgroup`.
pub fn parse(text: &str) -> Result<Vec<CgroupEntry>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let mut f = raw.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            return Err(ParseError::at(
                PATH,
                n,
                format!("expected \"HIERARCHY-ID:CONTROLLERS:PATH\", found {raw:?}"),
            ));
        };
        let id = parse_u64(PATH, n, "hierarchy id", id)?;
        let hierarchy_id = u32::try_from(id)
            .map_err(|_| ParseError::at(PATH, n, format!("hierarchy id {id} is too large")))?;
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (path, false),
        };
        if !path.starts_with('/') {
            return Err(ParseError::at(
                PATH,
                n,
                format!("expected a cgroup path starting with /, found {path:?}"),
            ));
        }
        out.push(CgroupEntry {
            hierarchy_id,
            controllers: controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            path: path.to_string(),
            deleted,
        });
    }
    Ok(out)
}

/// The systemd unit of a process, from its `/proc/PID/cgroup` text: the
/// outermost `*.service` in its cgroup path, else the innermost `*.scope`.
/// A unit's own sub-cgroups (`…/postgresql.service/payload`) still name it,
/// and a user's service (`…/user@1000.service/app.slice/pg.service`) names
/// the system unit whose limits bound it, `user@1000.service`.
pub fn systemd_unit(text: &str) -> Option<String> {
    // systemd's own lines first: the unified hierarchy's (`0::`) and, on
    // cgroup v1, `name=systemd`; a v1 controller systemd does not manage
    // (cpuset, a custom hierarchy) may name something else.
    let entries = parse(text).ok()?;
    let systemds = entries
        .iter()
        .filter(|e| e.hierarchy_id == 0 || e.controllers.iter().any(|c| c == "name=systemd"));
    systemds
        .chain(entries.iter())
        .find_map(|e| systemd_unit_of_path(&e.path))
}

/// The same, from a cgroup path (`/system.slice/postgresql.service`).
pub fn systemd_unit_of_path(path: &str) -> Option<String> {
    path.split('/')
        .find(|c| c.ends_with(".service"))
        .or_else(|| path.rsplit('/').find(|c| c.ends_with(".scope")))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hybrid host (Linux 6.18): v1 controllers and the unified hierarchy.
    const HYBRID: &str = "9:name=systemd:/
8:pids:/
5:devices:/
4:memory:/process_api/b8e3d68eff8cd74b7ce4f76be4109499
12:hugetlb:/kubepods/burstable/pod7c1e/ctr-pg
2:cpu,cpuacct:/
0::/
";

    #[test]
    fn real_text() {
        let e = parse(HYBRID).unwrap();
        assert_eq!(e.len(), 7);
        assert_eq!(e[0].controllers, ["name=systemd"]);
        assert_eq!(e[3].path, "/process_api/b8e3d68eff8cd74b7ce4f76be4109499");
        assert_eq!(e[5].controllers, ["cpu", "cpuacct"]);
        assert!(e[5].has_controller("cpuacct"));
        assert!(e[6].is_unified());
        assert!(!e[4].is_unified());
        let h = find(&e, "hugetlb", false).unwrap();
        assert_eq!(
            (h.hierarchy_id, h.path.as_str()),
            (12, "/kubepods/burstable/pod7c1e/ctr-pg")
        );
        assert_eq!(find(&e, "hugetlb", true).unwrap().path, "/");
        assert!(find(&e, "rdma", false).is_none());
        assert!(e.iter().all(|x| !x.deleted));
    }

    #[test]
    fn unified_only_and_odd_paths() {
        let e = parse("0::/system.slice/postgresql@16-main.service\n").unwrap();
        assert_eq!(e.len(), 1);
        assert!(e[0].is_unified());
        assert_eq!(e[0].path, "/system.slice/postgresql@16-main.service");
        // A colon in a cgroup name stays in the path; a removed cgroup.
        let e = parse("0::/a:b/c (deleted)\n0::/../../other\n").unwrap();
        assert_eq!(e[0].path, "/a:b/c");
        assert!(e[0].deleted);
        assert_eq!(e[1].path, "/../../other");
    }

    #[test]
    fn within() {
        assert!(is_within("/kubepods/pod1/ctr", "/kubepods/pod1"));
        assert!(is_within("/kubepods/pod1", "/kubepods/pod1"));
        assert!(!is_within("/kubepods/pod10", "/kubepods/pod1"));
        assert!(is_within("/", "/"));
        assert!(!is_within("/", "/a"));
    }

    #[test]
    fn malformed() {
        for (text, line) in [
            ("0::/\nnonsense\n", 2),
            ("x::/\n", 1),
            ("0:hugetlb\n", 1),
            ("-1::/\n", 1),
            ("99999999999::/\n", 1),
            ("0::relative\n", 1),
            ("0::\n", 1),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text:?}: {e}");
            assert!(e.to_string().starts_with("/proc/PID/cgroup:"), "{e}");
        }
        assert!(parse("").unwrap().is_empty());
        // Truncated mid-path: still a path.
        assert_eq!(parse("0::/sys").unwrap()[0].path, "/sys");
    }

    #[test]
    fn systemd_units() {
        assert_eq!(
            systemd_unit("0::/system.slice/system-postgresql.slice/postgresql@15-main.service\n")
                .as_deref(),
            Some("postgresql@15-main.service")
        );
        assert_eq!(
            systemd_unit("0::/system.slice/mysql.service/payload\n").as_deref(),
            Some("mysql.service")
        );
        assert_eq!(
            systemd_unit("0::/user.slice/user-0.slice/session-3.scope\n").as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(
            systemd_unit("0::/user.slice/user-1000.slice/user@1000.service/app.slice/pg.service\n")
                .as_deref(),
            Some("user@1000.service")
        );
        // cgroup v1: the named systemd hierarchy's line.
        assert_eq!(
            systemd_unit("12:hugetlb:/\n1:name=systemd:/system.slice/oracle-ohasd.service\n")
                .as_deref(),
            Some("oracle-ohasd.service")
        );
        // A controller systemd does not manage names something else.
        assert_eq!(
            systemd_unit("3:cpuset:/other.service\n1:name=systemd:/system.slice/db.service\n")
                .as_deref(),
            Some("db.service")
        );
        assert_eq!(systemd_unit("0::/\n"), None);
        assert_eq!(systemd_unit("garbage"), None);
    }
}
