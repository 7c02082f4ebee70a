//! Huge pages for a reproduction: raised through the benches' pool top-up
//! (given back when it is dropped), or, with `--no-reserve`, checked
//! against what the pool already has.

use super::model::Ctx;
use crate::common::PoolTopUp;
use hugeshm_parse::size::page_size_short;

/// Makes `pages` pages of `page_size` available for the life of `top`, or
/// says why they cannot be had (the caller notes it and measures the
/// rest).
pub(crate) fn make_available(
    ctx: &Ctx<'_>,
    top: &mut PoolTopUp<'_>,
    page_size: u64,
    pages: u64,
) -> Result<(), String> {
    let Some(pool) = ctx.host.pool(page_size) else {
        return Err(format!(
            "this kernel offers no {} pages",
            page_size_short(page_size)
        ));
    };
    if ctx.reserve {
        return top
            .ensure(ctx.host, page_size, pages)
            .map_err(|e| format!("{e:#}"));
    }
    let available = pool.available();
    if available < pages {
        return Err(format!(
            "--no-reserve and the pool has {available} {} pages available, {pages} needed",
            page_size_short(page_size)
        ));
    }
    Ok(())
}
