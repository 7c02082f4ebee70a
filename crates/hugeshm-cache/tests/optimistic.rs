//! `Cache::read_with` in one process: what a hit, a miss and a held guard
//! do to it, the pin limit (a full count refuses pins, never wraps), and
//! a retag that comes back to the same block under a reader (threads, each
//! with its own handle on a region attached by name).

mod common;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::format::state::REF_MASK;
use common::Rng;
use hugeshm_cache::{create_data_file, Cache, CacheError, Mode};
use hugeshm_region::{Backend, Locator, RegionBuilder};
use hugeshm_testkit::TempDir;

const BS: usize = 4096;
const WORDS: usize = BS / 8;

/// Block `blk` at `counter`: word 0 the block, word 1 the counter, the
/// others derived from both.
fn fill(blk: u64, counter: u64, buf: &mut [u8]) {
    for w in 0..WORDS {
        let v = match w {
            0 => blk,
            1 => counter,
            _ => (blk << 40 ^ counter).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ w as u64,
        };
        buf[w * 8..w * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// A `blocks`-block data file in its own scratch directory (removed
/// with it): the directory and the file's path.
fn data_file(test: &str, blocks: u64) -> (TempDir, PathBuf) {
    let dir = TempDir::new(&format!("cache-{test}"));
    let data = dir.join("data");
    create_data_file(&data, blocks, BS, |b, buf| fill(b, 0, buf)).unwrap();
    (dir, data)
}

/// A cache of `buffers` buffers over a `blocks`-block data file, in a
/// posix region named after `test` (so that other handles can attach it
/// by name): the data file (its scratch directory and path), the
/// region's name, the cache.
fn named_cache(test: &str, blocks: u64, buffers: usize) -> ((TempDir, PathBuf), String, Cache) {
    let data = data_file(test, blocks);
    let name = format!("t-cache-{test}-{}", std::process::id());
    let (region, _) = RegionBuilder::new(1 << 20)
        .backend(Backend::Posix)
        .name(name.clone())
        .create()
        .unwrap();
    let cache = Cache::create_sized(region, &data.1, BS, Some(buffers)).unwrap();
    (data, name, cache)
}

fn word(cache: &Cache, blk: u64, w: usize) -> Result<u64, CacheError> {
    cache.read_with(blk, |words| words[w].load(Ordering::Relaxed))
}

#[test]
fn hits_are_optimistic_misses_and_direct_are_pinned() {
    let data = data_file("opt-basic", 64);
    let (region, _) = RegionBuilder::new(1 << 20)
        .backend(Backend::Anon)
        .create()
        .unwrap();
    let cache = Cache::create_sized(region, &data.1, BS, Some(8)).unwrap();
    // A miss: read in under a pin, then counted as such.
    assert_eq!(word(&cache, 5, 0).unwrap(), 5);
    let s = cache.stats();
    assert_eq!((s.misses, s.hits, s.optimistic), (1, 0, 0), "{s:?}");
    // Hits: no pin.
    for _ in 0..10 {
        assert_eq!(word(&cache, 5, 1).unwrap(), 0);
    }
    let s = cache.stats();
    assert_eq!((s.misses, s.hits, s.optimistic), (1, 10, 10), "{s:?}");
    // A write is seen by the next read_with; a read guard held beside it
    // (a pin and a share) does not make it fail.
    cache.write(5).unwrap().write_u64(1, 42).unwrap();
    let held = cache.read(5).unwrap();
    assert_eq!(word(&cache, 5, 1).unwrap(), 42);
    drop(held);
    let s = cache.stats();
    assert_eq!((s.optimistic, s.optimistic_retries), (11, 0), "{s:?}");
    // f's whole result comes back: a copy of the block.
    let copy = cache
        .read_with(5, |w| {
            w.iter()
                .map(|x| x.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(copy.len(), WORDS);
    assert_eq!((copy[0], copy[1]), (5, 42));
    // Beyond the file: the error, f never runs.
    match cache.read_with(64, |_| panic!("f ran for a block beyond the file")) {
        Err(CacheError::BlockOutOfRange {
            block: 64,
            blocks: 64,
        }) => {}
        other => panic!("{other:?}"),
    }
    // Twenty misses over eight buffers (block 5 may be written back and
    // read in again): the value written survives.
    for blk in 10..30 {
        assert_eq!(word(&cache, blk, 0).unwrap(), blk);
    }
    assert_eq!(word(&cache, 5, 1).unwrap(), 42);
    assert!(cache.stats().evictions >= 12, "{:?}", cache.stats());
    cache.checkpoint().unwrap();

    // The direct mode reads through the pinned path (in place or in a
    // buffer), never optimistically.
    let (region, _) = RegionBuilder::new(1 << 20)
        .backend(Backend::Anon)
        .create()
        .unwrap();
    let direct = Cache::create_with(region, &data.1, BS, Some(8), Mode::Direct).unwrap();
    assert_eq!(
        word(&direct, 5, 1).unwrap(),
        42,
        "in place, after the checkpoint"
    );
    direct.write(6).unwrap().write_u64(1, 7).unwrap();
    assert_eq!(word(&direct, 6, 1).unwrap(), 7);
    let s = direct.stats();
    assert_eq!((s.optimistic, s.direct_reads, s.hits), (0, 1, 1), "{s:?}");
}

#[test]
fn a_full_pin_count_refuses_pins() {
    let data = data_file("opt-pins", 8);
    let (region, _) = RegionBuilder::new(1 << 20)
        .backend(Backend::Anon)
        .create()
        .unwrap();
    let cache = Cache::create_sized(region, &data.1, BS, Some(4)).unwrap();
    let guards: Vec<_> = (0..REF_MASK).map(|_| cache.read(3).unwrap()).collect();
    let full = |e: CacheError| match e {
        CacheError::TooManyPins { block: 3, pins } if pins == REF_MASK => e.to_string(),
        other => panic!("{other:?}"),
    };
    let text = full(cache.read(3).unwrap_err());
    assert!(text.contains("pinned 65535 times"), "{text}");
    full(cache.write(3).unwrap_err());
    // An optimistic read needs no pin.
    assert_eq!(word(&cache, 3, 0).unwrap(), 3);
    // Other blocks are not affected; misses still find victims.
    for blk in [0, 1, 2, 4, 5, 6, 7] {
        assert_eq!(cache.read(blk).unwrap().read_u64(0).unwrap(), blk);
    }
    drop(guards);
    // All unpinned: writable, and the count is back to what it was.
    cache.write(3).unwrap().write_u64(1, 9).unwrap();
    let held: Vec<_> = (0..REF_MASK).map(|_| cache.read(3).unwrap()).collect();
    assert_eq!(held[0].read_u64(1).unwrap(), 9);
    full(cache.read(3).unwrap_err());
}

/// What a writer or a retag does in the middle of `f` (a second handle
/// on the same cache, called from inside `f`, halfway through a copy of
/// the block) fails the check: the copy returned is the block after, read
/// by a second attempt. With one buffer, the retag is exact: block 2 goes
/// out of buffer 0 for block 5, the data file's block 2 changes (as if
/// written elsewhere), and block 2 comes back into buffer 0, so tag and
/// flags are as before and only the version tells.
#[test]
fn a_change_inside_f_fails_the_check() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    let (data, name, cache) = named_cache("opt-inside", 8, 1);
    let other = Cache::open(
        Locator::new(&name, Backend::Posix).attach().unwrap(),
        &data.1,
    )
    .unwrap();
    let mut buf = vec![0u8; BS];
    let copy = |buf: &mut Vec<u8>, meddle: &mut dyn FnMut()| {
        let mut first = true;
        cache
            .read_with(2, |w| {
                for (k, (x, b)) in w.iter().zip(buf.chunks_exact_mut(8)).enumerate() {
                    if first && k == WORDS / 2 {
                        meddle();
                    }
                    b.copy_from_slice(&x.load(Ordering::Relaxed).to_le_bytes());
                }
                first = false;
            })
            .unwrap();
    };
    let counter = |buf: &[u8]| u64::from_le_bytes(buf[8..16].try_into().unwrap());
    let whole = |buf: &[u8]| {
        let mut want = vec![0u8; BS];
        fill(2, counter(buf), &mut want);
        buf == want
    };
    // Block 2 into buffer 0, then a hit.
    assert_eq!(word(&cache, 2, 1).unwrap(), 0);
    copy(&mut buf, &mut || {});
    assert!(whole(&buf) && counter(&buf) == 0);
    let s0 = cache.stats();

    // A writer.
    copy(&mut buf, &mut || {
        let g = other.write(2).unwrap();
        let mut b = vec![0u8; BS];
        fill(2, 1, &mut b);
        g.write_from(0, &b).unwrap();
    });
    // Checked after the region is gone, so a failure leaves nothing.
    let mut wrong = Vec::new();
    if !whole(&buf) || counter(&buf) != 1 {
        wrong.push(format!(
            "after a write: counter {}, whole {}",
            counter(&buf),
            whole(&buf)
        ));
    }
    other.checkpoint().unwrap();

    // A retag there and back, the file's block changed meanwhile.
    copy(&mut buf, &mut || {
        assert_eq!(other.read(5).unwrap().read_u64(0).unwrap(), 5);
        let mut b = vec![0u8; BS];
        fill(2, 2, &mut b);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&data.1)
            .unwrap()
            .write_all_at(&b, 2 * BS as u64)
            .unwrap();
        assert_eq!(other.read(2).unwrap().read_u64(1).unwrap(), 2);
    });
    if !whole(&buf) || counter(&buf) != 2 {
        wrong.push(format!(
            "after a retag there and back: counter {}, whole {}",
            counter(&buf),
            whole(&buf)
        ));
    }
    let (s1, o) = (cache.stats(), other.stats());
    drop(other);
    cache.into_region().destroy().unwrap();
    assert!(wrong.is_empty(), "torn copies: {wrong:?}");
    assert_eq!(o.misses, 2, "both retags happened: {o:?}");
    assert_eq!(s1.optimistic - s0.optimistic, 2, "{s1:?}");
    assert_eq!(s1.optimistic_retries - s0.optimistic_retries, 2, "{s1:?}");
}

/// Four buffers for eight blocks: threads that write and read blocks all
/// the time move every buffer from block to block, so a reader's buffer is
/// retagged under it, now and then back to the block it was reading with
/// newer bytes (written in another buffer meanwhile) and no write in this
/// one: only the version a retag raises tells. The reader pauses halfway
/// through every other copy to let that happen. Every copy `read_with`
/// returns must be one block at one counter.
#[test]
fn retags_under_an_optimistic_reader() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    let (data, name, cache) = named_cache("opt-retag", 8, 4);
    let stop = Arc::new(AtomicBool::new(false));
    let churn: Vec<_> = (0..2u64)
        .map(|t| {
            let (name, path, stop) = (name.clone(), data.1.clone(), stop.clone());
            std::thread::spawn(move || {
                let region = Locator::new(&name, Backend::Posix).attach().unwrap();
                let cache = Cache::open(region, &path).unwrap();
                let mut rng = Rng::new(t + 100);
                let mut buf = vec![0u8; BS];
                while !stop.load(Ordering::Relaxed) {
                    let blk = rng.below(8);
                    if rng.below(2) == 0 {
                        // A read-in with no write after it.
                        cache.read(blk).unwrap();
                        continue;
                    }
                    let g = cache.write(blk).unwrap();
                    let c = g.read_u64(1).unwrap();
                    fill(blk, c + 1, &mut buf);
                    g.write_from(0, &buf).unwrap();
                }
            })
        })
        .collect();
    let mut rng = Rng::new(1);
    let mut buf = vec![0u8; BS];
    let mut bad = Vec::new();
    let mut torn = 0;
    for op in 0..20_000 {
        let blk = rng.below(8);
        cache
            .read_with(blk, |w| {
                for (k, (x, b)) in w.iter().zip(buf.chunks_exact_mut(8)).enumerate() {
                    if op % 2 == 0 && k == WORDS / 2 {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(50) {
                            std::hint::spin_loop();
                        }
                    }
                    b.copy_from_slice(&x.load(Ordering::Relaxed).to_le_bytes());
                }
            })
            .unwrap();
        let counter = u64::from_le_bytes(buf[8..16].try_into().unwrap());
        let mut want = vec![0u8; BS];
        fill(blk, counter, &mut want);
        torn += usize::from(buf != want);
        if buf != want && bad.len() < 5 {
            let w0 = u64::from_le_bytes(buf[..8].try_into().unwrap());
            let first = (0..WORDS)
                .find(|&w| buf[w * 8..w * 8 + 8] != want[w * 8..w * 8 + 8])
                .unwrap_or(0);
            bad.push(format!(
                "block {blk}: word 0 says {w0}, counter {counter}, word {first} torn"
            ));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let joined: Vec<_> = churn.into_iter().map(|t| t.join()).collect();
    let s = cache.stats();
    println!("retag reader: {torn} torn copies; {s:?}");
    cache.into_region().destroy().unwrap();
    assert!(joined.iter().all(Result::is_ok), "a writer thread panicked");
    assert!(bad.is_empty(), "torn copies returned: {bad:#?}");
    assert!(s.optimistic > 0 && s.misses > 0, "{s:?}");
}
