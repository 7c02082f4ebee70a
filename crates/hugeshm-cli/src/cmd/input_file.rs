//! Files a command reads because its user named them (`advise --spec`,
//! `apply --plan`), read by `hugeshm_probe::read_named` (no link
//! followed, a regular file, at most [`MAX_INPUT_BYTES`]); their lines are
//! quoted in an error only when the caller's real uid could read it and it
//! belongs to root, the caller or the user who ran `sudo`: otherwise the
//! error says the line and column and the parser's reason without the text
//! (the doctor's `advise::InputText`, which this module makes). Every
//! refusal is a usage error (exit 2).

use std::path::Path;

use hugeshm_doctor::advise::InputText;
use hugeshm_parse::size::format_bytes;

use crate::output::Usage;

/// The most a spec or a plan may hold: they are kilobytes.
pub(crate) const MAX_INPUT_BYTES: u64 = 1 << 20;

/// Reads `path` for `flag`, a file holding `what` (`a spec`): its text,
/// and whether errors may quote it.
pub(crate) fn read(flag: &str, path: &Path, what: &str) -> Result<InputText, Usage> {
    let fix = format!(
        "{flag} names {what} itself: a regular file of at most {} (a link is not followed)",
        format_bytes(MAX_INPUT_BYTES)
    );
    use hugeshm_probe::NamedFileError as E;
    let f = hugeshm_probe::read_named(path, MAX_INPUT_BYTES).map_err(|e| match &e {
        _ if e.is_wrong_type() => Usage(format!("{flag}: {e}; {fix}")),
        E::TooBig { size, uid, .. } => Usage(format!(
            "{flag}: {} is {size} bytes ({}, owned by uid {uid}): more than the {} {what} may \
             hold; not read. {fix}",
            path.display(),
            format_bytes(*size),
            format_bytes(MAX_INPUT_BYTES)
        )),
        E::Read { .. } => Usage(format!("{flag}: {e}; {fix}")),
        E::NotUtf8 { .. } => Usage(format!("{flag}: {e}: {what} is text")),
        E::Open(_) => Usage(format!("{flag}: {e}")),
    })?;
    Ok(InputText::new(f.path, f.text, f.withheld))
}
