//! `advise --oracle PFILE`: an Oracle Database instance's SGA from its
//! text parameter file, as the instance will allocate it: `sga_max_size`
//! (else `sga_target`) rounded up to the instance's granule, on the
//! default huge page size (the one Oracle uses on Linux), split over the
//! nodes with `_enable_NUMA_support`. An instance under Automatic Memory
//! Management (`memory_target`) keeps its SGA in /dev/shm files, which are
//! never on huge pages: no pages for it, and the plan says to turn AMM off.
//!
//! `advise --oracle-sid SID`: a running instance's SysV segments, as the
//! MOS script counts them (Doc ID 401749.1, `hugepages_settings.sh`: every
//! segment of `ipcs -m`), but only those that the instance's own processes
//! attach (executable `oracle`, command line naming the SID).

use super::error::SourceError;
use super::input::InputText;
use super::model::{Demand, Placement, Skipped};
use hugeshm_parse::oracle_pfile::{self, OraclePfile};
use hugeshm_parse::size::{format_bytes, GIB, MIB};

/// The granule of an instance whose SGA (`sga_max_size`, or
/// `memory_max_target` under AMM) is `sga` bytes, Oracle 11gR2 and later
/// on 64-bit platforms (My Oracle Support, "How To Determine Granule Size",
/// Doc ID 947152.1): 4 MiB up to 1 GiB, 16 MiB up to 8 GiB, 32 MiB up to
/// 16 GiB, 64 MiB up to 32 GiB, 128 MiB up to 64 GiB, 256 MiB up to
/// 128 GiB, 512 MiB above.
pub fn granule(sga: u64) -> u64 {
    match sga {
        s if s <= GIB => 4 * MIB,
        s if s <= 8 * GIB => 16 * MIB,
        s if s <= 16 * GIB => 32 * MIB,
        s if s <= 32 * GIB => 64 * MIB,
        s if s <= 64 * GIB => 128 * MIB,
        s if s <= 128 * GIB => 256 * MIB,
        _ => 512 * MIB,
    }
}

/// What `file`, an Oracle pfile, asks of pools of `page` bytes: the SGA's
/// demand, or (under AMM) a skipped entry that says what replaces AMM.
pub(super) fn oracle_demands(
    file: &InputText,
    page: u64,
) -> Result<(Vec<Demand>, Vec<Skipped>), SourceError> {
    let path = file.path().display().to_string();
    let p: OraclePfile = oracle_pfile::parse(file.text(), None).map_err(|e| {
        SourceError::Spec(format!("{path} is not an Oracle pfile: {}", file.said(e)))
    })?;
    let label = format!("--oracle {path}");
    let amm = p.memory_target.or(p.memory_max_target).filter(|m| *m > 0);
    if let Some(m) = amm {
        return Ok((
            Vec::new(),
            vec![Skipped {
                label,
                reason: format!(
                    "memory_target = {}: Automatic Memory Management keeps the SGA in /dev/shm \
                     files, which are never on huge pages. Turn it off: memory_target=0 and \
                     memory_max_target=0, sga_target and sga_max_size at the SGA wanted, \
                     pga_aggregate_target for the rest of the {} AMM had, \
                     use_large_pages=ONLY; then advise --oracle again",
                    format_bytes(m),
                    format_bytes(m)
                ),
            }],
        ));
    }
    let sga = match (p.sga_max_size, p.sga_target) {
        (Some(a), Some(b)) => a.max(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => {
            return Err(SourceError::Spec(format!(
                "{path} sets neither sga_max_size nor sga_target (nor memory_target): no SGA \
                 size to plan for"
            )))
        }
    };
    let g = granule(sga);
    let bytes = sga.div_ceil(g).saturating_mul(g);
    let switch = match p.use_large_pages.as_deref() {
        Some("ONLY") => "use_large_pages=ONLY".to_owned(),
        Some("FALSE") => {
            "use_large_pages=FALSE keeps the SGA on 4 KiB pages: set use_large_pages=ONLY"
                .to_owned()
        }
        Some(v) => format!(
            "use_large_pages={v}: set ONLY, so that the instance refuses to start short of pages \
             rather than putting part of the SGA on 4 KiB pages"
        ),
        None => "use_large_pages unset (TRUE): set ONLY, so that the instance refuses to start \
                 short of pages rather than putting part of the SGA on 4 KiB pages"
            .to_owned(),
    };
    let placement = if p.enable_numa_support == Some(true) {
        Placement::Spread
    } else {
        Placement::Any
    };
    let d = Demand::new(label, bytes, page)
        .placed(placement)
        .with_note(format!(
            "SGA {} rounded up to its {} granule (MOS 947152.1); {switch}",
            format_bytes(sga),
            format_bytes(g)
        ));
    Ok((vec![d], Vec::new()))
}

/// What the running instance `sid` asks of pools: its SysV segments (each
/// rounded up to its page size), or a skipped entry where no `oracle`
/// process of that SID attaches one.
/// An Oracle SID as `--oracle-sid` takes it: a letter, then letters,
/// digits or `_`, at most 30 (Oracle's own limit is 12 on most platforms;
/// the name only selects processes, never a path).
pub fn parse_oracle_sid(s: &str) -> Result<String, String> {
    let ok = s.len() <= 30
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not an Oracle SID: a letter, then letters, digits or _ (as ORACLE_SID)"
        ))
    }
}

pub(super) fn oracle_sid_demands(
    probe: &hugeshm_probe::Probe,
    host: &hugeshm_probe::HostSnapshot,
    sid: &str,
    units_of: impl Fn(&crate::segments::Segment) -> Vec<String>,
) -> (Vec<Demand>, Vec<Skipped>) {
    use crate::segments::oracle::OracleProcesses;
    let mut segs = crate::segments::build_with(probe, host, &Default::default());
    let mut oracle = OracleProcesses::new(probe);
    segs.segments.retain(|s| {
        s.kind == crate::segments::SegmentKind::Sysv
            && s.attached
                .iter()
                .any(|a| oracle.of(a.pid).flatten() == Some(sid))
    });
    let label = format!("--oracle-sid {sid}");
    if segs.segments.is_empty() {
        let reason = format!(
            "no SysV segment is attached by a process of instance {sid} (executable oracle, \
             command line ora_pmon_{sid} or oracle{sid}): is it running, under this name?"
        );
        return (Vec::new(), vec![Skipped { label, reason }]);
    }
    let (demands, skipped) = super::demands_from_segments(host, &segs, units_of);
    let demands = demands
        .into_iter()
        .map(|mut d| {
            let how = d.note.take().map(|n| format!("; {n}")).unwrap_or_default();
            d.note = Some(format!(
                "instance {sid}'s SysV segment, rounded up to its page size (the MOS script, \
                 Doc ID 401749.1, counts each as bytes / page + 1){how}"
            ));
            d.label = format!("oracle {sid}: {}", d.label);
            d
        })
        .collect::<Vec<_>>();
    (demands, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> InputText {
        InputText::new("initorcl.ora".into(), text.into(), None)
    }

    #[test]
    fn a_sid_is_a_name_not_a_path() {
        assert_eq!(parse_oracle_sid("ORCL_1").as_deref(), Ok("ORCL_1"));
        for bad in ["", "1ORCL", "bad/value%", "../x", "a b", &"A".repeat(31)] {
            assert!(parse_oracle_sid(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn granules_follow_oracles_table() {
        // MOS Doc ID 947152.1, 11gR2 and later.
        for (sga, g) in [
            (GIB, 4),
            (GIB + 1, 16),
            (8 * GIB, 16),
            (12 * GIB, 32),
            (32 * GIB, 64),
            (40 * GIB, 128),
            (100 * GIB, 256),
            (200 * GIB, 512),
        ] {
            assert_eq!(granule(sga), g * MIB, "{sga}");
        }
    }

    #[test]
    fn an_sga_is_rounded_to_its_granule_and_amm_is_turned_off() {
        let m2 = 2 * MIB;
        // 10,000 MiB: over 8 GiB, a 32 MiB granule: 10,016 MiB, 5,008 pages.
        let (d, s) = oracle_demands(&file("*.sga_max_size=10000M\n*.sga_target=9G\n"), m2).unwrap();
        assert!(s.is_empty());
        assert_eq!(d[0].bytes, 10_016 * MIB);
        assert!(
            d[0].note.as_deref().unwrap().contains("32 MiB granule"),
            "{:?}",
            d[0].note
        );
        assert!(d[0].note.as_deref().unwrap().contains("set ONLY"));
        // NUMA support: split over the nodes.
        let (d, _) =
            oracle_demands(&file("*.sga_target=2G\n*._enable_NUMA_support=true\n"), m2).unwrap();
        assert_eq!((d[0].bytes, d[0].placement), (2 * GIB, Placement::Spread));
        // AMM: no pages, the settings that replace it.
        let (d, s) = oracle_demands(&file("*.memory_target=6G\n"), m2).unwrap();
        assert!(d.is_empty());
        assert!(s[0].reason.contains("memory_target=0"), "{}", s[0].reason);
        assert!(oracle_demands(&file("*.db_name=orcl\n"), m2).is_err());
    }
}
