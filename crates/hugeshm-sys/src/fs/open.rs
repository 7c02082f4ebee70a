//! The one way hugeshm opens a path in a directory other users can write
//! (`/dev/shm`, `/tmp`, `/var/tmp`, a hugetlbfs or DAX mount, a data
//! directory, `/proc/PID/fd/N` of another process): [`OpenCheck::open`].
//!
//! A local user can plant anything at such a path. A FIFO makes a plain
//! `open` wait for a writer forever; a symbolic link makes root open a
//! file the user could not (and read its bytes as a header); a file with
//! a lease makes `open` wait for the lease to break. So the open is
//! `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC` (a FIFO opens at once,
//! a lease is `EWOULDBLOCK`, a link is `ELOOP`), and what was opened is
//! checked with `fstat` on the descriptor, never with a `stat` of the path
//! before (which a rename could outrun): it must be one of the kinds the
//! caller accepts (a regular file unless told otherwise), else
//! [`SysError::WrongFileType`] names the path, what is there and whose it
//! is. The caller gets the `fstat` too, owner and mode included, to apply
//! its own owner rule.
//!
//! `O_NONBLOCK` stays set on the descriptor: it changes nothing for a
//! regular file or a device-dax (reads of a regular file never block,
//! `flock` ignores it, `mmap` too).

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::SysError;

/// What a path names: the file type bits of `st_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A FIFO (named pipe).
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A type bit pattern Linux does not define.
    Unknown,
}

impl FileKind {
    /// The kind of an `st_mode`.
    pub fn of_mode(mode: u32) -> Self {
        match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::Regular,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => FileKind::Unknown,
        }
    }

    /// The kind of a `stat`.
    #[allow(clippy::unnecessary_cast)]
    pub fn of(st: &rustix::fs::Stat) -> Self {
        Self::of_mode(st.st_mode as u32)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }

    const ALL: [FileKind; 8] = [
        FileKind::Regular,
        FileKind::Directory,
        FileKind::Symlink,
        FileKind::Fifo,
        FileKind::Socket,
        FileKind::CharDevice,
        FileKind::BlockDevice,
        FileKind::Unknown,
    ];
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Symlink => "a symbolic link",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Unknown => "a file of unknown type",
        })
    }
}

/// How to open a path others may have planted something at (a FIFO
/// would block a plain open, a link would send it elsewhere): read-only or read-write, which kinds of file are
/// accepted (a regular file by default), and whether the last component
/// is a `/proc` magic link to follow.
///
/// ```
/// use hugeshm_sys::{FileKind, OpenCheck, SysError};
/// let dir = std::env::temp_dir().join(format!("open-check-doc-{}", std::process::id()));
/// std::fs::create_dir(&dir).unwrap();
/// let link = dir.join("link");
/// std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
/// match OpenCheck::read().open(&link) {
///     Err(SysError::WrongFileType { found, .. }) => assert_eq!(found, FileKind::Symlink),
///     other => panic!("{other:?}"),
/// }
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenCheck {
    write: bool,
    /// Accepted kinds, one bit per [`FileKind`].
    accept: u8,
    follow: bool,
}

impl OpenCheck {
    /// `O_RDONLY`, a regular file.
    pub fn read() -> Self {
        OpenCheck {
            write: false,
            accept: FileKind::Regular.bit(),
            follow: false,
        }
    }

    /// `O_RDWR`, a regular file.
    pub fn read_write() -> Self {
        OpenCheck {
            write: true,
            ..Self::read()
        }
    }

    /// Accepts `kind` too (e.g. a device-dax's character device where a
    /// dax region may be a file or a device).
    pub fn also(mut self, kind: FileKind) -> Self {
        self.accept |= kind.bit();
        self
    }

    /// Accepts `kind` only.
    pub fn only(mut self, kind: FileKind) -> Self {
        self.accept = kind.bit();
        self
    }

    /// Follows the last component: for `/proc/PID/fd/N` and
    /// `/proc/PID/map_files/…`, magic links the kernel resolves to the
    /// open file itself (no user can plant one; the `fstat` check still
    /// applies).
    pub fn follow_proc_link(mut self) -> Self {
        self.follow = true;
        self
    }

    fn flags(&self) -> OFlags {
        let mut f = OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        f |= if self.write {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        if !self.follow {
            f |= OFlags::NOFOLLOW;
        }
        f
    }

    fn describe(&self, path: &Path) -> String {
        format!(
            "open({}, {}{}O_NONBLOCK)",
            path.display(),
            if self.write { "O_RDWR|" } else { "O_RDONLY|" },
            if self.follow { "" } else { "O_NOFOLLOW|" },
        )
    }

    /// Opens `path` and checks what it opened. A wrong kind of file is
    /// [`SysError::WrongFileType`] (also when `open` itself refused it: a
    /// symbolic link, `ELOOP`; a socket, `ENXIO`); any other failure is
    /// [`SysError::Os`] with the call and its `errno` (`ENOENT` when there
    /// is nothing, `EWOULDBLOCK` for a file under a lease).
    pub fn open(&self, path: &Path) -> Result<CheckedFile, SysError> {
        let fd = match rustix::fs::open(path, self.flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                // What is there, if that is why (lstat: the link itself).
                if !self.follow {
                    if let Ok(st) = rustix::fs::lstat(path) {
                        let found = FileKind::of(&st);
                        if self.accept & found.bit() == 0 {
                            return Err(self.wrong_type(path, found, &st));
                        }
                    }
                }
                return Err(SysError::os(self.describe(path), e));
            }
        };
        let stat = rustix::fs::fstat(&fd)
            .map_err(|e| SysError::os(format!("fstat of {}", self.describe(path)), e))?;
        let found = FileKind::of(&stat);
        if self.accept & found.bit() == 0 {
            return Err(self.wrong_type(path, found, &stat));
        }
        Ok(CheckedFile { fd, stat })
    }

    /// The accepted kinds in words: `a regular file or a character device`.
    fn expected(&self) -> String {
        FileKind::ALL
            .iter()
            .filter(|k| self.accept & k.bit() != 0)
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    }

    #[allow(clippy::unnecessary_cast)]
    fn wrong_type(&self, path: &Path, found: FileKind, st: &rustix::fs::Stat) -> SysError {
        SysError::WrongFileType {
            path: path.display().to_string(),
            found,
            uid: st.st_uid as u32,
            expected: self.expected(),
        }
    }
}

/// A file [`OpenCheck::open`] opened, with its `fstat` (taken on the
/// descriptor, after the open).
#[derive(Debug)]
pub struct CheckedFile {
    fd: OwnedFd,
    stat: rustix::fs::Stat,
}

#[allow(clippy::unnecessary_cast)]
impl CheckedFile {
    /// The `fstat` of the descriptor.
    pub fn stat(&self) -> &rustix::fs::Stat {
        &self.stat
    }

    /// Its kind (one of those accepted).
    pub fn kind(&self) -> FileKind {
        FileKind::of(&self.stat)
    }

    /// Owner uid (for the caller's owner rule).
    pub fn uid(&self) -> u32 {
        self.stat.st_uid as u32
    }

    /// Permission bits (`st_mode & 0o777`).
    pub fn mode(&self) -> u32 {
        self.stat.st_mode as u32 & 0o777
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.stat.st_size as u64
    }

    /// Reads to the end, at most `max_bytes` (more is an `EFBIG` error:
    /// a file someone made larger than what belongs there is not read
    /// whole).
    pub fn read_all(&self, max_bytes: usize) -> Result<Vec<u8>, SysError> {
        let mut buf = vec![0u8; max_bytes.saturating_add(1)];
        let mut got = 0;
        while got < buf.len() {
            match rustix::io::read(&self.fd, &mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(SysError::os("read of a checked file".to_owned(), e)),
            }
        }
        if got > max_bytes {
            return Err(SysError::os(
                format!("read of a checked file: longer than {max_bytes} bytes"),
                rustix::io::Errno::FBIG,
            ));
        }
        buf.truncate(got);
        Ok(buf)
    }

    /// The descriptor and the `fstat`.
    pub fn into_parts(self) -> (OwnedFd, rustix::fs::Stat) {
        (self.fd, self.stat)
    }

    /// The descriptor.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

impl AsFd for CheckedFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Creates a new file at `path` for writing: `O_CREAT | O_EXCL |
/// O_NOFOLLOW` with `mode` (then `fchmod`, so the umask does not narrow
/// it), never an existing file or whatever a link points at (`EEXIST`).
/// For files hugeshm makes in directories others can write (`/var/tmp`).
pub fn create_new(path: &Path, mode: u32) -> Result<OwnedFd, SysError> {
    let call = || {
        format!(
            "open({}, O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW, {mode:#o})",
            path.display()
        )
    };
    let fd = rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_bits_truncate(mode),
    )
    .map_err(|e| SysError::os(call(), e))?;
    rustix::fs::fchmod(&fd, Mode::from_bits_truncate(mode))
        .map_err(|e| SysError::os(format!("fchmod after {}", call()), e))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn dir(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("hugeshm-open-{tag}-{}", std::process::id()));
        std::fs::create_dir(&d).unwrap();
        Dir(d)
    }

    #[test]
    fn a_regular_file_opens_with_its_owner_and_size() {
        let d = dir("reg");
        let p = d.0.join("f");
        std::fs::write(&p, b"hello").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let f = OpenCheck::read().open(&p).unwrap();
        assert_eq!(f.kind(), FileKind::Regular);
        assert_eq!(f.size(), 5);
        assert_eq!(f.mode(), 0o640);
        assert_eq!(f.uid(), rustix::process::geteuid().as_raw());
        let f = OpenCheck::read_write().open(&p).unwrap();
        rustix::io::write(&f, b"J").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"Jello");
        let e = OpenCheck::read().open(&d.0.join("none")).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
    }

    #[test]
    fn a_fifo_a_link_a_socket_and_a_directory_are_refused_at_once() {
        let d = dir("odd");
        let fifo = d.0.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_bits_truncate(0o666),
            0,
        )
        .unwrap();
        let target = d.0.join("secret");
        std::fs::write(&target, b"secret").unwrap();
        let link = d.0.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let sock = d.0.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        for (p, kind) in [
            (&fifo, FileKind::Fifo),
            (&link, FileKind::Symlink),
            (&sock, FileKind::Socket),
            (&d.0, FileKind::Directory),
        ] {
            for how in [OpenCheck::read(), OpenCheck::read_write()] {
                let e = how.open(p).unwrap_err();
                match &e {
                    SysError::WrongFileType {
                        path, found, uid, ..
                    } => {
                        assert_eq!(*found, kind, "{e}");
                        assert_eq!(path, &p.display().to_string());
                        assert_eq!(*uid, rustix::process::geteuid().as_raw());
                    }
                    other => panic!("{}: {other:?}", p.display()),
                }
                let text = e.to_string();
                assert!(
                    text.contains(&p.display().to_string()) && text.contains(&kind.to_string()),
                    "{text}"
                );
                assert!(!text.contains("secret\""), "{text}");
            }
        }
        // A device where a device is wanted; a file is refused then.
        let null = OpenCheck::read_write()
            .only(FileKind::CharDevice)
            .open(Path::new("/dev/null"))
            .unwrap();
        assert_eq!(null.kind(), FileKind::CharDevice);
        let e = OpenCheck::read().only(FileKind::CharDevice).open(&target);
        assert!(matches!(
            e,
            Err(SysError::WrongFileType {
                found: FileKind::Regular,
                ..
            })
        ));
        assert!(OpenCheck::read()
            .also(FileKind::CharDevice)
            .open(Path::new("/dev/null"))
            .is_ok());
        // A /proc magic link is followed, and still checked.
        let f = std::fs::File::open(&target).unwrap();
        let through = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
        assert!(OpenCheck::read().open(Path::new(&through)).is_err());
        let g = OpenCheck::read()
            .follow_proc_link()
            .open(Path::new(&through))
            .unwrap();
        assert_eq!(g.size(), 6);
    }

    #[test]
    fn create_new_never_opens_what_is_there() {
        let d = dir("create");
        let target = d.0.join("target");
        std::fs::write(&target, b"keep").unwrap();
        let link = d.0.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for p in [&target, &link] {
            let e = create_new(p, 0o600).unwrap_err();
            assert_eq!(e.errno(), Some(libc::EEXIST), "{e}");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let p = d.0.join("new");
        let fd = create_new(&p, 0o640).unwrap();
        assert_eq!(
            rustix::fs::fstat(&fd).unwrap().st_mode & 0o777,
            0o640,
            "mode"
        );
        let e = OpenCheck::read().open(&d.0).unwrap_err();
        assert!(matches!(
            e,
            SysError::WrongFileType {
                found: FileKind::Directory,
                ..
            }
        ));
    }
}
