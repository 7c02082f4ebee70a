//! Files where another user can plant things: root's hugeshm writes into
//! `/etc`, `/var/tmp`, a directory named on the command line, and reads a
//! PostgreSQL data directory its owner controls. A name there may be a
//! symlink to a root-only file, a FIFO, or a file of another user.
//!
//! So every file here is named relative to an open directory ([`DirHandle`]):
//! read with `O_NOFOLLOW | O_NONBLOCK` and its type checked with `fstat`
//! after opening, never more than a stated size; created with `O_CREAT |
//! O_EXCL | O_NOFOLLOW` and an explicit mode (`fchmod`, whatever the
//! umask); replaced through a random temporary name in the same directory
//! renamed over it (`renameat`, which replaces a symlink rather than
//! following it). A target that is a symlink or not a regular file is
//! refused with an error that says so.
//!
//! ```
//! use hugeshm_sys::DirHandle;
//! let parent = std::env::temp_dir();
//! let dir = DirHandle::private_temp(&parent, "hugeshm-doc-", None)?; // 0700, a random name
//! dir.write_atomic("a.conf", b"x = 1\n", 0o644)?;
//! assert_eq!(dir.read_regular("a.conf", 64)?.unwrap().0, b"x = 1\n");
//! hugeshm_sys::remove_private_dir(dir.path())?;
//! # Ok::<(), std::io::Error>(())
//! ```

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed in one path before giving up (the kernel's `ELOOP`).
const MAX_LINKS: u32 = 40;
/// Tries at a random temporary name before giving up.
const NAME_TRIES: u32 = 64;

/// An open directory; the files in it are named relative to its
/// descriptor, so a directory renamed or replaced meanwhile cannot send a
/// write elsewhere.
#[derive(Debug)]
pub struct DirHandle {
    fd: OwnedFd,
    path: PathBuf,
}

/// The owner and mode of a file, from `fstat` of its open descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Owner {
    /// The owner's uid.
    pub uid: u32,
    /// The group's gid.
    pub gid: u32,
    /// The permission bits (`0o7777`).
    pub mode: u32,
}

fn at(path: &Path, what: &str, e: impl Into<io::Error>) -> io::Error {
    let e: io::Error = e.into();
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

fn refuse(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{}: {why}", path.display()),
    )
}

fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "of an unknown type",
    }
}

fn owner_of(st: &rfs::Stat) -> Owner {
    Owner {
        uid: st.st_uid,
        gid: st.st_gid,
        mode: st.st_mode & 0o7777,
    }
}

/// The effective uid of this process (`geteuid`).
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// As root under `sudo`, the uid that ran `sudo` (`SUDO_UID`): that user
/// could write anywhere as root anyway, so its directories (a home
/// directory, `sudo hugeshm lab --out report` from it) are as good as
/// root's. Only sudo sets it in root's environment; `None` otherwise.
pub fn sudo_uid() -> Option<u32> {
    if euid() != 0 {
        return None;
    }
    std::env::var("SUDO_UID").ok()?.parse().ok()
}

/// A name of `prefix` and 16 random hex digits.
fn random_name(prefix: &str, suffix: &str) -> io::Result<String> {
    let mut b = [0u8; 8];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())?;
    Ok(format!("{prefix}{:016x}{suffix}", u64::from_le_bytes(b)))
}

/// The one name a file in a directory may have: a single component.
fn leaf(name: &str) -> io::Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file name"),
        ));
    }
    Ok(name)
}

impl DirHandle {
    /// Opens the directory at `path` (symlinks in it followed: for paths
    /// only root can change, such as `/etc/sysctl.d`).
    pub fn open(path: &Path) -> io::Result<DirHandle> {
        let fd = rfs::openat(
            rfs::CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| at(path, "open the directory", e))?;
        Ok(DirHandle {
            fd,
            path: path.to_owned(),
        })
    }

    /// `mkdirat` then `fchmod` to exactly `mode`; an existing name is left
    /// as it is (its opener checks it).
    fn make_dir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        match rfs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {
                let fd = self.open_dir_nofollow(name)?;
                rfs::fchmod(&fd, Mode::from_raw_mode(mode))?;
                Ok(())
            }
            Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn open_dir_nofollow(&self, name: &OsStr) -> io::Result<OwnedFd> {
        let path = self.path.join(name);
        rfs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => refuse(
                &path,
                "is not a directory (a symbolic link or another file): refusing it".into(),
            ),
            e => at(&path, "open", e),
        })
    }

    /// Makes a new directory `PREFIX` + 16 random hex digits in `parent`,
    /// mode 0700, owned by this process's user (`mkdtemp`): a private
    /// place for files in a directory every user can write (`/var/tmp`).
    /// `parent` and the directories above it must be safe to create in
    /// (see [`DirHandle::open_output`]; a sticky directory others can
    /// write, such as `/var/tmp`, is): nobody else can then move the new
    /// directory away and put a symlink in its place, so its path may be
    /// handed to other processes. `also_trust`: as in
    /// [`DirHandle::open_output`].
    pub fn private_temp(
        parent: &Path,
        prefix: &str,
        also_trust: Option<u32>,
    ) -> io::Result<DirHandle> {
        let up = DirHandle::walk_trusted(parent, false, also_trust)?;
        for _ in 0..NAME_TRIES {
            let name = random_name(prefix, "")?;
            match rfs::mkdirat(&up.fd, name.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(at(parent, "make a directory in", e)),
            }
            let d = DirHandle {
                fd: up.open_dir_nofollow(OsStr::new(&name))?,
                path: parent.join(&name),
            };
            rfs::fchmod(&d.fd, Mode::from_raw_mode(0o700))?;
            let o = d.owner()?;
            if o.uid != euid() {
                return Err(refuse(
                    &d.path,
                    format!("is owned by uid {}, not this user", o.uid),
                ));
            }
            return Ok(d);
        }
        Err(at(
            parent,
            "find a free name in",
            io::Error::from(io::ErrorKind::AlreadyExists),
        ))
    }

    /// Opens (and with `create`, makes, mode 0755) an output directory a
    /// user may have prepared: walks `path` one component at a time
    /// without following a symlink on its own, and refuses it unless
    /// - every directory on the way is owned by root or this user, and one
    ///   that others can write has the sticky bit (`/tmp`: nobody else can
    ///   rename or remove what is in it);
    /// - every symlink on the way is owned by root or this user;
    /// - the directory itself is owned by root or this user and nobody
    ///   else (group, others) can write it.
    ///
    /// So a directory or symlink another user owns or planted never
    /// receives root's files. `also_trust` names one more user whose
    /// directories and symlinks count as this user's: the one who ran
    /// root's command through `sudo`, who could do as root anyway.
    pub fn open_output(
        path: &Path,
        create: bool,
        also_trust: Option<u32>,
    ) -> io::Result<DirHandle> {
        let d = DirHandle::walk_trusted(path, create, also_trust)?;
        let o = d.owner()?;
        if o.mode & 0o022 != 0 {
            return Err(refuse(
                path,
                format!(
                    "is writable by others (mode {:04o}): refusing to write into it (chmod go-w it)",
                    o.mode
                ),
            ));
        }
        Ok(d)
    }

    /// The walk of [`DirHandle::open_output`], without its last check: the
    /// directory at `path` may be one others can write if it is sticky.
    fn walk_trusted(path: &Path, create: bool, also: Option<u32>) -> io::Result<DirHandle> {
        let abs = if path.is_absolute() {
            path.to_owned()
        } else {
            std::env::current_dir()?.join(path)
        };
        let me = euid();
        let trusted = |uid: u32| uid == 0 || uid == me || Some(uid) == also;
        let whom = match also {
            Some(a) if a != me => format!("not root, not uid {me} or {a}"),
            _ => format!("not root, not uid {me}"),
        };
        let root_fd = || {
            rfs::openat(
                rfs::CWD,
                "/",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        };
        let mut cur = root_fd()?;
        let mut walked = PathBuf::from("/");
        let mut queue: VecDeque<OsString> = components(&abs);
        let mut links = 0;
        let check_dir = |fd: &OwnedFd, walked: &Path| -> io::Result<()> {
            let o = owner_of(&rfs::fstat(fd)?);
            if !trusted(o.uid) {
                return Err(refuse(
                    walked,
                    format!(
                        "is owned by uid {} ({whom}), mode {:04o}: refusing to write under it",
                        o.uid, o.mode
                    ),
                ));
            }
            if o.mode & 0o022 != 0 && o.mode & 0o1000 == 0 {
                return Err(refuse(
                    walked,
                    format!(
                        "is writable by others (mode {:04o}, not sticky; owner uid {}): refusing to write under it",
                        o.mode, o.uid
                    ),
                ));
            }
            Ok(())
        };
        check_dir(&cur, &walked)?;
        while let Some(comp) = queue.pop_front() {
            if comp == ".." {
                cur = rfs::openat(
                    &cur,
                    "..",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                walked.pop();
                continue;
            }
            let next = walked.join(&comp);
            let open = |cur: &OwnedFd| {
                rfs::openat(
                    cur,
                    comp.as_os_str(),
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            };
            let fd = match open(&cur) {
                Err(Errno::NOENT) if create => {
                    let d = DirHandle {
                        fd: rfs::openat(
                            &cur,
                            ".",
                            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                            Mode::empty(),
                        )?,
                        path: walked.clone(),
                    };
                    d.make_dir(&comp, 0o755)
                        .map_err(|e| at(&next, "create", e))?;
                    open(&cur).map_err(|e| at(&next, "open", e))?
                }
                r => r.map_err(|e| at(&next, "open", e))?,
            };
            let st = rfs::fstat(&fd)?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    check_dir(&fd, &next)?;
                    cur = fd;
                    walked = next;
                }
                FileType::Symlink => {
                    if !trusted(st.st_uid) {
                        return Err(refuse(
                            &next,
                            format!(
                                "is a symbolic link owned by uid {} ({whom}): refusing to follow it",
                                st.st_uid
                            ),
                        ));
                    }
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(at(&next, "resolve", Errno::LOOP));
                    }
                    let target = rfs::readlinkat(&fd, "", Vec::new())?;
                    let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                    for c in components(&target).into_iter().rev() {
                        queue.push_front(c);
                    }
                    if target.is_absolute() {
                        cur = root_fd()?;
                        walked = PathBuf::from("/");
                    }
                }
                t => {
                    return Err(refuse(
                        &next,
                        format!("is {}, not a directory", kind_name(t)),
                    ))
                }
            }
        }
        let fd = rfs::openat(
            &cur,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| at(path, "open", e))?;
        Ok(DirHandle {
            fd,
            path: path.to_owned(),
        })
    }

    /// The path this directory was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The owner and mode of the directory (of the open descriptor).
    pub fn owner(&self) -> io::Result<Owner> {
        Ok(owner_of(&rfs::fstat(&self.fd)?))
    }

    /// Reads the regular file `name`, at most `max` bytes: `None` when it
    /// does not exist; an error when it is a symlink (not followed), not
    /// a regular file (a FIFO is never waited on), or larger than `max`.
    /// Returns the bytes and the file's owner and mode.
    pub fn read_regular(&self, name: &str, max: u64) -> io::Result<Option<(Vec<u8>, Owner)>> {
        let path = self.path.join(leaf(name)?);
        let fd = match rfs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(refuse(
                    &path,
                    "is a symbolic link: refusing to follow it".into(),
                ))
            }
            Err(e) => return Err(at(&path, "open", e)),
        };
        let st = rfs::fstat(&fd)?;
        let t = FileType::from_raw_mode(st.st_mode);
        if t != FileType::RegularFile {
            return Err(refuse(
                &path,
                format!("is {}, not a regular file", kind_name(t)),
            ));
        }
        if st.st_size as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {} bytes, more than the {max} expected",
                    path.display(),
                    st.st_size
                ),
            ));
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| at(&path, "read", e))?;
        if bytes.len() as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: grew past the {max} bytes expected while read",
                    path.display()
                ),
            ));
        }
        Ok(Some((bytes, owner_of(&st))))
    }

    /// Creates the new file `name` (`O_CREAT | O_EXCL | O_NOFOLLOW`: an
    /// existing name, a symlink included, is an error) with exactly `mode`,
    /// open for reading and writing.
    pub fn create_new(&self, name: &str, mode: u32) -> io::Result<File> {
        let path = self.path.join(leaf(name)?);
        let fd = rfs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| at(&path, "create", e))?;
        rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| at(&path, "chmod", e))?;
        Ok(File::from(fd))
    }

    /// Refuses a `name` that exists and is not a regular file (a symlink
    /// is refused, not followed).
    fn check_replaceable(&self, name: &str) -> io::Result<()> {
        match rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let t = FileType::from_raw_mode(st.st_mode);
                if t == FileType::RegularFile {
                    Ok(())
                } else {
                    Err(refuse(
                        &self.path.join(name),
                        format!(
                            "is {}, not a regular file: refusing to replace it",
                            kind_name(t)
                        ),
                    ))
                }
            }
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(at(&self.path.join(name), "stat", e)),
        }
    }

    /// Replaces (or creates) the regular file `name` with `bytes`, mode
    /// exactly `mode`: written to a new file of a random name in this
    /// directory (`O_EXCL`), synced, then renamed over `name`, and the
    /// directory synced. A reader sees the old file or the new one, never
    /// a part. A `name` that is a symlink or not a regular file is refused.
    pub fn write_atomic(&self, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        let path = self.path.join(leaf(name)?);
        self.check_replaceable(name)?;
        let (tmp, mut f) = self.create_temp(name, mode)?;
        let result = (|| {
            f.write_all(bytes)?;
            f.sync_all()?;
            rfs::renameat(&self.fd, tmp.as_str(), &self.fd, name)?;
            // Durable: the rename itself is in the directory.
            let _ = rfs::fsync(&self.fd);
            Ok(())
        })();
        result.map_err(|e: io::Error| {
            let _ = rfs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            at(&path, "write", e)
        })
    }

    /// A new file `.NAME.` + random hex + `.tmp` (a name configuration
    /// readers such as sysctl.d and node_exporter's textfile collector
    /// skip), mode exactly `mode`.
    fn create_temp(&self, name: &str, mode: u32) -> io::Result<(String, File)> {
        for _ in 0..NAME_TRIES {
            let tmp = random_name(&format!(".{name}."), ".tmp")?;
            match self.create_new(&tmp, mode) {
                Ok(f) => return Ok((tmp, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(at(
            &self.path,
            "find a free temporary name in",
            io::Error::from(io::ErrorKind::AlreadyExists),
        ))
    }
}

/// The components of `path` as names (`/` and `.` dropped, `..` kept).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// The directory above `path` (`.` for a bare name) and the last
/// component's name.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(refuse(path, "does not end in a file name".into()));
    };
    if parent.as_os_str().is_empty() {
        return Ok((Path::new("."), name));
    }
    Ok((parent, name))
}

/// Removes a directory made by [`DirHandle::private_temp`] and the files in
/// it, without following a symlink: refused unless it is a directory owned
/// by this user that nobody else can enter (mode `0700` or less).
/// Returns how many files were removed.
pub fn remove_private_dir(path: &Path) -> io::Result<usize> {
    let (parent, name) = split(path)?;
    let up = DirHandle::open(parent)?;
    let fd = up.open_dir_nofollow(name)?;
    let o = owner_of(&rfs::fstat(&fd)?);
    if o.uid != euid() || o.mode & 0o077 != 0 {
        return Err(refuse(
            path,
            format!(
                "is owned by uid {} with mode {:04o}: not a private directory of uid {}, left alone",
                o.uid,
                o.mode,
                euid()
            ),
        ));
    }
    let mut names = Vec::new();
    for entry in rfs::Dir::read_from(&fd)? {
        let entry = entry?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_owned());
        }
    }
    for n in &names {
        rfs::unlinkat(&fd, n.as_os_str(), AtFlags::empty())
            .map_err(|e| at(&path.join(n), "remove", e))?;
    }
    rfs::unlinkat(&up.fd, name, AtFlags::REMOVEDIR).map_err(|e| at(path, "remove", e))?;
    Ok(names.len())
}

/// Checks that the file at `path` is one only root or this user can have
/// put there, so that running it as root runs what root meant: the
/// directories on its way pass [`DirHandle::open_output`]'s walk (owned by
/// root or this user, not writable by others unless sticky; symlinks only
/// of root or this user), and the file itself is a regular file, not a
/// symlink, owned by root or this user and not writable by group or
/// others. Returns its owner and mode.
pub fn check_trusted_file(path: &Path) -> io::Result<Owner> {
    let (parent, name) = split(path)?;
    let dir = DirHandle::walk_trusted(parent, false, None)?;
    let fd = rfs::openat(
        &dir.fd,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| at(path, "open", e))?;
    let st = rfs::fstat(&fd)?;
    let t = FileType::from_raw_mode(st.st_mode);
    let o = owner_of(&st);
    if t != FileType::RegularFile {
        return Err(refuse(
            path,
            format!(
                "is {}, not a regular file: name the file itself",
                kind_name(t)
            ),
        ));
    }
    let me = euid();
    if o.uid != 0 && o.uid != me {
        return Err(refuse(
            path,
            format!(
                "is owned by uid {} (not root, not uid {me}): refusing to run it",
                o.uid
            ),
        ));
    }
    if o.mode & 0o022 != 0 {
        return Err(refuse(
            path,
            format!(
                "is writable by others (mode {:04o}): refusing to run it",
                o.mode
            ),
        ));
    }
    Ok(o)
}

impl AsFd for DirHandle {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn scratch(what: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hugeshm-files-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn open_output_follows_own_symlinks_and_dotdot_and_makes_what_is_missing() {
        let d = scratch("walk");
        std::fs::create_dir(d.join("real")).unwrap();
        symlink(d.join("real"), d.join("link")).unwrap();
        // Through our own symlink, up and down again, two new levels.
        let target = d.join("link/../real/new/deeper");
        let h = DirHandle::open_output(&target, true, None).unwrap();
        h.write_atomic("f", b"x", 0o600).unwrap();
        let made = d.join("real/new/deeper/f");
        assert_eq!(std::fs::read(&made).unwrap(), b"x");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&made), 0o600);
        assert_eq!(mode(&d.join("real/new")), 0o755);
        // Without `create`, a missing directory is an error.
        let e = DirHandle::open_output(&d.join("absent"), false, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        // A file where a directory should be.
        std::fs::write(d.join("file"), "").unwrap();
        let e = DirHandle::open_output(&d.join("file"), true, None).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        // A symlink loop ends.
        symlink(d.join("loop"), d.join("loop")).unwrap();
        let e = DirHandle::open_output(&d.join("loop"), false, None).unwrap_err();
        assert!(
            e.to_string().contains("loop") || e.raw_os_error() == Some(libc::ELOOP),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_users_directory_or_symlink_is_refused_unless_trusted() {
        if euid() != 0 {
            return; // chown needs root
        }
        let d = scratch("owners");
        std::fs::create_dir(d.join("theirs")).unwrap();
        std::os::unix::fs::chown(d.join("theirs"), Some(65534), Some(65534)).unwrap();
        let e = DirHandle::open_output(&d.join("theirs/x"), true, None).unwrap_err();
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        assert!(!d.join("theirs/x").exists());
        DirHandle::open_output(&d.join("theirs/x"), true, Some(65534)).unwrap();
        // A sticky directory others can write: fine to create in, not to
        // write into itself.
        std::fs::create_dir(d.join("sticky")).unwrap();
        std::fs::set_permissions(d.join("sticky"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        let p = DirHandle::private_temp(&d.join("sticky"), "t-", None).unwrap();
        assert_eq!(p.owner().unwrap().mode, 0o700);
        let e = DirHandle::open_output(&d.join("sticky"), false, None).unwrap_err();
        assert!(e.to_string().contains("writable by others"), "{e}");
        // A private directory of another user is not removed.
        std::os::unix::fs::chown(p.path(), Some(65534), None).unwrap();
        let e = remove_private_dir(p.path()).unwrap_err();
        assert!(e.to_string().contains("not a private directory"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn read_regular_is_bounded_and_refuses_links_and_fifos() {
        let d = scratch("read");
        let h = DirHandle::open(&d).unwrap();
        assert!(h.read_regular("absent", 8).unwrap().is_none());
        std::fs::write(d.join("big"), [b'1'; 9]).unwrap();
        let e = h.read_regular("big", 8).unwrap_err();
        assert!(e.to_string().contains("9 bytes, more than the 8"), "{e}");
        symlink(d.join("big"), d.join("link")).unwrap();
        let e = h.read_regular("link", 64).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        rfs::mknodat(
            rfs::CWD,
            d.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = h.read_regular("fifo", 64).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(h.read_regular("../x", 8).is_err());
        let e = h.write_atomic("fifo", b"", 0o644).unwrap_err();
        assert!(e.to_string().contains("refusing to replace"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
