//! Memory mappings: the [`Mapping`] type that owns each one, how they are
//! made and placed, and what can be done with their pages.
//!
//! | file          | what                                                             |
//! |---------------|------------------------------------------------------------------|
//! | `mapping.rs`  | `Mapping`: addresses, checked copies, release (`munmap`, `shmdt`)  |
//! | `map.rs`      | making mappings: anonymous memory, files                         |
//! | `place.rs`    | an aligned address inside a `PROT_NONE` reservation; PMD sharing |
//! | `populate.rs` | faulting pages in: touches, `madvise`, `mlock`                   |
//! | `words.rs`    | atomic words and word copies for structures in shared memory     |
//! | `piece.rs`    | disjoint mutable pieces for parallel writers                     |
//! | `numa.rs`     | `mbind`, the thread's memory policy                              |
//! | `affinity.rs` | the thread's CPUs                                                |
//! | `persist.rs`  | durability: CPU cache write-back on `MAP_SYNC`, else `msync`     |
//! | `sigbus.rs`   | the SIGBUS guard of file mappings                                |
//! | `vma.rs`      | one mapping of this process, read back from the kernel           |

mod affinity;
mod map;
mod mapping;
mod numa;
mod persist;
mod piece;
mod place;
mod populate;
pub(crate) mod sigbus;
pub(crate) mod vma;
mod words;

pub use affinity::{affinity, set_affinity};
pub use map::{
    mmap_anon, mmap_anon_placed, mmap_anon_populate, mmap_fd, mmap_fd_placed, mmap_fd_sync_placed,
};
pub use mapping::Mapping;
pub use numa::{thread_mempolicy, MemPolicy};
pub use persist::PersistMethod;
pub use piece::Piece;
pub(crate) use place::placed;
pub use place::{pmd_shareable_bytes, PMD_SHARE_ALIGN};
pub use populate::populate_write_supported;
