//! A region's error as a bench passes it up ([`RegionFailed`]): the text a
//! front end prints, with the error kept for its fix.

use hugeshm_region::RegionError;

/// A [`RegionError`] that a bench returns: its text is the whole message
/// (no cause follows it: the text holds the cause already, and `{:#}` or
/// [`error_text`](crate::error_text) print it once), and the error itself
/// stays for a front end to show its fix (the CLI's `to fix:` line).
#[derive(Debug)]
pub struct RegionFailed(pub RegionError);

impl std::fmt::Display for RegionFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for RegionFailed {}

/// `e` as a [`RegionFailed`] error, for `map_err`.
pub(crate) fn region_failed(e: RegionError) -> anyhow::Error {
    anyhow::Error::new(RegionFailed(e))
}
