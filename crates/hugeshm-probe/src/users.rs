//! Login names and uids, both ways, as the roots' host knows them: the
//! system's user database through NSS (`getpwuid_r`, `getpwnam_r`: local
//! files, LDAP, SSSD, systemd-userdb alike, as `id` and `ls -l` resolve
//! them) when the file-system root is `/`, and a captured tree's
//! `etc/passwd` (read with [`hugeshm_parse::passwd`]) otherwise.

use crate::Roots;
use std::path::Path;

/// The user database of a host (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Users {
    /// `etc/passwd` under the file-system root (the fixture's database; on
    /// the live host, only to see a uid with two names).
    passwd: String,
    /// Ask NSS (the file-system root is `/`).
    nss: bool,
}

impl Users {
    /// The database of the host these roots read.
    pub fn of(roots: &Roots) -> Users {
        Users {
            passwd: std::fs::read_to_string(roots.fs.join("etc/passwd")).unwrap_or_default(),
            nss: roots.fs == Path::new("/"),
        }
    }

    /// The system's database (NSS).
    pub fn system() -> Users {
        Users::of(&Roots::default())
    }

    /// The login name of `uid` (the first, where several share it).
    pub fn name_of(&self, uid: u32) -> Option<String> {
        if self.nss {
            return hugeshm_sys::user_by_uid(uid).ok().flatten().map(|u| u.name);
        }
        hugeshm_parse::passwd::name_of(&self.passwd, uid).map(str::to_owned)
    }

    /// The login name of `uid` where it has one only (a second name for the
    /// same uid, as some hosts give a service account, would not match a
    /// `limits.conf` line of the first). NSS gives one name per uid; a
    /// second one is seen in the local `/etc/passwd`.
    pub fn only_name_of(&self, uid: u32) -> Option<String> {
        let local = hugeshm_parse::passwd::entries(&self.passwd)
            .filter(|(_, u)| *u == uid)
            .count();
        if local > 1 {
            return None;
        }
        self.name_of(uid)
    }

    /// The uid and primary gid of the login name `name` (the live host's
    /// database only).
    pub fn ids_of(&self, name: &str) -> Option<(u32, u32)> {
        let u = hugeshm_sys::user_by_name(name).ok().flatten();
        u.filter(|_| self.nss).map(|u| (u.uid, u.gid))
    }

    /// The uid of the login name `name`.
    pub fn uid_of(&self, name: &str) -> Option<u32> {
        if self.nss {
            return hugeshm_sys::user_by_name(name)
                .ok()
                .flatten()
                .map(|u| u.uid);
        }
        hugeshm_parse::passwd::uid_of(&self.passwd, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_host_asks_nss_and_a_fixture_reads_its_passwd() {
        let live = Users::system();
        assert!(live.nss);
        let root = hugeshm_sys::user_by_uid(0).unwrap().unwrap();
        assert_eq!(live.name_of(0), Some(root.name.clone()));
        assert_eq!(live.uid_of(&root.name), Some(0));
        let nobody = hugeshm_sys::user_by_uid(65534).unwrap().map(|u| u.name);
        assert_eq!(live.name_of(65534), nobody);
        assert_eq!(live.uid_of("no-such-user-hugeshm"), None);

        let dir = hugeshm_testkit::TempDir::new("probe-users");
        std::fs::create_dir_all(dir.path().join("fs/etc")).unwrap();
        std::fs::write(
            dir.path().join("fs/etc/passwd"),
            "admin:x:0:0::/:/bin/sh\noracle:x:54321:54321::/:/bin/sh\nora2:x:54321:1::/:/bin/sh\n",
        )
        .unwrap();
        let fixture = Users::of(&Roots::fixture(dir.path()));
        assert!(!fixture.nss);
        assert_eq!(fixture.name_of(0).as_deref(), Some("admin"));
        assert_eq!(fixture.uid_of("admin"), Some(0));
        assert_eq!(fixture.uid_of(&root.name), None, "not the host's");
        assert_eq!(fixture.name_of(54321).as_deref(), Some("oracle"));
        assert_eq!(fixture.only_name_of(54321), None, "two names");
        assert_eq!(fixture.only_name_of(0).as_deref(), Some("admin"));
        assert_eq!(fixture.name_of(65534), None);
    }
}
