//! Differential folded stacks (`stack BASE NEW`) and the flamegraph drawn from them.

use std::io::Write;

use crate::error::Error;
use crate::profile::Profile;
use crate::report::export::DiffExporter;
use crate::report::flamegraph::{default_subtitle, empty_svg};
use crate::report::folded::collapsed;
use crate::report::view::{is_exact, View};

/// `memprof diff --flamegraph`: [`diff_flamegraph`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffFlamegraphExporter;

impl DiffExporter for DiffFlamegraphExporter {
    fn help(&self) -> &'static str {
        "Write a differential flamegraph SVG (inferno: widths are NEW's bytes, red where NEW \
         has more, blue where it has less)"
    }
    fn what(&self, view: View) -> String {
        format!("{} differential flamegraph", view.name())
    }
    fn write(
        &self,
        base: &Profile,
        new: &Profile,
        view: View,
        w: &mut dyn Write,
    ) -> Result<(), Error> {
        diff_flamegraph(base, new, view, w)
    }
}

/// `memprof diff --collapsed`: [`write_diff_collapsed`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffFoldedExporter;

impl DiffExporter for DiffFoldedExporter {
    fn help(&self) -> &'static str {
        "Write the differential folded stacks (`stack BASE NEW`, estimated bytes, sorted), \
         which inferno-flamegraph and Brendan Gregg's difffolded.pl/flamegraph.pl read"
    }
    fn what(&self, view: View) -> String {
        format!("{} differential folded stacks", view.name())
    }
    fn write(
        &self,
        base: &Profile,
        new: &Profile,
        view: View,
        w: &mut dyn Write,
    ) -> Result<(), Error> {
        write_diff_collapsed(w, base, new, view)
    }
}

/// The differential folded stacks of `view`: one line `stack BASE NEW` per stack that
/// either side has (estimated bytes, rounded), sorted; stacks are merged by name (see
/// [`collapsed`]). Built with inferno's `differential` module.
pub fn diff_collapsed(base: &Profile, new: &Profile, view: View) -> Result<Vec<String>, Error> {
    let (b, n) = (collapsed(base, view).join("\n"), collapsed(new, view).join("\n"));
    let mut out = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        b.as_bytes(),
        n.as_bytes(),
        &mut out,
    )
    .map_err(|e| Error::io("folding the two profiles together", e))?;
    let text = String::from_utf8(out)
        .map_err(|_| Error::Other("inferno's differential output is not UTF-8".into()))?;
    // inferno writes in hash order: sorted here, so that the output is deterministic.
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort_unstable();
    Ok(lines)
}

/// Writes [`diff_collapsed`] lines, one per line.
pub fn write_diff_collapsed(
    mut w: impl Write,
    base: &Profile,
    new: &Profile,
    view: View,
) -> Result<(), Error> {
    let io = |e| Error::io("writing differential folded stacks", e);
    for line in diff_collapsed(base, new, view)? {
        writeln!(w, "{line}").map_err(io)?;
    }
    w.flush().map_err(io)
}

/// What a view counts, in words, for titles.
fn view_words(view: View) -> &'static str {
    match view {
        View::Alloc => "allocated bytes",
        View::Live => "live bytes at the end",
        View::Peak => "live bytes at each recording's peak",
        View::ShortLived => "short-lived bytes",
        View::Gc => "GC mark time",
    }
}

/// Draws the differential flamegraph of `view` (inferno, from [`diff_collapsed`]): widths
/// are NEW's bytes; red where NEW has more than BASE, blue where it has less.
pub fn diff_flamegraph(
    base: &Profile,
    new: &Profile,
    view: View,
    mut w: impl Write,
) -> Result<(), Error> {
    let kind = if is_exact(base) && is_exact(new) { "exact" } else { "estimated" };
    let title =
        format!("memprof diff: {}, BASE → NEW (red: more in NEW, blue: less)", view_words(view));
    let subtitle = format!("base: {} | new: {}", default_subtitle(base), default_subtitle(new))
        + &format!(" | widths: NEW's bytes ({kind})");
    let lines = diff_collapsed(base, new, view)?;
    let io = |e| Error::io("writing flamegraph", e);
    // inferno refuses input whose NEW counts are all 0.
    let any_new = lines.iter().any(|l| l.rsplit(' ').next().is_some_and(|v| v != "0"));
    if !any_new {
        w.write_all(empty_svg(&title, &subtitle, None).as_bytes()).map_err(io)?;
        return w.flush().map_err(io);
    }
    let mut o = inferno::flamegraph::Options::default();
    o.deterministic = true;
    o.title = title;
    o.subtitle = Some(subtitle);
    o.count_name = "bytes".to_owned();
    o.name_type = "Function:".to_owned();
    inferno::flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), &mut w)
        .map_err(io)?;
    w.flush().map_err(io)
}
