//! What an opener checks of the control block before it uses a number
//! from it. Any process attached to the region may have written the
//! control block, so each geometry field is checked against what the
//! opener knows by itself: the region's size, the parts it was given, the
//! data file's length (`fstat`), and the layout it recomputes from the
//! block size and the buffers. A field out of its range is
//! [`CacheError::Corrupt`] naming it, the value and the bound; nothing is
//! mapped or read with it.

use std::sync::atomic::Ordering;

use hugeshm_region::Region;

use crate::error::{Bound, CacheError};
use crate::layout::{control, Layout, DESC_BYTES, MAGIC, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, VERSION};

/// The control block's geometry as read (wide, unchecked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Control {
    pub block_size: u64,
    pub buffers: u64,
    pub buckets: u64,
    pub partitions: u64,
    pub parts: u64,
    pub data_blocks: u64,
    pub mode: u64,
}

/// What the opener knows without shared memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Known {
    /// Data bytes of the control region.
    pub region_bytes: usize,
    /// Parts given to the opener.
    pub parts: usize,
    /// Data bytes of the smallest part (0 without parts).
    pub smallest_part: usize,
    /// The data file's length (`fstat`).
    pub file_len: u64,
}

/// What the checks leave: numbers the opener may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    pub layout: Layout,
    pub data_blocks: u64,
    pub direct: bool,
}

/// Reads the control block of `r`: refused unless it holds a ready cache
/// of this layout version.
pub(crate) fn read_control(r: &Region) -> Result<Control, CacheError> {
    if r.data_len() < Layout::new(MIN_BLOCK_SIZE, 1).total {
        return Err(CacheError::NotACache(format!(
            "{} data bytes",
            r.data_len()
        )));
    }
    if r.atomic_u32(control::READY)?.load(Ordering::Acquire) != 1 {
        return Err(CacheError::NotACache(
            "not initialized: Cache::create has not finished".into(),
        ));
    }
    let magic = r.atomic_u64(control::MAGIC)?.load(Ordering::Relaxed);
    let version = r.atomic_u32(control::VERSION)?.load(Ordering::Relaxed);
    if magic != MAGIC || version != VERSION {
        return Err(CacheError::NotACache(format!(
            "magic {magic:#x}, version {version}; expected {MAGIC:#x}, version {VERSION}"
        )));
    }
    let u32_at = |at| Ok::<u64, CacheError>(r.atomic_u32(at)?.load(Ordering::Relaxed).into());
    let u64_at = |at| Ok::<u64, CacheError>(r.atomic_u64(at)?.load(Ordering::Relaxed));
    Ok(Control {
        block_size: u32_at(control::BLOCK_SIZE)?,
        buffers: u64_at(control::BUFFERS)?,
        buckets: u64_at(control::BUCKETS)?,
        partitions: u32_at(control::PARTITIONS)?,
        parts: u32_at(control::PARTS)?,
        data_blocks: u64_at(control::DATA_BLOCKS)?,
        mode: u32_at(control::MODE)?,
    })
}

fn corrupt(field: &'static str, found: u64, bound: Bound, known: &'static str) -> CacheError {
    CacheError::Corrupt {
        field,
        buffer: None,
        found,
        bound,
        known,
    }
}

/// `found` unless it is outside `min..=max`.
fn within(
    field: &'static str,
    found: u64,
    min: u64,
    max: u64,
    known: &'static str,
) -> Result<u64, CacheError> {
    if (min..=max).contains(&found) {
        Ok(found)
    } else {
        Err(corrupt(field, found, Bound::Within { min, max }, known))
    }
}

/// `found` unless it differs from `expected`.
fn exactly(
    field: &'static str,
    found: u64,
    expected: u64,
    known: &'static str,
) -> Result<(), CacheError> {
    if found == expected {
        Ok(())
    } else {
        Err(corrupt(field, found, Bound::Exactly(expected), known))
    }
}

/// The most buffers of `bs` bytes whose layout fits the region (and whose
/// blocks fit each part): the largest `n` with [`Layout::split`]'s total
/// within the region, found by bisection (the layout grows with `n`).
/// Every layout up to it has its counts and offsets within the region's
/// (or a part's) size, so none overflows. At most `u32::MAX - 1`: links
/// are a buffer index + 1 in a `u32`.
pub(crate) fn most_buffers(bs: usize, k: &Known) -> usize {
    // Each buffer needs a descriptor and a link in the region, and its
    // block in the region or a part: a bound no layout beyond can meet.
    let blocks = match k.parts {
        0 => k.region_bytes / bs,
        n => (k.smallest_part / bs).saturating_mul(n),
    };
    let coarse = (k.region_bytes / (DESC_BYTES + 4))
        .min(blocks)
        .min(u32::MAX as usize - 1);
    let fits = |n: usize| {
        let l = Layout::split(bs, n, k.parts);
        // Without parts, part_bytes is 0 and so is the smallest part.
        l.total <= k.region_bytes && l.part_bytes() <= k.smallest_part
    };
    let (mut lo, mut hi) = (0, coarse);
    if !fits(lo) {
        return 0;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Checks `c` against `k`, field by field, in the order each bound
/// depends on the ones before (block size, then the buffers that fit,
/// then the fields the layout of those fixes).
pub(crate) fn check(c: &Control, k: &Known) -> Result<Checked, CacheError> {
    exactly("PARTS", c.parts, k.parts as u64, "the parts given to open")?;
    let (min, max) = (MIN_BLOCK_SIZE as u64, MAX_BLOCK_SIZE as u64);
    if !(c.block_size.is_power_of_two() && (min..=max).contains(&c.block_size)) {
        return Err(corrupt(
            "BLOCK_SIZE",
            c.block_size,
            Bound::PowerOfTwo { min, max },
            "the block sizes a cache may have",
        ));
    }
    let bs = c.block_size as usize;
    let most = most_buffers(bs, k) as u64;
    let buffers = within(
        "BUFFERS",
        c.buffers,
        1,
        most,
        "the region's size (and the parts') for this BLOCK_SIZE",
    )?;
    let layout = Layout::split(bs, buffers as usize, k.parts);
    exactly(
        "BUCKETS",
        c.buckets,
        layout.buckets as u64,
        "the layout of BUFFERS",
    )?;
    exactly(
        "PARTITIONS",
        c.partitions,
        layout.partitions as u64,
        "the layout of BUFFERS",
    )?;
    let data_blocks = within(
        "DATA_BLOCKS",
        c.data_blocks,
        1,
        k.file_len / c.block_size,
        "the data file's length",
    )?;
    let direct = within("MODE", c.mode, 0, 1, "the modes (0 classic, 1 direct)")? == 1;
    Ok(Checked {
        layout,
        data_blocks,
        direct,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: u64 = 4096;

    fn known() -> Known {
        Known {
            region_bytes: 1 << 20,
            parts: 0,
            smallest_part: 0,
            file_len: 64 * BS,
        }
    }

    /// The control block `Cache::create` writes for [`known`].
    fn good() -> Control {
        let l = Layout::fitting(BS as usize, 1 << 20);
        Control {
            block_size: BS,
            buffers: l.buffers as u64,
            buckets: l.buckets as u64,
            partitions: l.partitions as u64,
            parts: 0,
            data_blocks: 64,
            mode: 1,
        }
    }

    fn field_of(r: Result<Checked, CacheError>) -> (&'static str, u64) {
        match r {
            Err(CacheError::Corrupt { field, found, .. }) => (field, found),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn what_create_writes_passes() {
        let c = check(&good(), &known()).unwrap();
        assert_eq!(c.layout, Layout::fitting(BS as usize, 1 << 20));
        assert_eq!((c.data_blocks, c.direct), (64, true));
        // A smaller cache in the same region (create_sized) too.
        let l = Layout::new(BS as usize, 8);
        let small = Control {
            buffers: 8,
            buckets: l.buckets as u64,
            partitions: l.partitions as u64,
            ..good()
        };
        assert_eq!(check(&small, &known()).unwrap().layout, l);
    }

    #[test]
    fn each_field_out_of_range_is_named() {
        let g = good();
        let n = g.buffers;
        let cases: Vec<(&str, Control)> = vec![
            (
                "DATA_BLOCKS",
                Control {
                    data_blocks: 100_000,
                    ..g
                },
            ),
            (
                "DATA_BLOCKS",
                Control {
                    data_blocks: 65,
                    ..g
                },
            ),
            (
                "DATA_BLOCKS",
                Control {
                    data_blocks: 0,
                    ..g
                },
            ),
            (
                "DATA_BLOCKS",
                Control {
                    data_blocks: u64::MAX,
                    ..g
                },
            ),
            ("BLOCK_SIZE", Control { block_size: 0, ..g }),
            (
                "BLOCK_SIZE",
                Control {
                    block_size: 32,
                    ..g
                },
            ),
            (
                "BLOCK_SIZE",
                Control {
                    block_size: BS + 1,
                    ..g
                },
            ),
            (
                "BLOCK_SIZE",
                Control {
                    block_size: 1 << 31,
                    ..g
                },
            ),
            ("BUFFERS", Control { buffers: 0, ..g }),
            (
                "BUFFERS",
                Control {
                    buffers: n + 1,
                    ..g
                },
            ),
            (
                "BUFFERS",
                Control {
                    buffers: u64::MAX,
                    ..g
                },
            ),
            (
                "BUFFERS",
                Control {
                    buffers: 1 << 40,
                    ..g
                },
            ),
            (
                "BUCKETS",
                Control {
                    buckets: g.buckets * 2,
                    ..g
                },
            ),
            (
                "BUCKETS",
                Control {
                    buckets: g.buckets - 1,
                    ..g
                },
            ),
            ("BUCKETS", Control { buckets: 0, ..g }),
            (
                "PARTITIONS",
                Control {
                    partitions: g.partitions + 1,
                    ..g
                },
            ),
            ("PARTITIONS", Control { partitions: 0, ..g }),
            ("PARTS", Control { parts: 1, ..g }),
            ("MODE", Control { mode: 2, ..g }),
        ];
        for (field, c) in cases {
            assert_eq!(field_of(check(&c, &known())).0, field, "{c:?}");
        }
        // A larger block size that still fits the region: the data file
        // has fewer blocks of it than DATA_BLOCKS says.
        let big = Layout::fitting(2 * BS as usize, 1 << 20);
        let c = Control {
            block_size: 2 * BS,
            buffers: big.buffers as u64,
            buckets: big.buckets as u64,
            partitions: big.partitions as u64,
            ..g
        };
        assert_eq!(field_of(check(&c, &known())), ("DATA_BLOCKS", 64));
    }

    /// A control block whose geometry is the layout of `n` buffers.
    fn of(n: usize, parts: usize) -> Control {
        let l = Layout::split(BS as usize, n, parts);
        Control {
            buffers: n as u64,
            buckets: l.buckets as u64,
            partitions: l.partitions as u64,
            parts: parts as u64,
            ..good()
        }
    }

    /// The largest cache `create_sized` accepts (its whole layout within
    /// the region: more than `Layout::fitting` finds) opens; one buffer
    /// more is refused with that largest as the bound.
    #[test]
    fn the_largest_layout_that_fits_opens() {
        for (region, parts, part) in [(1 << 20, 0, 0), (1 << 30, 0, 0), (1 << 20, 3, 1 << 20)] {
            let k = Known {
                region_bytes: region,
                parts,
                smallest_part: part,
                ..known()
            };
            let bs = BS as usize;
            let mut n = 1;
            while {
                let l = Layout::split(bs, n + 1, parts);
                l.total <= region && (parts == 0 || l.part_bytes() <= part)
            } {
                n += 1;
            }
            assert!(check(&of(n, parts), &k).is_ok(), "{n} buffers in {region}");
            match check(&of(n + 1, parts), &k) {
                Err(CacheError::Corrupt {
                    field: "BUFFERS",
                    bound: Bound::Within { max, .. },
                    ..
                }) => assert_eq!(max, n as u64),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn parts_bound_the_buffers() {
        let k = Known {
            parts: 2,
            smallest_part: 4 * BS as usize,
            ..known()
        };
        let l = Layout::split(BS as usize, 8, 2);
        let c = Control {
            buffers: 8,
            buckets: l.buckets as u64,
            partitions: l.partitions as u64,
            parts: 2,
            ..good()
        };
        assert_eq!(check(&c, &k).unwrap().layout, l);
        let l9 = Layout::split(BS as usize, 9, 2);
        let more = Control {
            buffers: 9,
            buckets: l9.buckets as u64,
            partitions: l9.partitions as u64,
            ..c
        };
        assert_eq!(field_of(check(&more, &k)), ("BUFFERS", 9));
    }
}
