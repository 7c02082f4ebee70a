//! `advise --jvm ARGS_OR_PID`: what a JVM maps on huge pages
//! ([`crate::jvm`]), from a java command line (one string, split as a shell
//! splits words) or a running JVM's pid (its command line and the option
//! variables of its environment). The defaults it leaves out come from
//! `-XX:+PrintFlagsFinal` of a trusted java (`hugeshm_probe::jvm`), else
//! from the documented defaults, and the demands say which.

use super::error::SourceError;
use super::model::{Demand, Skipped};
use crate::jvm::{huge_parts, resolve, JvmMemory, JvmPart};
use hugeshm_parse::jvm_args;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::jvm::{running_jvm, trusted_java, OPTION_VARIABLES};
use hugeshm_probe::{HostSnapshot, Probe};
use std::path::PathBuf;

/// A JVM's options: the words its VM reads, in order, and who runs it.
pub(crate) struct JvmOptions {
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
        Some((first, rest)) if !first.starts_with(['-', '@']) => (Some(PathBuf::from(first)), rest),
        _ => (None, &all[..]),
    };
    Ok(JvmOptions {
        what: "command line".to_owned(),
        words: jvm_args::vm_words(rest).to_vec(),
        java,
        owner: None,
    })
}

/// The JVM's memory as `opts` size it on `host`: asked of a trusted java
/// where one is there, else from the documented defaults.
pub(crate) fn jvm_memory(
    host: &HostSnapshot,
    opts: &JvmOptions,
) -> Result<(JvmMemory, Option<String>), String> {
    let args = jvm_args::parse(&opts.words).map_err(|e| e.message)?;
    let mem_total = host
        .meminfo
        .as_ref()
        .and_then(|m| m.mem_total_bytes)
        .unwrap_or(0);
    let cpus = host
        .nodes
        .iter()
        .map(|n| n.cpus.len())
        .sum::<usize>()
        .max(1);
    let asked = trusted_java(opts.java.as_deref()).and_then(|java| {
        let out = hugeshm_probe::jvm::flags_final(&java, &opts.words)?;
        Ok((jvm_args::flags_final(&out), java))
    });
    Ok(match asked {
        Ok((flags, java)) => {
            let source = format!("-XX:+PrintFlagsFinal of {}", java.display());
            (
                resolve(&args, Some((&flags, &source)), mem_total, cpus),
                None,
            )
        }
        Err(e) => (resolve(&args, None, mem_total, cpus), Some(e.to_string())),
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
