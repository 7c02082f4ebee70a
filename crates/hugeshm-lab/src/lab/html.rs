//! The lab's one self-contained HTML report: every reproduction as a
//! section (`id="lab-NAME"`, NAME as `--only` takes it; two may share a seed) with the field report's figures beside ours,
//! the measured rows and the plots inlined as SVG. No script, no external
//! file.

use super::model::{figure_text, ratio_text, Ceiling, DataTable, LabReport, Reproduction};

/// Escapes text for HTML.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:.6em 0 1.2em}td,th{border:1px solid #ccc;padding:.25em .6em;font-size:.9em}\
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}\
section{border-top:2px solid #888;margin-top:2em}.note{color:#555;font-size:.9em}.error{color:#b00}\
figure{margin:1em 0}figcaption{font-size:.85em;color:#555}";

fn table(t: &DataTable) -> String {
    let mut h = String::from("<table><tr>");
    let right: Vec<bool> = t.columns.iter().map(|c| c.starts_with('>')).collect();
    for c in &t.columns {
        h.push_str(&format!("<th>{}</th>", escape(c.trim_start_matches('>'))));
    }
    h.push_str("</tr>\n");
    for r in &t.rows {
        h.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let class = if right.get(i).copied().unwrap_or(false) {
                " class=\"n\""
            } else {
                ""
            };
            h.push_str(&format!("<td{class}>{}</td>", escape(c)));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    h
}

fn section(r: &Reproduction, svgs: &[(String, String)]) -> String {
    let mut h = format!(
        "<section id=\"lab-{name}\" class=\"reproduction\" data-name=\"{name}\">\n<h2>{title}</h2>\n<p class=\"note\">Field report: {report}</p>\n",
        report = escape(&super::reports::describe(&r.seed)),
        name = escape(&r.name),
        title = escape(&r.title)
    );
    h.push_str(&format!(
        "<p class=\"note\">hugeshm lab --only {} &middot; {:.1} s</p>\n",
        escape(&r.name),
        r.seconds
    ));
    if let Some(e) = &r.error {
        h.push_str(&format!("<p class=\"error\">stopped: {}</p>\n", escape(e)));
    }
    if !r.comparisons.is_empty() {
        let mut t = DataTable::new(&[
            "what",
            ">field report",
            ">ours",
            ">ours / field",
            "field setting",
            "our setting",
        ]);
        for c in &r.comparisons {
            t.row(vec![
                c.what.clone(),
                figure_text(Some(c.field), &c.unit),
                figure_text(c.ours, &c.unit),
                ratio_text(c.ratio),
                c.field_setting.clone(),
                c.our_setting.clone(),
            ]);
        }
        h.push_str("<h3>The field report beside ours</h3>\n");
        h.push_str(&table(&t));
        for c in r.comparisons.iter().filter(|c| c.note.is_some()) {
            h.push_str(&format!(
                "<p class=\"note\">{}: {}</p>\n",
                escape(&c.what),
                escape(c.note.as_deref().unwrap_or_default())
            ));
        }
    }
    if !r.table.rows.is_empty() {
        h.push_str("<h3>Measured</h3>\n");
        h.push_str(&table(&r.table));
    }
    for p in &r.plots {
        if let Some((_, svg)) = svgs.iter().find(|(id, _)| *id == p.id) {
            h.push_str(&format!(
                "<figure id=\"plot-{id}\">{svg}<figcaption>{title} ({id}.svg)</figcaption></figure>\n",
                id = escape(&p.id),
                title = escape(&p.title)
            ));
        }
    }
    for n in &r.notes {
        h.push_str(&format!("<p class=\"note\">{}</p>\n", escape(n)));
    }
    h.push_str("</section>\n");
    h
}

/// The whole report; `svgs` are the rendered plots by id.
pub fn report(lab: &LabReport, svgs: &[(String, String)]) -> String {
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hugeshm lab</title><style>{STYLE}</style></head><body>\n\
         <h1>hugeshm lab</h1>\n<p>{}</p>\n",
        escape(&lab.host)
    );
    let ceiling: Vec<String> = lab.ceiling.iter().map(Ceiling::describe).collect();
    h.push_str(&format!(
        "<p>memset over already-faulted memory, measured in this run (the ceiling): {}. Lab took {:.0} s{}.</p>\n",
        escape(&ceiling.join(", ")),
        lab.seconds,
        if lab.quick { " (--quick: small sizes, one timed run)" } else { "" }
    ));
    if let [Some(a), Some(b)] = lab.load_average {
        h.push_str(&format!(
            "<p>Load average {a:.2} at the start, {b:.2} at the end: other work on the host moves every timing (the lab's own processes count in the end figure).</p>\n"
        ));
    }
    h.push_str("<ul>\n");
    for r in &lab.reproductions {
        h.push_str(&format!(
            "<li><a href=\"#lab-{n}\">{t}</a> ({s})</li>\n",
            n = escape(&r.name),
            s = escape(&super::reports::short(&r.seed)),
            t = escape(&r.title)
        ));
    }
    h.push_str("</ul>\n");
    for r in &lab.reproductions {
        h.push_str(&section(r, svgs));
    }
    h.push_str("</body></html>\n");
    h
}

/// Writes `--out`'s files into `dir`, each atomically, mode 0644: one SVG
/// per plot (`ID.svg`), `lab.json` (the caller's `json`, the report as
/// `--json` prints it) and `report.html` with the plots inlined.
pub fn write_out(dir: &hugeshm_sys::DirHandle, lab: &LabReport, json: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let write = |name: &str, text: &str| {
        dir.write_atomic(name, text.as_bytes(), 0o644)
            .with_context(|| format!("writing {}", dir.path().join(name).display()))
    };
    let mut svgs = Vec::new();
    for p in lab.reproductions.iter().flat_map(|r| &r.plots) {
        let svg = super::plot::svg(p)?;
        write(&format!("{}.svg", p.id), &svg)?;
        svgs.push((p.id.clone(), svg));
    }
    write("lab.json", json)?;
    write("report.html", &report(lab, &svgs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a<b>&\"c\""), "a&lt;b&gt;&amp;&quot;c&quot;");
    }
}
