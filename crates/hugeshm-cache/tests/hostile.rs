//! Another process attached to the cache's region (any attacher may write
//! it) writes hostile values into the shared metadata: each control block
//! field, absurd and off by one; descriptors' block numbers; chain links;
//! lock words and flags left held. The victim, a process that opens the
//! cache by name and reads and writes, must get errors: never a SIGBUS or
//! a panic (it runs as a child, and a signal or a non-zero exit fails the
//! test), never a hang (a child that does not exit within [`HANG`] is
//! killed and fails the test), never a write outside the data file.
//!
//! The hostile writes go through a second attach of the region by name in
//! the test process; the victims are this test binary re-executed with
//! `HUGESHM_CACHE_HOSTILE` set, running only `victim_child`.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hugeshm_cache::{create_data_file, Cache, Layout, Mode, Prefetch};
use hugeshm_region::{Backend, Locator, Region, RegionBuilder};
use hugeshm_testkit::TempDir;

use common::format::{self, control, desc, state, WRITER};

const CHILD_ENV: &str = "HUGESHM_CACHE_HOSTILE";
const BS: usize = 4096;
const BLOCKS: u64 = 64;
/// The victims' lock timeout.
const LOCK_TIMEOUT: Duration = Duration::from_millis(200);
/// A victim still running after this is hung.
const HANG: Duration = Duration::from_secs(60);

/// A victim: attach by name, open, then the operations of the spec, one
/// per comma (`readall`, `read:N`, `write:N`, `writeall`, `read_with:N`,
/// `prefetch`, `checkpoint`), stopping at the first error. Prints
/// `RESULT open=<ok|error> done=<ops> error=<Debug>`.
#[test]
#[ignore = "helper: its parent test runs it"]
fn victim_child() {
    let Some(spec) = hugeshm_testkit::helper_spec(CHILD_ENV) else {
        return;
    };
    let f: Vec<&str> = spec.split('|').collect();
    let (name, data, ops) = (f[0], f[1], f[2]);
    let region = Locator::new(name, Backend::Posix)
        .attach()
        .expect("attach by name");
    let mut cache = match Cache::open(region, Path::new(data)) {
        Ok(c) => c,
        Err(e) => {
            println!("\nRESULT open=error done=0 error={e:?} / {e}");
            return;
        }
    };
    cache.set_lock_timeout(LOCK_TIMEOUT);
    let mut done = 0;
    for op in ops.split(',') {
        let (what, n) = op.split_once(':').unwrap_or((op, "0"));
        let n: u64 = n.parse().unwrap();
        let r = match what {
            "readall" => (0..BLOCKS).try_for_each(|b| {
                let g = cache.read(b)?;
                assert_eq!(g.read_u64(0)?, b, "block {b} read wrong");
                Ok(())
            }),
            "read" => cache.read(n).map(drop),
            "write" => cache.write(n).and_then(|g| g.write_u64(1, 7)),
            "writeall" => (0..BLOCKS).try_for_each(|b| cache.write(b)?.write_u64(1, 7)),
            "read_with" => cache
                .read_with(n, |w| w[0].load(Ordering::Relaxed))
                .map(drop),
            "prefetch" => {
                for b in 0..BLOCKS {
                    for step in [Prefetch::Bucket, Prefetch::Descriptor, Prefetch::Row] {
                        cache.prefetch(b, 8, b % 2 == 0, step);
                    }
                }
                Ok(())
            }
            "checkpoint" => cache.checkpoint().map(drop),
            other => panic!("unknown op {other}"),
        };
        if let Err(e) = r {
            println!("\nRESULT open=ok done={done} error={e:?} / {e}");
            return;
        }
        done += 1;
    }
    println!("\nRESULT open=ok done={done} error=none");
}

/// What a victim did.
#[derive(Debug)]
struct Outcome {
    opened: bool,
    /// Operations that succeeded.
    done: usize,
    /// The error that stopped it (`Debug / Display`), if any.
    error: Option<String>,
}

/// A named cache over a data file, with a second attach of its region for
/// the hostile writes. Destroys the region when dropped.
struct Scene {
    _dir: TempDir,
    data: PathBuf,
    name: String,
    cache: Option<Cache>,
    evil: Option<Region>,
}

impl Drop for Scene {
    fn drop(&mut self) {
        if let Some(e) = self.evil.take() {
            let _ = e.close();
        }
        if let Some(c) = self.cache.take() {
            let _ = c.into_region().destroy();
        }
    }
}

impl Scene {
    /// `buffers` buffers (`None`: as many as the 1 MiB region holds) over
    /// a [`BLOCKS`]-block data file whose block `b` holds `b` in word 0.
    fn new(test: &str, mode: Mode, buffers: Option<usize>) -> Scene {
        let dir = TempDir::new(&format!("cache-hostile-{test}"));
        let data = dir.join("data");
        create_data_file(&data, BLOCKS, BS, |b, buf| {
            buf[..8].copy_from_slice(&b.to_le_bytes())
        })
        .unwrap();
        let name = format!("t-cache-hostile-{test}-{}", std::process::id());
        let (region, _) = RegionBuilder::new(1 << 20)
            .backend(Backend::Posix)
            .name(name.clone())
            .create()
            .unwrap();
        let cache = Cache::create_with(region, &data, BS, buffers, mode).unwrap();
        let evil = Locator::new(&name, Backend::Posix).attach().unwrap();
        Scene {
            _dir: dir,
            data,
            name,
            cache: Some(cache),
            evil: Some(evil),
        }
    }

    fn cache(&self) -> &Cache {
        self.cache.as_ref().unwrap()
    }

    fn layout(&self) -> Layout {
        *self.cache().layout()
    }

    fn evil(&self) -> &Region {
        self.evil.as_ref().unwrap()
    }

    fn put32(&self, at: usize, v: u32) -> u32 {
        self.evil()
            .atomic_u32(at)
            .unwrap()
            .swap(v, Ordering::SeqCst)
    }

    fn put64(&self, at: usize, v: u64) -> u64 {
        self.evil()
            .atomic_u64(at)
            .unwrap()
            .swap(v, Ordering::SeqCst)
    }

    fn file_len(&self) -> u64 {
        std::fs::metadata(&self.data).unwrap().len()
    }

    /// Runs a victim over `ops`: it must exit by itself, normally.
    fn victim(&self, ops: &str) -> Outcome {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(hugeshm_testkit::helper_args("victim_child"))
            .env(
                CHILD_ENV,
                format!("{}|{}|{ops}", self.name, self.data.display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn victim");
        let start = Instant::now();
        while child.try_wait().expect("wait victim").is_none() {
            if start.elapsed() > HANG {
                let _ = child.kill();
                let _ = child.wait();
                panic!("victim ({ops}) hung: still running after {HANG:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().expect("victim output");
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        if let Some(sig) = out.status.signal() {
            panic!("victim ({ops}) died of signal {sig} (SIGBUS is 7)\n{text}\n{err}");
        }
        assert!(
            out.status.success(),
            "victim ({ops}) failed: {}\n{text}\n{err}",
            out.status
        );
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .unwrap_or_else(|| panic!("victim ({ops}) printed no RESULT\n{text}\n{err}"));
        let (head, error) = line.split_once(" error=").unwrap();
        let opened = head.starts_with("open=ok");
        let done = head.split_once("done=").unwrap().1.parse().unwrap();
        let error = (error != "none").then(|| error.to_string());
        Outcome {
            opened,
            done,
            error,
        }
    }
}

/// One hostile control block field: its offset, whether it is a `u32`,
/// the value written, and the field the victim's error must name.
struct Field {
    at: usize,
    wide: bool,
    value: u64,
    named: &'static str,
}

fn field(at: usize, wide: bool, value: u64, named: &'static str) -> Field {
    Field {
        at,
        wide,
        value,
        named,
    }
}

/// What a victim does with a whole cache: every operation on every block.
const ALL_OPS: &str = "readall,writeall,checkpoint,prefetch";

/// What the victims of [`refused_at_open`] do: [`ALL_OPS`], then blocks
/// beyond the data file but within a hostile `DATA_BLOCKS` (in the direct
/// mode, beyond the end of the file's mapping: SIGBUS).
const BEYOND_OPS: &str = "readall,writeall,checkpoint,prefetch,read:64,read:99999,write:70";

/// Writes each field in turn (and puts the old value back after), runs a
/// victim that opens the cache, reads and writes every block and
/// checkpoints, then reads beyond the file: `open` must refuse, naming
/// the field.
fn refused_at_open(s: &Scene, fields: &[Field]) {
    for f in fields {
        let put = |v: u64| match f.wide {
            true => s.put64(f.at, v),
            false => s.put32(f.at, v as u32).into(),
        };
        let old = put(f.value);
        let o = s.victim(BEYOND_OPS);
        put(old);
        let e = o.error.clone().unwrap_or_default();
        assert!(
            !o.opened && e.contains("Corrupt") && e.contains(f.named),
            "{} = {}: {o:?}",
            f.named,
            f.value
        );
    }
}

/// With every field put back, the cache opens and works.
fn whole_again(s: &Scene) {
    let o = s.victim(ALL_OPS);
    assert!(o.opened && o.error.is_none(), "{o:?}");
}

/// The case: `DATA_BLOCKS` beyond the data file made the direct
/// mode map past its end (SIGBUS at the first read there) and the classic
/// mode `pread` past it; and 0 or an overflowing count.
#[test]
fn data_blocks_beyond_the_file_are_refused() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    for mode in [Mode::Direct, Mode::Classic] {
        let s = Scene::new(&format!("data-blocks-{mode}"), mode, None);
        let at = control::DATA_BLOCKS;
        refused_at_open(
            &s,
            &[
                field(at, true, 100_000, "DATA_BLOCKS"),
                field(at, true, BLOCKS + 1, "DATA_BLOCKS"),
                field(at, true, 0, "DATA_BLOCKS"),
                field(at, true, u64::MAX / BS as u64 + 1, "DATA_BLOCKS"),
                field(at, true, u64::MAX, "DATA_BLOCKS"),
            ],
        );
        whole_again(&s);
    }
}

/// Every geometry field, absurd and off by one, alone and (for the
/// buffers) with the fields that follow from it made to agree.
#[test]
fn geometry_fields_are_checked_against_the_region() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    for mode in [Mode::Classic, Mode::Direct] {
        let s = Scene::new(&format!("geometry-{mode}"), mode, None);
        let l = s.layout();
        let (n, b, p) = (l.buffers as u64, l.buckets as u64, l.partitions as u64);
        let wide = |at, v, named| field(at, true, v, named);
        let narrow = |at, v, named| field(at, false, v, named);
        refused_at_open(
            &s,
            &[
                narrow(control::BLOCK_SIZE, 0, "BLOCK_SIZE"),
                narrow(control::BLOCK_SIZE, 63, "BLOCK_SIZE"),
                narrow(control::BLOCK_SIZE, BS as u64 - 1, "BLOCK_SIZE"),
                narrow(control::BLOCK_SIZE, BS as u64 + 1, "BLOCK_SIZE"),
                narrow(control::BLOCK_SIZE, 1 << 31, "BLOCK_SIZE"),
                narrow(control::BLOCK_SIZE, u32::MAX.into(), "BLOCK_SIZE"),
                // Twice the block size: the buffers no longer fit.
                narrow(control::BLOCK_SIZE, 2 * BS as u64, "BUFFERS"),
                wide(control::BUFFERS, 0, "BUFFERS"),
                wide(control::BUFFERS, n + 1, "BUFFERS"),
                wide(control::BUFFERS, 100_000, "BUFFERS"),
                wide(control::BUFFERS, 1 << 40, "BUFFERS"),
                wide(control::BUFFERS, u64::MAX, "BUFFERS"),
                wide(control::BUCKETS, b - 1, "BUCKETS"),
                wide(control::BUCKETS, b + 1, "BUCKETS"),
                wide(control::BUCKETS, 2 * b, "BUCKETS"),
                wide(control::BUCKETS, 0, "BUCKETS"),
                wide(control::BUCKETS, u64::MAX, "BUCKETS"),
                narrow(control::PARTITIONS, p - 1, "PARTITIONS"),
                narrow(control::PARTITIONS, p + 1, "PARTITIONS"),
                narrow(control::PARTITIONS, 0, "PARTITIONS"),
                narrow(control::PARTITIONS, u32::MAX.into(), "PARTITIONS"),
                narrow(control::PARTS, 1, "PARTS"),
                narrow(control::PARTS, u32::MAX.into(), "PARTS"),
                narrow(control::MODE, 2, "MODE"),
                narrow(control::MODE, u32::MAX.into(), "MODE"),
            ],
        );
        // No buffers, with buckets and partitions that a layout of none
        // would have: the clock sweep would divide by zero.
        let none = Layout::new(BS, 0);
        let old = (
            s.put64(control::BUCKETS, none.buckets as u64),
            s.put32(control::PARTITIONS, none.partitions as u32),
        );
        refused_at_open(&s, &[wide(control::BUFFERS, 0, "BUFFERS")]);
        // More buffers than fit, the same way.
        let more = Layout::new(BS, 4 * l.buffers);
        s.put64(control::BUCKETS, more.buckets as u64);
        s.put32(control::PARTITIONS, more.partitions as u32);
        refused_at_open(&s, &[wide(control::BUFFERS, 4 * n, "BUFFERS")]);
        s.put64(control::BUCKETS, old.0);
        s.put32(control::PARTITIONS, old.1);
        whole_again(&s);
    }
}

/// Dirty buffers whose descriptors another process pointed beyond the
/// data file: a write-back must not write there (it made the file grow to
/// the hostile block), nor overflow the offset.
#[test]
fn hostile_block_numbers_are_not_written_back() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    for mode in [Mode::Classic, Mode::Direct] {
        let s = Scene::new(&format!("tags-{mode}"), mode, Some(8));
        for blk in 0..8 {
            s.cache().write(blk).unwrap().write_u64(1, 1).unwrap();
        }
        let l = s.layout();
        let len = s.file_len();
        for i in 0..l.buffers {
            let tag = match i % 2 {
                0 => 100_000 + i as u64,
                _ => u64::MAX / BS as u64 + i as u64,
            };
            s.put64(format::desc(&l, i) + desc::TAG, tag);
        }
        // Writes take buffers (in both modes), so victims are written back.
        let o = s.victim("writeall");
        let e = o.error.clone().unwrap_or_default();
        assert!(
            o.opened && e.contains("Corrupt") && e.contains("tag"),
            "{o:?}"
        );
        let o = s.victim("checkpoint");
        let e = o.error.clone().unwrap_or_default();
        assert!(e.contains("Corrupt") && e.contains("tag"), "{o:?}");
        assert_eq!(s.file_len(), len, "{mode}: the data file changed length");
    }
}

/// Chain links another process made loop (every bucket leads to buffer
/// 0, which leads to itself) or point beyond the buffers: lookups end,
/// and an eviction that must unlink a buffer says the chain is corrupt
/// instead of walking it forever.
#[test]
fn hostile_chain_links_end() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    let s = Scene::new("links", Mode::Classic, Some(8));
    for blk in 0..8 {
        drop(s.cache().read(blk).unwrap());
    }
    let l = s.layout();
    for b in 0..l.buckets {
        s.put32(format::bucket(&l, b), 1);
    }
    s.put32(format::link(&l, 0), 1);
    let o = s.victim("prefetch,read_with:3,readall");
    let e = o.error.clone().unwrap_or_default();
    assert!(o.done >= 1 && e.contains("chain"), "{o:?}");

    for b in 0..l.buckets {
        s.put32(format::bucket(&l, b), 100_000);
    }
    for i in 0..l.buffers {
        s.put32(format::link(&l, i), u32::MAX);
    }
    let o = s.victim("prefetch,read_with:3,readall");
    let e = o.error.clone().unwrap_or_default();
    assert!(
        o.done >= 1 && e.contains("Corrupt") && e.contains("bucket head"),
        "{o:?}"
    );
}

/// Partition lock words another process set to the writer bit: a read
/// that needs one (a miss) gives up after the lock timeout.
#[test]
fn a_held_partition_lock_times_out() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    let s = Scene::new("partition", Mode::Classic, Some(8));
    let l = s.layout();
    for p in 0..l.partitions {
        s.put32(format::partition_lock(&l, p), WRITER);
    }
    let o = s.victim("read:20");
    let e = o.error.clone().unwrap_or_default();
    assert!(
        o.opened && e.contains("LockTimeout") && e.contains("partition lock"),
        "{o:?}"
    );
}

/// Stripe lock words (direct mode) set to the writer bit: an in-place
/// read gives up after the lock timeout; set to a reader count, a
/// checkpoint's write-back does.
#[test]
fn a_held_stripe_lock_times_out() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    let s = Scene::new("stripe", Mode::Direct, Some(8));
    let l = s.layout();
    for blk in 0..BLOCKS {
        s.put32(format::stripe_lock(&l, blk), WRITER);
    }
    let o = s.victim("read:20");
    let e = o.error.clone().unwrap_or_default();
    assert!(
        e.contains("LockTimeout") && e.contains("stripe lock"),
        "{o:?}"
    );
    for blk in 0..BLOCKS {
        s.put32(format::stripe_lock(&l, blk), 1);
    }
    let o = s.victim("write:5,checkpoint");
    let e = o.error.clone().unwrap_or_default();
    assert!(
        o.done == 1 && e.contains("LockTimeout") && e.contains("stripe lock"),
        "{o:?}"
    );
}

/// A buffer's state word left with its header lock, a writer's content
/// lock, or a read-in that never ends: a read of that block gives up
/// after the lock timeout, naming what it waited for.
#[test]
fn held_buffer_words_time_out() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    let s = Scene::new("state", Mode::Classic, Some(8));
    drop(s.cache().read(3).unwrap());
    let l = s.layout();
    let i = (0..l.buffers)
        .find(|&i| {
            s.evil()
                .atomic_u64(format::desc(&l, i) + desc::TAG)
                .unwrap()
                .load(Ordering::Relaxed)
                == 3
        })
        .expect("block 3 in a buffer");
    let at = format::desc(&l, i) + desc::STATE;
    let valid = state::TAG_VALID | state::VALID;
    let cases = [
        (valid | state::LOCKED, "read:3", "buffer header lock"),
        (valid | state::EXCLUSIVE | 1, "read:3", "content lock"),
        (valid | state::SHARE_ONE | 1, "write:3", "content lock"),
        (
            state::TAG_VALID | state::IO_IN_PROGRESS,
            "read:3",
            "read-in",
        ),
    ];
    for (word, ops, what) in cases {
        let old = s.put64(at, word);
        let o = s.victim(ops);
        s.put64(at, old);
        let e = o.error.clone().unwrap_or_default();
        assert!(e.contains("LockTimeout") && e.contains(what), "{o:?}");
    }
    // Nothing held: the block reads.
    let o = s.victim("read:3,read_with:3");
    assert!(o.error.is_none() && o.done == 2, "{o:?}");
}

/// The format the tests above write (`tests/common/format.rs`, the crate
/// docs' table) is the one the cache keeps: every control block field,
/// descriptors' tags and state bits (flags, pins, shares, the writer's
/// lock) as guards come and go, the bucket heads and chain links, and
/// (direct mode) the stripe lock an in-place read holds.
#[test]
fn the_format_is_the_one_the_tests_write() {
    // Its region in /dev/shm is host state other tests compare under the
    // pool lock; the end checks that nothing is left.
    let _pool = hugeshm_testkit::observe!();
    for mode in [Mode::Classic, Mode::Direct] {
        let s = Scene::new(&format!("format-{mode}"), mode, Some(8));
        let l = s.layout();
        let get32 = |at| s.evil().atomic_u32(at).unwrap().load(Ordering::SeqCst);
        let get64 = |at| s.evil().atomic_u64(at).unwrap().load(Ordering::SeqCst);
        assert_eq!(get64(control::MAGIC).to_le_bytes(), *b"HSHMCACH");
        assert_eq!(get32(control::BLOCK_SIZE), BS as u32);
        assert_eq!(get64(control::BUFFERS), 8);
        assert_eq!(get64(control::BUCKETS), l.buckets as u64);
        assert_eq!(get32(control::PARTITIONS), l.partitions as u32);
        assert_eq!(get64(control::DATA_BLOCKS), BLOCKS);
        assert_eq!(get32(control::MODE), u32::from(mode == Mode::Direct));
        assert_eq!(get32(control::PARTS), 0);

        // Eight blocks written: each in one of the eight buffers, dirty.
        for blk in 0..8 {
            s.cache().write(blk).unwrap().write_u64(1, 1).unwrap();
        }
        let state_of = |blk: u64| {
            let i = (0..l.buffers)
                .find(|&i| get64(format::desc(&l, i) + desc::TAG) == blk)
                .unwrap_or_else(|| panic!("block {blk} in no buffer's tag"));
            get64(format::desc(&l, i) + desc::STATE)
        };
        // (pins, shared holders, writer)
        let held = |w: u64| {
            (
                w & state::REF_MASK,
                w / state::SHARE_ONE,
                w & state::EXCLUSIVE != 0,
            )
        };
        let flags =
            state::TAG_VALID | state::VALID | state::DIRTY | state::IO_IN_PROGRESS | state::LOCKED;
        let dirty = state::TAG_VALID | state::VALID | state::DIRTY;
        assert_eq!(state_of(3) & flags, dirty, "{mode}");
        assert_eq!(held(state_of(3)), (0, 0, false), "{mode}");
        {
            let _r1 = s.cache().read(3).unwrap();
            let _r2 = s.cache().read(3).unwrap();
            let _w = s.cache().write(4).unwrap();
            assert_eq!(held(state_of(3)), (2, 2, false), "{mode}: two readers");
            assert_eq!(held(state_of(4)), (1, 0, true), "{mode}: a writer");
        }
        assert_eq!(held(state_of(3)), (0, 0, false), "{mode}");
        assert_eq!(held(state_of(4)), (0, 0, false), "{mode}");
        s.cache().checkpoint().unwrap();
        assert_eq!(state_of(3) & flags, dirty & !state::DIRTY, "{mode}");

        // Every buffer is in one chain: heads and links name each once.
        let mut named: Vec<u32> = (0..l.buckets)
            .map(|b| get32(format::bucket(&l, b)))
            .chain((0..l.buffers).map(|i| get32(format::link(&l, i))))
            .filter(|&x| x != 0)
            .collect();
        named.sort_unstable();
        assert_eq!(named, (1..=8).collect::<Vec<u32>>(), "{mode}");

        if mode == Mode::Direct {
            // Block 20 is in no buffer: read in place, its stripe held.
            let g = s.cache().read(20).unwrap();
            assert!(g.in_place());
            assert_eq!(get32(format::stripe_lock(&l, 20)), 1);
            drop(g);
            assert_eq!(get32(format::stripe_lock(&l, 20)), 0);
        }
    }
}
