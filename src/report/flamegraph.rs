//! Flamegraphs (SVG, via inferno) of allocated or live bytes.
//!
//! The input is the [folded stacks](super::folded) of the view; colours come from inferno's
//! `mem` palette with `deterministic` set, so a frame's colour depends only on its name and
//! two renders of one profile are byte-identical. Python frames (`engine::python`) are
//! drawn apart, in shades of blue from a hash of their name.
//!
//! A view with no samples (a live view where everything was freed, or an empty recording)
//! still yields a small valid SVG that carries the title and says "no samples", rather than
//! an error: a report run should not fail because a program freed all its memory. inferno
//! itself refuses empty input, so that SVG is written here.

use std::io::Write;

use inferno::flamegraph::{self as inferno_fg, color::BasicPalette, color::Palette};

use super::export::{ExportOptions, Exporter};
use super::flame_lines::drawn_lines;
use super::folded::folded_names;
use super::view::stack_totals;
use super::view::{human_bytes, is_exact, GroupBy, View};
use crate::error::Error;
use crate::profile::Profile;

/// `--flamegraph`: the [`flamegraph`] of the chosen view, with its default title and
/// subtitle; `memprof diff`'s is the differential one.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlamegraphExporter;

impl Exporter for FlamegraphExporter {
    fn name(&self) -> &'static str {
        "flamegraph"
    }
    fn value_name(&self) -> &'static str {
        "OUT.svg"
    }
    fn help(&self) -> &'static str {
        "Write a flamegraph SVG (inferno) of the chosen view"
    }
    fn what(&self, options: &ExportOptions<'_>) -> String {
        format!("{} flamegraph", options.view.name())
    }
    fn write(
        &self,
        profile: &Profile,
        options: &ExportOptions<'_>,
        w: &mut dyn Write,
    ) -> Result<(), Error> {
        let o =
            FlameOptions { view: options.view, group_by: options.group_by, ..Default::default() };
        flamegraph(profile, &o, w)
    }
}

/// Options of [`flamegraph`].
#[derive(Clone, Debug, Default)]
pub struct FlameOptions {
    /// Which samples to draw.
    pub view: View,
    /// Title; `None` derives it from the view ("memprof: allocated bytes (estimated)").
    pub title: Option<String>,
    /// Subtitle; `None` describes the recording (executable, sampling interval, status).
    pub subtitle: Option<String>,
    /// Image width in pixels; `None` lets the SVG fill its container.
    pub image_width: Option<usize>,
    /// [`GroupBy::Span`]: span paths as root frames (see [`super::folded::collapsed_grouped`]).
    pub group_by: GroupBy,
}

/// The default title of a view.
pub fn default_title(profile: &Profile, view: View) -> String {
    let kind = if is_exact(profile) { "exact" } else { "estimated" };
    match view {
        View::Alloc => format!("memprof: allocated bytes ({kind})"),
        View::Live => format!("memprof: live bytes at end ({kind})"),
        View::Peak => {
            format!("memprof: live bytes at the peak, {}", super::top::peak_text(profile))
        }
        View::ShortLived => format!(
            "memprof: short-lived bytes, freed within {} ({kind})",
            super::view::human_duration(profile.lifetimes.short_lived_ns as f64)
        ),
        View::Gc => format!("memprof: GC mark time by allocation site ({kind}, ns)"),
    }
}

/// The default subtitle: what was recorded and how.
pub fn default_subtitle(profile: &Profile) -> String {
    let h = &profile.header;
    let mut s = if h.executable.is_empty() {
        "unknown executable".to_owned()
    } else {
        h.executable.clone()
    };
    if is_exact(profile) && crate::report::view::figures_whole(profile) {
        s.push_str(" · every allocation recorded");
    } else if is_exact(profile) && profile.lost.nothing_missing() {
        s.push_str(" · exact until the cut");
    } else if is_exact(profile) {
        s.push_str(&format!(" · exact, but {}", profile.lost.brief()));
    } else {
        s.push_str(&format!(" · mean sampling interval {}", human_bytes(h.interval)));
    }
    s.push_str(&format!(" · {} samples", profile.counts.samples));
    match profile.stopped {
        _ if profile.complete => {}
        Some(crate::profile::Stopped::Exec) => s.push_str(" · ended by exec"),
        Some(crate::profile::Stopped::QuickExit) => s.push_str(" · ended by _exit"),
        None => s.push_str(" · INCOMPLETE recording"),
    }
    s
}

/// Renders a flamegraph of `profile` as SVG into `w`.
pub fn flamegraph(
    profile: &Profile,
    options: &FlameOptions,
    mut w: impl Write,
) -> Result<(), Error> {
    let title = options.title.clone().unwrap_or_else(|| default_title(profile, options.view));
    let subtitle = options.subtitle.clone().unwrap_or_else(|| default_subtitle(profile));
    let mut o = inferno_fg::Options::default();
    // What inferno would not draw is folded away first (`flame_lines`). Unsorted: inferno
    // sorts its lines.
    let group = options.group_by;
    let stacks = stack_totals(profile, options.view)
        .into_iter()
        .map(|t| (folded_names(profile, t.stack, group), t.bytes));
    let lines = drawn_lines(stacks, o.min_width);
    let io = |e| Error::io("writing flamegraph", e);
    if lines.is_empty() {
        w.write_all(empty_svg(&title, &subtitle, options.image_width).as_bytes()).map_err(io)?;
        return w.flush().map_err(io);
    }
    // Python frames (`engine::python`) in shades of blue, apart from the native frames.
    let mut python = inferno::flamegraph::color::PaletteMap::default();
    for name in profile.python_frame_names() {
        let h = name.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        let (r, g) = (60 + (h % 50) as u8, 140 + ((h >> 8) % 60) as u8);
        python.insert(name, inferno::flamegraph::color::Color { r, g, b: 230 });
    }
    if python.iter().next().is_some() {
        o.palette_map = Some(&mut python);
    }
    o.colors = Palette::Basic(BasicPalette::Mem);
    o.deterministic = true;
    o.title = title;
    o.subtitle = Some(subtitle);
    o.count_name = if options.view == View::Gc { "ns" } else { "bytes" }.to_owned();
    o.name_type = "Function:".to_owned();
    o.image_width = options.image_width;
    inferno_fg::from_lines(&mut o, lines.iter().map(String::as_str), &mut w).map_err(io)?;
    w.flush().map_err(io)
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A small valid SVG for a view without samples.
pub(crate) fn empty_svg(title: &str, subtitle: &str, width: Option<usize>) -> String {
    let width = width.unwrap_or(1200);
    let mid = width / 2;
    format!(
        concat!(
            "<?xml version=\"1.0\" standalone=\"no\"?>\n",
            "<svg version=\"1.1\" width=\"{w}\" height=\"110\" viewBox=\"0 0 {w} 110\" ",
            "xmlns=\"http://www.w3.org/2000/svg\">\n",
            "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#eef2ee\"/>\n",
            "<text x=\"{m}\" y=\"24\" text-anchor=\"middle\" font-family=\"Verdana\" ",
            "font-size=\"17\">{t}</text>\n",
            "<text x=\"{m}\" y=\"48\" text-anchor=\"middle\" font-family=\"Verdana\" ",
            "font-size=\"12\" fill=\"#a0a0a0\">{s}</text>\n",
            "<text x=\"{m}\" y=\"84\" text-anchor=\"middle\" font-family=\"Verdana\" ",
            "font-size=\"14\">no samples in this view</text>\n",
            "</svg>\n"
        ),
        w = width,
        m = mid,
        t = xml_escape(title),
        s = xml_escape(subtitle),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_profile_gives_a_valid_svg() {
        let p = Profile::default();
        let mut out = Vec::new();
        flamegraph(
            &p,
            &FlameOptions { title: Some("a <b> & c".into()), ..Default::default() },
            &mut out,
        )
        .unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains("no samples"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
