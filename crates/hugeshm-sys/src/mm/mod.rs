//! Memory mappings: the [`Mapping`] type that owns each one, how they are
//! made and placed, and what can be done with their pages.
//!
//! | file          | what                                                             |
//! |---------------|------------------------------------------------------------------|
//! | `mapping.rs`  | `Mapping`: addresses, checked copies, release (`munmap`, `shmdt`)  |
//! | `map.rs`      | `MapOptions`: making mappings of anonymous memory or files       |
//! | `place.rs`    | an aligned address inside a `PROT_NONE` reservation; PMD sharing |
//! | `populate.rs` | faulting pages in: touches, `madvise`, `mlock`                   |
//! | `words.rs`    | atomic words and word copies for structures in shared memory     |
//! | `piece.rs`    | disjoint mutable pieces for parallel writers                     |
//! | `numa.rs`     | `mbind`, the thread's memory policy                              |
//! | `affinity.rs` | the thread's CPUs                                                |
//! | `persist.rs`  | durability: CPU cache write-back on `MAP_SYNC`, else `msync`     |
//! | `sigbus.rs`   | the SIGBUS guard of file mappings                                |
//! | `vma.rs`      | one mapping of this process, read back from the kernel           |
//! | `collapse.rs` | `MADV_COLLAPSE`: another process's shmem (`process_madvise`), own mappings |

mod affinity;
mod collapse;
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
pub use collapse::{collapse_block, BlocksCollapsed, PidFd, COLLAPSE_BLOCK};
pub use map::MapOptions;
pub use mapping::Mapping;
pub use numa::{thread_mempolicy, MemPolicy};
pub use persist::PersistMethod;
pub use piece::{even_runs, Piece};
pub(crate) use place::placed;
pub use place::{pmd_shareable_bytes, PMD_SHARE_ALIGN};
pub use populate::populate_write_supported;

#[cfg(test)]
mod tests {
    /// Rss of this process's mapping at `addr` in /proc/self/smaps, in kB.
    pub(super) fn rss_kb(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{addr:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        assert!(lines.next().is_some(), "no smaps entry at {head}");
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}
