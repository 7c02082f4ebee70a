//! A mapped file's own DAX state on a `dax=inode` mount. The kernel says
//! it through system calls (`statx`'s `STATX_ATTR_DAX`, the
//! `FS_IOC_FSGETXATTR` ioctl), which a fixture tree cannot answer: the
//! caller passes a [`FileDaxReader`] in the [`Probe`](crate::Probe)
//! ([`Probe::with_file_dax`](crate::Probe::with_file_dax)), as it passes the
//! roots: [`SysFileDax`] on the live host (`hugeshm-sys`), tests their own.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A file's own DAX state on a `dax=inode` mount: the kernel serves it by
/// DAX only when its inode was loaded with the flag (`FS_XFLAG_DAX`, `chattr
/// +x`); without it, through the page cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FileDax {
    /// Whether the kernel serves it by DAX (`statx` `STATX_ATTR_DAX`);
    /// `None`: unknown (a fixture tree, or not readable).
    pub dax: Option<bool>,
    /// Whether it has the flag (`FS_IOC_FSGETXATTR`); set while `dax` is
    /// false: not in force yet (applied when its inode is loaded again).
    pub flag: Option<bool>,
}

impl FileDax {
    /// A state read by a [`FileDaxReader`].
    pub fn new(dax: Option<bool>, flag: Option<bool>) -> Self {
        FileDax { dax, flag }
    }
}

/// Reads the DAX state of a mapped file, given a path that reaches it
/// (`/proc/PID/map_files/START-END`, or `/proc/PID/root/PATH`).
pub trait FileDaxReader: Send + Sync {
    /// The state of the file at `path`; `None` where it cannot be read.
    fn read(&self, path: &Path) -> Option<FileDax>;
}

/// The live host's reader: `statx`'s DAX attribute and the file's own
/// flag, through `hugeshm-sys`.
pub struct SysFileDax;

impl FileDaxReader for SysFileDax {
    fn read(&self, path: &Path) -> Option<FileDax> {
        let dax = hugeshm_sys::is_dax_path(path).ok()?;
        // Another user's file (by /proc/PID/root/PATH, which that user may
        // have turned into a FIFO or a link since): the checked open. A
        // /proc/PID/map_files link is the kernel's, followed.
        let how = hugeshm_sys::OpenCheck::read();
        let how = if path.to_string_lossy().contains("/map_files/") {
            how.follow_proc_link()
        } else {
            how
        };
        let flag = how
            .open(path)
            .ok()
            .and_then(|f| hugeshm_sys::dax_flag(std::os::fd::AsFd::as_fd(&f)).ok());
        Some(FileDax::new(dax, flag))
    }
}

/// The reader a [`Probe`](crate::Probe) holds, if any. Two are equal when
/// they are the same reader (or both absent).
#[derive(Clone, Default)]
pub(crate) struct ReaderSlot(pub(crate) Option<Arc<dyn FileDaxReader>>);

impl fmt::Debug for ReaderSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "Some(FileDaxReader)",
            None => "None",
        })
    }
}

impl PartialEq for ReaderSlot {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Eq for ReaderSlot {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Probe, Roots};

    struct Never;

    impl FileDaxReader for Never {
        fn read(&self, _: &Path) -> Option<FileDax> {
            None
        }
    }

    #[test]
    fn a_probe_carries_its_reader_and_compares_by_it() {
        let bare = Probe::new(Roots::default());
        assert!(bare.file_dax_reader().is_none());
        let reader: Arc<dyn FileDaxReader> = Arc::new(Never);
        let with = bare.clone().with_file_dax(reader.clone());
        assert!(with.file_dax_reader().is_some());
        // Clones and other maps sources keep it.
        let text = with.clone().with_maps(crate::MapsSource::Text);
        assert!(text.file_dax_reader().is_some());
        assert_eq!(with.clone(), with);
        assert_ne!(with, bare);
        assert_ne!(with, bare.clone().with_file_dax(Arc::new(Never)));
        assert_eq!(with, bare.with_file_dax(reader));
        assert_eq!(format!("{:?}", with.file_dax), "Some(FileDaxReader)");
    }
}
