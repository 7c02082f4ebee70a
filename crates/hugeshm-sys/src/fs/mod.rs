//! Files: memfd and its seals, unnamed files, locks, a file's length and
//! blocks, DAX, the hugetlbfs page size, and the checked ways of opening
//! and writing paths in directories other users can write.
//!
//! | file           | what                                                            |
//! |----------------|-----------------------------------------------------------------|
//! | `open.rs`      | `OpenCheck`: one checked open of a path (no link, no FIFO wait) |
//! | `files.rs`     | `DirHandle`: whole-file writes relative to an open directory    |
//! | `memfd.rs`     | `memfd_create`, size seals                                      |
//! | `tmpfile.rs`   | `O_TMPFILE` and the `linkat` that names it                      |
//! | `flock.rs`     | `flock`                                                         |
//! | `size.rs`      | `ftruncate`, `fallocate`                                        |
//! | `dax.rs`       | `statx`'s DAX attribute, the `FS_XFLAG_DAX` flag                |
//! | `hugetlbfs.rs` | the page size of a hugetlbfs file                               |

mod dax;
mod files;
mod flock;
mod hugetlbfs;
mod memfd;
mod open;
mod size;
mod tmpfile;

pub use dax::{dax_flag, is_dax_file, is_dax_path, set_dax_flag};
pub use files::{check_trusted_file, euid, remove_private_dir, sudo_uid, DirHandle, Owner};
pub use flock::flock;
pub use hugetlbfs::hugetlbfs_page_size;
pub use memfd::{memfd_create, seal_size, size_sealed};
pub use open::{create_new, CheckedFile, FileKind, OpenCheck};
pub use size::{fallocate, set_len};
pub use tmpfile::{link_tmpfile, open_tmpfile};
