//! The option files a MariaDB or MySQL server reads (`my.cnf` and what it
//! includes), read as root may read files another user could have
//! prepared: each file, and each directory it lies in, must be owned by
//! root (or the caller) and writable by nobody else
//! ([`hugeshm_sys::check_trusted_file`], [`hugeshm_sys::DirHandle`]); a
//! final symbolic link (`/etc/mysql/my.cnf` → `/etc/alternatives/my.cnf`
//! on Debian) is followed only where it is root's (or the caller's) in
//! such a directory. The text goes to hugeshm-parse's `mycnf`.

use hugeshm_parse::mycnf::{self, Line, Settings};
use std::path::{Path, PathBuf};

/// The most one option file may hold.
const MAX_OPTION_FILE: u64 = 1 << 20;
/// How deep `!include` may nest, and how many links one path may pass.
const MAX_DEPTH: usize = 10;

/// The default option files of a server on Linux, in the order it reads
/// them (`mariadbd --help --verbose`: "/etc/my.cnf /etc/mysql/my.cnf";
/// `~/.my.cnf` is the user's, not the service's, and is not read).
pub const DEFAULT_FILES: [&str; 2] = ["/etc/my.cnf", "/etc/mysql/my.cnf"];

/// The settings of the groups `groups` in `files` (those of
/// [`DEFAULT_FILES`] that exist when `files` is empty), and every file
/// read, in order. A named file that is missing, any file or directory
/// that is not trusted, or a line that is not an option, is an error that
/// names the file.
pub fn read_option_files(
    files: &[PathBuf],
    groups: &[String],
) -> Result<(Settings, Vec<PathBuf>), String> {
    let mut r = Reader {
        groups,
        settings: Settings::default(),
        read: Vec::new(),
    };
    if files.is_empty() {
        for f in DEFAULT_FILES {
            if Path::new(f).symlink_metadata().is_ok() {
                r.file(Path::new(f), 0)?;
            }
        }
    } else {
        for f in files {
            r.file(f, 0)?;
        }
    }
    Ok((r.settings, r.read))
}

struct Reader<'a> {
    groups: &'a [String],
    settings: Settings,
    read: Vec<PathBuf>,
}

impl Reader<'_> {
    fn file(&mut self, path: &Path, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "{}: !include nests more than {MAX_DEPTH} deep",
                path.display()
            ));
        }
        let real = follow_trusted_links(path)?;
        // (check_trusted_file speaks of binaries it would run.)
        let said = |e: &dyn std::fmt::Display| {
            format!("option file {e}").replace("refusing to run it", "refusing to read it")
        };
        hugeshm_sys::check_trusted_file(&real).map_err(|e| said(&e))?;
        let f = crate::read_named(&real, MAX_OPTION_FILE).map_err(|e| said(&e))?;
        let lines = mycnf::parse(&f.text).map_err(|e| format!("{}: {e}", path.display()))?;
        self.read.push(real.clone());
        let shown = real.display().to_string();
        let mut group: Option<String> = None;
        for (n, line) in lines {
            match line {
                Line::Group(g) => group = Some(g),
                Line::Option { name, value } => self.settings.add(
                    self.groups,
                    group.as_deref(),
                    &name,
                    value.as_deref(),
                    &shown,
                    n,
                ),
                Line::Include(p) => self.file(&relative(&real, &p), depth + 1)?,
                Line::IncludeDir(d) => {
                    let dir = relative(&real, &d);
                    for f in cnf_files(&dir)? {
                        self.file(&f, depth + 1)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `p` as written in `file`: absolute, or beside it.
fn relative(file: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    match file.parent() {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p.to_owned(),
    }
}

/// The `*.cnf` files of `dir` by name, as `!includedir` reads them; the
/// directory must be trusted.
fn cnf_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let refuse = |e: std::io::Error| format!("!includedir {}: {e}", dir.display());
    hugeshm_sys::DirHandle::open_output(dir, false, None).map_err(refuse)?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(refuse)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cnf"))
        .collect();
    names.sort();
    Ok(names)
}

/// `path` with its final symbolic links followed, each one owned by root
/// or the caller in a directory nobody else can write.
fn follow_trusted_links(path: &Path) -> Result<PathBuf, String> {
    let mut p = path.to_owned();
    for _ in 0..MAX_DEPTH {
        let m = p
            .symlink_metadata()
            .map_err(|e| format!("option file {}: {e}", p.display()))?;
        if !m.file_type().is_symlink() {
            return Ok(p);
        }
        let me = hugeshm_sys::euid();
        let uid = std::os::unix::fs::MetadataExt::uid(&m);
        if uid != 0 && uid != me {
            return Err(format!(
                "option file {}: a symbolic link owned by uid {uid} (not root, not uid {me}): \
                 refusing to follow it",
                p.display()
            ));
        }
        let dir = p.parent().unwrap_or(Path::new("/")).to_owned();
        hugeshm_sys::DirHandle::open_output(&dir, false, None)
            .map_err(|e| format!("option file {}: {e}", p.display()))?;
        let target = std::fs::read_link(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        p = dir.join(target);
    }
    Err(format!(
        "option file {}: more than {MAX_DEPTH} symbolic links",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn includes_are_read_in_order_and_a_file_others_can_write_is_refused() {
        let dir = std::env::temp_dir().join(format!("hugeshm-optfiles-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("conf.d")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let w = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        w(
            "my.cnf",
            "[mysqld]\ninnodb_buffer_pool_size=1G\n!includedir conf.d\n!include extra.inc\n",
        );
        w("conf.d/20-b.cnf", "[mysqld]\ninnodb_buffer_pool_size=3G\n");
        w("conf.d/10-a.cnf", "[mysqld]\ninnodb_buffer_pool_size=2G\n");
        w("conf.d/30-c.txt", "[mysqld]\ninnodb_buffer_pool_size=9G\n");
        w("extra.inc", "large_pages\n[mariadbd]\nlarge_pages\n");
        std::os::unix::fs::symlink("my.cnf", dir.join("link.cnf")).unwrap();
        let groups = mycnf::server_groups(true, "10.11");
        let (s, read) = read_option_files(&[dir.join("link.cnf")], &groups).unwrap();
        let (bp, o) = s.size("innodb_buffer_pool_size").unwrap().unwrap();
        assert_eq!(bp, 3 << 30);
        assert!(o.file.ends_with("20-b.cnf"), "{o:?}");
        assert_eq!(read.len(), 4, "{read:?}");
        // The bare line before any group belongs to none; [mariadbd]'s counts.
        assert_eq!(s.switch("large_pages").unwrap().1.group, "mariadbd");
        let f = dir.join("conf.d/20-b.cnf");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = read_option_files(&[dir.join("my.cnf")], &groups).unwrap_err();
        assert!(e.contains("20-b.cnf") && e.contains("writable"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(dir.join("conf.d"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let e = read_option_files(&[dir.join("my.cnf")], &groups).unwrap_err();
        assert!(e.contains("conf.d") && e.contains("writable"), "{e}");
        assert!(read_option_files(&[dir.join("none.cnf")], &groups).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
