//! A hugeshm spec file (TOML, docs/advise.md): its regions as demands, and
//! the settings it names (spare pages, the memlock user, a systemd unit).

use super::error::{offered_page_size, SourceError};
use super::input::InputText;
use super::model::{Demand, Placement};
use hugeshm_parse::size_arg::parse_size_arg;
use hugeshm_probe::HostSnapshot;

/// A spec file.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    #[serde(default)]
    spare_pages: Option<u64>,
    #[serde(default)]
    memlock_user: Option<String>,
    #[serde(default)]
    systemd_unit: Option<String>,
    #[serde(default)]
    region: Vec<SpecRegion>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecRegion {
    name: String,
    size: String,
    #[serde(default)]
    page_size: Option<String>,
    #[serde(default)]
    node: Option<u32>,
    #[serde(default)]
    spread: bool,
    #[serde(default)]
    sysv_group: Option<u32>,
}

/// What a spec file asks for: its regions, and the settings it names.
pub(super) struct Spec {
    pub(super) demands: Vec<Demand>,
    pub(super) spare_pages: Option<u64>,
    pub(super) memlock_user: Option<String>,
    pub(super) systemd_unit: Option<String>,
}

/// The spec in `file`, its regions on pages of `default` size unless they
/// name one the host offers.
pub(super) fn spec_demands(
    host: &HostSnapshot,
    file: &InputText,
    default: u64,
) -> Result<Spec, SourceError> {
    let spec: SpecFile = file
        .toml("a valid hugeshm spec")
        .map_err(SourceError::Spec)?;
    let path = file.path();
    let bad = |what: String| SourceError::Spec(format!("{}: {what}", path.display()));
    if spec.region.is_empty() {
        return Err(bad("no [[region]] entries".into()));
    }
    if let Some(u) = &spec.memlock_user {
        super::parse_memlock_user(u).map_err(|e| bad(format!("memlock_user: {}", file.said(e))))?;
    }
    if let Some(u) = &spec.systemd_unit {
        super::parse_systemd_unit(u).map_err(|e| bad(format!("systemd_unit: {}", file.said(e))))?;
    }
    let mut out = Vec::new();
    for r in spec.region {
        let region = file.quoted(&r.name);
        let size = parse_size_arg(&r.size)
            .map_err(|e| bad(format!("region {region}: size {}", file.said(e))))?;
        let page = match &r.page_size {
            Some(p) => parse_size_arg(p)
                .map_err(|e| bad(format!("region {region}: page_size {}", file.said(e))))?,
            None => default,
        };
        if r.node.is_some() && r.spread {
            return Err(bad(format!(
                "region {region}: node and spread exclude each other"
            )));
        }
        let placement = Placement::of(r.node, r.spread);
        offered_page_size(
            host,
            page,
            &format!("{}: region {region}: page_size", path.display()),
        )?;
        let mut d = Demand::new(format!("spec {}", r.name), size, page).placed(placement);
        if let Some(g) = r.sysv_group {
            d = d.with_sysv_gid(g);
        }
        out.push(d);
    }
    Ok(Spec {
        demands: out,
        spare_pages: spec.spare_pages,
        memlock_user: spec.memlock_user,
        systemd_unit: spec.systemd_unit,
    })
}
