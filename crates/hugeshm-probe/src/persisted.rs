//! The settings that will apply at the next boot: sysctl.d and tmpfiles.d
//! files (read under the file-system root), in systemd's order of precedence.

use crate::read::{read_parse_at, Problem};
use crate::Probe;
use hugeshm_parse::sysctl_conf;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A value and the file that sets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PersistedValue {
    /// The value.
    pub value: String,
    /// The file (host path) and line.
    pub file: String,
}

/// What the next boot will set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Persisted {
    /// sysctl keys hugeshm cares about (`vm.nr_hugepages`, `vm.hugetlb_shm_group`,
    /// `vm.nr_overcommit_hugepages`, `kernel.shmmax`, `kernel.shmall`), last one wins.
    pub sysctl: BTreeMap<String, PersistedValue>,
    /// tmpfiles.d writes to `.../nr_hugepages` files: sysfs path → value.
    pub sysfs_writes: BTreeMap<String, PersistedValue>,
}

const KEYS: [&str; 5] = [
    "vm.nr_hugepages",
    "vm.hugetlb_shm_group",
    "vm.nr_overcommit_hugepages",
    "kernel.shmmax",
    "kernel.shmall",
];

impl Probe {
    /// Files of a `*.d` directory set in precedence order: by file name, a name
    /// in an earlier directory (`/etc`) masking the same name in later ones.
    fn conf_files(&self, dirs: &[&str]) -> Vec<(String, PathBuf)> {
        let mut by_name: BTreeMap<String, (String, PathBuf)> = BTreeMap::new();
        for d in dirs.iter().rev() {
            let dir = self.roots.fs.join(d.trim_start_matches('/'));
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".conf") {
                    by_name.insert(name.clone(), (format!("{d}/{name}"), e.path()));
                }
            }
        }
        by_name.into_values().collect()
    }

    /// Reads the persisted settings; unreadable files go to `problems`.
    pub fn persisted(&self, problems: &mut Vec<Problem>) -> Persisted {
        let mut p = Persisted::default();
        let mut files = self.conf_files(&[
            "/etc/sysctl.d",
            "/run/sysctl.d",
            "/usr/local/lib/sysctl.d",
            "/usr/lib/sysctl.d",
            "/lib/sysctl.d",
        ]);
        let main = self.roots.fs.join("etc/sysctl.conf");
        if main.exists() {
            files.push(("/etc/sysctl.conf".to_string(), main));
        }
        for (host_path, path) in files {
            match read_parse_at(&path, sysctl_conf::parse) {
                Ok(settings) => {
                    for s in settings
                        .into_iter()
                        .filter(|s| KEYS.contains(&s.key.as_str()))
                    {
                        p.sysctl.insert(
                            s.key,
                            PersistedValue {
                                value: s.value,
                                file: format!("{host_path}:{}", s.line),
                            },
                        );
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => problems.push(e.to_problem()),
            }
        }
        for (host_path, path) in self.conf_files(&[
            "/etc/tmpfiles.d",
            "/run/tmpfiles.d",
            "/usr/local/lib/tmpfiles.d",
            "/usr/lib/tmpfiles.d",
        ]) {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for w in sysctl_conf::parse_tmpfiles_writes(&text) {
                if w.path.ends_with("/nr_hugepages") {
                    p.sysfs_writes.insert(
                        w.path,
                        PersistedValue {
                            value: w.value,
                            file: format!("{host_path}:{}", w.line),
                        },
                    );
                }
            }
        }
        p
    }
}
