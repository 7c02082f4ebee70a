//! Creating a cache (laying it out in a region) and opening one another
//! process created (checking it first, `validate.rs`). The control block
//! is published to other processes by `READY`, released last.

use std::cell::Cell;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;

use hugeshm_region::Region;

use super::io::{map_data, open_data};
use super::{Cache, Mode, Stats};
use crate::error::CacheError;
use crate::layout::{control, desc, Layout, MAGIC, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, VERSION};
use crate::lock::DEFAULT_LOCK_TIMEOUT;
use crate::validate::{self, Known};

impl Cache {
    /// Lays a new, empty cache out in `region` (which this process just
    /// created; its data must be zero or unused) over the data file at
    /// `data` (its length a multiple of `block_size`), with as many
    /// buffers as fit. Other processes [`open`](Cache::open) it after this
    /// returns.
    pub fn create(region: Region, data: &Path, block_size: usize) -> Result<Cache, CacheError> {
        Cache::create_sized(region, data, block_size, None)
    }

    /// [`create`](Cache::create) with `buffers` buffers (`None`: as many
    /// as fit), for a region larger than the cache (rounded up to a 1 GiB
    /// page, say).
    pub fn create_sized(
        region: Region,
        data: &Path,
        block_size: usize,
        buffers: Option<usize>,
    ) -> Result<Cache, CacheError> {
        Cache::create_with(region, data, block_size, buffers, Mode::Classic)
    }

    /// [`create_sized`](Cache::create_sized) in `mode`: [`Mode::Direct`]
    /// maps the data file (every process that opens the cache does too).
    pub fn create_with(
        region: Region,
        data: &Path,
        block_size: usize,
        buffers: Option<usize>,
        mode: Mode,
    ) -> Result<Cache, CacheError> {
        Cache::create_split(region, Vec::new(), data, block_size, buffers, mode)
    }

    /// [`create_with`](Cache::create_with) with the blocks spread over
    /// `parts` (one region per NUMA node, say, from
    /// `RegionBuilder::create_per_node`; buffer `i`'s block is in part
    /// `i mod parts.len()`); `region` keeps the control block, locks,
    /// hash table and descriptors. Other processes attach every region and
    /// [`open_split`](Cache::open_split) them in the same order. `None`
    /// buffers: as many as the control region and the smallest part hold.
    /// No parts: the blocks are in `region`, as [`create_with`](Cache::create_with).
    ///
    /// ```no_run
    /// use hugeshm_cache::{Cache, Mode, DEFAULT_BLOCK_SIZE};
    /// use hugeshm_region::{Backend, PageSize, RegionBuilder};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let data = std::path::Path::new("/var/tmp/example.data");
    /// let (control, _) = RegionBuilder::new(64 << 20).name("sga").backend(Backend::Sysv).create()?;
    /// // sga-buffers.node0, sga-buffers.node1, ...: each bound to its node.
    /// let parts = RegionBuilder::new(8 << 30)
    ///     .name("sga-buffers")
    ///     .backend(Backend::Sysv)
    ///     .page_size(PageSize::HUGE_2M)
    ///     .create_per_node()?;
    /// let parts = parts.into_iter().map(|(p, _)| p.region).collect();
    /// let cache = Cache::create_split(control, parts, data, DEFAULT_BLOCK_SIZE, None, Mode::Classic)?;
    /// # Ok(()) }
    /// ```
    pub fn create_split(
        region: Region,
        parts: Vec<Region>,
        data: &Path,
        block_size: usize,
        buffers: Option<usize>,
        mode: Mode,
    ) -> Result<Cache, CacheError> {
        let layout = choose_layout(&region, &parts, block_size, buffers)?;
        let (file, len) = open_data(data)?;
        let data_blocks = len / block_size as u64;
        if data_blocks == 0 || len % block_size as u64 != 0 {
            return Err(CacheError::Config(format!(
                "the data file {} is {len} bytes: not a whole, non-zero number of {block_size}-byte blocks",
                data.display()
            )));
        }
        let cache = Cache::handle(region, parts, layout, data_blocks, file, data, mode)?;
        cache.lay_out()?;
        Ok(cache)
    }

    /// Opens the cache another process laid out in `region` (attached by
    /// name, or inherited over `fork`), over the same data file.
    pub fn open(region: Region, data: &Path) -> Result<Cache, CacheError> {
        Cache::open_split(region, Vec::new(), data)
    }

    /// Opens a cache made by [`create_split`](Cache::create_split): the
    /// control region and the parts in the creator's order.
    pub fn open_split(
        region: Region,
        parts: Vec<Region>,
        data: &Path,
    ) -> Result<Cache, CacheError> {
        // Every number below is checked against what this process knows
        // before it is used (validate.rs): any attacher may have written
        // the control block.
        let ctl = validate::read_control(&region)?;
        let (file, file_len) = open_data(data)?;
        let known = Known {
            region_bytes: region.data_len(),
            parts: parts.len(),
            smallest_part: parts.iter().map(Region::data_len).min().unwrap_or(0),
            file_len,
        };
        let ok = validate::check(&ctl, &known)?;
        let mode = match ok.direct {
            true => Mode::Direct,
            false => Mode::Classic,
        };
        Cache::handle(region, parts, ok.layout, ok.data_blocks, file, data, mode)
    }

    /// The handle over a cache in `region` that [`create_split`] laid out
    /// or [`open_split`] checked, over the opened data file `file` of
    /// `data_blocks` blocks at `data`: every handle is made here. In the
    /// direct mode it maps the data file.
    ///
    /// [`create_split`]: Cache::create_split
    /// [`open_split`]: Cache::open_split
    fn handle(
        region: Region,
        parts: Vec<Region>,
        layout: Layout,
        data_blocks: u64,
        file: File,
        data: &Path,
        mode: Mode,
    ) -> Result<Cache, CacheError> {
        let direct = match mode {
            Mode::Direct => Some(map_data(&file, data, data_blocks, layout.block_size)?),
            Mode::Classic => None,
        };
        Ok(Cache {
            region,
            parts,
            layout,
            data_blocks,
            file,
            path: data.to_owned(),
            stats: Cell::new(Stats::default()),
            direct,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        })
    }

    /// Writes the control block, the locks, the hash table and the
    /// descriptors of a new cache, then `READY` (release): what
    /// [`open_split`](Cache::open_split) will check.
    fn lay_out(&self) -> Result<(), CacheError> {
        let (r, layout, k) = (&self.region, &self.layout, self.parts.len());
        r.atomic_u64(control::MAGIC)?
            .store(MAGIC, Ordering::Relaxed);
        r.atomic_u32(control::MODE)?
            .store(u32::from(self.mode() == Mode::Direct), Ordering::Relaxed);
        r.atomic_u32(control::PARTS)?
            .store(k as u32, Ordering::Relaxed);
        r.atomic_u32(control::VERSION)?
            .store(VERSION, Ordering::Relaxed);
        r.atomic_u32(control::BLOCK_SIZE)?
            .store(layout.block_size as u32, Ordering::Relaxed);
        r.atomic_u64(control::BUFFERS)?
            .store(layout.buffers as u64, Ordering::Relaxed);
        r.atomic_u64(control::BUCKETS)?
            .store(layout.buckets as u64, Ordering::Relaxed);
        r.atomic_u32(control::PARTITIONS)?
            .store(layout.partitions as u32, Ordering::Relaxed);
        r.atomic_u64(control::DATA_BLOCKS)?
            .store(self.data_blocks, Ordering::Relaxed);
        r.atomic_u64(control::CLOCK_HAND)?
            .store(0, Ordering::Relaxed);
        for p in 0..layout.partitions {
            r.atomic_u32(layout.partition_lock(p))?
                .store(0, Ordering::Relaxed);
        }
        for st in 0..crate::layout::STRIPES {
            r.atomic_u32(layout.stripe_lock(st as u64))?
                .store(0, Ordering::Relaxed);
        }
        for b in 0..layout.buckets {
            r.atomic_u32(layout.bucket(b))?.store(0, Ordering::Relaxed);
        }
        for i in 0..layout.buffers {
            let d = layout.desc(i);
            r.atomic_u64(d + desc::STATE)?.store(0, Ordering::Relaxed);
            r.atomic_u64(d + desc::TAG)?
                .store(u64::MAX, Ordering::Relaxed);
            r.atomic_u32(layout.link(i))?.store(0, Ordering::Relaxed);
        }
        // Publish: everything above happens-before a READY seen as 1.
        r.atomic_u32(control::READY)?.store(1, Ordering::Release);
        Ok(())
    }
}

/// The layout [`Cache::create_split`] asks for: `buffers` (or as many as
/// fit) blocks of `block_size` bytes, in `region` or with the blocks over
/// `parts`; an error when the block size or the sizes do not allow it.
fn choose_layout(
    region: &Region,
    parts: &[Region],
    block_size: usize,
    buffers: Option<usize>,
) -> Result<Layout, CacheError> {
    if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) || !block_size.is_power_of_two() {
        return Err(CacheError::Config(format!(
            "block size {block_size} must be a power of two from {MIN_BLOCK_SIZE} to \
             {MAX_BLOCK_SIZE} bytes"
        )));
    }
    if parts.len() > u32::MAX as usize {
        return Err(CacheError::Config(format!("{} parts", parts.len())));
    }
    let k = parts.len();
    let smallest = parts.iter().map(Region::data_len).min().unwrap_or(0);
    let needed = |n: usize| {
        let l = Layout::split(block_size, n, k);
        l.total > region.data_len() || l.part_bytes() > smallest
    };
    let fit = if k == 0 {
        Layout::fitting(block_size, region.data_len())
    } else {
        Layout::fitting_split(block_size, region.data_len(), k, smallest)
    };
    let layout = match buffers {
        Some(n) if k > 0 && needed(n) => {
            let l = Layout::split(block_size, n, k);
            return Err(CacheError::Config(format!(
                "{n} buffers of {block_size} bytes over {k} parts need {} bytes of control                      region and {} bytes in each part; the control region has {}, the smallest                      part {smallest}",
                l.total,
                l.part_bytes(),
                region.data_len()
            )));
        }
        Some(n) if k > 0 => Layout::split(block_size, n, k),
        Some(n) if Layout::new(block_size, n).total > region.data_len() => {
            return Err(CacheError::Config(format!(
                "{n} buffers of {block_size} bytes need {} bytes; the region has {}",
                Layout::new(block_size, n).total,
                region.data_len()
            )))
        }
        Some(n) => Layout::new(block_size, n),
        None => fit,
    };
    if layout.buffers == 0 {
        return Err(CacheError::Config(format!(
            "a region with {} data bytes holds no {block_size}-byte buffer (it needs at least {})",
            region.data_len(),
            Layout::new(block_size, 1).total
        )));
    }
    Ok(layout)
}
