//! The small vocabulary of a region request: backend, page size, policy,
//! pre-fault method. Each parses from and prints to the words the CLI uses.

use std::fmt;
use std::str::FromStr;

use hugeshm_parse::size::{format_bytes, parse_size};
use serde::{Deserialize, Serialize};

/// Where the memory of a region comes from, and how other processes find it.
///
/// | backend | object | name → object | shared with |
/// |---|---|---|---|
/// | `sysv` | System V segment (`shmget`, `SHM_HUGETLB`) | key [`sysv_key`](crate::sysv_key)`(name)` | any process (`shmat` by key or shmid) |
/// | `memfd` | `memfd_create` file (`MFD_HUGETLB`) | record `/dev/shm/hugeshm-memfd.<name>` → `/proc/PID/fd/N` of a holder ([`memfd_record`](crate::memfd_record)) | any process of the same uid (or root) while some process holds it |
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
}

impl Backend {
    /// Every backend, in the order the CLI lists them.
    pub const ALL: [Backend; 5] = [
        Backend::Sysv,
        Backend::Memfd,
        Backend::Hugetlbfs,
        Backend::Posix,
        Backend::Anon,
    ];

    /// The CLI word: `sysv`, `memfd`, `hugetlbfs`, `posix`, `anon`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sysv => "sysv",
            Backend::Memfd => "memfd",
            Backend::Hugetlbfs => "hugetlbfs",
            Backend::Posix => "posix",
            Backend::Anon => "anon",
        }
    }

    /// Whether the object outlives every process that maps it and can be
    /// found by name (`sysv`, `hugetlbfs`, `posix`): it stays until removed.
    pub fn is_named(self) -> bool {
        matches!(self, Backend::Sysv | Backend::Hugetlbfs | Backend::Posix)
    }

    /// Whether an unrelated process can attach a region of this backend by
    /// its name: the named backends, and `memfd` through its record (see
    /// [`memfd_record`](crate::memfd_record)) while some process holds it.
    /// `anon` regions are shared with `fork`ed children only.
    pub fn attachable_by_name(self) -> bool {
        self.is_named() || self == Backend::Memfd
    }

    /// Whether huge pages come from the hugetlb pool (every backend but
    /// `posix`, which can only use transparent huge pages).
    pub fn uses_hugetlb_pool(self) -> bool {
        !matches!(self, Backend::Posix)
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
                format!("unknown backend {s:?} (expected sysv, memfd, hugetlbfs, posix or anon)")
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
            PageSize::Base => Some(crate::sys::base_page_size() as u64),
            PageSize::Huge(b) => Some(b),
            PageSize::Largest => None,
        }
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageSize::Base => write!(f, "{}", format_bytes(crate::sys::base_page_size() as u64)),
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
        if bytes == crate::sys::base_page_size() as u64 {
            Ok(PageSize::Base)
        } else if bytes.is_power_of_two() && bytes > crate::sys::base_page_size() as u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

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
