//! The plain data every part of the crate speaks: what a region is asked
//! to be (backend, page size, policy, reclaim, pre-fault method), what is
//! found behind a name (state, object), what a pool lacks, what an
//! attacher expects. This module imports nothing of the crate: it is the
//! floor the other modules stand on.

use std::ffi::OsStr;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use hugeshm_fix::Fix;
use hugeshm_parse::size::{format_bytes, parse_size};
use serde::{Deserialize, Serialize};

/// Where the memory of a region comes from, and how other processes find it.
///
/// | backend | object | name → object | shared with |
/// |---|---|---|---|
/// | `sysv` | System V segment (`shmget`, `SHM_HUGETLB`) | key [`sysv_key`](crate::sysv_key)`(name)` | any process (`shmat` by key or shmid) |
/// | `memfd` | `memfd_create` file (`MFD_HUGETLB`) | record `/dev/shm/hugeshm-memfd.<name>` → `/proc/PID/fd/N` of a holder (the memfd record, see `hugeshm_region::memfd_record`) | any process of the same uid (or root) while some process holds it |
/// | `hugetlbfs` | file `<mount>/hugeshm.<name>` on a hugetlbfs mount of the page size | path | any process (open + `mmap`) |
/// | `posix` | file `/dev/shm/hugeshm.<name>` (tmpfs; THP at most) | path | any process (`shm_open` / open + `mmap`) |
/// | `anon` | `MAP_SHARED\|MAP_ANONYMOUS[\|MAP_HUGETLB]` | none | children created by `fork` only |
///
/// A `file` backend for DAX file systems will join these later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Backend {
    /// System V shared memory.
    Sysv,
    /// A memfd.
    Memfd,
    /// A file on a hugetlbfs mount.
    Hugetlbfs,
    /// A file in `/dev/shm` (tmpfs), the "memory-mapped files" style.
    Posix,
    /// Shared anonymous memory, inherited over `fork`.
    Anon,
    /// A file on a DAX file system (persistent memory: `mount -o dax`),
    /// mapped `MAP_SYNC` so that [`Region::persist`](crate::Region::persist)
    /// makes writes durable; the data outlive the machine.
    Dax,
}

impl Backend {
    /// Every backend, in the order the CLI lists them.
    pub const ALL: [Backend; 6] = [
        Backend::Sysv,
        Backend::Memfd,
        Backend::Hugetlbfs,
        Backend::Posix,
        Backend::Anon,
        Backend::Dax,
    ];

    /// The CLI word: `sysv`, `memfd`, `hugetlbfs`, `posix`, `anon`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sysv => "sysv",
            Backend::Memfd => "memfd",
            Backend::Hugetlbfs => "hugetlbfs",
            Backend::Posix => "posix",
            Backend::Anon => "anon",
            Backend::Dax => "dax",
        }
    }

    /// Whether the object outlives every process that maps it and can be
    /// found by name (`sysv`, `hugetlbfs`, `posix`): it stays until removed.
    pub fn is_named(self) -> bool {
        matches!(
            self,
            Backend::Sysv | Backend::Hugetlbfs | Backend::Posix | Backend::Dax
        )
    }

    /// Whether an unrelated process can attach a region of this backend by
    /// its name: the named backends, and `memfd` through its record (see
    /// the memfd record) while some process holds it.
    /// `anon` regions are shared with `fork`ed children only.
    pub fn attachable_by_name(self) -> bool {
        self.is_named() || self == Backend::Memfd
    }

    /// Whether huge pages come from the hugetlb pool (every backend but
    /// `posix`, which can only use transparent huge pages).
    pub fn uses_hugetlb_pool(self) -> bool {
        !matches!(self, Backend::Posix | Backend::Dax)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Backend::ALL
            .into_iter()
            .find(|b| b.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!(
                    "unknown backend {s:?} (expected sysv, memfd, hugetlbfs, posix, anon or dax)"
                )
            })
    }
}

/// The page size asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PageSize {
    /// The base page size (4 KiB on x86-64).
    Base,
    /// A huge page size in bytes (e.g. `2 << 20`), one the kernel lists in
    /// `/sys/kernel/mm/hugepages`.
    Huge(u64),
    /// The largest huge page size whose pool can hold the whole region,
    /// among those not larger than the region itself (so rounding never
    /// more than doubles it); the smallest huge size when none is.
    Largest,
}

impl PageSize {
    /// `PageSize::Huge(2 MiB)`, the default huge page size on x86-64.
    pub const HUGE_2M: PageSize = PageSize::Huge(2 << 20);
    /// `PageSize::Huge(1 GiB)`.
    pub const HUGE_1G: PageSize = PageSize::Huge(1 << 30);

    /// The size in bytes, `None` for [`PageSize::Largest`].
    pub fn bytes(self) -> Option<u64> {
        match self {
            PageSize::Base => Some(hugeshm_sys::base_page_size() as u64),
            PageSize::Huge(b) => Some(b),
            PageSize::Largest => None,
        }
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageSize::Base => write!(f, "{}", format_bytes(hugeshm_sys::base_page_size() as u64)),
            PageSize::Huge(b) => f.write_str(&format_bytes(*b)),
            PageSize::Largest => f.write_str("largest"),
        }
    }
}

impl FromStr for PageSize {
    type Err = String;
    /// `4k`/`base`, `2m`, `1g`, `2MiB`, `2097152`, `largest`.
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("largest") {
            return Ok(PageSize::Largest);
        }
        if t.eq_ignore_ascii_case("base") {
            return Ok(PageSize::Base);
        }
        let bytes = parse_size(t)
            .ok_or_else(|| format!("unknown page size {s:?} (expected 4k, 2m, 1g or largest)"))?;
        if bytes == hugeshm_sys::base_page_size() as u64 {
            Ok(PageSize::Base)
        } else if bytes.is_power_of_two() && bytes > hugeshm_sys::base_page_size() as u64 {
            Ok(PageSize::Huge(bytes))
        } else {
            Err(format!(
                "page size {s:?} is not the base page size or a power of two above it"
            ))
        }
    }
}

/// What to do when huge pages cannot be had.
///
/// These mirror Oracle's `use_large_pages` FALSE/TRUE/ONLY and PostgreSQL's
/// `huge_pages` off/try/on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Never use huge pages: the whole region on base pages.
    Off,
    /// The whole region on the asked huge pages if they are there, else the
    /// whole region on base pages (never a mix), with the reason in the
    /// report.
    #[default]
    Try,
    /// The whole region on the asked pages, or an error.
    Only,
}

impl Policy {
    /// The CLI word: `off`, `try`, `only`.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Off => "off",
            Policy::Try => "try",
            Policy::Only => "only",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = String;
    /// `off`, `try`, `only` (also `on` for `only`, as PostgreSQL spells it).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" => Ok(Policy::Off),
            "try" | "true" => Ok(Policy::Try),
            "only" | "on" => Ok(Policy::Only),
            _ => Err(format!("unknown policy {s:?} (expected off, try or only)")),
        }
    }
}

/// What [`create`](crate::RegionBuilder::create) does when a region of the
/// same name exists and **no live process holds it** (its creator crashed,
/// or exited without removing it). A region that a live process holds is
/// never touched, whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reclaim {
    /// Refuse with [`RegionError::Orphaned`](crate::RegionError::Orphaned),
    /// which says how to reclaim (the default: never lose contents
    /// silently).
    #[default]
    Refuse,
    /// Attach to it and keep its contents. Only a region whose header is
    /// `ready` can be reused, and only if its size and page size are the
    /// ones asked for; one whose creation never finished can only be
    /// recreated.
    Reuse,
    /// Destroy it and create a new one.
    Recreate,
}

impl Reclaim {
    /// The CLI word: `refuse`, `reuse`, `recreate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reclaim::Refuse => "refuse",
            Reclaim::Reuse => "reuse",
            Reclaim::Recreate => "recreate",
        }
    }
}

impl fmt::Display for Reclaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Reclaim {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "refuse" | "no" | "none" => Ok(Reclaim::Refuse),
            "reuse" | "attach" => Ok(Reclaim::Reuse),
            "recreate" => Ok(Reclaim::Recreate),
            _ => Err(format!(
                "unknown reclaim mode {s:?} (expected refuse, reuse or recreate)"
            )),
        }
    }
}

/// How the pages of a region were faulted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefaultMethod {
    /// Not pre-faulted (`prefault_threads(0)`).
    None,
    /// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14+): a fault that cannot be
    /// served is an error, never SIGBUS.
    PopulateWrite,
    /// One atomic read-modify-write per page, where the kernel lacks
    /// `MADV_POPULATE_WRITE`. Safe against SIGBUS only because hugetlb
    /// memory is reserved at map time and tmpfs files are fallocated.
    Touch,
}

impl PrefaultMethod {
    /// `none`, `populate_write`, `touch`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrefaultMethod::None => "none",
            PrefaultMethod::PopulateWrite => "populate_write",
            PrefaultMethod::Touch => "touch",
        }
    }
}

impl fmt::Display for PrefaultMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is behind a region's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegionState {
    /// Created and verified (header `ready`).
    Ready,
    /// Being created by a live process.
    Initializing,
    /// Creation never finished and the creator is gone: it crashed (or was
    /// killed) mid-creation. Can only be recreated or removed.
    Crashed,
    /// A memfd record whose memfd nobody holds any more: the memory is
    /// gone.
    Stale,
    /// Not a hugeshm region.
    Foreign,
    /// A hugeshm region of another name whose SysV key is the same.
    Collision,
    /// A hugeshm region with a newer header layout.
    Newer,
    /// hugeshm's magic, but a header that does not add up.
    Damaged,
    /// Another user's object (neither the caller's, or the owner it
    /// named, nor root's): its header is not read (a SysV segment would
    /// have to be attached, and anyone who may write an object can write a
    /// header), so whether it is a hugeshm region is not known. A SysV
    /// segment is listed from `/proc/sysvipc/shm` alone, under its key; a
    /// file or memfd record from its directory entry and `fstat`, with the
    /// page size of its file system; never attached, reused or removed.
    Untrusted,
    /// Root's SysV segment that this user may not read (mode 0600 to
    /// others: `IPC_STAT` and `shmat` refused): trusted, but its header
    /// is unknown to this user, so whether it is a hugeshm region made to
    /// be kept or one left behind only root can tell. Listed from
    /// `/proc/sysvipc/shm` alone, under its key.
    Unreadable,
}

impl RegionState {
    /// `ready`, `initializing`, `crashed`, `stale`, `foreign`, `collision`,
    /// `newer`, `damaged`, `untrusted`, `unreadable`.
    pub fn as_str(self) -> &'static str {
        match self {
            RegionState::Ready => "ready",
            RegionState::Initializing => "initializing",
            RegionState::Crashed => "crashed",
            RegionState::Stale => "stale",
            RegionState::Foreign => "foreign",
            RegionState::Collision => "collision",
            RegionState::Newer => "newer",
            RegionState::Damaged => "damaged",
            RegionState::Untrusted => "untrusted",
            RegionState::Unreadable => "unreadable",
        }
    }

    /// Whether hugeshm may reclaim or remove an object in this state (when
    /// nobody holds it).
    pub fn is_reclaimable(self) -> bool {
        matches!(
            self,
            RegionState::Ready | RegionState::Crashed | RegionState::Stale | RegionState::Newer
        )
    }
}

impl std::fmt::Display for RegionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kernel object that holds a named region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[non_exhaustive]
pub enum NamedObject {
    /// A System V segment.
    Sysv {
        /// Its key.
        key: i32,
        /// Its shmid.
        shmid: i32,
        /// Its size.
        size_bytes: u64,
        /// Current attachments.
        nattch: u64,
    },
    /// A file on hugetlbfs or tmpfs.
    File {
        /// Its path.
        path: String,
        /// Its size.
        size_bytes: u64,
    },
    /// The record of a memfd region (see `hugeshm_region::memfd_record`).
    Memfd {
        /// The record file.
        record: String,
        /// The process the record names.
        pid: u32,
        /// Its descriptor of the memfd.
        fd: i32,
        /// Region size.
        size_bytes: u64,
    },
}

impl std::fmt::Display for NamedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamedObject::Sysv { key, shmid, .. } => {
                write!(f, "SysV key {:#010x}, shmid {shmid}", *key as u32)
            }
            NamedObject::File { path, .. } => f.write_str(path),
            NamedObject::Memfd {
                record, pid, fd, ..
            } => write!(f, "memfd record {record} (pid {pid}, fd {fd})"),
        }
    }
}

/// A pool too small for a region: the numbers, and the fix.
///
/// Displays the facts,
/// `2 MiB pages: required 10432, available 288 (free 800, reserved 512)`;
/// [`Shortfall::fix`] is the pool size that would do
/// (`sysctl -w vm.nr_hugepages=10944` on the command line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Shortfall {
    /// The page size.
    pub page_size_bytes: u64,
    /// Pages the region needs.
    pub required: u64,
    /// Pages available: free − reserved.
    pub available: u64,
    /// `free_hugepages`.
    pub free: u64,
    /// `resv_hugepages` (promised to mappings, not yet faulted).
    pub reserved: u64,
    /// `nr_hugepages` (the persistent pool size).
    pub nr_hugepages: u64,
    /// The NUMA node, when the region is bound to one (`None`: host-wide).
    pub node: Option<u32>,
    /// The pool size that would do: `nr_hugepages + (required −
    /// available)` pages.
    pub fix: Fix,
}

impl Shortfall {
    /// Pages missing: `required − available`.
    pub fn missing(&self) -> u64 {
        self.required.saturating_sub(self.available)
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} pages", format_bytes(self.page_size_bytes))?;
        if let Some(n) = self.node {
            write!(f, " on node {n}")?;
        }
        write!(
            f,
            ": required {}, available {} (free {}, reserved {})",
            self.required, self.available, self.free, self.reserved
        )
    }
}

/// Who owns a kernel object and its permission bits (`st_uid` and
/// `st_mode & 0o777`, or the SysV `shm_perm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The owner's uid.
    pub uid: u32,
    /// Permission bits.
    pub mode: u32,
}

/// Whose objects a caller trusts: the owner it accepts (its effective uid
/// unless it names another), root (who may write anything anyway, so its
/// objects are as good as the caller's own to every reader), and the
/// permission bits it accepts beyond the owner's own (write access for
/// group or others only where asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trust {
    /// The uid that must own the object (or root).
    pub uid: u32,
    /// The mode the caller asked for: group/other write bits outside it
    /// are refused.
    pub mode: u32,
}

impl Trust {
    /// This process's effective uid, and mode `mode`.
    pub fn own(mode: u32) -> Trust {
        Trust {
            uid: rustix::process::geteuid().as_raw(),
            mode,
        }
    }

    /// What a listing reads the headers of: the objects of `owner` (this
    /// process's effective uid by default) and root's, whatever their
    /// mode.
    pub fn listing(owner: Option<u32>) -> Trust {
        Trust {
            uid: owner.unwrap_or_else(|| rustix::process::geteuid().as_raw()),
            mode: 0o777,
        }
    }

    /// Why `owner` is not trusted, `None` when it is.
    pub fn refuses(&self, owner: Owner) -> Option<String> {
        if owner.uid != self.uid && owner.uid != 0 {
            return Some(format!(
                "it is owned by uid {}, not uid {} (this process's, or the one named) nor root",
                owner.uid, self.uid
            ));
        }
        let extra = owner.mode & 0o022 & !self.mode;
        if extra != 0 {
            return Some(format!(
                "its mode {:04o} lets {} write it, which mode {:04o} (asked for) does not",
                owner.mode,
                match (extra & 0o020 != 0, extra & 0o002 != 0) {
                    (true, true) => "its group and others",
                    (true, false) => "its group",
                    _ => "others",
                },
                self.mode
            ));
        }
        None
    }
}

/// What an attacher expects of a region.
#[derive(Debug, Clone)]
pub(crate) struct Expect {
    pub name: Option<String>,
    pub backend: Option<Backend>,
    pub size: Option<u64>,
    pub page_size: Option<u64>,
    pub pmd_sharing: bool,
    /// Whose objects are accepted.
    pub trust: Trust,
}

impl Default for Expect {
    fn default() -> Self {
        Expect {
            name: None,
            backend: None,
            size: None,
            page_size: None,
            pmd_sharing: true,
            trust: Trust::own(0o600),
        }
    }
}

/// Why a region is not on the pages asked for (policy `try`): the reason,
/// and the pool numbers when a short pool was it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Fallback {
    /// What happened, with the numbers.
    pub reason: String,
    /// The pool numbers, when the pool was short.
    pub shortfall: Option<Shortfall>,
}

/// `Option<Fallback>` as the flat `fell_back` / `reason` / `shortfall`
/// fields that report JSON has always had (`#[serde(flatten, with)]`).
pub(crate) mod fallback_fields {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{Fallback, Shortfall};

    #[derive(Serialize, Deserialize)]
    struct Flat {
        fell_back: bool,
        reason: Option<String>,
        shortfall: Option<Shortfall>,
    }

    pub fn serialize<S: Serializer>(v: &Option<Fallback>, s: S) -> Result<S::Ok, S::Error> {
        Flat {
            fell_back: v.is_some(),
            reason: v.as_ref().map(|f| f.reason.clone()),
            shortfall: v.as_ref().and_then(|f| f.shortfall.clone()),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Fallback>, D::Error> {
        let f = Flat::deserialize(d)?;
        Ok(f.fell_back.then(|| Fallback {
            reason: f.reason.unwrap_or_default(),
            shortfall: f.shortfall,
        }))
    }
}

/// Where a region's pages come from, on a host with several NUMA nodes
/// (`create --numa`). Parses from and prints as `bind=1`, `bind=0,1`,
/// `interleave`, `interleave=0,1`, `preferred=1`,
/// `weighted-interleave=0,1`, `default`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Placement {
    /// The caller's own memory policy (`numactl --membind` and the like:
    /// honoured and reported; no `mbind`).
    #[default]
    Default,
    /// Only these nodes; a page that cannot be had there is an error.
    Bind(Vec<u32>),
    /// Page by page round-robin over these nodes (empty: every node).
    Interleave(Vec<u32>),
    /// This node first, others when it has no free page.
    Preferred(u32),
    /// Interleave weighted by `/sys/kernel/mm/mempolicy/weighted_interleave`
    /// (Linux 6.9+; empty: every node).
    WeightedInterleave(Vec<u32>),
    /// One region per node with memory, each bound to its node
    /// (`NAME.node0`, ...): Oracle's NUMA buffer pools. Made by
    /// [`RegionBuilder::create_per_node`](crate::RegionBuilder::create_per_node).
    PerNode,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |n: &[u32]| n.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        match self {
            Placement::Default => f.write_str("default"),
            Placement::Bind(n) => write!(f, "bind={}", list(n)),
            Placement::Interleave(n) if n.is_empty() => f.write_str("interleave"),
            Placement::Interleave(n) => write!(f, "interleave={}", list(n)),
            Placement::Preferred(n) => write!(f, "preferred={n}"),
            Placement::WeightedInterleave(n) if n.is_empty() => f.write_str("weighted-interleave"),
            Placement::WeightedInterleave(n) => write!(f, "weighted-interleave={}", list(n)),
            Placement::PerNode => f.write_str("per-node"),
        }
    }
}

impl FromStr for Placement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, nodes) = match s.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (s, None),
        };
        let list = |v: Option<&str>| -> Result<Vec<u32>, String> {
            let Some(v) = v else { return Ok(Vec::new()) };
            let mut out = Vec::new();
            for part in v.split(',') {
                match part.split_once('-') {
                    Some((a, b)) => {
                        let (a, b): (u32, u32) = (
                            a.parse()
                                .map_err(|_| format!("{part:?} is not a node range"))?,
                            b.parse()
                                .map_err(|_| format!("{part:?} is not a node range"))?,
                        );
                        if b < a || b - a > 1023 {
                            return Err(format!("{part:?} is not a node range"));
                        }
                        out.extend(a..=b);
                    }
                    None => out.push(
                        part.parse()
                            .map_err(|_| format!("{part:?} is not a node number"))?,
                    ),
                }
            }
            out.sort_unstable();
            out.dedup();
            Ok(out)
        };
        match kind {
            "default" if nodes.is_none() => Ok(Placement::Default),
            "bind" => {
                let n = list(nodes)?;
                if n.is_empty() {
                    return Err("bind needs nodes: bind=1 or bind=0,1".to_owned());
                }
                Ok(Placement::Bind(n))
            }
            "interleave" => Ok(Placement::Interleave(list(nodes)?)),
            "weighted-interleave" => Ok(Placement::WeightedInterleave(list(nodes)?)),
            "per-node" if nodes.is_none() => Ok(Placement::PerNode),
            "preferred" => match list(nodes)?.as_slice() {
                [n] => Ok(Placement::Preferred(*n)),
                _ => Err("preferred takes one node: preferred=1".to_owned()),
            },
            _ => Err(format!(
                "{s:?}: expected default, bind=NODES, interleave[=NODES], preferred=NODE, \
                 weighted-interleave[=NODES] or per-node"
            )),
        }
    }
}

impl Serialize for Placement {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Placement {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t = String::deserialize(d)?;
        t.parse().map_err(serde::de::Error::custom)
    }
}

/// One node's side of a NUMA shortfall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeNeed {
    /// The node.
    pub node: u32,
    /// Pages the region needs from it.
    pub required: u64,
    /// Free pages of its pool.
    pub available: u64,
    /// Its pool size (`nr_hugepages` of the node).
    pub nr_hugepages: u64,
}

/// Prefix of every object name hugeshm creates.
pub const OBJECT_PREFIX: &str = "hugeshm.";

/// Where `posix` region files live by default (the tmpfs `shm_open` uses).
pub const DEFAULT_POSIX_DIR: &str = "/dev/shm";

/// The file (or memfd) name of a region: `hugeshm.<name>`.
pub fn object_file_name(name: &str) -> String {
    format!("{OBJECT_PREFIX}{name}")
}

/// The directory (or device-dax) to name again (`--dir`,
/// [`Locator::directory`](crate::Locator::directory)) to find the region
/// `name` of `backend` whose object is `object` (its path): the file's
/// directory, or the device itself. `None` for the default `/dev/shm` and
/// for objects that are not files (SysV, memfd).
pub fn directory_hint(name: &str, backend: Backend, object: &str) -> Option<String> {
    if !matches!(backend, Backend::Posix | Backend::Hugetlbfs | Backend::Dax) {
        return None;
    }
    let path = Path::new(object);
    if !path.is_absolute() {
        return None;
    }
    if path.file_name() == Some(OsStr::new(&object_file_name(name))) {
        let dir = path.parent()?;
        (dir != Path::new(DEFAULT_POSIX_DIR)).then(|| dir.display().to_string())
    } else {
        // A device-dax holds its region from offset 0, under no file name.
        (backend == Backend::Dax).then(|| object.to_owned())
    }
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    #[test]
    fn placements_parse_and_print() {
        for (text, p) in [
            ("default", Placement::Default),
            ("bind=1", Placement::Bind(vec![1])),
            ("bind=0-2,5", Placement::Bind(vec![0, 1, 2, 5])),
            ("interleave", Placement::Interleave(vec![])),
            ("interleave=1,0", Placement::Interleave(vec![0, 1])),
            ("preferred=1", Placement::Preferred(1)),
            ("weighted-interleave", Placement::WeightedInterleave(vec![])),
        ] {
            assert_eq!(text.parse::<Placement>().unwrap(), p, "{text}");
        }
        assert_eq!(Placement::Bind(vec![0, 1]).to_string(), "bind=0,1");
        for bad in ["bind", "bind=x", "preferred=0,1", "spread", "bind=3-1"] {
            assert!(bad.parse::<Placement>().is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_hints_name_what_a_search_by_name_needs() {
        let hint = |b, o: &str| directory_hint("db", b, o);
        assert_eq!(hint(Backend::Posix, "/dev/shm/hugeshm.db"), None);
        assert_eq!(
            hint(Backend::Posix, "/dev/shm/db1/hugeshm.db").as_deref(),
            Some("/dev/shm/db1")
        );
        assert_eq!(
            hint(Backend::Hugetlbfs, "/dev/hugepages/hugeshm.db").as_deref(),
            Some("/dev/hugepages")
        );
        assert_eq!(
            hint(Backend::Dax, "/dev/dax0.1").as_deref(),
            Some("/dev/dax0.1")
        );
        assert_eq!(hint(Backend::Posix, "/dev/shm/other"), None);
        assert_eq!(hint(Backend::Sysv, "SysV key 0x1, shmid 2"), None);
        assert_eq!(hint(Backend::Memfd, "/dev/shm/x/hugeshm.db"), None);
    }

    #[test]
    fn words_roundtrip() {
        for b in Backend::ALL {
            assert_eq!(b.as_str().parse::<Backend>().unwrap(), b);
            assert_eq!(
                serde_json::to_string(&b).unwrap(),
                format!("\"{}\"", b.as_str())
            );
        }
        assert!("shm".parse::<Backend>().is_err());
        for p in [Policy::Off, Policy::Try, Policy::Only] {
            assert_eq!(p.to_string().parse::<Policy>().unwrap(), p);
        }
        assert_eq!("on".parse::<Policy>().unwrap(), Policy::Only);
        assert_eq!(
            serde_json::to_string(&PrefaultMethod::PopulateWrite).unwrap(),
            "\"populate_write\""
        );
    }

    #[test]
    fn reclaim_words() {
        for r in [Reclaim::Refuse, Reclaim::Reuse, Reclaim::Recreate] {
            assert_eq!(r.as_str().parse::<Reclaim>().unwrap(), r);
        }
        assert_eq!(Reclaim::default(), Reclaim::Refuse);
        assert!("delete".parse::<Reclaim>().is_err());
        assert!(Backend::Memfd.attachable_by_name());
        assert!(!Backend::Anon.attachable_by_name());
    }

    #[test]
    fn page_sizes() {
        assert_eq!("4k".parse::<PageSize>().unwrap(), PageSize::Base);
        assert_eq!("base".parse::<PageSize>().unwrap(), PageSize::Base);
        assert_eq!("2m".parse::<PageSize>().unwrap(), PageSize::HUGE_2M);
        assert_eq!("1G".parse::<PageSize>().unwrap(), PageSize::HUGE_1G);
        assert_eq!("largest".parse::<PageSize>().unwrap(), PageSize::Largest);
        assert!("3m".parse::<PageSize>().is_err());
        assert!("1k".parse::<PageSize>().is_err());
        assert!("huge".parse::<PageSize>().is_err());
        assert_eq!(PageSize::HUGE_2M.to_string(), "2 MiB");
        assert_eq!(PageSize::Base.to_string(), "4 KiB");
        assert_eq!(PageSize::Largest.bytes(), None);
        let j = serde_json::to_string(&PageSize::HUGE_2M).unwrap();
        assert_eq!(j, "{\"huge\":2097152}");
        assert_eq!(
            serde_json::from_str::<PageSize>(&j).unwrap(),
            PageSize::HUGE_2M
        );
    }
}
