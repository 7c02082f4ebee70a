//! The parts of [`RegionError`](super::RegionError)'s messages that are
//! more than one field: lists, limits, holders, states.

use hugeshm_parse::size::format_bytes;
use hugeshm_sys::SysError;

use crate::model::RegionState;

/// What [`RegionError::Lost`](super::RegionError::Lost) says: a truncation with both sizes where the
/// file is now shorter than the region, else the fault as the guard saw it.
pub(super) fn lost_text(object: &str, file: Option<u64>, region: u64, source: &SysError) -> String {
    let offset = match source {
        SysError::MappingLost { offset, .. } => format!(" (a SIGBUS at offset {offset})"),
        _ => String::new(),
    };
    match file {
        Some(f) if f < region => format!(
            "the file behind region {object} was truncated to {f} bytes by another process \
             (the region has {region}{offset}); the mapping is no longer valid: close the \
             region; what it held is gone"
        ),
        _ => format!("region {object}: {source}; the mapping is no longer valid: close the region"),
    }
}

pub(super) fn offered_list(offered: &[u64]) -> String {
    if offered.is_empty() {
        return "none: the kernel has no hugetlb pools".to_owned();
    }
    offered
        .iter()
        .map(|s| format_bytes(*s))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn limit_text(limit: Option<u64>) -> String {
    match limit {
        Some(b) => format!("{b} bytes"),
        None => "unlimited".to_owned(),
    }
}

pub(super) fn in_use_text(pids: &[u32], nattch: Option<u64>) -> String {
    let mut parts = Vec::new();
    if let Some(n) = nattch {
        parts.push(format!("{n} attachment(s)"));
    }
    if pids.is_empty() {
        parts.push("by processes not visible here".to_owned());
    } else {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        parts.push(format!("mapped by pid(s) {}", list.join(", ")));
    }
    parts.join(", ")
}

pub(super) fn exists_text(holders: &[u32], state: Option<RegionState>) -> String {
    let mut s = String::new();
    if !holders.is_empty() {
        let list: Vec<String> = holders.iter().map(u32::to_string).collect();
        s.push_str(&format!(" and is held by pid(s) {}", list.join(", ")));
    }
    match state {
        Some(RegionState::Initializing) => s.push_str(" (still being created)"),
        Some(st) if st != RegionState::Ready => s.push_str(&format!(" (state {st})")),
        _ => {}
    }
    s
}

pub(super) fn orphan_text(state: RegionState, creator_pid: Option<u32>, kept: bool) -> String {
    let who = creator_pid
        .map(|p| format!("its creator (pid {p})"))
        .unwrap_or_else(|| "its creator".to_owned());
    match state {
        RegionState::Ready if kept => format!(
            "it was made to be kept and {who} has exited (not a crash); the contents are intact"
        ),
        RegionState::Ready => format!(
            "{who} finished creating it and is gone (crashed or exited without removing it); \
             the contents are intact"
        ),
        RegionState::Crashed => {
            format!("{who} died while creating it: the contents were never finished")
        }
        RegionState::Stale => {
            format!("{who} is gone and the memfd went with it: the memory is already freed")
        }
        // A ready region whose object someone cut short.
        RegionState::Damaged => format!(
            "{who} is gone and the object is shorter than its header says (truncated): \
             the contents cannot be reused"
        ),
        other => format!("state {other}"),
    }
}

pub(super) fn incomplete_text(
    creator_pid: Option<u32>,
    alive: bool,
    header_written: bool,
) -> String {
    let who = creator_pid
        .map(|p| format!("pid {p}"))
        .unwrap_or_else(|| "its creator".to_owned());
    let header = if header_written {
        "header state initializing"
    } else {
        "header not written yet"
    };
    if alive {
        format!("is still being created by {who} ({header})")
    } else {
        format!(
            "is incomplete: {who} died while creating it ({header}), so its contents were never \
             finished and it cannot be used or reused"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_region_nobody_holds_is_not_called_a_crash() {
        let kept = orphan_text(RegionState::Ready, Some(7), true);
        assert!(kept.contains("made to be kept"), "{kept}");
        assert!(!kept.contains("crashed"), "{kept}");
        let abandoned = orphan_text(RegionState::Ready, Some(7), false);
        assert!(abandoned.contains("crashed or exited"), "{abandoned}");
        // A kept region that is not ready is what it is, kept or not.
        assert_eq!(
            orphan_text(RegionState::Crashed, Some(7), true),
            orphan_text(RegionState::Crashed, Some(7), false)
        );
    }
}
