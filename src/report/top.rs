//! The top-sites table: where the memory was allocated, and where it is still held.
//!
//! Samples are grouped by allocation site ([`Profile::site`]: the innermost frame of the
//! program itself, below the allocation plumbing of the runtimes, the standard libraries and
//! known wrappers, see [`crate::profile::site`]). Sites are ordered by the quantity of the
//! report's [`View`] ([`TopOptions::view`]: allocated bytes by default; live, peak or
//! short-lived bytes), largest first, then by allocated bytes and name, so that the sites a
//! view asks about are the ones a short table keeps. A site's row shows where in its source it allocates
//! (`fill(int)  (map.cpp:12)`: the lines of its file that allocated most, up to three) and,
//! with [`TopOptions::backtrace`], each shown site's largest stack follows the table. A
//! shown site that looks like an allocation wrapper ([`wrapper_suggestions`]) gets a `hint:`
//! line below the table with the `--site-skip` that would name its callers instead.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use super::confidence::{ci95, peak_ci95};
use super::resident::{ended_line, gap_lines, resident_line};
use super::text::printable;
use super::view::{
    gc_cycle_samples, human_bytes, human_duration, is_exact, sampling_summary, stack_totals,
    GroupBy, View,
};
use crate::profile::site::{Site, Wrapper};
use crate::profile::symbolize::UNKNOWN_STACK;
use crate::profile::{lifetime_bucket_range, Profile};

/// The peak as every report states it: exact, with its moment; sampled, the cross-fitted
/// estimate with its 95 % interval and the two moments whose live heaps it averages
/// ([`crate::profile::Peak`]); for a tree of processes, an upper bound.
pub(crate) fn peak_text(p: &Profile) -> String {
    let (peak, secs) = (&p.peak, |t: u64| format!("{:.3} s", t as f64 / 1e9));
    if !p.since_peak_known() {
        let kind = if is_exact(p) { "" } else { ", estimated" };
        return format!(
            "at most {} live (the processes' largest heaps added{kind}) at {}",
            human_bytes(peak.bytes),
            secs(peak.time_ns)
        );
    }
    if is_exact(p) {
        return format!("{} live at {}", human_bytes(peak.bytes), secs(peak.time_ns));
    }
    let (a, b) = (secs(peak.moments_ns[0]), secs(peak.moments_ns[1]));
    let when = if a == b {
        format!("(estimated) at {a}")
    } else {
        format!("(estimated: the mean of the heap at {a} and {b})")
    };
    format!(
        "{} ± {} live {when}",
        human_bytes(peak.bytes),
        human_bytes(peak_ci95(peak.bytes, p.header.interval))
    )
}

/// Options of [`top_table`].
#[derive(Clone, Debug)]
pub struct TopOptions {
    /// How many sites to list (the totals line always covers all of them).
    pub limit: usize,
    /// Show bytes in binary units (`1.50 MiB`) rather than as plain integers.
    pub human_bytes: bool,
    /// [`GroupBy::Span`]: one row per (span path, site), named `span › site`
    /// ([`site_totals_grouped`]).
    pub group_by: GroupBy,
    /// After the table, print the stack of each shown site that allocated the most, this
    /// many frames from the site outwards (the site first, as heaptrack_print does); 0 for
    /// none.
    pub backtrace: usize,
    /// The quantity the sites are ordered by ([`sort_sites`]): `--view`.
    pub view: View,
}

impl Default for TopOptions {
    fn default() -> Self {
        TopOptions {
            limit: 20,
            human_bytes: true,
            group_by: GroupBy::Stack,
            backtrace: 0,
            view: View::Alloc,
        }
    }
}

/// The bytes of `s` that `view` orders by: allocated, live at the end, live at the peak or
/// short-lived (the GC view, whose mark time is not a site column, orders by allocated
/// bytes: the GC section that follows the table is its own).
pub fn view_bytes(s: &SiteTotal, view: View) -> f64 {
    match view {
        View::Alloc | View::Gc => s.alloc_bytes,
        View::Live => s.live_bytes,
        View::Peak => s.peak_bytes,
        View::ShortLived => s.short_bytes,
    }
}

/// Orders `sites` by `view`'s bytes ([`view_bytes`]), largest first, then by allocated
/// bytes, then by name (a stable order for equal figures).
pub fn sort_sites(sites: &mut [SiteTotal], view: View) {
    sites.sort_by(|a, b| {
        view_bytes(b, view)
            .total_cmp(&view_bytes(a, view))
            .then_with(|| b.alloc_bytes.total_cmp(&a.alloc_bytes))
            .then_with(|| a.site.cmp(&b.site))
    });
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
    /// Estimated bytes allocated here and live at the heap's peak ([`Profile::peak_live`]).
    pub peak_bytes: f64,
    /// Estimated bytes allocated here and freed within the short-lived threshold.
    pub short_bytes: f64,
    /// Estimated bytes allocated here and freed, by [`crate::profile::lifetime_bucket`] of
    /// their lifetime, in bucket order.
    pub lifetimes: Vec<(u16, f64)>,
    /// Where in its source the site allocates: `file:line`, or `file:l1,l2,l3` for the lines
    /// of its file that allocated most (`…` when there are more, or other files); `None`
    /// when the debug info has no line.
    pub location: Option<String>,
    /// The site's stack that allocated the most bytes (the first in id order among equals).
    pub top_stack: Option<crate::profile::StackId>,
}

impl SiteTotal {
    /// The lifetime below which a share `q` (0 to 1) of the site's freed bytes died, as the
    /// lower bound of its histogram bucket (within 19 %); `None` when none was freed.
    pub fn lifetime_quantile(&self, q: f64) -> Option<u64> {
        let total: f64 = self.lifetimes.iter().map(|(_, b)| b).sum();
        if total <= 0.0 {
            return None;
        }
        let mut seen = 0.0;
        for &(bucket, bytes) in &self.lifetimes {
            seen += bytes;
            if seen >= q * total {
                return Some(lifetime_bucket_range(bucket).0);
            }
        }
        self.lifetimes.last().map(|&(b, _)| lifetime_bucket_range(b).0)
    }
}

/// Totals of every site, largest allocated bytes first, then by name.
pub fn site_totals(profile: &Profile) -> Vec<SiteTotal> {
    site_totals_grouped(profile, GroupBy::Stack)
}

/// [`site_totals`], grouped: with [`GroupBy::Span`] a site allocating under two span paths
/// is two rows, named `span › site` ([`GroupBy::span`]).
pub fn site_totals_grouped(profile: &Profile, group: GroupBy) -> Vec<SiteTotal> {
    let mut by_site: HashMap<String, SiteTotal> = HashMap::new();
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut sites: HashMap<u32, Option<Site>> = HashMap::new();
    for t in stack_totals(profile, View::Alloc) {
        sites.insert(t.stack, profile.site(t.stack));
    }
    let site_of = |stack: u32| match sites.get(&stack) {
        Some(s) => s.clone(),
        None => profile.site(stack),
    };
    let name_of = |stack: u32| {
        let name = site_of(stack).map_or_else(|| UNKNOWN_STACK.to_owned(), |s| s.name);
        match group {
            GroupBy::Stack => name,
            GroupBy::Span => format!("{} › {name}", GroupBy::span(profile, stack)),
        }
    };
    fn site<'a>(
        by_site: &'a mut HashMap<String, SiteTotal>,
        names: &mut HashMap<u32, String>,
        name_of: &dyn Fn(u32) -> String,
        stack: u32,
    ) -> &'a mut SiteTotal {
        let name = names.entry(stack).or_insert_with(|| name_of(stack)).clone();
        by_site
            .entry(name.clone())
            .or_insert_with(|| SiteTotal { site: name, ..Default::default() })
    }
    // Per site: allocated bytes by (file, line), and its largest stack.
    let mut lines: HashMap<String, HashMap<(String, u32), f64>> = HashMap::new();
    let mut largest: HashMap<String, (f64, u32)> = HashMap::new();
    for view in [View::Alloc, View::Live, View::Peak, View::ShortLived] {
        for t in stack_totals(profile, view) {
            let e = site(&mut by_site, &mut names, &name_of, t.stack);
            match view {
                View::Alloc => {
                    e.alloc_bytes += t.bytes;
                    e.alloc_objects += t.objects;
                    let name = e.site.clone();
                    if let Some(Site { file: Some(file), line: Some(line), .. }) = site_of(t.stack)
                    {
                        *lines.entry(name.clone()).or_default().entry((file, line)).or_default() +=
                            t.bytes;
                    }
                    let top = largest.entry(name).or_insert((t.bytes, t.stack));
                    if t.bytes > top.0 {
                        *top = (t.bytes, t.stack);
                    }
                }
                View::Live => {
                    e.live_bytes += t.bytes;
                    e.live_objects += t.objects;
                }
                View::Peak => e.peak_bytes += t.bytes,
                _ => e.short_bytes += t.bytes,
            }
        }
    }
    let mut histogram: Vec<_> = profile.lifetimes.histogram.iter().collect();
    histogram.sort_unstable_by_key(|(&(stack, bucket), _)| (bucket, stack));
    for (&(stack, bucket), t) in histogram {
        let e = site(&mut by_site, &mut names, &name_of, stack);
        let bytes = profile.estimated_bytes(t.k);
        match e.lifetimes.last_mut() {
            Some((b, sum)) if *b == bucket => *sum += bytes,
            _ => e.lifetimes.push((bucket, bytes)),
        }
    }
    let mut sites: Vec<SiteTotal> = by_site.into_values().collect();
    for s in &mut sites {
        s.location = lines.get(&s.site).and_then(describe_lines);
        s.top_stack = largest.get(&s.site).map(|&(_, stack)| stack);
    }
    sites.sort_by(|a, b| b.alloc_bytes.total_cmp(&a.alloc_bytes).then_with(|| a.site.cmp(&b.site)));
    sites
}

/// `file:l1,l2,l3` for the file that allocated most and its lines that allocated most (by
/// bytes, then line), with `…` when lines or files are left out.
fn describe_lines(lines: &HashMap<(String, u32), f64>) -> Option<String> {
    let base = |f: &str| f.rsplit('/').next().unwrap_or(f).to_owned();
    let mut by_file: HashMap<String, f64> = HashMap::new();
    for ((file, _), bytes) in lines {
        *by_file.entry(base(file)).or_default() += bytes;
    }
    let mut files: Vec<(String, f64)> = by_file.into_iter().collect();
    files.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let (file, _) = files.first()?;
    let mut ls: Vec<(u32, f64)> =
        lines.iter().filter(|((f, _), _)| base(f) == *file).map(|((_, l), b)| (*l, *b)).collect();
    ls.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ls.dedup_by_key(|(l, _)| *l);
    let shown: Vec<String> = ls.iter().take(3).map(|(l, _)| l.to_string()).collect();
    let more = if ls.len() > 3 || files.len() > 1 { "…" } else { "" };
    Some(format!("{file}:{}{more}", shown.join(",")))
}

/// The stacks of the shown sites, `frames` frames each from the site outwards.
fn backtraces(profile: &Profile, sites: &[SiteTotal], frames: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nbacktraces (each site's stack that allocated most, the site first, {frames} frames):"
    );
    for (i, s) in sites.iter().enumerate() {
        let _ = writeln!(out, "#{} {}", i + 1, site_cell(s));
        let Some(stack) = s.top_stack else { continue };
        let from = profile.site(stack).map_or(0, |site| site.index);
        let locations = profile.frame_locations(stack);
        for f in locations.iter().skip(from).take(frames) {
            let at = match (&f.file, f.line) {
                (Some(file), Some(line)) => format!("  ({}:{line})", printable(file)),
                (Some(file), None) => format!("  ({})", printable(file)),
                _ => String::new(),
            };
            let inlined = if f.inlined { " [inlined]" } else { "" };
            let _ = writeln!(out, "    {}{at}{inlined}", printable(&f.function));
        }
        let left = locations.len().saturating_sub(from + frames);
        if left > 0 {
            let _ = writeln!(out, "    … {left} more");
        }
    }
    out
}

/// A site's cell in the table: its name and, when known, where it allocates (both the
/// program's strings, escaped for the terminal).
fn site_cell(s: &SiteTotal) -> String {
    match &s.location {
        Some(at) => format!("{}  ({})", printable(&s.site), printable(at)),
        None => printable(&s.site).into_owned(),
    }
}

/// The summary printed by `memprof report` and at the end of `memprof record`: a few header
/// lines about the recording, then the top sites and a totals line.
pub fn top_table(profile: &Profile, options: &TopOptions) -> String {
    top_table_sharing(profile, options, &OnceLock::new())
}

/// [`top_table`], the profile's wrappers taken from `wrappers` (made there if no pass has
/// yet: `record` makes the table and the page, which shows them too, at once).
pub(crate) fn top_table_sharing(
    profile: &Profile,
    options: &TopOptions,
    wrappers: &OnceLock<Vec<Wrapper>>,
) -> String {
    let mut out = String::new();
    describe_recording(&mut out, profile);
    describe_outcome(&mut out, profile);
    let order = match options.view {
        View::Live => Some("live bytes at the end"),
        View::Peak => Some("bytes live at the peak"),
        View::ShortLived => Some("short-lived bytes"),
        View::Alloc | View::Gc => None,
    };
    if let Some(order) = order {
        let _ = writeln!(out, "sites ordered by {order} (--view {})", options.view.name());
    }
    out.push('\n');

    let mut sites = site_totals_grouped(profile, options.group_by);
    sort_sites(&mut sites, options.view);
    if sites.is_empty() {
        out.push_str("no samples\n");
        return out;
    }
    let shown = sites.len().min(options.limit);
    write_sites(&mut out, profile, options, &sites, shown);
    for w in shown_wrappers(wrappers.get_or_init(|| profile.wrappers()), &sites[..shown]) {
        let _ = writeln!(out, "hint: {}", printable(&w.suggestion()));
    }
    if options.backtrace > 0 {
        out.push_str(&backtraces(profile, &sites[..shown], options.backtrace));
    }
    out.push_str(&short_lived_table(profile, &sites, options));
    if !profile.gc_cycles.is_empty() {
        out.push('\n');
        out.push_str(&gc_table(profile, options));
    }
    out
}

/// The header's first lines: which program was recorded, how it was sampled, how much, over
/// which window and how high its heap went: what a reader needs to weigh the table.
fn describe_recording(out: &mut String, profile: &Profile) {
    const ATTACHED: &str = "attached: recorded in a running process (memprof attach); blocks \
         allocated before the attach are not in it, and their frees are not counted";
    let h = &profile.header;
    let exe = if h.executable.is_empty() { "(unknown executable)" } else { &h.executable };
    // The program's name and arguments are the program's strings: escaped for the terminal.
    let _ = write!(out, "memprof profile of {}", printable(exe));
    match (h.pid, h.ns_pid) {
        (0, _) => {}
        (pid, 0) => {
            let _ = write!(out, " (pid {pid})");
        }
        (pid, ns) => {
            let _ = write!(out, " (pid {pid}; {ns} in its PID namespace)");
        }
    }
    out.push('\n');
    if !h.cmdline.is_empty() {
        let _ = writeln!(out, "command: {}", printable(&h.cmdline.join(" ")));
    }
    if h.attached {
        let _ = writeln!(out, "{ATTACHED}");
    }
    let _ = writeln!(out, "sampling: {}", sampling_summary(profile));
    // Moves are in recordings of versions that kept a sample across `realloc` only.
    let moved = match profile.counts.moves {
        0 => String::new(),
        n => format!(", {n} moved"),
    };
    let _ = writeln!(
        out,
        "samples: {} ({} freed{moved}), stacks: {}",
        profile.counts.samples,
        profile.counts.frees,
        profile.stacks.len()
    );
    if let Some(w) = &profile.window {
        let _ = writeln!(out, "window: {}", w.describe());
    }
    if profile.peak.bytes > 0.0 {
        let _ = writeln!(
            out,
            "{}: {}",
            if profile.window.is_some() { "peak in the window" } else { "peak" },
            peak_text(profile)
        );
    }
}

/// The header's last lines: resident memory beside the heap, how the program ended, and
/// what qualifies the numbers (notes, a recording cut short, warnings), before the numbers.
fn describe_outcome(out: &mut String, profile: &Profile) {
    if let Some(line) = resident_line(profile) {
        let _ = writeln!(out, "{line}");
    }
    for line in gap_lines(profile) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(line) = ended_line(profile) {
        let _ = writeln!(out, "{line}");
    }
    // What qualifies the numbers, before them (written by the program's run: escaped).
    for note in &profile.notes {
        let _ = writeln!(out, "note: {}", printable(note));
    }
    match profile.stopped {
        _ if profile.complete => {}
        Some(why) => {
            let _ = writeln!(out, "status: ended where {} (no end record)", why.describe());
        }
        None if profile.header.collected => {
            let _ = writeln!(
                out,
                "status: INCOMPLETE (no end record): {}",
                crate::profile::RECORD_STOPPED
            );
        }
        None => {
            let _ = writeln!(out, "status: INCOMPLETE (no end record)");
        }
    }
    for w in &profile.warnings {
        let _ = writeln!(out, "warning: {}", printable(w));
    }
}

/// Writes the table of the first `shown` of `sites` and the totals line of them all.
fn write_sites(
    out: &mut String,
    profile: &Profile,
    options: &TopOptions,
    sites: &[SiteTotal],
    shown: usize,
) {
    let total = sites.iter().fold(SiteTotal::default(), |mut t, s| {
        t.alloc_bytes += s.alloc_bytes;
        t.alloc_objects += s.alloc_objects;
        t.live_bytes += s.live_bytes;
        t.live_objects += s.live_objects;
        t.peak_bytes += s.peak_bytes;
        t.short_bytes += s.short_bytes;
        t
    });
    let numbers = Numbers {
        human: options.human_bytes,
        exact: is_exact(profile),
        interval: profile.header.interval,
    };
    // The peak column exists when the live set at the peak is known (not for a tree of
    // processes, which peak each on its own).
    let columns = columns(&numbers, &total, profile.since_peak_known());
    let row = |s: &SiteTotal, name: &str| -> Vec<String> {
        columns.iter().map(|(_, f)| f(s)).chain(std::iter::once(name.to_owned())).collect()
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    rows.push(columns.iter().map(|(h, _)| h.to_string()).chain(["site".to_owned()]).collect());
    for s in sites.iter().take(shown) {
        rows.push(row(s, &site_cell(s)));
    }
    // The totals' intervals are those of the sums (every sample point is independent).
    let totals = row(&total, &totals_label(profile, sites.len(), shown));
    let rule: Vec<String> =
        (0..columns.len()).map(|_| "-".to_owned()).chain([String::new()]).collect();
    write_table(out, &rows, Some(&rule), &totals);
}

/// How the table writes its numbers: bytes in binary units or as integers, objects as
/// integers when exact, and the 95 % intervals of sampled estimates.
struct Numbers {
    human: bool,
    exact: bool,
    interval: f64,
}

impl Numbers {
    /// Bytes as the options ask: `1.50 MiB`, or the integer for tools that read the table.
    fn bytes(&self, v: f64) -> String {
        if self.human {
            human_bytes(v)
        } else {
            format!("{v:.0}")
        }
    }

    /// ± the 95 % interval of a sampled estimate (see `report::confidence`). A site without
    /// samples in a column has no estimate to bound: `-`.
    fn pm(&self, v: f64) -> String {
        if v > 0.0 {
            format!("±{}", self.bytes(ci95(v, self.interval)))
        } else {
            "-".into()
        }
    }

    /// [`Numbers::pm`] of a share of the peak, whose interval is the peak's own.
    fn pm_peak(&self, v: f64) -> String {
        if v > 0.0 {
            format!("±{}", self.bytes(peak_ci95(v, self.interval)))
        } else {
            "-".into()
        }
    }

    /// Objects: estimates are fractional when sampled, so they keep a decimal then.
    fn objects(&self, v: f64) -> String {
        if self.exact {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    }
}

/// `v` as a share of `of`, or `-` when there is nothing to share.
fn percent(v: f64, of: f64) -> String {
    if of > 0.0 {
        format!("{:.1}%", 100.0 * v / of)
    } else {
        "-".to_owned()
    }
}

/// A column of the table: its header and how it writes a site's cell.
type Column<'a> = (&'static str, Box<dyn Fn(&SiteTotal) -> String + 'a>);

/// The table's columns: the ± columns only for sampled profiles (nothing to bound when
/// exact), the peak column only when `peak` (the live set at the peak is known).
fn columns<'a>(n: &'a Numbers, total: &'a SiteTotal, peak: bool) -> Vec<Column<'a>> {
    let mut columns: Vec<Column<'a>> = Vec::new();
    columns.push(("alloc bytes", Box::new(|s| n.bytes(s.alloc_bytes))));
    if !n.exact {
        columns.push(("±95%", Box::new(|s| n.pm(s.alloc_bytes))));
    }
    columns.push(("alloc%", Box::new(|s| percent(s.alloc_bytes, total.alloc_bytes))));
    columns.push(("alloc objs", Box::new(|s| n.objects(s.alloc_objects))));
    columns.push(("live bytes", Box::new(|s| n.bytes(s.live_bytes))));
    if !n.exact {
        columns.push(("±95%", Box::new(|s| n.pm(s.live_bytes))));
    }
    columns.push(("live%", Box::new(|s| percent(s.live_bytes, total.live_bytes))));
    columns.push(("live objs", Box::new(|s| n.objects(s.live_objects))));
    if peak {
        columns.push(("peak bytes", Box::new(|s| n.bytes(s.peak_bytes))));
        if !n.exact {
            columns.push(("±95%", Box::new(|s| n.pm_peak(s.peak_bytes))));
        }
    }
    columns
}

/// The totals line's label: how many sites there are and are shown, and what was lost,
/// since the totals are short of it: said where they are read.
fn totals_label(profile: &Profile, sites: usize, shown: usize) -> String {
    let mut label = format!("total ({sites} sites");
    if shown < sites {
        let _ = write!(label, ", {shown} shown");
    }
    let lost = profile.lost.brief();
    if !lost.is_empty() {
        let _ = write!(label, "; {lost}");
    }
    label.push(')');
    label
}

/// The sites of `sites` (a report's rows, named `span › site` when grouped by span) that
/// look like allocation wrappers ([`Profile::wrappers`]), the largest first: what the top
/// table, `--json` and the HTML page suggest a `--site-skip` for.
pub fn wrapper_suggestions(profile: &Profile, sites: &[SiteTotal]) -> Vec<Wrapper> {
    shown_wrappers(&profile.wrappers(), sites)
}

/// Those of `wrappers` that are among `sites` ([`wrapper_suggestions`]).
fn shown_wrappers(wrappers: &[Wrapper], sites: &[SiteTotal]) -> Vec<Wrapper> {
    let shown = |w: &&Wrapper| {
        sites.iter().any(|s| {
            s.site == w.site || s.site.strip_suffix(&*w.site).is_some_and(|r| r.ends_with(" › "))
        })
    };
    wrappers.iter().filter(shown).cloned().collect()
}

/// Writes `rows` right-aligned in columns (the last column left as is), then a rule of
/// dashes as wide as each column (cells of `rule` are repeated to the width) and `last`.
fn write_table(out: &mut String, rows: &[Vec<String>], rule: Option<&[String]>, last: &[String]) {
    let n = rows.first().map_or(0, Vec::len).saturating_sub(1);
    let mut width = vec![0usize; n];
    for r in rows.iter().chain(std::iter::once(&last.to_vec())) {
        for (w, cell) in width.iter_mut().zip(r.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |r: &[String]| {
        let mut text = String::new();
        for (w, cell) in width.iter().zip(r.iter()) {
            let _ = write!(text, "{cell:>w$}  ");
        }
        text.push_str(r.get(n).map_or("", String::as_str));
        out.push_str(text.trim_end());
        out.push('\n');
    };
    for r in rows {
        line(r);
    }
    if let Some(rule) = rule {
        let dashes: Vec<String> =
            rule.iter().zip(&width).map(|(c, w)| c.repeat(*w)).chain([String::new()]).collect();
        line(&dashes);
    }
    if !last.is_empty() {
        line(last);
    }
}

/// The short-lived section of the top table: how many of the allocated bytes were freed
/// within the threshold, then the sites with the most short-lived bytes and the lifetimes
/// of their freed bytes (percentiles by bytes, to within 19 %; a lifetime below the
/// resolution of the recording's lifetimes, [`Header::lifetime_unit_ns`], shows as `<` it).
/// Empty when nothing was freed.
///
/// [`Header::lifetime_unit_ns`]: crate::profile::Header::lifetime_unit_ns
pub fn short_lived_table(profile: &Profile, sites: &[SiteTotal], options: &TopOptions) -> String {
    let mut out = String::new();
    let short: f64 = sites.iter().map(|s| s.short_bytes).sum();
    let alloc: f64 = sites.iter().map(|s| s.alloc_bytes).sum();
    if profile.counts.frees == 0 || alloc <= 0.0 {
        return out;
    }
    let exact = is_exact(profile);
    let interval = profile.header.interval;
    let unit = profile.header.lifetime_unit_ns();
    let bytes = |v: f64| if options.human_bytes { human_bytes(v) } else { format!("{v:.0}") };
    let _ = writeln!(
        out,
        "\nshort-lived (freed within {}): {} of {} allocated ({:.1}%)",
        human_duration(profile.lifetimes.short_lived_ns as f64),
        bytes(short),
        bytes(alloc),
        100.0 * short / alloc
    );
    let mut by_short: Vec<&SiteTotal> = sites.iter().filter(|s| !s.lifetimes.is_empty()).collect();
    by_short.sort_by(|a, b| {
        b.short_bytes
            .total_cmp(&a.short_bytes)
            .then_with(|| b.alloc_bytes.total_cmp(&a.alloc_bytes))
    });
    let life = |s: &SiteTotal, q: f64| match s.lifetime_quantile(q) {
        Some(ns) if ns < unit => format!("<{}", human_duration(unit as f64)),
        Some(ns) => human_duration(ns as f64),
        None => "-".to_owned(),
    };
    let mut header = vec!["short bytes".to_owned()];
    if !exact {
        header.push("±95%".to_owned());
    }
    header.extend(["of site", "lifetime p50", "p90", "p99", "site"].map(str::to_owned));
    let mut rows = vec![header];
    for s in by_short.iter().take(options.limit.min(10)) {
        let mut r = vec![bytes(s.short_bytes)];
        if !exact {
            r.push(if s.short_bytes > 0.0 {
                format!("±{}", bytes(ci95(s.short_bytes, interval)))
            } else {
                "-".to_owned()
            });
        }
        let of = if s.alloc_bytes > 0.0 { 100.0 * s.short_bytes / s.alloc_bytes } else { 0.0 };
        r.extend([
            format!("{of:.1}%"),
            life(s, 0.5),
            life(s, 0.9),
            life(s, 0.99),
            printable(&s.site).into_owned(),
        ]);
        rows.push(r);
    }
    write_table(&mut out, &rows, None, &[]);
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
