//! What the command line accepts: one parser per kind of value, the same in
//! every command.
//!
//! - Sizes are [`hugeshm_parse::size_arg`]'s: binary suffixes, positive,
//!   `10GB` refused with both readings ([`size`]).
//!
//! A value refused here is a usage error: clap exits 2 before the command
//! runs.

use hugeshm_parse::size_arg::parse_size_arg;

/// A size: `4096`, `4k`, `2M`, `1.5G`, `10GiB` (binary; `10GB` refused).
pub fn size(s: &str) -> Result<u64, String> {
    parse_size_arg(s).map_err(|e| e.to_string())
}
