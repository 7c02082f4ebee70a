//! What an OpenJDK 17 JVM maps on explicit huge pages (`-XX:+UseLargePages`),
//! mapping by mapping, as measured on OpenJDK 17.0.15 (Debian 12) against a
//! 2 MiB pool (docs/advise.md, "The JVM"), and as its `os_linux.cpp` reserves
//! them: every reservation of the JVM's "special" memory is one
//! `mmap(MAP_HUGETLB)` (or one SysV segment with `-XX:+UseSHM`) of its whole
//! size, made at start whatever `-Xms` says, so the pool's pages are taken
//! (`HugePages_Rsvd`) at start. Which page size a mapping gets is the largest
//! the JVM may use (`LargePageSizeInBytes`, else the kernel's default) that
//! the mapping is not smaller than; it is rounded up to it.
//!
//! On huge pages: the Java heap (`MaxHeapSize`), the code cache
//! (`ReservedCodeCacheSize`, its segments in one reservation; not with
//! `-XX:+UseSHM`, measured: SysV memory is not executable) and, where
//! each is at least a page: G1's two mark bitmaps (heap ÷ 64 each, in JDK
//! 17), card table, block offset table and card counts (heap ÷ 512 each);
//! Parallel's mark bitmap (heap ÷ 32) where it is a multiple of the page and
//! at least 10 pages. Serial's and Parallel's card tables stay on base pages.
//! From JDK 20 on (measured on Temurin 25.0.3) G1 has one mark bitmap and
//! two tables (no card counts), and the code cache is what
//! `ReservedCodeCacheSize` says (240 MiB + 4 KiB there), rounded up.
//! Used by advise (`--jvm`) and by the segments' JVM finding, so that both
//! count the same.

use hugeshm_parse::jvm_args::{self, Gc, JvmArgs};
use hugeshm_parse::size::MIB;
use hugeshm_probe::jvm::{running_jvm, OPTION_VARIABLES};
use hugeshm_probe::Probe;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A JVM's options: the words its VM reads, in order, and who runs it.
pub struct JvmOptions {
    /// `pid N` or `command line`.
    pub what: String,
    /// The VM's words (env variables', the command line's VM options).
    pub words: Vec<String>,
    /// The java to ask first (the exe, or the command line's path).
    pub java: Option<PathBuf>,
    /// Uid and gid of a running JVM.
    pub owner: Option<(u32, u32)>,
}

/// The options `spec` names: a pid of a running JVM, or a command line.
pub(crate) fn jvm_options(probe: &Probe, spec: &str) -> Result<JvmOptions, String> {
    let split = |s: &str| jvm_args::split_words(s).map_err(|e| e.message);
    if let Ok(pid) = spec.trim().parse::<u32>() {
        let j = running_jvm(&probe.roots.proc, pid).map_err(|e| e.to_string())?;
        let env = |name: &str| -> Result<Vec<String>, String> {
            match j.env_options.iter().find(|(k, _)| k == name) {
                Some((_, v)) => split(v),
                None => Ok(Vec::new()),
            }
        };
        let [tool, jdk, late] = OPTION_VARIABLES;
        let mut words = env(tool)?;
        words.extend(env(jdk)?);
        let rest = j.args.get(1..).unwrap_or_default();
        words.extend(jvm_args::vm_words(rest).iter().cloned());
        words.extend(env(late)?);
        return Ok(JvmOptions {
            what: format!("pid {pid}"),
            words,
            java: Some(j.exe),
            owner: j.uid.zip(j.gid),
        });
    }
    let all = split(spec)?;
    let (java, rest) = match all.split_first() {
        None => return Err("an empty command line: give java's, its options, or a pid".into()),
        Some((first, rest)) if !first.starts_with(['-', '@']) => {
            let java = PathBuf::from(first);
            if java.file_name().is_none_or(|n| n != "java") {
                return Err(format!(
                    "{first:?} is not java: give a java command line (java -Xmx8g ...), its \
                     options alone (-Xmx8g ...), or a running JVM's pid"
                ));
            }
            (Some(java), rest)
        }
        Some(_) => (None, &all[..]),
    };
    Ok(JvmOptions {
        what: "command line".to_owned(),
        words: jvm_args::vm_words(rest).to_vec(),
        java,
        owner: None,
    })
}

/// What sizes a JVM's huge page mappings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmMemory {
    /// `MaxHeapSize`, bytes.
    pub heap: u64,
    /// `ReservedCodeCacheSize`, bytes.
    pub code_cache: u64,
    /// The collector.
    pub gc: Gc,
    /// `UseLargePages`.
    pub large_pages: bool,
    /// `UseSHM`.
    pub shm: bool,
    /// `UseTransparentHugePages`.
    pub thp: bool,
    /// `LargePageSizeInBytes` (0: the kernel's default).
    pub large_page_size: u64,
    /// The Java feature release (`None`: unknown, taken as 17).
    pub major: Option<u32>,
    /// Where the values come from (`-XX:+PrintFlagsFinal of /usr/…/java`,
    /// or the documented defaults).
    pub source: String,
}

/// The host's memory and CPUs, which the JVM's defaults follow.
pub fn ram_and_cpus(host: &hugeshm_probe::HostSnapshot) -> (u64, usize) {
    let mem_total = host
        .meminfo
        .as_ref()
        .and_then(|m| m.mem_total_bytes)
        .unwrap_or(0);
    let cpus = host.nodes.iter().map(|n| n.cpus.len()).sum::<usize>();
    (mem_total, cpus.max(1))
}

/// The documented default of a flag the command line leaves out, where no
/// java could be asked: the heap a quarter of `mem_total`
/// (`MaxRAMPercentage=25`), G1 on a server-class machine (2 CPUs and
/// 1792 MiB), else Serial, a 240 MiB code cache with tiered compilation, else 48 MiB.
pub fn resolve(
    args: &JvmArgs,
    flags: Option<(&BTreeMap<String, String>, &str, Option<u32>)>,
    mem_total: u64,
    cpus: usize,
) -> JvmMemory {
    let num = |name: &str| {
        flags
            .and_then(|(f, _, _)| f.get(name))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let on = |name: &str| flags.and_then(|(f, _, _)| f.get(name)).map(|v| v == "true");
    let gc = args.gc.unwrap_or_else(|| {
        Gc::ALL
            .into_iter()
            .find(|g| on(g.flag()) == Some(true))
            .unwrap_or(if cpus >= 2 && mem_total >= 1792 * MIB {
                Gc::G1
            } else {
                Gc::Serial
            })
    });
    let tiered = args.tiered.or(on("TieredCompilation")).unwrap_or(true);
    JvmMemory {
        heap: num("MaxHeapSize")
            .or(args.max_heap)
            .unwrap_or(mem_total / 4),
        code_cache: args
            .code_cache
            .or(num("ReservedCodeCacheSize"))
            .unwrap_or(if tiered { 240 * MIB } else { 48 * MIB }),
        gc,
        large_pages: args.use_large_pages.unwrap_or(false),
        shm: args.use_shm.unwrap_or(false),
        thp: args.use_thp.unwrap_or(false),
        large_page_size: args.large_page_size.unwrap_or(0),
        major: flags.and_then(|(_, _, v)| v),
        source: match flags {
            Some((_, s, _)) => s.to_owned(),
            None => "the documented defaults (no java asked)".to_owned(),
        },
    }
}

/// One kind of mapping the JVM puts on huge pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmPart {
    /// What it is (`heap`, `code cache`, `G1 mark bitmaps`).
    pub name: &'static str,
    /// How many mappings of it.
    pub mappings: u64,
    /// Each mapping's bytes, rounded up to its page.
    pub each: u64,
    /// Its page size.
    pub page: u64,
    /// How its size follows (`MaxHeapSize`, `heap ÷ 64`).
    pub from: &'static str,
}

impl JvmPart {
    /// All its mappings' bytes.
    pub fn bytes(&self) -> u64 {
        self.each.saturating_mul(self.mappings)
    }
}

/// The mappings `m` puts on huge pages, with the host's page sizes `offered`
/// and its default `default_page`; none unless it uses explicit large pages.
pub fn huge_parts(m: &JvmMemory, offered: &[u64], default_page: u64) -> Vec<JvmPart> {
    if !m.large_pages || m.thp {
        return Vec::new();
    }
    let top = if offered.contains(&m.large_page_size) {
        m.large_page_size
    } else {
        default_page
    };
    let mut sizes: Vec<u64> = offered.iter().copied().filter(|&p| p <= top).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    // The largest page the region is not smaller than (os::page_size_for_region_unaligned).
    let page_for = |s: u64| sizes.iter().copied().find(|&p| s >= p);
    let mut parts = Vec::new();
    let mut add = |name, mappings, raw: u64, page: Option<u64>, from| {
        if let Some(p) = page {
            parts.push(JvmPart {
                name,
                mappings,
                each: raw.div_ceil(p).saturating_mul(p),
                page: p,
                from,
            });
        }
    };
    let heap_page = page_for(m.heap);
    let heap = heap_page.map_or(m.heap, |p| m.heap.div_ceil(p).saturating_mul(p));
    add("heap", 1, m.heap, heap_page, "MaxHeapSize");
    if !m.shm {
        // With -XX:+UseSHM the code cache (executable) stays on base pages.
        add(
            "code cache",
            1,
            m.code_cache,
            page_for(m.code_cache),
            "ReservedCodeCacheSize",
        );
    }
    match m.gc {
        // JDK 20 dropped G1's second mark bitmap and its card counts
        // (measured: OpenJDK 17.0.15 and Temurin 25.0.3).
        Gc::G1 => {
            let (bitmaps, tables, what) = if m.major.unwrap_or(17) >= 20 {
                (1, 2, "G1 card table, BOT")
            } else {
                (2, 3, "G1 card table, BOT, card counts")
            };
            add(
                "G1 mark bitmaps",
                bitmaps,
                heap / 64,
                page_for(heap / 64),
                "heap ÷ 64",
            );
            let t = heap / 512;
            add(what, tables, t, page_for(t), "heap ÷ 512");
        }
        Gc::Parallel => {
            // heap ÷ 32 measured on 17; Temurin 25 put no bitmap of a 1 GiB
            // heap on huge pages (measured), taken as heap ÷ 64 there.
            let (b, from) = if m.major.unwrap_or(17) >= 20 {
                (heap / 64, "heap ÷ 64")
            } else {
                (heap / 32, "heap ÷ 32")
            };
            // os::page_size_for_region_aligned(b, 10).
            let page = sizes.iter().copied().find(|&p| b % p == 0 && b / p >= 10);
            add("Parallel mark bitmap", 1, b, page, from);
        }
        _ => {}
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(heap: u64, gc: Gc) -> JvmMemory {
        JvmMemory {
            heap,
            code_cache: 240 * MIB,
            gc,
            large_pages: true,
            shm: false,
            thp: false,
            large_page_size: 0,
            major: Some(17),
            source: String::new(),
        }
    }

    fn pages(m: &JvmMemory) -> u64 {
        huge_parts(m, &[2 * MIB, 1 << 30], 2 * MIB)
            .iter()
            .map(|p| p.bytes() / p.page)
            .sum()
    }

    #[test]
    fn the_pages_measured_on_openjdk_17() {
        // HugePages_Total - Free + Rsvd with each JVM running (docs/advise.md).
        assert_eq!(pages(&mem(256 * MIB, Gc::G1)), 252);
        assert_eq!(pages(&mem(300 * MIB, Gc::G1)), 276);
        assert_eq!(pages(&mem(1 << 30, Gc::G1)), 651);
        assert_eq!(pages(&mem(256 * MIB, Gc::Serial)), 248);
        assert_eq!(pages(&mem(256 * MIB, Gc::Parallel)), 248);
        assert_eq!(pages(&mem(1 << 30, Gc::Parallel)), 648);
        // Temurin 25.0.3: one bitmap, two tables, a 240 MiB + 4 KiB code cache.
        let mut j25 = mem(1 << 30, Gc::G1);
        j25.major = Some(25);
        j25.code_cache = 240 * MIB + 4096;
        assert_eq!(pages(&j25), 643);
        j25.heap = 256 * MIB;
        assert_eq!(pages(&j25), 251);
        j25.heap = 1 << 30;
        j25.gc = Gc::Parallel;
        assert_eq!(pages(&j25), 633);
        let mut shm = mem(256 * MIB, Gc::G1);
        shm.shm = true;
        assert_eq!(pages(&shm), 132);
        let mut off = mem(1 << 30, Gc::G1);
        off.large_pages = false;
        assert!(huge_parts(&off, &[2 * MIB], 2 * MIB).is_empty());
    }

    #[test]
    fn a_pids_options_in_the_jvms_order_and_a_command_lines() {
        struct Gone(PathBuf);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = std::env::temp_dir().join(format!("hugeshm-jvm-{}", std::process::id()));
        let _gone = Gone(dir.clone());
        let pid = dir.join("proc/4242");
        std::fs::create_dir_all(&pid).unwrap();
        std::os::unix::fs::symlink("/opt/jdk/bin/java", pid.join("exe")).unwrap();
        std::fs::write(
            pid.join("cmdline"),
            "java\0-Xmx2g\0-XX:+UseLargePages\0-jar\0app.jar\0-Xmx9g\0",
        )
        .unwrap();
        std::fs::write(
            pid.join("environ"),
            "HOME=/x\0_JAVA_OPTIONS=-XX:ReservedCodeCacheSize=64m\0\
             JAVA_TOOL_OPTIONS=-Xmx1g -XX:ReservedCodeCacheSize=32m -Xms1g\0",
        )
        .unwrap();
        std::fs::write(dir.join("proc/4243"), "").unwrap();
        let probe = Probe::new(hugeshm_probe::Roots::fixture(&dir));
        let o = jvm_options(&probe, "4242").unwrap();
        let a = jvm_args::parse(&o.words).unwrap();
        // JAVA_TOOL_OPTIONS, then the command line, then _JAVA_OPTIONS.
        assert_eq!(a.max_heap, Some(2 << 30), "{:?}", o.words);
        assert_eq!(a.initial_heap, Some(1 << 30));
        assert_eq!(a.code_cache, Some(64 * MIB));
        assert_eq!(
            o.java.as_deref(),
            Some(std::path::Path::new("/opt/jdk/bin/java"))
        );
        assert!(jvm_options(&probe, "4243").is_err(), "not a process");
        let o = jvm_options(&probe, "'/opt/jdk 17/bin/java' -Xmx1g -jar a.jar -Xmx9g").unwrap();
        assert_eq!(o.words, ["-Xmx1g"]);
        assert_eq!(
            o.java.as_deref(),
            Some(std::path::Path::new("/opt/jdk 17/bin/java"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn defaults_and_asked_flags() {
        let args = hugeshm_parse::jvm_args::parse(&["-Xmx300m", "-XX:+UseLargePages"]).unwrap();
        let m = resolve(&args, None, 8 << 30, 2);
        assert_eq!((m.heap, m.code_cache, m.gc), (300 * MIB, 240 * MIB, Gc::G1));
        let mut f = BTreeMap::new();
        f.insert("MaxHeapSize".to_owned(), "314572800".to_owned());
        f.insert("ReservedCodeCacheSize".to_owned(), "50331648".to_owned());
        f.insert("UseSerialGC".to_owned(), "true".to_owned());
        let m = resolve(
            &JvmArgs::default(),
            Some((&f, "java", Some(17))),
            8 << 30,
            2,
        );
        assert_eq!(
            (m.heap, m.code_cache, m.gc),
            (300 * MIB, 48 * MIB, Gc::Serial)
        );
    }
}
