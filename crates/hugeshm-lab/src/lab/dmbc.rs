//! Seed 004: Oracle's directly mapped buffer cache on an (emulated) NVDIMM
//! did about 6x fewer physical reads than the same database treating the
//! DAX file system as an ordinary one (5,212 against 30,594 per second, at
//! similar logical reads) and a little more work (215 against 197
//! transactions per second). Here: `bench dmbc`, the shared buffer cache
//! in its direct mode (blocks in no buffer read in place through a mapping
//! of the data file) against its classic mode (every block copied in), on
//! a DAX mount where the host has one, else on the page cache, and it says
//! which.

use super::model::{Comparison, Ctx, DataTable, Lab, Plot, PlotKind, Reproduction, Series};
use crate::dmbc::{measure, ModeRun, Options, FIELD, STEPS};
use crate::oltp::Dist;
use hugeshm_parse::size::{format_bytes, MIB};
use std::path::PathBuf;

/// The reproduction.
pub struct Dmbc;

const FIELD_SETTING: &str = "Oracle 21c, SLOB, buffer cache under 100 MB, 900 MB tablespace on \
     an NVDIMM emulated under KVM: PMEM filestore against XFS -o dax";

impl Lab for Dmbc {
    fn name(&self) -> &'static str {
        "dmbc"
    }
    fn seed(&self) -> &'static str {
        "004"
    }
    fn title(&self) -> &'static str {
        "The directly mapped buffer cache: blocks read in place from a mapped data file against copied into buffers"
    }

    fn steps(&self, _: &Ctx<'_>) -> u64 {
        STEPS
    }

    fn run(&self, ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<()> {
        // The first DAX mount, if the host has one.
        let dax_dir = ctx
            .probe
            .mounts()
            .unwrap_or_default()
            .into_iter()
            .find(|m| m.is_dax())
            .map(|m| PathBuf::from(m.target));
        let (data, cache) = if ctx.quick {
            (32 * MIB, 4 * MIB)
        } else {
            (ctx.scaled(32, 256 * MIB, 1 << 30), 32 * MIB)
        };
        let o = Options {
            dir: dax_dir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp")),
            data_size_bytes: data,
            cache_size_bytes: cache,
            block_size: 8192,
            blocks_per_tx: 20,
            write_pct: 10,
            dist: Dist::Zipf,
            duration_seconds: if ctx.quick { 0.3 } else { 3.0 },
            workers: 1,
        };
        let r = measure(&ctx.probe.roots, &o, ctx.steps)?;
        let mut table = DataTable::new(&[
            "mode",
            "blocks read from",
            ">logical/s",
            ">physical/s",
            ">physical/tx",
            ">tps",
            ">copied by reads",
        ]);
        let row = |m: &ModeRun| {
            vec![
                m.mode.to_string(),
                m.mapping
                    .clone()
                    .map(|x| format!("{x} (in place)"))
                    .unwrap_or_else(|| "buffers (pread)".into()),
                format!("{:.0}", m.logical_per_second),
                format!("{:.0}", m.physical_per_second),
                format!("{:.2}", m.physical_per_tx),
                format!("{:.0}", m.tps),
                format_bytes(m.bytes_copied_by_reads),
            ]
        };
        table.row(row(&r.classic));
        table.row(row(&r.direct));
        out.table = table;
        let setting = format!(
            "{} data file in {}, {} of buffers, 20 blocks per transaction, 10% updates, Zipf, \
             one process",
            format_bytes(data),
            o.dir.display(),
            format_bytes(cache)
        );
        let where_ = if r.dax {
            "the data file was on DAX: the direct mode read persistent memory in place"
        } else {
            "no DAX here: the direct mode read the page cache through the mapping, so this \
             measures the copies saved, not persistent memory (run `hugeshm bench dmbc --data-dir` on a \
             mount with -o dax for that)"
        };
        out.comparisons.push(
            Comparison::new(
                "physical reads per second, classic / direct",
                "x",
                (
                    FIELD.classic_physical / FIELD.direct_physical,
                    FIELD_SETTING,
                ),
                (r.physical_ratio, setting.clone()),
            )
            .note(where_),
        );
        out.comparisons.push(
            Comparison::new(
                "transactions per second, direct / classic",
                "x",
                (FIELD.direct_tps / FIELD.classic_tps, FIELD_SETTING),
                (r.tps_ratio, setting),
            )
            .note(
                "the field's transactions did real SQL work and waited on I/O; ours are 20 block \
                 accesses with nothing else, so the saved copies weigh more",
            ),
        );
        // Ratios, not reads per second: this host's absolute figures and
        // the field's 2019 system share no scale.
        out.plots.push(Plot {
            id: "dmbc-ratios".to_owned(),
            title: "The direct mode against the classic one, as ratios (1x: no difference)"
                .to_owned(),
            kind: PlotKind::Bars,
            x_label: "what is compared".to_owned(),
            x_counts: false,
            y_label: "ratio (x)".to_owned(),
            categories: vec![
                "physical reads/s, classic / direct".to_owned(),
                "transactions/s, direct / classic".to_owned(),
            ],
            series: vec![
                Series {
                    name: "this host".to_owned(),
                    points: vec![
                        (0.0, r.physical_ratio.unwrap_or(0.0)),
                        (1.0, r.tps_ratio.unwrap_or(0.0)),
                    ],
                },
                Series {
                    name: "field report".to_owned(),
                    points: vec![
                        (0.0, FIELD.classic_physical / FIELD.direct_physical),
                        (1.0, FIELD.direct_tps / FIELD.classic_tps),
                    ],
                },
            ],
        });
        out.notes.push(r.note.clone());
        if dax_dir.is_none() {
            out.notes.push(
                "this host has no DAX mount; the guest test (`cargo test -p hugeshm --test \
                 guest guest_dmbc::`) runs the same on an emulated NVDIMM"
                    .to_owned(),
            );
        }
        Ok(())
    }
}
