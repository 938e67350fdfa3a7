//! The top-sites table: where the memory was allocated, and where it is still held.
//!
//! Samples are grouped by allocation site ([`Profile::site_name`]: the innermost frame of the
//! program itself, below the standard library's allocation plumbing). Sites are ordered by
//! allocated bytes, largest first, then by name.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::{gc_cycle_samples, human_bytes, is_exact, stack_totals, View};
use crate::profile::Profile;

/// Options of [`top_table`].
#[derive(Clone, Debug)]
pub struct TopOptions {
    /// How many sites to list (the totals line always covers all of them).
    pub limit: usize,
    /// Show bytes in binary units (`1.50 MiB`) rather than as plain integers.
    pub human_bytes: bool,
}

impl Default for TopOptions {
    fn default() -> Self {
        TopOptions { limit: 20, human_bytes: true }
    }
}

/// Estimated totals of one allocation site.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteTotal {
    /// The site's name (a function name, or `module+0xoffset`).
    pub site: String,
    /// Estimated bytes allocated at this site.
    pub alloc_bytes: f64,
    /// Estimated objects allocated at this site.
    pub alloc_objects: f64,
    /// Estimated bytes allocated here and still live at the end.
    pub live_bytes: f64,
    /// Estimated objects allocated here and still live at the end.
    pub live_objects: f64,
}

/// Totals of every site, largest allocated bytes first, then by name.
pub fn site_totals(profile: &Profile) -> Vec<SiteTotal> {
    let mut by_site: HashMap<String, SiteTotal> = HashMap::new();
    let mut names: HashMap<u32, String> = HashMap::new();
    for (view, live) in [(View::Alloc, false), (View::Live, true)] {
        for t in stack_totals(profile, view) {
            let site = names.entry(t.stack).or_insert_with(|| profile.site_name(t.stack)).clone();
            let e = by_site
                .entry(site.clone())
                .or_insert_with(|| SiteTotal { site, ..SiteTotal::default() });
            if live {
                e.live_bytes += t.bytes;
                e.live_objects += t.objects;
            } else {
                e.alloc_bytes += t.bytes;
                e.alloc_objects += t.objects;
            }
        }
    }
    let mut sites: Vec<SiteTotal> = by_site.into_values().collect();
    sites.sort_by(|a, b| b.alloc_bytes.total_cmp(&a.alloc_bytes).then_with(|| a.site.cmp(&b.site)));
    sites
}

/// The summary printed by `memprof report` and at the end of `memprof record`: a few header
/// lines about the recording, then the top sites and a totals line.
pub fn top_table(profile: &Profile, options: &TopOptions) -> String {
    let exact = is_exact(profile);
    let h = &profile.header;
    let mut out = String::new();

    // Header lines.
    let exe = if h.executable.is_empty() { "(unknown executable)" } else { &h.executable };
    let _ = write!(out, "memprof profile of {exe}");
    if h.pid != 0 {
        let _ = write!(out, " (pid {})", h.pid);
    }
    out.push('\n');
    if !h.cmdline.is_empty() {
        let _ = writeln!(out, "command: {}", h.cmdline.join(" "));
    }
    if exact {
        let _ = writeln!(out, "sampling: exact (every allocation recorded)");
    } else {
        let _ = writeln!(
            out,
            "sampling: mean interval {} (numbers are unbiased estimates)",
            human_bytes(h.interval)
        );
    }
    let _ = writeln!(
        out,
        "samples: {} ({} freed, {} moved), stacks: {}",
        profile.counts.samples,
        profile.counts.frees,
        profile.counts.moves,
        profile.stacks.len()
    );
    if let Some(w) = &profile.window {
        let _ = writeln!(out, "window: {}", w.describe());
    }
    if profile.peak.bytes > 0.0 {
        let _ = writeln!(
            out,
            "{}: {} live{} at {:.3} s",
            if profile.window.is_some() { "peak in the window" } else { "peak" },
            human_bytes(profile.peak.bytes),
            if is_exact(profile) { "" } else { " (estimated)" },
            profile.peak.time_ns as f64 / 1e9
        );
    }
    match profile.stopped {
        _ if profile.complete => {}
        Some(why) => {
            let _ = writeln!(out, "status: ended where {} (no end record)", why.describe());
        }
        None => {
            let _ = writeln!(out, "status: INCOMPLETE (no end record)");
        }
    }
    for w in &profile.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    let l = &profile.lost;
    if l.events != 0 || l.untracked != 0 || l.callback_panics != 0 {
        let _ = writeln!(
            out,
            "lost: {} events dropped, {} blocks untracked, {} callback panics",
            l.events, l.untracked, l.callback_panics
        );
    }
    out.push('\n');

    let sites = site_totals(profile);
    if sites.is_empty() {
        out.push_str("no samples\n");
        return out;
    }
    let total = sites.iter().fold(SiteTotal::default(), |mut t, s| {
        t.alloc_bytes += s.alloc_bytes;
        t.alloc_objects += s.alloc_objects;
        t.live_bytes += s.live_bytes;
        t.live_objects += s.live_objects;
        t
    });

    let bytes = |v: f64| if options.human_bytes { human_bytes(v) } else { format!("{v:.0}") };
    let objects = |v: f64| if exact { format!("{v:.0}") } else { format!("{v:.1}") };
    let percent = |v: f64, of: f64| {
        if of > 0.0 {
            format!("{:.1}%", 100.0 * v / of)
        } else {
            "-".to_owned()
        }
    };
    let row = |s: &SiteTotal, name: &str| -> [String; 7] {
        [
            bytes(s.alloc_bytes),
            percent(s.alloc_bytes, total.alloc_bytes),
            objects(s.alloc_objects),
            bytes(s.live_bytes),
            percent(s.live_bytes, total.live_bytes),
            objects(s.live_objects),
            name.to_owned(),
        ]
    };

    let mut rows: Vec<[String; 7]> = Vec::new();
    rows.push(
        ["alloc bytes", "alloc%", "alloc objs", "live bytes", "live%", "live objs", "site"]
            .map(str::to_owned),
    );
    let shown = sites.len().min(options.limit);
    for s in sites.iter().take(shown) {
        rows.push(row(s, &s.site));
    }
    let mut label = format!("total ({} sites", sites.len());
    if shown < sites.len() {
        let _ = write!(label, ", {shown} shown");
    }
    label.push(')');
    let totals = row(&total, &label);

    let mut width = [0usize; 6];
    for r in rows.iter().chain(std::iter::once(&totals)) {
        for (w, cell) in width.iter_mut().zip(r.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |r: &[String; 7]| {
        let mut text = String::new();
        for (w, cell) in width.iter().zip(r.iter()) {
            let _ = write!(text, "{cell:>w$}  ");
        }
        text.push_str(&r[6]);
        out.push_str(text.trim_end());
        out.push('\n');
    };
    for r in &rows {
        line(r);
    }
    let rule: [String; 7] =
        std::array::from_fn(|i| if i < 6 { "-".repeat(width[i]) } else { String::new() });
    line(&rule);
    line(&totals);
    if !profile.gc_cycles.is_empty() {
        out.push('\n');
        out.push_str(&gc_table(profile, options));
    }
    out
}

/// The GC section of the top table: one row per collection cycle (the first and last
/// `limit / 2` when there are more), with its measured mark timing and the sampled
/// managed-heap objects it marked (live at its start and surviving its sweep; blocks
/// allocated during marking are allocated black, not scanned, and not counted).
pub fn gc_table(profile: &Profile, options: &TopOptions) -> String {
    let mut out = String::new();
    let cycles = &profile.gc_cycles;
    let sampled = gc_cycle_samples(profile);
    let exact = is_exact(profile);
    let ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6);
    let _ = writeln!(
        out,
        "GC cycles: {} (mark {} ms, sweep {} ms in all; longest mark slice {} ms)",
        cycles.len(),
        ms(cycles.iter().map(|c| c.mark_ns).sum()),
        ms(cycles.iter().map(|c| c.sweep_ns).sum()),
        ms(cycles.iter().map(|c| c.longest_slice_ns).max().unwrap_or(0)),
    );
    let mut rows: Vec<[String; 11]> = vec![[
        "cycle",
        "at ms",
        "mark ms",
        "slices",
        "max slice ms",
        "words marked",
        "ns/word",
        "sweep ms",
        "heap",
        "live",
        "sampled marked objs (bytes)",
    ]
    .map(str::to_owned)];
    let keep = options.limit.max(2);
    let n = cycles.len();
    let mut skipped = false;
    for (i, (c, s)) in cycles.iter().zip(&sampled).enumerate() {
        if n > keep && i >= keep / 2 && i < n - keep / 2 {
            if !skipped {
                rows.push(std::array::from_fn(|j| if j == 0 { "…".into() } else { String::new() }));
                skipped = true;
            }
            continue;
        }
        let objs = if exact { format!("{:.0}", s.objects) } else { format!("{:.1}", s.objects) };
        rows.push([
            c.cycle.to_string(),
            ms(c.start_ns),
            ms(c.mark_ns),
            c.slices.to_string(),
            ms(c.longest_slice_ns),
            c.words_marked.to_string(),
            format!("{:.2}", c.ns_per_word),
            ms(c.sweep_ns),
            human_bytes(c.heap_words as f64 * 8.0),
            human_bytes(c.live_words as f64 * 8.0),
            format!("{objs} ({})", human_bytes(s.bytes)),
        ]);
    }
    let mut width = [0usize; 11];
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in &rows {
        let mut text = String::new();
        for (w, cell) in width.iter().zip(r.iter()) {
            let _ = write!(text, "{cell:>w$}  ");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}
