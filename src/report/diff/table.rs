//! The comparison as a terminal table: both recordings described, then the flagged and
//! largest changes.

use std::fmt::Write as _;

use super::compare::{diff_sites, Change, SiteDiff, METRICS};
use crate::profile::Profile;
use crate::report::text::printable;
use crate::report::view::{human_bytes, is_exact};

/// Options of [`diff_table`].
#[derive(Clone, Debug, Default)]
pub struct DiffOptions {
    /// Show the sites without a significant change too.
    pub all: bool,
    /// Names of the two files, for the header (`None`: not shown).
    pub base_name: Option<String>,
    /// See [`DiffOptions::base_name`].
    pub new_name: Option<String>,
}

/// The header lines of one side.
fn describe(out: &mut String, label: &str, file: Option<&str>, p: &Profile) {
    let h = &p.header;
    let exe = if h.executable.is_empty() { "(unknown executable)" } else { &h.executable };
    let _ = write!(out, "{label:<4}: ");
    if let Some(f) = file {
        let _ = write!(out, "{}: ", printable(f));
    }
    let _ = write!(out, "{}", printable(exe));
    if h.pid != 0 {
        let _ = write!(out, " (pid {})", h.pid);
    }
    out.push('\n');
    let pad = " ".repeat(label.len().max(4) + 2);
    if !h.cmdline.is_empty() {
        let _ = writeln!(out, "{pad}command: {}", printable(&h.cmdline.join(" ")));
    }
    // "every allocation" only while nothing is missing (the warning below says what is).
    let sampling = if is_exact(p) && p.lost.nothing_missing() {
        "exact (every allocation)".to_owned()
    } else if is_exact(p) {
        format!("exact, but {}", p.lost.brief())
    } else {
        format!("mean interval {}", human_bytes(h.interval))
    };
    let _ = write!(out, "{pad}sampling: {sampling}, samples: {}", p.counts.samples);
    if p.peak.bytes > 0.0 {
        let _ = write!(out, ", peak: {}", crate::report::top::peak_text(p));
    }
    out.push('\n');
    if let Some(line) = crate::report::resident::resident_line(p) {
        let _ = writeln!(out, "{pad}{line}");
    }
    match p.stopped {
        _ if p.complete => {}
        Some(why) => {
            let _ = writeln!(out, "{pad}status: ended where {} (no end record)", why.describe());
        }
        None if h.collected => {
            let _ = writeln!(
                out,
                "{pad}status: INCOMPLETE (no end record): {}",
                crate::profile::RECORD_STOPPED
            );
        }
        None => {
            let _ = writeln!(out, "{pad}status: INCOMPLETE (no end record)");
        }
    }
    for w in &p.warnings {
        let _ = writeln!(out, "{pad}warning: {}", printable(w));
    }
    if !p.lost.nothing_missing() {
        let _ = writeln!(out, "{pad}warning: {}", p.lost.describe());
    }
}

/// The change of the resident size at the end beside the change of the live heap, when both
/// recordings have resident readings (`memprof record`'s).
fn resident_change(base: &Profile, new: &Profile) -> Option<String> {
    let last =
        |p: &Profile| crate::report::resident::resident_readings(p).last().map(|r| r.bytes as f64);
    let (b, n) = (last(base)?, last(new)?);
    Some(format!(
        "resident at the end: {} → {} ({}), beside the live heap: {} → {} ({})",
        human_bytes(b),
        human_bytes(n),
        signed_bytes(n - b),
        human_bytes(base.live_bytes),
        human_bytes(new.live_bytes),
        signed_bytes(new.live_bytes - base.live_bytes),
    ))
}

/// A signed byte count: `+1.50 MiB`, `-512 B`, `0 B`.
fn signed_bytes(v: f64) -> String {
    let s = human_bytes(v);
    if v.round() == 0.0 {
        human_bytes(0.0)
    } else if v > 0.0 {
        format!("+{s}")
    } else {
        s
    }
}

/// The table printed by `memprof diff`: a header on both recordings and on the test, then
/// one row per site with a significant change (every site with [`DiffOptions::all`]).
pub fn diff_table(base: &Profile, new: &Profile, options: &DiffOptions) -> String {
    let d = diff_sites(base, new);
    let mut out = String::new();
    let _ = writeln!(out, "memprof diff: per allocation site, Δ = NEW − BASE in estimated bytes");
    describe(&mut out, "base", options.base_name.as_deref(), base);
    describe(&mut out, "new", options.new_name.as_deref(), new);
    if let Some(line) = resident_change(base, new) {
        let _ = writeln!(out, "{line}");
    }
    let exact_both = is_exact(base) && is_exact(new);
    explain_test(&mut out, base, new, d.tests);
    out.push('\n');
    if d.sites.is_empty() {
        out.push_str("no samples in either recording\n");
        return out;
    }
    let shown: Vec<&SiteDiff> = d.sites.iter().filter(|s| options.all || s.flagged()).collect();
    let mut rows: Vec<Row> =
        vec![["base alloc", "new alloc", "Δ alloc", "Δ live", "Δ peak", "change", "site"]
            .map(str::to_owned)];
    rows.extend(
        shown
            .iter()
            .map(|s| row(&s.changes, words(s), printable(&s.site).into_owned(), exact_both)),
    );
    let total =
        row(&d.total, String::new(), format!("total ({} sites)", d.sites.len()), exact_both);
    if shown.is_empty() {
        let _ = writeln!(out, "no significant change\n");
    }
    write_rows(&mut out, &rows, &total);
    let hidden = d.sites.len() - shown.len();
    if hidden > 0 {
        let _ =
            writeln!(out, "{hidden} sites without a significant change hidden (--all shows them)");
    }
    out
}

/// The legend of the columns and what a `*` means: which test, over how many differences,
/// so that a reader can weigh a flag (none when both recordings are exact: every difference
/// is then real).
fn explain_test(out: &mut String, base: &Profile, new: &Profile, tests: usize) {
    let _ = writeln!(
        out,
        "alloc = bytes allocated, live = live at the end, peak = live at each recording's \
         peak; ± = 95 % interval"
    );
    if is_exact(base) && is_exact(new) {
        let _ = writeln!(out, "significance: both recordings are exact: every difference is real");
    } else {
        let _ = writeln!(
            out,
            "significance: * marks a change that is not sampling noise: two-sided tests with \
             Holm's correction over the {} (site, quantity) differences, family-wise \
             false-positive rate 5 %{}",
            tests,
            if is_exact(base) || is_exact(new) {
                " (exact on one side: its values are the truth)"
            } else {
                ""
            }
        );
    }
}

/// One line of the table: BASE's and NEW's allocated bytes, the changes of allocated, live
/// and peak bytes, the words (`change`) and the site.
type Row = [String; 7];

/// The row of a site's (or the totals') `changes`, in [`METRICS`] order.
fn row(changes: &[Change; 3], words: String, site: String, exact_both: bool) -> Row {
    let c = changes;
    [
        human_bytes(c[0].base),
        human_bytes(c[0].new),
        cell(&c[0], exact_both),
        cell(&c[1], exact_both),
        cell(&c[2], exact_both),
        words,
        site,
    ]
}

/// A change as a cell: `+1.50 MiB ± 12.00 KiB *`, the interval only when a side is sampled,
/// the `*` when the change is significant.
fn cell(c: &Change, exact_both: bool) -> String {
    let mut s = signed_bytes(c.delta);
    if !exact_both {
        let _ = write!(s, " ± {}", human_bytes(c.ci95));
    }
    if c.significant {
        s.push_str(" *");
    }
    s
}

/// The significant changes of a site in words (`alloc more, live less`), for a reader who
/// skims the signs.
fn words(s: &SiteDiff) -> String {
    let said: Vec<String> = METRICS
        .iter()
        .zip(&s.changes)
        .filter(|(_, c)| c.significant)
        .map(|(v, c)| format!("{} {}", v.name(), if c.delta > 0.0 { "more" } else { "less" }))
        .collect();
    said.join(", ")
}

/// Writes `rows` in aligned columns (the numbers right-aligned, the words left-aligned, the
/// site as is), then a rule and `total`.
fn write_rows(out: &mut String, rows: &[Row], total: &Row) {
    let mut width = [0usize; 6];
    for r in rows.iter().chain(std::iter::once(total)) {
        for (w, c) in width.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut String, r: &Row| {
        let mut text = String::new();
        for (i, (w, c)) in width.iter().zip(r.iter()).enumerate() {
            // The words are left-aligned, the numbers right-aligned.
            if i == 5 {
                let _ = write!(text, "{c:<w$}  ");
            } else {
                let _ = write!(text, "{c:>w$}  ");
            }
        }
        text.push_str(&r[6]);
        out.push_str(text.trim_end());
        out.push('\n');
    };
    for r in rows {
        line(out, r);
    }
    let rule: Row =
        std::array::from_fn(|i| if i < 6 { "-".repeat(width[i]) } else { String::new() });
    line(out, &rule);
    line(out, total);
}
