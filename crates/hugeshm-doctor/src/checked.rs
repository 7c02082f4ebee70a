//! Sums and products of pages and bytes that refuse to wrap. A plan's
//! numbers come from the command line, a spec or a plan file, so any of
//! them may be as large as `u64` holds: `--spare 18446744073709551615`
//! added to 512 pages wrapped to a plan of 511 pages. Every sum of pages
//! and bytes in advise and apply goes through these, and a result past
//! `u64::MAX` is a [`TooLarge`] that names the quantity and both numbers.

use std::fmt;

/// A sum or product of pages or bytes that does not fit in 64 bits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TooLarge {
    /// What was being counted (`the 2 MiB pool (host-wide): pages and spare`).
    pub what: String,
    /// The left operand.
    pub a: u64,
    /// `+` or `*`.
    pub op: char,
    /// The right operand.
    pub b: u64,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} {} {} is more than the largest number hugeshm counts ({})",
            self.what,
            self.a,
            self.op,
            self.b,
            u64::MAX
        )
    }
}

impl std::error::Error for TooLarge {}

/// `a + b`, or what does not fit (`what` is only built then).
pub fn add(a: u64, b: u64, what: impl FnOnce() -> String) -> Result<u64, TooLarge> {
    a.checked_add(b).ok_or_else(|| TooLarge {
        what: what(),
        a,
        b,
        op: '+',
    })
}

/// `a * b`, or what does not fit.
pub fn mul(a: u64, b: u64, what: impl FnOnce() -> String) -> Result<u64, TooLarge> {
    a.checked_mul(b).ok_or_else(|| TooLarge {
        what: what(),
        a,
        b,
        op: '*',
    })
}

/// The sum of `items`, or the first partial sum that does not fit.
pub fn sum(
    items: impl IntoIterator<Item = u64>,
    what: impl Fn() -> String,
) -> Result<u64, TooLarge> {
    items.into_iter().try_fold(0u64, |s, x| add(s, x, &what))
}

/// Adds `n` to the count under `key`.
pub fn bump<K: Ord>(
    map: &mut std::collections::BTreeMap<K, u64>,
    key: K,
    n: u64,
    what: impl FnOnce() -> String,
) -> Result<(), TooLarge> {
    let c = map.entry(key).or_default();
    *c = add(*c, n, what)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_that_fit_are_exact() {
        assert_eq!(add(512, 2, String::new), Ok(514));
        assert_eq!(mul(514, 2 << 20, String::new), Ok(514 * (2 << 20)));
        assert_eq!(sum([1, 2, u64::MAX - 3], String::new), Ok(u64::MAX));
        assert_eq!(sum([], String::new), Ok(0));
        let mut m = std::collections::BTreeMap::new();
        bump(&mut m, 'a', 3, String::new).unwrap();
        bump(&mut m, 'a', 4, String::new).unwrap();
        assert_eq!(m[&'a'], 7);
    }

    #[test]
    fn what_does_not_fit_is_refused_with_its_numbers() {
        let e = add(512, u64::MAX, || "the 2 MiB pool: pages and spare".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the 2 MiB pool: pages and spare: 512 + 18446744073709551615 is more than the \
             largest number hugeshm counts (18446744073709551615)"
        );
        let e = mul(1 << 44, 1 << 21, || "bytes".into()).unwrap_err();
        assert_eq!((e.a, e.op, e.b), (1 << 44, '*', 1 << 21));
        let e = sum([u64::MAX, 1, 5], || "sum".into()).unwrap_err();
        assert_eq!((e.a, e.b), (u64::MAX, 1));
        let mut m = std::collections::BTreeMap::from([('a', u64::MAX)]);
        assert!(bump(&mut m, 'a', 1, String::new).is_err());
        assert_eq!(m[&'a'], u64::MAX, "a refused sum leaves the count");
    }
}
