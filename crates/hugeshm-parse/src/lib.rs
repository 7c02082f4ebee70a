//! Pure parsers for the kernel files that describe huge pages and shared memory.
//!
//! Every parser takes the file's text (`&str`) and returns a typed value or a
//! [`ParseError`] naming the file and the line it could not read. Nothing here
//! touches the file system: the `hugeshm-probe` crate reads the real files (under
//! configurable `/proc` and `/sys` roots) and hands their text to these functions.
//!
//! Conventions: sizes are bytes (`kB` in the kernel's text is converted on read),
//! fields a kernel version may lack are `Option`, public structs are
//! `#[non_exhaustive]`.
//!
//! The API is each module's parser of its file and the types it returns
//! (for example [`sysctl_conf::parse`] gives [`sysctl_conf::Setting`]s,
//! whose key, value and line `hugeshm-probe` reads); how a parser reads
//! one line (`maps`'s line parser, which `smaps` shares) is the crate's own.
//!
//! ```
//! let text = "MemTotal:       24000000 kB\nHugePages_Total:      16\n\
//!             HugePages_Free:       10\nHugePages_Rsvd:        2\n\
//!             HugePages_Surp:        0\nHugepagesize:       2048 kB\n";
//! let m = hugeshm_parse::meminfo::parse(text).unwrap();
//! assert_eq!(m.hugepages_total, Some(16));
//! assert_eq!(m.hugepagesize_bytes, Some(2 * 1024 * 1024));
//! assert_eq!(m.mem_total_bytes, Some(24_000_000 * 1024));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod buddyinfo;
pub mod cgroup;
pub mod cmdline;
pub mod dpdk_eal;
pub mod elf;
pub mod error;
pub mod hugepages;
pub mod hugetlb_cgroup;
pub mod jvm_args;
pub mod maps;
pub mod meminfo;
pub mod mountinfo;
pub mod mounts;
pub mod mycnf;
pub mod nd;
pub mod node;
pub mod numa_maps;
pub mod oracle_pfile;
pub mod pagemap;
pub mod pagetypeinfo;
pub mod passwd;
pub mod pid_limits;
pub mod pid_status;
pub mod run_record;
pub mod size;
pub mod size_arg;
pub mod smaps;
pub mod sysctl;
pub mod sysctl_conf;
pub mod sysvipc_shm;
pub mod thp;
pub mod vmstat;

pub use error::ParseError;
