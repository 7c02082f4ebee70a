//! What the command line accepts: one parser per kind of value, the same in
//! every command, each listing its values to clap so that `--help`, the man
//! pages and the shell completions show them.
//!
//! - Closed sets (backend, policy, reclaim, block choice, the lab's
//!   reproductions) are [`clap::ValueEnum`]s, mapped onto the libraries'
//!   types ([`backend`], [`policy`], [`reclaim`]).
//! - Sizes are [`hugeshm_parse::size_arg`]'s: binary suffixes, positive,
//!   `10GB` refused with both readings ([`size`]).
//! - Page sizes are an open set (arm64 offers 64k, 32m, 512m, 16g): the
//!   usual ones are listed, any power of two from the base page up is
//!   accepted ([`page_size`], [`huge_page_size`]).
//!
//! A value refused here is a usage error: clap exits 2 before the command
//! runs.

use clap::builder::{
    EnumValueParser, MapValueParser, PossibleValue, StringValueParser, TypedValueParser,
};
use clap::ValueEnum;
use hugeshm_lab::oltp::Dist;
use hugeshm_parse::size::page_size_short;
use hugeshm_parse::size_arg::parse_size_arg;
use hugeshm_region::{Backend, PageSize, Policy, Reclaim};
use std::sync::LazyLock;

/// A size: `4096`, `4k`, `2M`, `1.5G`, `10GiB` (binary; `10GB` refused).
pub fn size(s: &str) -> Result<u64, String> {
    parse_size_arg(s).map_err(|e| e.to_string())
}

/// A parser of free text into `T` that lists the usual values for help and
/// completion while accepting more (page sizes). The list is the help's;
/// the function decides.
#[derive(Clone)]
pub struct Listed<T: Clone + Send + Sync + 'static> {
    values: &'static [(&'static str, &'static str)],
    parse: fn(&str) -> Result<T, String>,
}

impl<T: Clone + Send + Sync + 'static> Listed<T> {
    /// `values` (name, help) for help and completion; `parse` decides.
    pub const fn new(
        values: &'static [(&'static str, &'static str)],
        parse: fn(&str) -> Result<T, String>,
    ) -> Self {
        Listed { values, parse }
    }
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Listed<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let parse = self.parse;
        StringValueParser::new()
            .try_map(move |s| parse(&s))
            .parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            self.values
                .iter()
                .map(|(name, help)| PossibleValue::new(*name).help(*help)),
        ))
    }
}

/// The page sizes named in help and completions.
const PAGE_SIZES: [(&str, &str); 3] = [
    ("4k", "Base pages (x86-64; arm64 may use 16k or 64k)"),
    ("2m", "2 MiB huge pages"),
    ("1g", "1 GiB huge pages"),
];
const PAGE_SIZES_OR_LARGEST: [(&str, &str); 4] = [
    PAGE_SIZES[0],
    PAGE_SIZES[1],
    PAGE_SIZES[2],
    (
        "largest",
        "The largest huge page size whose pool holds the region",
    ),
];

/// `bytes` as a page: the base page, or a power of two above it.
fn page_of(text: &str, bytes: u64) -> Result<PageSize, String> {
    let base = hugeshm_sys::base_page_size() as u64;
    if bytes == base {
        Ok(PageSize::Base)
    } else if bytes.is_power_of_two() && bytes > base {
        Ok(PageSize::Huge(bytes))
    } else {
        Err(format!(
            "{text:?} is not a page size: the base page ({}) or a power of two above it, such \
             as 2m or 1g",
            page_size_short(base)
        ))
    }
}

fn explicit_page(s: &str) -> Result<PageSize, String> {
    if s.trim().eq_ignore_ascii_case("base") {
        return Ok(PageSize::Base);
    }
    page_of(s, size(s)?)
}

fn page_or_largest(s: &str) -> Result<PageSize, String> {
    if s.trim().eq_ignore_ascii_case("largest") {
        return Ok(PageSize::Largest);
    }
    explicit_page(s)
}

/// A huge page size in bytes: a page size above the base page.
pub fn huge_page_bytes(s: &str) -> Result<u64, String> {
    match explicit_page(s)? {
        PageSize::Huge(b) => Ok(b),
        _ => Err(format!(
            "{s:?} is the base page size: a huge page size is asked for (2m, 1g)"
        )),
    }
}

fn explicit_page_bytes(s: &str) -> Result<u64, String> {
    Ok(match explicit_page(s)? {
        PageSize::Huge(b) => b,
        _ => hugeshm_sys::base_page_size() as u64,
    })
}

/// A page size: 4k, 2m, 1g or another power of two from the base page up.
pub fn page_size() -> Listed<PageSize> {
    Listed {
        values: &PAGE_SIZES,
        parse: explicit_page,
    }
}

/// A page size in bytes (as [`page_size`]).
pub fn page_size_bytes() -> Listed<u64> {
    Listed {
        values: &PAGE_SIZES,
        parse: explicit_page_bytes,
    }
}

/// A page size or `largest`.
pub fn page_size_or_largest() -> Listed<PageSize> {
    Listed {
        values: &PAGE_SIZES_OR_LARGEST,
        parse: page_or_largest,
    }
}

/// A huge page size in bytes: 2m, 1g (not the base page).
pub fn huge_page_size() -> Listed<u64> {
    Listed {
        values: &[PAGE_SIZES[1], PAGE_SIZES[2]],
        parse: huge_page_bytes,
    }
}

/// A backend as a clap value: [`Backend::ALL`]'s words, in its order, or
/// those of them that `only` keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendArg(pub Backend);

/// Every backend, and the named ones (other processes find them by name).
static BACKENDS: LazyLock<[Vec<BackendArg>; 2]> = LazyLock::new(|| {
    let all = Backend::ALL.map(BackendArg);
    [
        all.to_vec(),
        all.into_iter().filter(|b| b.0.is_named()).collect(),
    ]
});

/// What a user reads about each backend in help and completions.
fn backend_help(b: Backend) -> &'static str {
    match b {
        Backend::Sysv => "System V shared memory (shmget): stays until removed, found by name",
        Backend::Memfd => "A memfd: lives while some process holds it",
        Backend::Hugetlbfs => "A file on a hugetlbfs mount: stays until removed",
        Backend::Posix => "A file in /dev/shm (tmpfs: transparent huge pages at most)",
        Backend::Anon => "Shared anonymous memory, for forked children only",
        Backend::Dax => "A file on a -o dax mount or a device-dax, mapped MAP_SYNC: durable",
        _ => "",
    }
}

impl ValueEnum for BackendArg {
    fn value_variants<'a>() -> &'a [Self] {
        &BACKENDS[0]
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.as_str()).help(backend_help(self.0)))
    }
}

/// A backend other processes find by name (the benches whose children
/// attach): sysv, hugetlbfs, posix, dax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedBackendArg(pub Backend);

impl ValueEnum for NamedBackendArg {
    fn value_variants<'a>() -> &'a [Self] {
        static NAMED: LazyLock<Vec<NamedBackendArg>> =
            LazyLock::new(|| BACKENDS[1].iter().map(|b| NamedBackendArg(b.0)).collect());
        &NAMED
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        BackendArg(self.0).to_possible_value()
    }
}

/// `--backend`: sysv, memfd, hugetlbfs, posix, anon, dax.
pub fn backend() -> MapValueParser<EnumValueParser<BackendArg>, fn(BackendArg) -> Backend> {
    EnumValueParser::<BackendArg>::new().map((|b| b.0) as fn(BackendArg) -> Backend)
}

/// A block choice of the cache benches (`--dist`) as a clap value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistArg(pub Dist);

impl ValueEnum for DistArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[DistArg(Dist::Uniform), DistArg(Dist::Zipf)]
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self.0 {
            Dist::Uniform => PossibleValue::new("uniform").help("Every block equally likely"),
            Dist::Zipf => PossibleValue::new("zipf")
                .alias("zipfian")
                .help("Zipfian with exponent 0.99 (YCSB's), hot blocks scattered over the file"),
        })
    }
}

/// `--dist` of `bench oltp` and `bench dmbc`.
pub fn dist() -> MapValueParser<EnumValueParser<DistArg>, fn(DistArg) -> Dist> {
    EnumValueParser::<DistArg>::new().map((|d| d.0) as fn(DistArg) -> Dist)
}

/// `--backend` of a bench whose children attach by name.
pub fn named_backend(
) -> MapValueParser<EnumValueParser<NamedBackendArg>, fn(NamedBackendArg) -> Backend> {
    EnumValueParser::<NamedBackendArg>::new().map((|b| b.0) as fn(NamedBackendArg) -> Backend)
}

/// What to do when huge pages cannot be had (`--policy`; Oracle's
/// use_large_pages, PostgreSQL's huge_pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    /// Never huge pages
    #[value(alias = "false")]
    Off,
    /// All on huge pages if they are there, else all on base pages, with the reason
    #[value(alias = "true")]
    Try,
    /// All on huge pages, or fail
    #[value(alias = "on")]
    Only,
}

fn to_policy(p: PolicyArg) -> Policy {
    match p {
        PolicyArg::Off => Policy::Off,
        PolicyArg::Try => Policy::Try,
        PolicyArg::Only => Policy::Only,
    }
}

/// `--policy`: off, try, only.
pub fn policy() -> MapValueParser<EnumValueParser<PolicyArg>, fn(PolicyArg) -> Policy> {
    EnumValueParser::<PolicyArg>::new().map(to_policy as fn(PolicyArg) -> Policy)
}

/// `hugeshm run --policy` (without `off`: that is running the server
/// without hugeshm run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunPolicyArg {
    /// A mapping that cannot get its pages falls back whole to base pages, with one line on stderr
    #[value(alias = "true")]
    Try,
    /// The call fails with ENOMEM after one line with the numbers and the fix
    #[value(alias = "on")]
    Only,
}

/// `run --policy`: try, only.
pub fn run_policy() -> MapValueParser<EnumValueParser<RunPolicyArg>, fn(RunPolicyArg) -> Policy> {
    fn to(p: RunPolicyArg) -> Policy {
        match p {
            RunPolicyArg::Try => Policy::Try,
            RunPolicyArg::Only => Policy::Only,
        }
    }
    EnumValueParser::<RunPolicyArg>::new().map(to as fn(RunPolicyArg) -> Policy)
}

/// What `create` does when the name exists and nobody holds it
/// (`--reclaim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReclaimArg {
    /// Refuse, saying how to reclaim it
    #[value(alias = "no", alias = "none")]
    Refuse,
    /// Attach it and keep its contents (same size and page size only)
    #[value(alias = "attach")]
    Reuse,
    /// Destroy it and create a new one
    Recreate,
}

/// `--reclaim`: refuse, reuse, recreate.
pub fn reclaim() -> MapValueParser<EnumValueParser<ReclaimArg>, fn(ReclaimArg) -> Reclaim> {
    fn to(r: ReclaimArg) -> Reclaim {
        match r {
            ReclaimArg::Refuse => Reclaim::Refuse,
            ReclaimArg::Reuse => Reclaim::Reuse,
            ReclaimArg::Recreate => Reclaim::Recreate,
        }
    }
    EnumValueParser::<ReclaimArg>::new().map(to as fn(ReclaimArg) -> Reclaim)
}

/// Seconds of a timed run (`--duration`): above 0, at most a day.
pub fn duration(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    hugeshm_lab::common::check_duration(v).map_err(|e| e.to_string())?;
    Ok(v)
}

/// A cache block (`--block-size`): a power of two from 512 bytes to 1 MiB.
pub fn block_size(s: &str) -> Result<u64, String> {
    let v = size(s)?;
    hugeshm_lab::common::check_block_size(v).map_err(|e| e.to_string())?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_backend_has_its_word_and_help() {
        let words: Vec<Backend> = BackendArg::value_variants().iter().map(|b| b.0).collect();
        assert_eq!(words, Backend::ALL);
        for b in Backend::ALL {
            assert!(!backend_help(b).is_empty(), "{b}");
            assert_eq!(BackendArg::from_str(b.as_str(), false), Ok(BackendArg(b)));
        }
        let named: Vec<&str> = NamedBackendArg::value_variants()
            .iter()
            .map(|b| b.0.as_str())
            .collect();
        assert_eq!(named, ["sysv", "hugetlbfs", "posix", "dax"]);
    }

    #[test]
    fn policy_and_reclaim_words_are_the_libraries() {
        for p in PolicyArg::value_variants() {
            let name = p.to_possible_value().unwrap().get_name().to_owned();
            assert_eq!(name, to_policy(*p).as_str());
        }
        // PostgreSQL's and Oracle's spellings stay accepted.
        assert_eq!(PolicyArg::from_str("on", false), Ok(PolicyArg::Only));
        assert_eq!(PolicyArg::from_str("true", false), Ok(PolicyArg::Try));
        for r in ReclaimArg::value_variants() {
            let name = r.to_possible_value().unwrap().get_name().to_owned();
            assert_eq!(name.parse::<Reclaim>().unwrap().as_str(), name);
        }
    }

    #[test]
    fn page_sizes() {
        assert_eq!(explicit_page("2m"), Ok(PageSize::Huge(2 << 20)));
        assert_eq!(explicit_page("2MiB"), Ok(PageSize::Huge(2 << 20)));
        assert_eq!(explicit_page("64k"), Ok(PageSize::Huge(64 << 10)));
        assert_eq!(explicit_page("4k"), Ok(PageSize::Base));
        assert_eq!(explicit_page("base"), Ok(PageSize::Base));
        assert_eq!(page_or_largest("largest"), Ok(PageSize::Largest));
        assert!(explicit_page("largest").is_err());
        let e = explicit_page("3m").unwrap_err();
        assert!(e.contains("not a page size"), "{e}");
        assert!(explicit_page("2MB").unwrap_err().contains("2M or 2MiB"));
        assert!(explicit_page("1k").is_err());
        assert_eq!(huge_page_bytes("1g"), Ok(1 << 30));
        assert!(huge_page_bytes("4k")
            .unwrap_err()
            .contains("huge page size"));
        assert_eq!(explicit_page_bytes("4k"), Ok(4096));
    }

    #[test]
    fn durations_and_block_sizes() {
        assert_eq!(duration("2.5"), Ok(2.5));
        for bad in ["0", "-1", "inf", "nan", "1e308", "x", "86401"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert_eq!(block_size("8k"), Ok(8192));
        for bad in ["256", "3k", "2M", "0"] {
            assert!(block_size(bad).is_err(), "{bad}");
        }
    }
}
