//! Sizes as a person types them: on the command line (`--size 10G`) and in
//! hugeshm's spec files (`size = "18G"`).
//!
//! The kernel's own spellings (`2048 kB` in `/proc/meminfo`, `pagesize=2M`
//! in a mount) are [`parse_size`](crate::size::parse_size)'s. A person is
//! held to one reading:
//!
//! - a plain number is bytes: `4096`;
//! - `k`, `M`, `G`, `T` and `KiB`, `MiB`, `GiB`, `TiB` (any case) are powers
//!   of 1024, as in systemd, hugeadm and numactl: `2M`, `1.5G`, `10GiB`;
//! - `kB`, `MB`, `GB` and `TB` are refused: GNU dd and truncate read them as
//!   powers of 1000, the kernel and hugeadm as powers of 1024. The error
//!   spells the number both ways, so the fix is a copy away.
//!
//! A size is positive and fits in 64 bits; each failure says which rule it
//! broke ([`SizeError`]).
//!
//! ```
//! use hugeshm_parse::size_arg::{parse_size_arg, SizeError};
//! assert_eq!(parse_size_arg("10G"), Ok(10 << 30));
//! assert_eq!(parse_size_arg("10GiB"), Ok(10 << 30));
//! assert!(matches!(parse_size_arg("10gb"), Err(SizeError::Ambiguous { .. })));
//! assert_eq!(parse_size_arg("-1G"), Err(SizeError::Negative("-1G".into())));
//! ```

use crate::size::{GIB, KIB, MIB};

/// The examples every "not a size" names.
const EXAMPLES: &str = "examples: 4096, 4k, 2M, 1.5G, 10GiB";

/// Why a typed size was refused. `Display` quotes what was typed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// Nothing but blanks.
    #[error("an empty size ({EXAMPLES})")]
    Empty,
    /// A minus sign: `-1G`.
    #[error("{0:?}: a size is positive")]
    Negative(String),
    /// Zero bytes.
    #[error("{0:?}: a size is positive (more than 0 bytes)")]
    Zero(String),
    /// `10GB`: powers of 1000 or of 1024? The message spells the number
    /// both ways.
    #[error("{}", ambiguous_text(text, unit, number, *power, *letter))]
    Ambiguous {
        /// What was typed.
        text: String,
        /// The unit as typed (`gb`).
        unit: String,
        /// The number before it (`10`).
        number: String,
        /// The unit's power of 1000 (3 for G).
        power: u32,
        /// The letter of the binary unit (`G`).
        letter: char,
    },
    /// More than 2^64 - 1 bytes.
    #[error("{0:?} is too large (max {max} bytes, 16 EiB - 1)", max = u64::MAX)]
    TooLarge(String),
    /// Anything else.
    #[error("{0:?} is not a size ({EXAMPLES})")]
    NotASize(String),
}

/// The message of [`SizeError::Ambiguous`].
fn ambiguous_text(text: &str, unit: &str, number: &str, power: u32, letter: char) -> String {
    let sup = ["", "", "²", "³", "⁴"].get(power as usize).unwrap_or(&"");
    let decimal = match scaled(number, 1000u64.saturating_pow(power)) {
        Ok(Some(d)) => format!(", or {d} for {number} x 1000{sup}"),
        _ => String::new(),
    };
    format!(
        "{text:?}: {unit} means 1000{sup} bytes to some tools and 1024{sup} to others: write \
         {number}{letter} or {number}{letter}iB for {number} x 1024{sup} bytes{decimal}"
    )
}

/// A unit suffix: its multiplier, or a refused decimal-looking unit with
/// its power of 1000 and the letter of its binary twin.
enum Unit {
    Binary(u64),
    Ambiguous(u32, char),
}

fn unit(suffix: &str) -> Option<Unit> {
    Some(match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => Unit::Binary(1),
        "k" | "kib" => Unit::Binary(KIB),
        "m" | "mib" => Unit::Binary(MIB),
        "g" | "gib" => Unit::Binary(GIB),
        "t" | "tib" => Unit::Binary(1024 * GIB),
        "kb" => Unit::Ambiguous(1, 'K'),
        "mb" => Unit::Ambiguous(2, 'M'),
        "gb" => Unit::Ambiguous(3, 'G'),
        "tb" => Unit::Ambiguous(4, 'T'),
        _ => return None,
    })
}

/// `num` (digits with at most one `.`, up to 9 decimals) times `mult`:
/// `Err(())` when `num` is no number, `Ok(None)` when the product does not
/// fit in 64 bits. Fractions of a byte are dropped.
fn scaled(num: &str, mult: u64) -> Result<Option<u64>, ()> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') || frac.len() > 9 {
        return Err(());
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    // Digits only, so a failed parse is an overflow.
    let Ok(int) = (if int.is_empty() {
        Ok(0)
    } else {
        int.parse::<u64>()
    }) else {
        return Ok(None);
    };
    let frac_v: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| ())?
    };
    let scale = 10u128.pow(frac.len() as u32);
    let part = (frac_v as u128 * mult as u128 / scale) as u64;
    Ok(int.checked_mul(mult).and_then(|w| w.checked_add(part)))
}

/// Parses a size a person typed (see the [module docs](self)): bytes,
/// positive, binary suffixes only.
///
/// ```
/// use hugeshm_parse::size_arg::parse_size_arg;
/// assert_eq!(parse_size_arg("2m"), Ok(2 << 20));
/// assert_eq!(parse_size_arg("1.5G"), Ok(3 << 29));
/// assert_eq!(parse_size_arg("4096"), Ok(4096));
/// assert_eq!(
///     parse_size_arg("10gb").unwrap_err().to_string(),
///     "\"10gb\": gb means 1000³ bytes to some tools and 1024³ to others: write 10G or 10GiB \
///      for 10 x 1024³ bytes, or 10000000000 for 10 x 1000³"
/// );
/// ```
pub fn parse_size_arg(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SizeError::Empty);
    }
    if t.starts_with('-') {
        return Err(SizeError::Negative(text.to_owned()));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let not_a_size = || SizeError::NotASize(text.to_owned());
    if num.is_empty() {
        return Err(not_a_size());
    }
    let suffix = suffix.trim();
    let mult = match unit(suffix).ok_or_else(not_a_size)? {
        Unit::Binary(m) => m,
        Unit::Ambiguous(power, letter) => {
            scaled(num, 1).map_err(|()| not_a_size())?;
            return Err(SizeError::Ambiguous {
                text: text.to_owned(),
                unit: suffix.to_owned(),
                number: num.to_owned(),
                power,
                letter,
            });
        }
    };
    match scaled(num, mult) {
        Err(()) => Err(not_a_size()),
        Ok(None) => Err(SizeError::TooLarge(text.to_owned())),
        Ok(Some(0)) => Err(SizeError::Zero(text.to_owned())),
        Ok(Some(v)) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::parse_size;

    #[test]
    fn binary_suffixes_in_any_case() {
        for (t, v) in [
            ("4096", 4096),
            ("4096b", 4096),
            ("4k", 4 * KIB),
            ("4K", 4 * KIB),
            ("4KiB", 4 * KIB),
            ("4kib", 4 * KIB),
            (" 2m ", 2 * MIB),
            ("2MiB", 2 * MIB),
            ("10G", 10 * GIB),
            ("10GiB", 10 * GIB),
            ("10 G", 10 * GIB),
            ("1.5G", 3 * GIB / 2),
            (".5G", GIB / 2),
            ("1T", 1024 * GIB),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse_size_arg(t), Ok(v), "{t}");
            // The same bytes as the kernel-text parser, where both read it.
            assert_eq!(parse_size(t), Some(v), "{t}");
        }
    }

    #[test]
    fn decimal_looking_units_are_refused_with_both_readings() {
        for t in ["10gb", "10GB", "10Gb", "2048kB", "2MB", "1tb"] {
            assert!(
                matches!(parse_size_arg(t), Err(SizeError::Ambiguous { .. })),
                "{t}"
            );
        }
        let e = parse_size_arg("10GB").unwrap_err().to_string();
        assert!(e.contains("10G or 10GiB"), "{e}");
        assert!(e.contains("10000000000 for 10 x 1000³"), "{e}");
        let e = parse_size_arg("1.5MB").unwrap_err().to_string();
        assert!(e.contains("1.5M or 1.5MiB"), "{e}");
        assert!(e.contains("1500000 for 1.5 x 1000²"), "{e}");
        // Too large either way: only the binary spelling is offered.
        let e = parse_size_arg("99999999999TB").unwrap_err().to_string();
        assert!(e.contains("99999999999T or 99999999999TiB"), "{e}");
        assert!(!e.contains(", or"), "{e}");
        // A unit after something that is no number is no size at all.
        assert_eq!(
            parse_size_arg("1.2.3GB"),
            Err(SizeError::NotASize("1.2.3GB".into()))
        );
    }

    #[test]
    fn negative_zero_and_too_large_say_so() {
        assert_eq!(
            parse_size_arg("-1G"),
            Err(SizeError::Negative("-1G".into()))
        );
        assert_eq!(
            parse_size_arg("-1G").unwrap_err().to_string(),
            "\"-1G\": a size is positive"
        );
        assert_eq!(parse_size_arg("0"), Err(SizeError::Zero("0".into())));
        assert_eq!(parse_size_arg("0.0G"), Err(SizeError::Zero("0.0G".into())));
        for t in [
            "99999999999T",
            "16777216T",
            "99999999999999999999",
            "18446744073709551616",
        ] {
            assert_eq!(parse_size_arg(t), Err(SizeError::TooLarge(t.into())), "{t}");
        }
        assert_eq!(
            parse_size_arg("99999999999T").unwrap_err().to_string(),
            "\"99999999999T\" is too large (max 18446744073709551615 bytes, 16 EiB - 1)"
        );
    }

    #[test]
    fn what_is_no_size() {
        assert_eq!(parse_size_arg(""), Err(SizeError::Empty));
        assert_eq!(parse_size_arg("  "), Err(SizeError::Empty));
        for t in [
            "G",
            ".",
            "1.2.3G",
            "lots",
            "1x",
            "+1G",
            "1,5G",
            "0x10",
            "1.0000000001G",
        ] {
            assert_eq!(parse_size_arg(t), Err(SizeError::NotASize(t.into())), "{t}");
        }
        assert!(parse_size_arg("lots")
            .unwrap_err()
            .to_string()
            .contains("examples: 4096, 4k, 2M"));
    }
}
