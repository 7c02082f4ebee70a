//! `advise --jvm ARGS_OR_PID`: what a JVM maps on huge pages
//! ([`crate::jvm`]), from a java command line (one string, split as a shell
//! splits words) or a running JVM's pid (its command line and the option
//! variables of its environment). The defaults it leaves out come from
//! `-XX:+PrintFlagsFinal` of a trusted java (`hugeshm_probe::jvm`), else
//! from the documented defaults, and the demands say which.

use super::error::SourceError;
use super::model::{Demand, Skipped};
use crate::jvm::{huge_parts, jvm_options, resolve, JvmMemory, JvmOptions, JvmPart};
use hugeshm_parse::jvm_args;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::jvm::trusted_java;
use hugeshm_probe::{HostSnapshot, Probe};

/// The JVM's memory as `opts` size it on `host`: asked of a trusted java
/// where one is there, else from the documented defaults.
pub(super) fn jvm_memory(
    host: &HostSnapshot,
    opts: &JvmOptions,
) -> Result<(JvmMemory, Option<String>), String> {
    let args = jvm_args::parse(&opts.words).map_err(|e| e.message)?;
    let (mem_total, cpus) = crate::jvm::ram_and_cpus(host);
    let asked = trusted_java(opts.java.as_deref()).and_then(|java| {
        let out = hugeshm_probe::jvm::flags_final(&java, &opts.words)?;
        Ok((
            jvm_args::flags_final(&out),
            jvm_args::java_major(&out),
            java,
        ))
    });
    Ok(match asked {
        Ok((flags, major, java)) => {
            let source = format!("-XX:+PrintFlagsFinal of {}", java.display());
            let m = resolve(&args, Some((&flags, &source, major)), mem_total, cpus);
            (m, None)
        }
        Err(e) => {
            let mut m = resolve(&args, None, mem_total, cpus);
            m.major = opts
                .java
                .as_deref()
                .and_then(hugeshm_probe::jvm::release_major);
            (m, Some(e.to_string()))
        }
    })
}

/// What the JVM `spec` names asks of the pools.
pub(super) fn jvm_demands(
    probe: &Probe,
    host: &HostSnapshot,
    spec: &str,
    default_page: u64,
) -> Result<(Vec<Demand>, Vec<Skipped>), SourceError> {
    let fail = |e: String| SourceError::Spec(format!("--jvm {spec}: {e}"));
    let opts = jvm_options(probe, spec).map_err(fail)?;
    let (m, no_java) = jvm_memory(host, &opts).map_err(fail)?;
    let label = format!("jvm {}", opts.what);
    if m.thp {
        return Ok((
            Vec::new(),
            vec![Skipped {
                label,
                reason: "-XX:+UseTransparentHugePages: the JVM madvises its heap for \
                         transparent huge pages, not the pools; drop it and add \
                         -XX:+UseLargePages for hugetlb pages"
                    .to_owned(),
            }],
        ));
    }
    let offered: Vec<u64> = host.pools.iter().map(|p| p.page_size_bytes).collect();
    let mut asked = m.clone();
    asked.large_pages = true;
    let parts = huge_parts(&asked, &offered, default_page);
    let switch = match (m.large_pages, m.shm) {
        (false, _) => "add -XX:+UseLargePages (the JVM does not ask for huge pages without it)",
        (true, false) => "-XX:+UseLargePages (MAP_HUGETLB: no memlock, no hugetlb_shm_group)",
        (true, true) => {
            "-XX:+UseLargePages -XX:+UseSHM (SysV SHM_HUGETLB: memlock and \
             vm.hugetlb_shm_group for its user)"
        }
    };
    let source = match &no_java {
        Some(why) => format!("{}: {why}", m.source),
        None => m.source.clone(),
    };
    let demands = parts
        .iter()
        .map(|p| {
            let mut d = Demand::new(format!("{label} {}", p.name), p.bytes(), p.page)
                .with_note(part_note(p, &m, &source, switch));
            if !m.shm {
                d = d.memlock_free();
            }
            if let (true, Some((uid, gid))) = (m.shm, opts.owner) {
                d = d.owned_by(uid);
                if gid != 0 {
                    d = d.with_sysv_gid(gid);
                }
            }
            d
        })
        .collect();
    Ok((demands, Vec::new()))
}

/// Where a part's size comes from, in the demand's note.
fn part_note(p: &JvmPart, m: &JvmMemory, source: &str, switch: &str) -> String {
    let what = if p.mappings > 1 {
        format!("{} mappings of {} each", p.mappings, format_bytes(p.each))
    } else {
        format!("one mapping of {}", format_bytes(p.each))
    };
    format!(
        "{what} ({}, rounded up to the page; heap {}, code cache {}, {}: {source}), \
         reserved whole at start whatever -Xms says; {switch}",
        p.from,
        format_bytes(m.heap),
        format_bytes(m.code_cache),
        m.gc.flag()
    )
}
