//! Why a plan could not be made of its sources.

use crate::checked::TooLarge;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::postgres::PgError;
use hugeshm_probe::HostSnapshot;
use std::fmt;
use std::path::PathBuf;

/// Why a plan could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum SourceError {
    /// The kernel has no hugetlb support: there is no pool to plan.
    NoHugetlb,
    /// A page size the kernel does not offer.
    PageSize {
        /// What asked for it (`--page-size`, `SPEC: region "db": page_size`).
        what: String,
        /// The page size, in bytes.
        page_size: u64,
        /// The sizes the kernel offers.
        offered: Vec<u64>,
    },
    /// PostgreSQL could not be asked about a data directory.
    Postgres {
        /// The data directory.
        datadir: PathBuf,
        /// Why.
        error: PgError,
    },
    /// A data directory whose owner could not be read.
    DataDir {
        /// The data directory.
        datadir: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The spec file could not be read, or is not a spec: the reason,
    /// naming the file.
    Spec(String),
    /// A number of pages or bytes past what hugeshm counts.
    TooLarge(TooLarge),
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::NoHugetlb => f.write_str(
                "this kernel has no hugetlb support (no /sys/kernel/mm/hugepages): there is no pool to plan",
            ),
            SourceError::PageSize {
                what,
                page_size,
                offered,
            } => {
                let offered: Vec<String> = offered.iter().map(|p| page_size_short(*p)).collect();
                write!(
                    f,
                    "{what}: this kernel offers no {} pages ({page_size} bytes; it offers {})",
                    format_bytes(*page_size),
                    offered.join(", ")
                )
            }
            SourceError::Postgres { datadir, .. } => {
                write!(f, "asking PostgreSQL about {}", datadir.display())
            }
            SourceError::DataDir { datadir, .. } => write!(f, "reading {}", datadir.display()),
            SourceError::Spec(why) => f.write_str(why),
            SourceError::TooLarge(t) => t.fmt(f),
        }
    }
}

impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SourceError::Postgres { error, .. } => Some(error),
            SourceError::DataDir { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A page size the host's kernel offers, or the error that names it and
/// those it offers (a size it lacks would be written as a pool that does
/// not exist: `page_size = "3"` gave `hugepages-0kB`).
pub(super) fn offered_page_size(
    host: &HostSnapshot,
    page: u64,
    what: &str,
) -> Result<(), SourceError> {
    if host.pool(page).is_some() {
        return Ok(());
    }
    Err(SourceError::PageSize {
        what: what.to_owned(),
        page_size: page,
        offered: host.pools.iter().map(|p| p.page_size_bytes).collect(),
    })
}
