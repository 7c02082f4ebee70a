//! The OLTP-style workload of `hugeshm bench oltp` (and `bench dmbc`):
//! block choice (uniform or Zipfian), a read/write mix, a latency
//! histogram, and the same loop run through the [`Cache`] or straight on a
//! region (the "raw" baseline that shows the cache's overhead). A user of
//! hugeshm-cache, not part of it: what a server's loop over the cache
//! looks like (hints a few operations ahead, optimistic reads).
//!
//! One operation touches one 64-byte row of one block: a read loads its 8
//! words, a write increments the first and stores the other 7.

use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use hugeshm_region::Region;
use serde::{Deserialize, Serialize};

use hugeshm_cache::{Cache, CacheError, Lookups, Prefetch, Stats};

/// Which blocks the operations pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Every block equally likely.
    Uniform,
    /// Zipfian with exponent 0.99 (YCSB's), hot blocks scattered over the
    /// file.
    Zipf,
}

impl std::fmt::Display for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dist::Uniform => "uniform",
            Dist::Zipf => "zipf",
        })
    }
}

/// A small, fast generator (xorshift64*), seeded per process.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Block numbers in `0..n` drawn from a [`Dist`].
#[derive(Debug, Clone)]
pub(crate) struct Picker {
    n: u64,
    zipf: Option<Zipf>,
}

#[derive(Debug, Clone)]
struct Zipf {
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Picker {
    /// A picker over `n` blocks (n > 0).
    pub fn new(dist: Dist, n: u64) -> Picker {
        let zipf = (dist == Dist::Zipf && n > 2).then(|| {
            let theta = 0.99;
            let zetan = zeta(n, theta);
            let zeta2 = zeta(2, theta);
            Zipf {
                theta,
                zetan,
                alpha: 1.0 / (1.0 - theta),
                eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            }
        });
        Picker { n: n.max(1), zipf }
    }

    /// The next block.
    #[inline]
    pub fn pick(&self, rng: &mut Rng) -> u64 {
        match self.zipf {
            None => rng.below(self.n),
            Some(_) => self.pick_zipf(rng),
        }
    }

    /// The next block, uniform ones from the high bits of `v` (a draw the
    /// caller also takes other bits of), Zipfian ones from `rng`.
    #[inline]
    fn pick_with(&self, v: u64, rng: &mut Rng) -> u64 {
        match self.zipf {
            None => ((v as u128 * self.n as u128) >> 64) as u64,
            Some(_) => self.pick_zipf(rng),
        }
    }

    fn pick_zipf(&self, rng: &mut Rng) -> u64 {
        let Some(z) = &self.zipf else {
            return rng.below(self.n);
        };
        let u = rng.unit();
        let uz = u * z.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(z.theta) {
            1
        } else {
            ((self.n as f64) * (z.eta * u - z.eta + 1.0).powf(z.alpha)) as u64
        };
        // Scatter the hot ranks over the file (FNV-1a of the rank).
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in rank.min(self.n - 1).to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        h % self.n
    }
}

/// A latency histogram: 16 linear buckets below 16 ns, then 16 buckets
/// per power of two (at most 1/16 relative error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Histogram {
    /// `(bucket, count)` for the non-empty buckets, ascending.
    pub buckets: Vec<(u32, u64)>,
    #[serde(skip)]
    dense: Vec<u64>,
}

const BUCKETS: usize = 16 + 60 * 16;

fn bucket_of(ns: u64) -> usize {
    if ns < 16 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize;
    16 + (e - 4) * 16 + ((ns >> (e - 4)) & 15) as usize
}

fn bucket_low(idx: usize) -> u64 {
    if idx < 16 {
        return idx as u64;
    }
    let e = (idx - 16) / 16 + 4;
    let sub = ((idx - 16) % 16) as u64;
    (16 + sub) << (e - 4)
}

impl Histogram {
    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        if self.dense.is_empty() {
            self.dense = vec![0; BUCKETS];
        }
        self.dense[bucket_of(ns).min(BUCKETS - 1)] += 1;
    }

    /// Moves the recorded values into the sparse, serializable form.
    pub fn seal(&mut self) {
        let dense = std::mem::take(&mut self.dense);
        for (i, c) in dense.into_iter().enumerate() {
            if c > 0 {
                self.add_bucket(i as u32, c);
            }
        }
    }

    fn add_bucket(&mut self, b: u32, c: u64) {
        match self.buckets.binary_search_by_key(&b, |&(k, _)| k) {
            Ok(i) => self.buckets[i].1 += c,
            Err(i) => self.buckets.insert(i, (b, c)),
        }
    }

    /// Adds another (sealed) histogram.
    pub fn merge(&mut self, o: &Histogram) {
        for &(b, c) in &o.buckets {
            self.add_bucket(b, c);
        }
    }

    /// Values recorded (sealed).
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.1).sum()
    }

    /// The `q` quantile (0..=1) in nanoseconds: the lower bound of its
    /// bucket; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let want = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for &(b, c) in &self.buckets {
            seen += c;
            if seen >= want {
                return Some(bucket_low(b as usize));
            }
        }
        self.buckets.last().map(|&(b, _)| bucket_low(b as usize))
    }
}

/// What one worker runs.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// Block choice.
    pub dist: Dist,
    /// Percentage of operations that write (0–100).
    pub write_pct: u32,
    /// Time one operation in this many (rounded up to a power of two; the
    /// clock costs about as much as an operation; 1 = every one).
    pub sample_every: u32,
}

/// What one run of one worker did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub(crate) struct RunResult {
    /// Operations (one block each).
    pub ops: u64,
    /// Of which writes.
    pub writes: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// CPU time the worker's thread used in the run (less than `seconds`
    /// when other processes share the CPUs).
    pub cpu_seconds: f64,
    /// Cache counters of the run (zero for the raw loop).
    pub stats: Stats,
    /// Sampled operation latencies.
    pub latency: Histogram,
    /// A sum of the words read, so no read is optimized away.
    pub checksum: u64,
}

const ROW_WORDS: usize = 8;

/// A read: the sum of the row's words.
#[inline]
fn read_row(row: &[AtomicU64]) -> u64 {
    row.iter()
        .fold(0u64, |s, w| s.wrapping_add(w.load(Ordering::Relaxed)))
}

/// An update: the first word + 1, the others derived from it.
#[inline]
fn update_row(row: &[AtomicU64]) -> u64 {
    let v = row[0].load(Ordering::Relaxed).wrapping_add(1);
    row[0].store(v, Ordering::Relaxed);
    for (i, w) in row.iter().enumerate().skip(1) {
        w.store(v ^ i as u64, Ordering::Relaxed);
    }
    v
}

/// One operation: a block, the first word of its row, read or write.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Op {
    /// Block number.
    pub block: u64,
    /// First word of the row.
    pub word: usize,
    /// A write (else a read).
    pub write: bool,
}

/// Draws [`Op`]s: one random draw per operation (the block from its high
/// bits, the row and the read/write choice from its low bits), as cheap
/// as the C loop the raw figure is checked against.
struct Ops<'a> {
    picker: &'a Picker,
    rows_mask: u64,
    write_below: u64,
}

impl Ops<'_> {
    #[inline]
    fn next(&self, rng: &mut Rng) -> Op {
        let v = rng.next_u64();
        Op {
            block: self.picker.pick_with(v, rng),
            word: ((v >> 16) & self.rows_mask) as usize * ROW_WORDS,
            write: v & 0xFFFF < self.write_below,
        }
    }
}

/// Operations the loop draws ahead of the one it runs (a power of two).
const RING: usize = 16;
/// How far ahead each prefetch step runs: the bucket, then the
/// descriptor, then the row (see [`Cache::prefetch`]).
/// Tried on a 2-core Zen 5 VM with 2 MiB pages: 15/10/5 as good as any
/// farther or nearer (12/8/4, 24/16/8: within the noise), none at all
/// about half as many transactions per CPU-second.
const STEPS: [(usize, Prefetch); 3] = [
    (15, Prefetch::Bucket),
    (10, Prefetch::Descriptor),
    (5, Prefetch::Row),
];

/// What [`drive`] runs: a hint for an operation a few ahead, and the
/// operation. Methods rather than closures, inlined into the loop: the
/// loop waits on memory, and a call per step (the closures were not
/// inlined, being called from more than one place) kept fewer lookups in
/// flight.
trait Workload {
    /// Starts loading what `op` will touch, step `step`.
    fn ahead(&self, op: &Op, step: Prefetch);
    /// Runs `op`, returning a value for the checksum.
    fn run(&self, op: &Op) -> Result<u64, CacheError>;
}

/// The loop: draws operations [`RING`] ahead, calls `w.ahead(op, step)`
/// for each step of [`STEPS`] as an operation comes that close, and
/// `w.run(op)` for each in turn until `duration` has passed. The first
/// operations go without hints (each call site is the only one, so that
/// it is inlined).
#[inline(always)]
fn drive(
    spec: &Spec,
    picker: &Picker,
    rng: &mut Rng,
    rows: u64,
    duration: Duration,
    w: &impl Workload,
) -> Result<RunResult, CacheError> {
    let mut r = RunResult::default();
    let ops = Ops {
        picker,
        // Rows per block is a power of two (block sizes are).
        rows_mask: rows.max(1).next_power_of_two() - 1,
        write_below: u64::from(spec.write_pct.min(100)) * 65536 / 100,
    };
    let mut ring = [Op::default(); RING];
    for slot in ring.iter_mut() {
        *slot = ops.next(rng);
    }
    // A power of two, so the test is a mask, not a division.
    let mask = u64::from(spec.sample_every.max(1)).next_power_of_two() - 1;
    let start = Instant::now();
    let cpu0 = hugeshm_sys::thread_cpu_seconds().unwrap_or(0.0);
    let deadline = start + duration;
    let mut k = 0usize;
    loop {
        for _ in 0..256 {
            let o = ring[k % RING];
            // The step a constant at each call: its `match` folds away.
            w.ahead(&ring[(k + STEPS[0].0) % RING], STEPS[0].1);
            w.ahead(&ring[(k + STEPS[1].0) % RING], STEPS[1].1);
            w.ahead(&ring[(k + STEPS[2].0) % RING], STEPS[2].1);
            let t = (r.ops & mask == 0).then(Instant::now);
            r.checksum = r.checksum.wrapping_add(w.run(&o)?);
            if let Some(t) = t {
                r.latency.record(t.elapsed().as_nanos() as u64);
            }
            ring[k % RING] = ops.next(rng);
            k = k.wrapping_add(1);
            r.ops += 1;
            r.writes += u64::from(o.write);
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    r.seconds = start.elapsed().as_secs_f64();
    r.cpu_seconds = hugeshm_sys::thread_cpu_seconds().unwrap_or(0.0) - cpu0;
    r.latency.seal();
    Ok(r)
}

/// The cache's loop: hints through [`Lookups::prefetch`], reads through
/// [`Lookups::read_with`], writes through [`Cache::write`].
struct CacheLoop<'a> {
    cache: &'a Cache,
    lk: Lookups<'a>,
}

impl Workload for CacheLoop<'_> {
    #[inline(always)]
    fn ahead(&self, o: &Op, step: Prefetch) {
        self.lk.prefetch(o.block, o.word * 8, o.write, step);
    }

    #[inline(always)]
    fn run(&self, o: &Op) -> Result<u64, CacheError> {
        let row = o.word..o.word + ROW_WORDS;
        if o.write {
            self.write(o.block, row)
        } else {
            self.lk.read_with(o.block, |w| read_row(&w[row.clone()]))
        }
    }
}

impl CacheLoop<'_> {
    /// A write, out of the loop's line (a few in a hundred operations;
    /// the pin and lock code inlined into the loop slowed the reads).
    #[inline(never)]
    fn write(&self, blk: u64, row: std::ops::Range<usize>) -> Result<u64, CacheError> {
        let g = self.cache.write(blk)?;
        Ok(update_row(&g.words()?[row]))
    }
}

/// Runs the workload through `cache` for `duration`, naming each block to
/// [`Lookups::prefetch`] a few operations before it is read or written
/// (as a server that knows its next keys does; the lookups then overlap
/// instead of waiting for memory one after the other). Reads go through
/// [`Lookups::read_with`] (no lock on a hit), writes through
/// [`Cache::write`].
pub(crate) fn run_cache(
    cache: &Cache,
    spec: &Spec,
    picker: &Picker,
    rng: &mut Rng,
    duration: Duration,
) -> Result<RunResult, CacheError> {
    let rows = (cache.layout().block_size / (ROW_WORDS * 8)) as u64;
    cache.reset_stats();
    let w = CacheLoop {
        cache,
        lk: cache.lookups()?,
    };
    let mut r = drive(spec, picker, rng, rows, duration, &w)?;
    drop(w);
    r.stats = cache.stats();
    Ok(r)
}

/// The raw loop: rows of a flat array of blocks.
struct RawLoop<'a> {
    all: &'a [AtomicU64],
    block_words: usize,
    blocks: u64,
}

impl Workload for RawLoop<'_> {
    #[inline(always)]
    fn ahead(&self, _: &Op, _: Prefetch) {}

    #[inline(always)]
    fn run(&self, o: &Op) -> Result<u64, CacheError> {
        let at = o.block as usize * self.block_words + o.word;
        let Some(words) = self.all.get(at..at + ROW_WORDS) else {
            return Err(CacheError::BlockOutOfRange {
                block: o.block,
                blocks: self.blocks,
            });
        };
        Ok(if o.write {
            update_row(words)
        } else {
            read_row(words)
        })
    }
}

/// Runs the same loop straight on `region`'s data, as a flat array of
/// `blocks` blocks of `block_size` bytes from data offset `at` (no hash
/// table, no pins, no locks, no prefetch: the CPU overlaps the independent
/// loads itself): the ceiling the cache is compared with. Given a cache's
/// block area ([`Layout::blocks_at`](hugeshm_cache::Layout::blocks_at), its
/// buffers), it runs on the very pages the cache's rows are on, and a
/// cache run can follow it: it writes only those blocks' bytes, never the
/// descriptors or the hash table, so the cache stays whole (its blocks no
/// longer holding the data file's bytes: a bench's cache, not a
/// server's).
pub(crate) fn run_raw(
    region: &Region,
    at: usize,
    block_size: usize,
    blocks: u64,
    spec: &Spec,
    rng: &mut Rng,
    duration: Duration,
) -> Result<RunResult, CacheError> {
    let fit = (region.data_len().saturating_sub(at) / block_size) as u64;
    if blocks == 0 || blocks > fit || block_size < ROW_WORDS * 8 || at % 8 != 0 {
        return Err(CacheError::Config(format!(
            "{blocks} blocks of {block_size} bytes from data offset {at}: the region's {} data bytes hold {fit} there",
            region.data_len()
        )));
    }
    let picker = Picker::new(spec.dist, blocks);
    let rows = (block_size / (ROW_WORDS * 8)) as u64;
    let block_words = block_size / 8;
    // Checked once: every row of every block lies in it.
    let all = region.atomic_u64s(at, blocks as usize * block_words)?;
    let w = RawLoop {
        all,
        block_words,
        blocks,
    };
    drive(spec, &picker, rng, rows, duration, &w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_cache::create_data_file;
    use hugeshm_region::{Backend, RegionBuilder};
    use hugeshm_testkit::TempDir;

    #[test]
    fn histogram_quantiles_are_within_a_sixteenth() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        h.seal();
        assert_eq!(h.count(), 10_000);
        let p50 = h.quantile(0.5).unwrap();
        assert!((4700..=5000).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99).unwrap();
        assert!((9300..=9900).contains(&p99), "{p99}");
        let mut m = Histogram::default();
        m.merge(&h);
        m.merge(&h);
        assert_eq!(m.count(), 20_000);
        assert_eq!(m.quantile(0.5), Some(p50));
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn bucket_bounds_roundtrip() {
        for v in [0u64, 15, 16, 17, 100, 1000, 123_456, u64::MAX / 2] {
            let b = bucket_of(v);
            assert!(bucket_low(b) <= v, "{v}");
            assert!(bucket_low(b + 1) > v, "{v}");
        }
    }

    #[test]
    fn zipf_is_skewed_and_uniform_is_not() {
        let n = 10_000;
        let mut rng = Rng::new(1);
        let count = |p: &Picker, rng: &mut Rng| {
            let mut c = vec![0u32; n as usize];
            for _ in 0..200_000 {
                c[p.pick(rng) as usize] += 1;
            }
            c.sort_unstable();
            c.iter().rev().take(100).map(|&x| x as u64).sum::<u64>()
        };
        let top_zipf = count(&Picker::new(Dist::Zipf, n), &mut rng);
        let top_uniform = count(&Picker::new(Dist::Uniform, n), &mut rng);
        // 1% of the blocks: about half the accesses under Zipf, ~1% uniform.
        assert!(top_zipf > 80_000, "{top_zipf}");
        assert!(top_uniform < 10_000, "{top_uniform}");
    }

    const BS: usize = 4096;
    const BUFFERS: usize = 16;

    fn snapshot(cache: &Cache, from: usize, to: usize) -> Vec<u8> {
        let mut buf = vec![0u8; to - from];
        cache.region().load_words(from, &mut buf).unwrap();
        buf
    }

    /// The raw loop the OLTP bench compares the cache with runs on the
    /// cache's own block area, between cache runs: it must write blocks'
    /// bytes only, never the control block, locks, hash table or
    /// descriptors, so the cache is whole after it (every cached block
    /// still a hit, no miss).
    #[test]
    fn raw_loop_on_the_block_area_leaves_the_cache_whole() {
        let dir = TempDir::new("cache-raw");
        let data = dir.join("data");
        create_data_file(&data, BUFFERS as u64, BS, |b, buf| buf.fill(b as u8)).unwrap();
        let (region, _) = RegionBuilder::new(1 << 20)
            .backend(Backend::Anon)
            .create()
            .unwrap();
        let cache = Cache::create_sized(region, &data, BS, Some(BUFFERS)).unwrap();
        for blk in 0..BUFFERS as u64 {
            cache.read_with(blk, |w| w.len()).unwrap();
        }
        let l = *cache.layout();
        assert_eq!(l.parts, 0);
        let meta = snapshot(&cache, 0, l.blocks_at);
        let blocks = snapshot(&cache, l.blocks_at, l.blocks_at + BUFFERS * BS);

        let spec = Spec {
            dist: Dist::Uniform,
            write_pct: 100,
            sample_every: 1,
        };
        let r = run_raw(
            cache.region(),
            l.blocks_at,
            BS,
            BUFFERS as u64,
            &spec,
            &mut Rng::new(7),
            Duration::from_millis(50),
        )
        .unwrap();
        assert!(
            r.ops > 0 && r.writes == r.ops,
            "{} ops, {} writes",
            r.ops,
            r.writes
        );
        assert_eq!(
            snapshot(&cache, 0, l.blocks_at),
            meta,
            "the raw loop wrote below the block area"
        );
        assert_ne!(
            snapshot(&cache, l.blocks_at, l.blocks_at + BUFFERS * BS),
            blocks,
            "the raw loop wrote no block"
        );
        cache.reset_stats();
        for blk in 0..BUFFERS as u64 {
            cache.read_with(blk, |w| w.len()).unwrap();
            cache.write(blk).unwrap();
        }
        let s = cache.stats();
        assert_eq!((s.hits, s.misses), (2 * BUFFERS as u64, 0), "{s:?}");

        // Past the region's end, or misaligned: refused, nothing touched.
        let room = ((cache.region().data_len() - l.blocks_at) / BS) as u64;
        for (at, n) in [(l.blocks_at, room + 1), (l.blocks_at + 4, 1)] {
            let e = run_raw(
                cache.region(),
                at,
                BS,
                n,
                &spec,
                &mut Rng::new(1),
                Duration::ZERO,
            )
            .unwrap_err();
            assert!(e.to_string().contains("data offset"), "{e}");
        }
        drop(cache.into_region().destroy());
    }
}
