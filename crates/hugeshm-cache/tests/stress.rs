//! Many processes hammer one buffer cache that is far smaller than its
//! data file, so buffers are evicted and dirty blocks written back all the
//! time; then every block of the data file must carry a valid checksum and
//! a counter equal to the increments all processes made (no lost update,
//! no torn block, nothing dirty lost at eviction or checkpoint).
//!
//! Beside them, reader processes read blocks with `Cache::read_with` (no
//! pin, no lock, a version check): a whole block copied or one row of
//! it (the rows through one `Lookups` each reader holds for its whole
//! run), each checked, while the others write those blocks and evict
//! them.
//! A check that let a torn copy through (a writer's release that did not
//! raise the version, say) fails the checksum here.
//!
//! The direct mode runs the same: reads of blocks in no buffer go in place
//! through the mapped data file while other processes write blocks back
//! to it, so a torn in-place read would fail the checksum.
//!
//! Children are this test binary re-executed with `HUGESHM_CACHE_STRESS`
//! set, running only `stress_child`; they attach the region by name.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use common::Rng;
use hugeshm_cache::{create_data_file, Cache, Layout, Lookups, Mode, Prefetch, Stats};
use hugeshm_region::{Backend, Locator, PageSize, Policy, RegionBuilder};
use hugeshm_testkit::{helper_args, helper_spec, live, observe, TempDir};

const CHILD_ENV: &str = "HUGESHM_CACHE_STRESS";
const BS: usize = 8192;
const WORDS: usize = BS / 8;
const BLOCKS: u64 = 2048;
const CHILDREN: usize = 6;
const OPS: u64 = 2500;
const HOT: u64 = 64;
/// Processes that only read, with `read_with`.
const READERS: usize = 2;
/// Reads each of them makes.
const READER_OPS: u64 = 20_000;

fn mix(blk: u64, counter: u64, w: usize) -> u64 {
    (blk << 32 ^ counter)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(w as u32 % 64)
        ^ w as u64
}

/// Block `blk` at `counter`: word 0 the block number, word 1 the counter,
/// words 2.. a pattern of both, the last word the sum of the others.
fn fill(blk: u64, counter: u64, buf: &mut [u8]) {
    let mut sum = 0u64;
    for w in 0..WORDS - 1 {
        let v = match w {
            0 => blk,
            1 => counter,
            _ => mix(blk, counter, w),
        };
        sum = sum.wrapping_add(v);
        buf[w * 8..w * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    buf[BS - 8..].copy_from_slice(&sum.to_le_bytes());
}

/// The counter of a well-formed block `blk`, or what is wrong with it.
fn check(blk: u64, buf: &[u8]) -> Result<u64, String> {
    let word = |w: usize| u64::from_le_bytes(buf[w * 8..w * 8 + 8].try_into().unwrap());
    if word(0) != blk {
        return Err(format!("block {blk} holds block {}", word(0)));
    }
    let counter = word(1);
    let mut sum = 0u64;
    for w in 0..WORDS - 1 {
        if w >= 2 && word(w) != mix(blk, counter, w) {
            return Err(format!("block {blk} (counter {counter}): word {w} torn"));
        }
        sum = sum.wrapping_add(word(w));
    }
    if sum != word(WORDS - 1) {
        return Err(format!(
            "block {blk}: checksum {:#x} != {sum:#x}",
            word(WORDS - 1)
        ));
    }
    Ok(counter)
}

/// Block `blk` copied by `read_with` (an optimistic read: the copy is
/// returned only if no writer or retag was at the block meanwhile).
fn read_block_optimistic(cache: &Cache, blk: u64, buf: &mut [u8]) {
    cache
        .read_with(blk, |words| {
            for (w, b) in words.iter().zip(buf.chunks_exact_mut(8)) {
                b.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
        })
        .expect("read_with");
}

/// One 8-word row of block `blk` at word `at` read by
/// `Lookups::read_with` (a short `f`, as the OLTP loop's, through one
/// `Lookups` held for the whole run, as the loop holds it), with words 0
/// and 1: what is wrong with it.
fn check_row_optimistic(lk: &Lookups, blk: u64, at: usize) -> Result<(), String> {
    let (b, counter, row) = lk
        .read_with(blk, |w| {
            let mut row = [0u64; 8];
            for (r, x) in row.iter_mut().zip(&w[at..at + 8]) {
                *r = x.load(Ordering::Relaxed);
            }
            (
                w[0].load(Ordering::Relaxed),
                w[1].load(Ordering::Relaxed),
                row,
            )
        })
        .expect("read_with");
    if b != blk {
        return Err(format!("row of block {blk} holds block {b}"));
    }
    for (j, v) in row.iter().enumerate() {
        if (2..WORDS - 1).contains(&(at + j)) && *v != mix(blk, counter, at + j) {
            return Err(format!(
                "block {blk} (counter {counter}): word {} of the row at {at} torn",
                at + j
            ));
        }
    }
    Ok(())
}

/// A reader child: READER_OPS optimistic reads, most of the hot blocks
/// (the writers' favourites), the rest over the whole file (misses, so
/// buffers are retagged under other readers); every other read a whole
/// block, the others a row.
fn reader_child(cache: &Cache, id: u64) {
    let lk = cache.lookups().expect("lookups");
    let mut rng = Rng::new(id * 7919 + 1);
    let mut buf = vec![0u8; BS];
    for op in 0..READER_OPS {
        let blk = if rng.below(4) != 0 {
            rng.below(HOT)
        } else {
            rng.below(BLOCKS)
        };
        if op % 2 == 0 {
            read_block_optimistic(cache, blk, &mut buf);
            check(blk, &buf).unwrap_or_else(|e| panic!("reader {id} read_with: {e}"));
        } else {
            let at = rng.below(WORDS as u64 / 8) as usize * 8;
            check_row_optimistic(&lk, blk, at)
                .unwrap_or_else(|e| panic!("reader {id} read_with (row): {e}"));
        }
    }
}

/// A child: attach by name, then OPS operations on random blocks, a
/// quarter reads (check; half of them by `read_with`), the rest
/// increments (check, counter + 1, rewrite) under the write lock; child 0
/// checkpoints now and then. A reader child (role `reader`) runs
/// [`reader_child`] instead.
#[test]
#[ignore = "helper: its parent test runs it"]
fn stress_child() {
    let Some(spec) = helper_spec(CHILD_ENV) else {
        return;
    };
    let f: Vec<&str> = spec.split('|').collect();
    let (name, backend, data, id, k, role) = (f[0], f[1], f[2], f[3], f[4], f[5]);
    let backend: Backend = backend.parse().unwrap();
    let id: u64 = id.parse().unwrap();
    let k: usize = k.parse().unwrap();
    let region = Locator::new(name, backend)
        .attach()
        .expect("attach by name");
    let parts = (0..k)
        .map(|j| {
            Locator::new(&part_name(name, j), backend)
                .attach()
                .expect("attach a part by name")
        })
        .collect();
    let cache = Cache::open_split(region, parts, data.as_ref()).expect("open cache");
    if role == "reader" {
        reader_child(&cache, id);
        let out = serde_json::json!({ "incs": {}, "stats": cache.stats() });
        println!("\nRESULT {out}");
        return;
    }
    let mut rng = Rng::new(id * 7919 + 1);
    let mut incs: BTreeMap<u64, u64> = BTreeMap::new();
    let mut buf = vec![0u8; BS];
    for op in 0..OPS {
        // Half the operations on 64 hot blocks (hits, contended content
        // locks), half over the whole file (misses, evictions).
        let blk = if rng.below(2) == 0 {
            rng.below(HOT)
        } else {
            rng.below(BLOCKS)
        };
        // Hints for a block ahead, racing other processes' evictions: they
        // must never fail, panic or change what the checks below see.
        let ahead = rng.below(BLOCKS);
        for step in [Prefetch::Bucket, Prefetch::Descriptor, Prefetch::Row] {
            cache.prefetch(ahead, (ahead as usize % WORDS) * 8, op % 2 == 0, step);
        }
        if rng.below(8) == 0 {
            let g = cache.read(blk).expect("read");
            g.read_into(0, &mut buf).unwrap();
            check(blk, &buf).unwrap_or_else(|e| panic!("child {id} read: {e}"));
        } else if rng.below(7) == 0 {
            read_block_optimistic(&cache, blk, &mut buf);
            check(blk, &buf).unwrap_or_else(|e| panic!("child {id} read_with: {e}"));
        } else {
            let g = cache.write(blk).expect("write");
            g.read_into(0, &mut buf).unwrap();
            let c = check(blk, &buf).unwrap_or_else(|e| panic!("child {id} write: {e}"));
            fill(blk, c + 1, &mut buf);
            g.write_from(0, &buf).unwrap();
            *incs.entry(blk).or_default() += 1;
        }
        if id == 0 && op % 500 == 250 {
            cache.checkpoint().expect("checkpoint");
        }
    }
    let out = serde_json::json!({ "incs": incs, "stats": cache.stats() });
    println!("\nRESULT {out}");
    drop(cache);
}

fn part_name(name: &str, j: usize) -> String {
    format!("{name}.part{j}")
}

/// Bytes of each part of a split cache: 32 blocks.
const PART_BYTES: u64 = 32 * BS as u64 + 4096;

/// `k` parts: the blocks in `k` regions of [`PART_BYTES`] beside the
/// control region (0: in it).
fn run_stress(
    test: &str,
    backend: Backend,
    page: PageSize,
    region_bytes: u64,
    mode: Mode,
    k: usize,
) {
    let name = format!("t-cache-{test}-{}", std::process::id());
    let dir = TempDir::new(&format!("cache-{test}"));
    let data = dir.join("data");
    create_data_file(&data, BLOCKS, BS, |b, buf| fill(b, 0, buf)).expect("data file");
    let (region, _) = RegionBuilder::new(region_bytes)
        .backend(backend)
        .page_size(page)
        .policy(Policy::Only)
        .name(name.clone())
        .create()
        .expect("create region");
    let parts: Vec<_> = (0..k)
        .map(|j| {
            RegionBuilder::new(PART_BYTES)
                .backend(backend)
                .page_size(page)
                .policy(Policy::Only)
                .name(part_name(&name, j))
                .create()
                .expect("create a part")
                .0
        })
        .collect();
    let part_len = parts.first().map(|p| p.data_len());
    let cache = Cache::create_split(region, parts, &data, BS, None, mode).expect("create cache");
    assert_eq!(cache.mode(), mode);
    let buffers = cache.layout().buffers;
    assert!(
        (buffers as u64) < BLOCKS / 4,
        "{buffers} buffers: the cache must be much smaller than the file"
    );
    assert_eq!(
        *cache.layout(),
        match part_len {
            None => Layout::fitting(BS, cache.region().data_len()),
            Some(p) => Layout::fitting_split(BS, cache.region().data_len(), k, p),
        }
    );

    let exe = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..CHILDREN + READERS)
        .map(|i| {
            let role = if i < CHILDREN { "mixed" } else { "reader" };
            Command::new(&exe)
                .args(helper_args("stress_child"))
                .env(
                    CHILD_ENV,
                    format!(
                        "{name}|{}|{}|{i}|{k}|{role}",
                        backend.as_str(),
                        data.display()
                    ),
                )
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    let mut stats = Stats::default();
    let mut failures = Vec::new();
    for (i, k) in kids.into_iter().enumerate() {
        let out = k.wait_with_output().expect("wait child");
        let text = String::from_utf8_lossy(&out.stdout);
        match text
            .lines()
            .find_map(|l| l.split_once("RESULT ").map(|x| x.1))
        {
            Some(json) if out.status.success() => {
                let v: serde_json::Value = serde_json::from_str(json).unwrap();
                for (b, n) in v["incs"].as_object().unwrap() {
                    *expected.entry(b.parse().unwrap()).or_default() += n.as_u64().unwrap();
                }
                stats.add(&serde_json::from_value(v["stats"].clone()).unwrap());
            }
            _ => {
                let tail: String = text
                    .chars()
                    .rev()
                    .take(3000)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                failures.push(format!("child {i}: {}\n{tail}", out.status))
            }
        }
    }
    // The parent checkpoints, then the file alone must hold every update.
    let written = cache.checkpoint();
    let (region, parts) = cache.into_regions();
    // Every part held blocks (buffer i is in part i mod k); checked after
    // everything is destroyed, so a failure leaves nothing behind.
    let empty: Vec<usize> = parts
        .into_iter()
        .enumerate()
        .filter_map(|(j, p)| {
            let sum = p.sum_words();
            p.destroy().expect("destroy a part");
            (sum == 0).then_some(j)
        })
        .collect();
    region.destroy().expect("destroy region");
    assert!(empty.is_empty(), "parts {empty:?} hold no block");
    assert!(failures.is_empty(), "{failures:#?}");
    written.expect("checkpoint");

    let f = std::fs::File::open(&data).unwrap();
    let mut buf = vec![0u8; BS];
    let mut total = 0;
    for blk in 0..BLOCKS {
        f.read_exact_at(&mut buf, blk * BS as u64).unwrap();
        let c = check(blk, &buf).unwrap_or_else(|e| panic!("data file: {e}"));
        assert_eq!(
            c,
            expected.get(&blk).copied().unwrap_or(0),
            "block {blk}: lost updates"
        );
        total += c;
    }
    let ops = CHILDREN as u64 * OPS;
    let reads = READERS as u64 * READER_OPS;
    println!(
        "{test}: {buffers} buffers over {BLOCKS} blocks, {CHILDREN} processes and {READERS} \
         readers: {total} increments, hits {} (optimistic {}, failed checks {}) misses {} \
         in place {} write-backs {} evictions {}",
        stats.hits,
        stats.optimistic,
        stats.optimistic_retries,
        stats.misses,
        stats.direct_reads,
        stats.writes,
        stats.evictions
    );
    assert!(total > ops / 2, "{total} increments of {ops} operations");
    assert_eq!(
        stats.logical_reads(),
        ops + reads,
        "every operation found its block once"
    );
    match mode {
        // Most reads of the readers are of hot blocks, found in a buffer.
        Mode::Classic => assert!(stats.optimistic > reads / 2, "{stats:?}"),
        Mode::Direct => assert_eq!(stats.optimistic, 0, "pinned in the direct mode: {stats:?}"),
    }
    assert_eq!(stats.bytes_copied, stats.misses * BS as u64, "{stats:?}");
    match mode {
        Mode::Classic => assert_eq!(stats.direct_reads, 0, "{stats:?}"),
        // A quarter of the operations read, half of them over the whole file.
        _ => assert!(stats.direct_reads > ops / 32, "in-place reads: {stats:?}"),
    }
    assert!(stats.evictions > ops / 8, "eviction must happen: {stats:?}");
    assert!(stats.writes > ops / 16, "write-back must happen: {stats:?}");
    assert!(
        stats.hits > ops / 8,
        "the hot blocks must be hits: {stats:?}"
    );
    // Nothing of ours left (other tests on the host may come and go).
    assert!(
        matches!(
            Locator::new(&name, backend).locate(),
            Err(hugeshm_region::RegionError::NotFound { .. })
        ),
        "region {name} still there"
    );
}

/// Base pages, a file in /dev/shm (no huge pages, no root needed).
#[test]
fn stress_many_processes_4k() {
    // Its regions in /dev/shm are host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = observe!();
    run_stress(
        "stress-4k",
        Backend::Posix,
        PageSize::Base,
        1 << 20,
        Mode::Classic,
        0,
    );
}

/// The direct mode: in-place reads of the mapped data file beside
/// write-backs to it, from many processes.
#[test]
fn stress_many_processes_direct() {
    // Its regions in /dev/shm are host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = observe!();
    run_stress(
        "stress-direct",
        Backend::Posix,
        PageSize::Base,
        1 << 20,
        Mode::Direct,
        0,
    );
}

/// 2 MiB pages through the pool guard, a System V segment.
#[test]
fn stress_many_processes_2m() {
    let Some(pool) = live!() else { return };
    if !pool.page_sizes().contains(&(2 << 20)) {
        return pool.skip("the kernel offers no 2 MiB pages");
    }
    pool.ensure_free(2 << 20, 2).expect("reserve 2 MiB pages");
    run_stress(
        "stress-2m",
        Backend::Sysv,
        PageSize::HUGE_2M,
        2 << 20,
        Mode::Classic,
        0,
    );
    pool.finish();
}

/// The blocks in three regions beside the control region (how per-node
/// regions hold them: buffer i in part i mod 3), each attached by name in
/// every process.
#[test]
fn stress_many_processes_split() {
    // Its regions in /dev/shm are host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = observe!();
    run_stress(
        "stress-split",
        Backend::Posix,
        PageSize::Base,
        1 << 20,
        Mode::Classic,
        3,
    );
}
