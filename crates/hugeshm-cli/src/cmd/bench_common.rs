//! What the bench commands share in the CLI: the count arguments and the
//! lines of the page sizes not measured (the measuring half is
//! `hugeshm_lab::common`).

use crate::output::Out;
use hugeshm_lab::common::Skipped;
use hugeshm_parse::size::page_size_short;

/// Parses a count that must be at least 1 (`--runs`, `--procs`).
pub fn parse_count_arg<T: std::str::FromStr + Default + PartialEq>(s: &str) -> Result<T, String> {
    match s.trim().parse::<T>() {
        Ok(n) if n == T::default() => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a count (a whole number from 1)")),
    }
}

/// `2M pages not measured: WHY` and its fix, a line each.
pub(crate) fn print_skipped(all: &[Skipped], out: &mut Out) -> anyhow::Result<()> {
    for sk in all {
        out.line(format!(
            "{} pages not measured: {}",
            page_size_short(sk.page_size_bytes),
            sk.reason
        ))?;
        if let Some(f) = &sk.fix {
            out.line(format!("  to fix: {f}"))?;
        }
    }
    Ok(())
}
