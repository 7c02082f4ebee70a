//! The direct mode in one process: reads in place copy nothing, a write
//! goes through a buffer, and a write-back never changes the file under an
//! in-place reader.

use std::os::unix::fs::FileExt;
use std::path::Path;

use hugeshm_cache::{create_data_file, Cache, Mode};
use hugeshm_region::{Backend, RegionBuilder};
use hugeshm_testkit::TempDir;

const BS: usize = 4096;
const BLOCKS: u64 = 64;

fn file_word(data: &Path, blk: u64, word: u64) -> u64 {
    let f = std::fs::File::open(data).unwrap();
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, blk * BS as u64 + word * 8).unwrap();
    u64::from_le_bytes(b)
}

#[test]
fn in_place_reads_and_write_back_under_a_reader() {
    let dir = TempDir::new("cache-direct");
    let data = dir.join("data");
    create_data_file(&data, BLOCKS, BS, |b, buf| {
        buf[..8].copy_from_slice(&b.to_le_bytes())
    })
    .unwrap();
    let (region, _) = RegionBuilder::new(1 << 20)
        .backend(Backend::Anon)
        .create()
        .unwrap();
    // 4 buffers for 64 blocks: writes to other blocks evict.
    let cache = Cache::create_with(region, &data, BS, Some(4), Mode::Direct).unwrap();
    assert_eq!(cache.mode(), Mode::Direct);
    let (_, len) = cache.data_mapping().unwrap();
    assert!(len >= BLOCKS as usize * BS);

    // Reads of blocks in no buffer: in place, nothing copied.
    for blk in 0..BLOCKS {
        let g = cache.read(blk).unwrap();
        assert!(g.in_place());
        assert_eq!(g.read_u64(0).unwrap(), blk);
    }
    let s = cache.stats();
    assert_eq!((s.direct_reads, s.misses, s.bytes_copied), (BLOCKS, 0, 0));

    // Hold block 7 in place, then write it: the writer gets a buffer (a
    // copy in), the reader still sees the file.
    let reader = cache.read(7).unwrap();
    assert!(reader.in_place());
    {
        let w = cache.write(7).unwrap();
        assert!(!w.in_place());
        w.write_u64(0, 700).unwrap();
    }
    assert_eq!(cache.stats().misses, 1);
    assert_eq!(cache.stats().bytes_copied, BS as u64);
    // Writes to other blocks sweep every buffer: block 7's write-back must
    // wait for the reader (its victim is passed), so the file keeps 7.
    for blk in 20..40 {
        cache.write(blk).unwrap().write_u64(1, 1).unwrap();
    }
    assert_eq!(reader.read_u64(0).unwrap(), 7);
    assert_eq!(file_word(&data, 7, 0), 7, "written back under a reader");
    drop(reader);

    // A read now finds the newer block in its buffer, or (once it was
    // written back and evicted) in place in the file.
    assert_eq!(cache.read(7).unwrap().read_u64(0).unwrap(), 700);
    cache.checkpoint().unwrap();
    assert_eq!(file_word(&data, 7, 0), 700);
    assert_eq!(file_word(&data, 25, 1), 1);
    let g = cache.read(25).unwrap();
    assert_eq!(g.read_u64(1).unwrap(), 1);
    drop(g);
    cache.into_region().destroy().unwrap();
}

/// One buffer, dirty with a block this process reads in place: the next
/// miss cannot write it back, and says so instead of spinning.
#[test]
fn write_back_blocked_by_own_reader_is_an_error() {
    let dir = TempDir::new("cache-blocked");
    let data = dir.join("data");
    create_data_file(&data, BLOCKS, BS, |_, _| {}).unwrap();
    let (region, _) = RegionBuilder::new(1 << 20)
        .backend(Backend::Anon)
        .create()
        .unwrap();
    let cache = Cache::create_with(region, &data, BS, Some(1), Mode::Direct).unwrap();
    let reader = cache.read(1).unwrap();
    cache.write(1).unwrap().write_u64(0, 9).unwrap();
    let e = cache.write(2).unwrap_err();
    assert!(
        matches!(
            e,
            hugeshm_cache::CacheError::WriteBackBlocked { buffers: 1, .. }
        ),
        "{e}"
    );
    drop(reader);
    cache.write(2).unwrap().write_u64(0, 3).unwrap();
    assert_eq!(file_word(&data, 1, 0), 9);
    cache.into_region().destroy().unwrap();
}

#[test]
fn classic_mode_copies_every_read() {
    let dir = TempDir::new("cache-classic");
    let data = dir.join("data");
    create_data_file(&data, BLOCKS, BS, |b, buf| {
        buf[..8].copy_from_slice(&b.to_le_bytes())
    })
    .unwrap();
    let (region, _) = RegionBuilder::new(1 << 20)
        .backend(Backend::Anon)
        .create()
        .unwrap();
    let cache = Cache::create_with(region, &data, BS, Some(4), Mode::Classic).unwrap();
    assert_eq!(cache.data_mapping(), None);
    assert_eq!(cache.data_is_dax(), None);
    for blk in 0..BLOCKS {
        let g = cache.read(blk).unwrap();
        assert!(!g.in_place());
        assert_eq!(g.read_u64(0).unwrap(), blk);
    }
    let s = cache.stats();
    assert_eq!((s.direct_reads, s.misses), (0, BLOCKS));
    assert_eq!(s.bytes_copied, BLOCKS * BS as u64);
    cache.into_region().destroy().unwrap();
}
