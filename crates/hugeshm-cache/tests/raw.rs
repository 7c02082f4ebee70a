//! The raw loop the OLTP bench compares the cache with runs on the cache's
//! own block area, between cache runs: it must write blocks' bytes only,
//! never the control block, locks, hash table or descriptors, so the cache
//! is whole after it (every cached block still a hit, no miss).

use std::time::Duration;

use hugeshm_cache::workload::{run_raw, Dist, Rng, Spec};
use hugeshm_cache::{create_data_file, Cache};
use hugeshm_region::{Backend, RegionBuilder};
use hugeshm_testkit::TempDir;

const BS: usize = 4096;
const BUFFERS: usize = 16;

fn snapshot(cache: &Cache, from: usize, to: usize) -> Vec<u8> {
    let mut buf = vec![0u8; to - from];
    cache.region().load_words(from, &mut buf).unwrap();
    buf
}

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
