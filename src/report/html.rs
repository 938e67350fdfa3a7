//! The interactive HTML report: one self-contained page (no network access, no external
//! scripts or fonts) with a timeline of the heap, a flamegraph of any moment or range, a
//! search box and a table of sites. The page's script and style live beside this file
//! (`html/page.html`, `page.css`, `page.js`) and are included verbatim; the data is
//! embedded as JSON in a `<script type="application/json">` element.
//!
//! # 1. Pre-aggregation
//! A page cannot replay ten million events, so the fold that read or recorded the profile
//! also folded the heap over time by stack (`profile/timeline.rs`): at most
//! `profile::timeline::BUCKETS` buckets of `w` nanoseconds (the stream's time unit times a power of two),
//! bucket `i` covering `[i·w, (i+1)·w)`, and every sampled block in one *cell*: (its
//! stack, the bucket it was allocated in, the bucket it was freed in or "never" = the
//! number of buckets), which sums the blocks' sample points and counts. The page's cells
//! are those of the stacks' frame-tree nodes (§2). From the cells, for a bucket boundary
//! `Bᵢ = i·w`:
//! - live at `Bᵢ` = the cells allocated in a bucket `< i` and freed in a bucket `≥ i` (or
//!   never): exactly the blocks with a time `< Bᵢ` not freed at a time `< Bᵢ`, which is
//!   what `memprof report FILE --at Bᵢns --view live` counts ([`Window::at`](crate::profile::replay::Window::at)); the page
//!   snaps a click to the nearest boundary for that reason;
//! - allocated in buckets `[a, b)` = the cells allocated in them.
//!
//! Frees of blocks the stream never sampled (orphans) are left out as [`Profile::add`]
//! leaves them out. The other views are per node, computed here: the live set at the peak
//! ([`Profile::peak_live`]: exact, or sampled each node's share of the cross-fitted peak, at
//! the two moments its estimate averages; the timeline marks the peak at
//! [`Peak::time_ns`](crate::profile::Peak::time_ns) with its 95 % interval, below the
//! noisy maximum of the live curve), the short-lived blocks (freed less than
//! [`DEFAULT_SHORT_LIVED_NS`] after their allocation) and the GC mark time
//! ([`stack_totals`] of [`View::Gc`]). `memprof record` writes the page from its
//! collector's fold, `memprof report` from its reading of the file: the same page.
//!
//! # 2. Stacks as a tree
//! Stacks are named root first ([`Profile::frame_names_ref`]) and interned into a tree of
//! frame-name nodes, so stacks that differ only in their addresses share a node, and the
//! page builds a flamegraph by adding each node's value to its ancestors. Names are in
//! one string table.
//!
//! # 3. Size
//! Numbers are integers (sample points; the page multiplies by the interval), arrays are
//! flat. A 10 M-event exact profile of CPython gives a page of a few MB.
//!
//! # 4. A process tree
//! The tree's page ([`write_tree_html`]) is the page of the merged profile
//! ([`crate::profile::merge`]: every process's stacks under a root frame naming it), its
//! buckets on the first process's clock: each process's timeline (§1) goes into the same
//! frame tree, its times shifted by its start after the first's (rounded to whole buckets
//! of its own timeline). Each process also gets its
//! own series (`procs`: its timeline) and its root node, so the page can show one process
//! (its timeline, and the flamegraph and sites under its root) or all of them. Buckets no
//! longer fall on a file's time units, so a moment of the tree's page is within a bucket of
//! `report FILE --at`, not exactly it. The peak view is each process's live set at its own
//! peak (exactly `report FILE --view peak` for one process; the processes' peaks need not
//! coincide); the all-processes timeline adds the processes' largest live heaps per bucket
//! (an upper bound, as the merged profile's peak is).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::OnceLock;

use super::confidence;
use super::export::{ExportOptions, Exporter};
use super::view::{sampling_summary, sorted, stack_totals, View};
use crate::error::Error;
use crate::profile::site::Wrapper;
use crate::profile::timeline::{Cell, Grid, Timeline};
use crate::profile::{IdHash, Profile, StackId, DEFAULT_SHORT_LIVED_NS};

#[cfg(test)]
use crate::profile::timeline::BUCKETS;

const PAGE: &str = include_str!("html/page.html");
const CSS: &str = include_str!("html/page.css");
const JS: &str = include_str!("html/page.js");

/// A stream of JSON text with the few forms the page's data needs.
struct Json(String);

impl Json {
    fn raw(&mut self, s: &str) {
        self.0.push_str(s);
    }

    /// A JSON string; `<` is escaped so that no name can close the `<script>` element.
    fn str(&mut self, s: &str) {
        let o = &mut self.0;
        o.push('"');
        for c in s.chars() {
            match c {
                '"' => o.push_str("\\\""),
                '\\' => o.push_str("\\\\"),
                '<' => o.push_str("\\u003c"),
                '>' => o.push_str("\\u003e"),
                '&' => o.push_str("\\u0026"),
                '\u{2028}' => o.push_str("\\u2028"),
                '\u{2029}' => o.push_str("\\u2029"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(o, "\\u{:04x}", c as u32);
                }
                c => o.push(c),
            }
        }
        o.push('"');
    }

    fn key(&mut self, k: &str) {
        if !self.0.ends_with('{') {
            self.0.push(',');
        }
        self.str(k);
        self.0.push(':');
    }

    /// An integer (a float is rounded; JavaScript numbers hold integers to 2⁵³ exactly).
    fn num(&mut self, v: f64) {
        let v = if v.is_finite() { v.round() } else { 0.0 };
        let _ = write!(self.0, "{v:.0}");
    }

    fn ints(&mut self, v: impl IntoIterator<Item = u64>) {
        self.0.push('[');
        for (i, x) in v.into_iter().enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            let _ = write!(self.0, "{x}");
        }
        self.0.push(']');
    }

    fn nums(&mut self, v: impl IntoIterator<Item = f64>) {
        self.0.push('[');
        for (i, x) in v.into_iter().enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            self.num(x);
        }
        self.0.push(']');
    }

    fn strs<'a>(&mut self, v: impl IntoIterator<Item = &'a str>) {
        self.0.push('[');
        for (i, s) in v.into_iter().enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            self.str(s);
        }
        self.0.push(']');
    }
}

/// Frame names interned into a tree (see the [module documentation](self) §2).
#[derive(Default)]
struct Tree {
    names: Vec<String>,
    name_ids: HashMap<String, u32, crate::sys::hash::SeededHash>,
    /// Node `i + 1`'s parent and name (node 0 is the root, which has neither).
    nodes: Vec<(u32, u32)>,
    children: HashMap<(u32, u32), u32, IdHash>,
    /// The leaf node of each stack, by stack id (`u32::MAX`: not seen yet).
    of_stack: Vec<u32>,
    /// The site name of each leaf node.
    sites: HashMap<u32, u32, IdHash>,
}

impl Tree {
    fn name(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.to_owned());
        self.name_ids.insert(s.to_owned(), id);
        id
    }

    /// The outermost frame's node (below the root) of the stack whose leaf is `node`: a
    /// process's root frame in a merged tree.
    fn top(&self, mut node: u32) -> u32 {
        while let Some(&(parent, _)) = node.checked_sub(1).and_then(|i| self.nodes.get(i as usize))
        {
            if parent == 0 {
                break;
            }
            node = parent;
        }
        node
    }

    /// The leaf node of `stack`, interning its frames on first sight.
    fn node(&mut self, profile: &Profile, stack: StackId) -> u32 {
        if self.of_stack.len() != profile.stacks.len() {
            self.of_stack = vec![u32::MAX; profile.stacks.len()];
        }
        let cached = self.of_stack.get(stack as usize).copied().unwrap_or(u32::MAX);
        if cached != u32::MAX {
            return cached;
        }
        let mut node = 0;
        for f in profile.frame_names_ref(stack) {
            let name = self.name(&f);
            node = match self.children.get(&(node, name)) {
                Some(&c) => c,
                None => {
                    self.nodes.push((node, name));
                    let c = self.nodes.len() as u32;
                    self.children.insert((node, name), c);
                    c
                }
            };
        }
        if !self.sites.contains_key(&node) {
            let site = self.name(&profile.site_name(stack));
            self.sites.insert(node, site);
        }
        if let Some(c) = self.of_stack.get_mut(stack as usize) {
            *c = node;
        }
        node
    }
}

/// What the page shows of the run over time: the grid, the cells by frame-tree node, and
/// the per-bucket figures.
struct Pass {
    /// Bucket width and count.
    w: u64,
    buckets: u64,
    /// (node, alloc bucket, free bucket or `buckets`) → totals.
    cells: HashMap<(u32, u32, u32), Cell, IdHash>,
    /// Per node, the sample points of short-lived blocks.
    short: HashMap<u32, u64, IdHash>,
    /// Per bucket: estimated bytes allocated and freed, largest live heap after an event.
    alloc: Vec<f64>,
    freed: Vec<f64>,
    live_max: Vec<f64>,
}

impl Pass {
    fn empty(w: u64, buckets: u64) -> Pass {
        let n = buckets as usize;
        Pass {
            w,
            buckets,
            cells: HashMap::default(),
            short: HashMap::default(),
            alloc: vec![0.0; n],
            freed: vec![0.0; n],
            live_max: vec![0.0; n],
        }
    }

    /// Adds a finished timeline on this grid, its stack `s` named by `names`'s stack
    /// `base + s`.
    fn add(&mut self, tl: &Timeline, names: &Profile, base: StackId, tree: &mut Tree) {
        let never = self.buckets as u32;
        tl.cells(|s| tree.node(names, base + s), &mut self.cells, never);
        for (&s, &k) in &tl.short {
            *self.short.entry(tree.node(names, base + s)).or_default() += k;
        }
        let max = tl.live_max();
        let rows = self.alloc.iter_mut().zip(&mut self.freed).zip(&mut self.live_max);
        for (((a, f), m), ((ta, tf), tm)) in rows.zip(tl.alloc.iter().zip(&tl.freed).zip(&max)) {
            *a += ta;
            *f += tf;
            *m += tm;
        }
    }
}

/// `--html`: the page of one recording ([`write_html`]), or of a tree read from several
/// files ([`write_tree_html`]), whatever the view.
#[derive(Clone, Copy, Debug, Default)]
pub struct HtmlExporter;

impl Exporter for HtmlExporter {
    fn name(&self) -> &'static str {
        "html"
    }
    fn value_name(&self) -> &'static str {
        "OUT.html"
    }
    fn help(&self) -> &'static str {
        "Write an interactive HTML report (one self-contained page: timeline, flamegraph of \
         any moment or range, search, sites) of the whole recording; of a tree, one page \
         with every process (a process selector, each one's timeline, the merged flamegraph)"
    }
    fn what(&self, _: &ExportOptions<'_>) -> String {
        "HTML report".into()
    }
    fn write(
        &self,
        profile: &Profile,
        options: &ExportOptions<'_>,
        w: &mut dyn Write,
    ) -> Result<(), Error> {
        match options.processes {
            [] | [_] => write_html(profile, options.wrappers, w),
            several => write_tree_html(profile, several, options.wrappers, w),
        }
    }
    // The page replays the recording's timeline (§1): ranges are chosen on the page.
    fn whole_recording(&self) -> bool {
        true
    }
    // A large recording's page takes seconds and megabytes (§3): the user is told both.
    fn timed(&self) -> bool {
        true
    }
}

/// The timeline of `profile`, which its reading or recording kept and finished.
fn timeline_of(profile: &Profile) -> Result<&Timeline, Error> {
    profile.timeline.as_deref().ok_or_else(|| {
        Error::Config(
            "the HTML report needs the profile's timeline, which was not kept when it was read"
                .into(),
        )
    })
}

/// Writes the HTML report of `profile`, one recording read or recorded with its timeline
/// ([`crate::profile::load::LoadOptions::timeline`]), into `out`.
///
/// The page's hints are taken from `wrappers` when another pass shares them
/// ([`ExportOptions::wrappers`]).
pub fn write_html(
    profile: &Profile,
    wrappers: Option<&OnceLock<Vec<Wrapper>>>,
    out: impl Write,
) -> Result<(), Error> {
    if profile.window.is_some() {
        return Err(Error::Config(
            "the HTML report covers the whole recording (its timeline selects moments and \
             ranges): give it without --at, --from or --to"
                .into(),
        ));
    }
    let mut tree = Tree::default();
    let tl = timeline_of(profile)?;
    let mut p = Pass::empty(tl.width(), tl.buckets());
    p.add(tl, profile, 0, &mut tree);
    // The live set at the peak, which the reading of the profile kept.
    let at_peak = profile.peak_live().ok_or_else(|| {
        Error::Config("the HTML report is of one profile (each process peaks on its own)".into())
    })?;
    let mut peak_k: std::collections::BTreeMap<u32, u64> = Default::default();
    for (&(stack, _), t) in sorted(&at_peak) {
        *peak_k.entry(tree.node(profile, stack)).or_default() += t.k;
    }
    let mut gc: std::collections::BTreeMap<u32, f64> = Default::default();
    for t in stack_totals(profile, View::Gc) {
        *gc.entry(tree.node(profile, t.stack)).or_default() += t.bytes;
    }
    let json = data_json(profile, &p, &tree, (&peak_k, &gc), wrappers);
    let exe = profile.header.executable.rsplit('/').next().unwrap_or_default();
    let title =
        if exe.is_empty() { "memprof report".to_owned() } else { format!("memprof: {exe}") };
    write_page(&title, &json, out)
}

/// Writes the page of a process tree (§4): `profile` is the merge of the files of
/// `processes`, in that order (what [`crate::profile::load::load`] returns). Its hints are
/// taken from `wrappers` as [`write_html`]'s are.
pub fn write_tree_html(
    profile: &Profile,
    processes: &[crate::profile::load::Process],
    wrappers: Option<&OnceLock<Vec<Wrapper>>>,
    out: impl Write,
) -> Result<(), Error> {
    if profile.window.is_some() {
        return Err(Error::Config(
            "the HTML report covers the whole recording (its timeline selects moments and \
             ranges): give it without --at, --from or --to"
                .into(),
        ));
    }
    if processes.is_empty() {
        return Err(Error::Config("no profile to report".into()));
    }
    let grid = Grid::of(profile.end_ns, profile.header.time_unit_ns);
    let mut all = Pass::empty(grid.w, grid.buckets);
    let mut tree = Tree::default();
    let mut peak_k: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut procs = Json(String::from("["));
    let mut base: StackId = 0;
    for (i, pr) in processes.iter().enumerate() {
        let own = pr.page.as_deref().ok_or_else(|| {
            Error::Config(format!(
                "{}: the HTML report needs each process's timeline, which was not kept",
                pr.file.display()
            ))
        })?;
        let offset = own.start_unix_ns.saturating_sub(profile.header.start_unix_ns);
        let moved = own.timeline.on_grid(grid.w, grid.buckets, offset);
        all.add(&moved, profile, base, &mut tree);
        for &(stack, k) in &own.peak_live {
            *peak_k.entry(tree.node(profile, base + stack)).or_default() += k;
        }
        let root = (own.stacks > 0).then(|| {
            let leaf = tree.node(profile, base);
            tree.top(leaf)
        });
        if i > 0 {
            procs.raw(",");
        }
        let ci = confidence::peak_ci95(own.peak.bytes, profile.header.interval);
        let peak = [own.peak.bytes, own.peak.time_ns.saturating_add(offset) as f64, ci];
        process_json(&mut procs, pr, &own.cmdline, root, peak, &moved, grid.buckets as usize);
        base += own.stacks;
    }
    procs.raw("]");
    let mut gc: std::collections::BTreeMap<u32, f64> = Default::default();
    for t in stack_totals(profile, View::Gc) {
        *gc.entry(tree.node(profile, t.stack)).or_default() += t.bytes;
    }
    let mut json = data_json(profile, &all, &tree, (&peak_k, &gc), wrappers);
    json.pop();
    json.push_str(",\"procs\":");
    json.push_str(&procs.0);
    json.push('}');
    let exe = profile.header.executable.rsplit('/').next().unwrap_or_default();
    let title = format!("memprof: {exe} and {} other processes", processes.len() - 1);
    write_page(&title, &json, out)
}

/// One process of a tree's page (§4): who it is, its root node (the page shows the
/// flamegraph and sites under it), its peak (bytes, time on the tree's clock, 95 % half
/// width) and its own timeline on the tree's `buckets`, so the page can show it alone.
fn process_json(
    j: &mut Json,
    pr: &crate::profile::load::Process,
    cmdline: &[String],
    root: Option<u32>,
    peak: [f64; 3],
    moved: &Timeline,
    buckets: usize,
) {
    j.raw("{");
    j.key("exe");
    j.str(&pr.executable);
    j.key("cmd");
    j.strs(cmdline.iter().map(String::as_str));
    j.key("pid");
    j.num(f64::from(pr.pid));
    j.key("ppid");
    j.num(f64::from(pr.ppid));
    j.key("file");
    j.str(&pr.file.display().to_string());
    j.key("node");
    j.num(root.map_or(-1.0, f64::from));
    j.key("samples");
    j.num(pr.samples as f64);
    j.key("allocated");
    j.num(pr.allocated);
    j.key("peak");
    j.nums(peak);
    // Its own timeline, on the tree's buckets.
    j.key("max");
    j.nums(moved.live_max().into_iter().take(buckets));
    j.key("alloc");
    j.nums(moved.alloc.iter().copied().take(buckets));
    j.raw("}");
}

/// The page with `json` as its data. The template is filled in one pass over its own text:
/// what a placeholder is replaced with is never searched again, so a title or a name that
/// spells `{{DATA}}` or `{{JS}}` is only text (replacing placeholders one after the other
/// would find the data's placeholder inside the title). The data cannot close its script
/// element either: [`Json::str`] escapes `<`.
fn write_page(title: &str, json: &str, mut out: impl Write) -> Result<(), Error> {
    let io = |e| Error::io("writing the HTML report", e);
    let title = html_escape(title);
    let mut rest = PAGE;
    while let Some(at) = rest.find("{{") {
        let (text, tail) = rest.split_at(at);
        out.write_all(text.as_bytes()).map_err(io)?;
        let end = tail.find("}}").map_or(tail.len(), |e| e + 2);
        let value = match &tail[..end] {
            "{{TITLE}}" => title.as_str(),
            "{{CSS}}" => CSS,
            "{{JS}}" => JS,
            "{{DATA}}" => json,
            other => other,
        };
        out.write_all(value.as_bytes()).map_err(io)?;
        rest = &tail[end..];
    }
    out.write_all(rest.as_bytes()).map_err(io)?;
    out.flush().map_err(io)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The warnings the page's header shows.
fn warnings(profile: &Profile) -> Vec<String> {
    let mut w = profile.warnings.clone();
    if !profile.complete {
        w.push(match profile.stopped {
            Some(s) => format!("the recording has no end record: {}", s.describe()),
            None if profile.header.collected => {
                format!("incomplete recording: {}", crate::profile::RECORD_STOPPED)
            }
            None => "incomplete recording: the file has no end record (the program crashed, was \
                     killed, or is still running)"
                .to_owned(),
        });
    }
    if !profile.lost.nothing_missing() {
        w.push(profile.lost.describe());
    }
    w
}

/// The process's resident memory on the page's grid (§1): per bucket the largest reading
/// in it, a bucket without one carrying the last before it (0 before the first). Empty
/// without readings (a profile not made by `memprof record`, or a tree's).
fn resident_per_bucket(profile: &Profile, w: u64, buckets: u64) -> Vec<f64> {
    let n = buckets as usize;
    if profile.resident.is_empty() || n == 0 {
        return Vec::new();
    }
    let mut most: Vec<Option<u64>> = vec![None; n];
    for r in &profile.resident {
        let i = usize::try_from(r.time_ns / w.max(1)).unwrap_or(usize::MAX).min(n - 1);
        most[i] = Some(most[i].map_or(r.bytes, |m| m.max(r.bytes)));
    }
    let mut last = 0;
    most.iter()
        .map(|m| {
            last = m.unwrap_or(last);
            last as f64
        })
        .collect()
}

/// The page's data (the module documentation's §1–§3) as one JSON object: the recording's
/// facts, its timeline and its frame tree with the cells and per-node values.
fn data_json(
    profile: &Profile,
    p: &Pass,
    tree: &Tree,
    (peak, gc): (&std::collections::BTreeMap<u32, u64>, &std::collections::BTreeMap<u32, f64>),
    wrappers: Option<&OnceLock<Vec<Wrapper>>>,
) -> String {
    let mut j = Json(String::with_capacity(1 << 20));
    j.raw("{");
    recording_json(&mut j, profile);
    facts_json(&mut j, profile, wrappers);
    timeline_json(&mut j, profile, p);
    tree_json(&mut j, p, tree, peak, gc);
    j.raw("}");
    j.0
}

/// The recording's identity, sampling, clock and peak: what the page's header states and
/// what its numbers are scaled and bounded by.
fn recording_json(j: &mut Json, profile: &Profile) {
    let h = &profile.header;
    j.key("exe");
    j.str(&h.executable);
    j.key("cmd");
    j.strs(h.cmdline.iter().map(String::as_str));
    j.key("pid");
    j.num(h.pid as f64);
    j.key("interval");
    // The interval may be fractional (a rate): written in full, not rounded.
    let _ = write!(j.0, "{}", if h.interval.is_finite() { h.interval } else { 0.0 });
    j.key("z95");
    let _ = write!(j.0, "{}", confidence::Z95);
    j.key("start");
    j.num(h.start_unix_ns as f64);
    j.key("unit");
    j.num(h.time_unit_ns as f64);
    j.key("end");
    j.num(profile.end_ns as f64);
    j.key("samples");
    j.num(profile.counts.samples as f64);
    j.key("frees");
    j.num(profile.counts.frees as f64);
    // The peak, when, and its 95 % half width (0 when exact, or an upper bound: a tree's).
    j.key("peak");
    let ci = if profile.since_peak_known() {
        confidence::peak_ci95(profile.peak.bytes, h.interval)
    } else {
        0.0
    };
    j.nums([profile.peak.bytes, profile.peak.time_ns as f64, ci]);
    j.key("short_ns");
    j.num(DEFAULT_SHORT_LIVED_NS as f64);
}

/// What qualifies the numbers, as the top table's header lines say it: how it sampled,
/// resident memory, notes, warnings and wrapper hints.
fn facts_json(j: &mut Json, profile: &Profile, wrappers: Option<&OnceLock<Vec<Wrapper>>>) {
    // The summary's first fact: how it sampled and what it lost (`report::sampling_summary`),
    // marked as a warning when the numbers lack something.
    j.key("sampling");
    j.str(&sampling_summary(profile));
    j.key("whole");
    j.raw(if super::view::figures_whole(profile) { "true" } else { "false" });
    // Resident memory beside the live heap, its gap explained, and how the program ended:
    // the top table's header lines (`report::top`).
    j.key("memory");
    let memory: Vec<String> = super::resident::resident_line(profile)
        .into_iter()
        .chain(super::resident::gap_lines(profile))
        .chain(super::resident::ended_line(profile))
        .collect();
    j.strs(memory.iter().map(String::as_str));
    j.key("notes");
    j.strs(profile.notes.iter().map(String::as_str));
    j.key("warnings");
    let w = warnings(profile);
    j.strs(w.iter().map(String::as_str));
    // The sites that look like allocation wrappers, under the sites table: the top table's
    // hints (`report::top`). The page has no one list of shown sites (each view and range
    // has its own), so it takes the 20 largest of them, as many as the top table shows.
    j.key("hints");
    let own = OnceLock::new();
    let wrappers = wrappers.unwrap_or(&own).get_or_init(|| profile.wrappers());
    let hints: Vec<String> = wrappers.iter().take(20).map(|w| w.suggestion()).collect();
    j.strs(hints.iter().map(String::as_str));
}

/// The timeline's per-bucket figures (§1), from which the page draws the heap over time.
fn timeline_json(j: &mut Json, profile: &Profile, p: &Pass) {
    j.key("w");
    j.num(p.w as f64);
    j.key("n");
    j.num(p.buckets as f64);
    j.key("alloc");
    j.nums(p.alloc.iter().copied());
    j.key("freed");
    j.nums(p.freed.iter().copied());
    j.key("max");
    j.nums(p.live_max.iter().copied());
    j.key("rss");
    j.nums(resident_per_bucket(profile, p.w, p.buckets));
    j.key("gcc");
    j.ints(profile.gc_cycles.iter().flat_map(|c| [c.start_ns, c.end_ns]));
}

/// The frame tree (§2) and what each node holds: the cells from which the page sums any
/// moment or range, and the per-node values of the views it cannot sum from them (the
/// peak, short-lived blocks, GC mark time). Sorted, so that the page is the same each time.
fn tree_json(
    j: &mut Json,
    p: &Pass,
    tree: &Tree,
    peak: &std::collections::BTreeMap<u32, u64>,
    gc: &std::collections::BTreeMap<u32, f64>,
) {
    j.key("names");
    j.strs(tree.names.iter().map(String::as_str));
    j.key("nodes");
    j.ints(tree.nodes.iter().flat_map(|&(parent, name)| [parent as u64, name as u64]));
    j.key("sites");
    let mut sites: Vec<(u32, u32)> = tree.sites.iter().map(|(&n, &s)| (n, s)).collect();
    sites.sort_unstable();
    j.ints(sites.iter().flat_map(|&(n, s)| [n as u64, s as u64]));
    j.key("cells");
    let mut cells: Vec<_> = p.cells.iter().collect();
    cells.sort_unstable_by_key(|(k, _)| **k);
    j.ints(cells.iter().flat_map(|(&(node, a, f), c)| [node as u64, a as u64, f as u64, c.k, c.n]));
    j.key("peakv");
    j.ints(peak.iter().flat_map(|(&n, &k)| [n as u64, k]));
    j.key("short");
    let mut short: Vec<_> = p.short.iter().filter(|(_, &k)| k > 0).collect();
    short.sort_unstable();
    j.ints(short.iter().flat_map(|(&n, &k)| [n as u64, k]));
    j.key("gcv");
    j.ints(gc.iter().filter(|(_, &v)| v >= 0.5).flat_map(|(&n, &v)| [n as u64, v.round() as u64]));
}

/// A recording with the event times of `events`, for the tests.
#[cfg(test)]
fn write_events_file(
    meta: &Profile,
    events: &[crate::profile::format::Event],
    path: &std::path::Path,
) -> Profile {
    let bytes = crate::profile::format::write_events(Vec::new(), meta, events).unwrap();
    std::fs::write(path, bytes).unwrap();
    Profile::read_file_with(path, true).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::format::Event;
    use crate::profile::replay::Window;
    use crate::profile::{Free, Header, Sample, Stack, Symbol};

    fn meta() -> Profile {
        let mut p = Profile {
            header: Header { interval: 1.0, executable: "/bin/t".into(), ..Header::default() },
            ..Profile::default()
        };
        for (i, f) in ["a", "b<&>\"x\""].iter().enumerate() {
            let addr = 0x1000 + i as u64;
            p.stacks.push(Stack { frames: vec![addr], truncated: false, label: 0 });
            p.symbols
                .insert(addr, vec![Symbol { function: (*f).to_owned(), file: None, line: None }]);
        }
        p
    }

    #[test]
    fn data_never_forms_a_placeholder() {
        let mut page = Vec::new();
        write_page("x{{DATA}}y{{JS}}</script>", "{\"d\":1}", &mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        assert_eq!(page.matches("{\"d\":1}").count(), 1, "the data once");
        assert!(page.contains("<title>x{{DATA}}y{{JS}}&lt;/script&gt;</title>"), "{page}");
        assert!(page.contains("<script type=\"application/json\" id=\"data\">{\"d\":1}</script>"));
        assert_eq!(page.matches(JS).count(), 1, "the script once");
    }

    #[test]
    fn json_strings_cannot_close_the_script() {
        let mut j = Json(String::new());
        j.str("</script><!-- \"\\\n\u{2028}");
        assert_eq!(j.0, r#""\u003c/script\u003e\u003c!-- \"\\\u000a\u2028""#);
    }

    #[test]
    fn cells_give_the_live_set_at_every_boundary() {
        let dir = std::env::temp_dir().join(format!("memprof-html-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.mprof");
        let unit = crate::profile::format::time_unit_ns(1.0);
        let s = |id, stack, t: u64, size| Sample {
            id,
            stack,
            time_ns: t * unit,
            thread: 1,
            addr: 0x10 * id,
            size,
            k: size,
        };
        let (a, b, c) = (s(1, 0, 0, 100), s(2, 1, 50, 10), s(3, 0, 120, 7));
        let events = [
            Event::Sample(a),
            Event::Sample(b),
            Event::Free(Free::of(&b, 60 * unit)),
            Event::Sample(c),
            Event::Free(Free::of(&a, 150 * unit)),
        ];
        let profile = write_events_file(&meta(), &events, &path);
        let mut tree = Tree::default();
        let tl = timeline_of(&profile).unwrap();
        let mut p = Pass::empty(tl.width(), tl.buckets());
        p.add(tl, &profile, 0, &mut tree);
        assert!(p.buckets <= BUCKETS && p.w % unit == 0 && p.buckets * p.w > profile.end_ns);
        for i in 0..=p.buckets {
            let t = i * p.w;
            let page: u64 = p
                .cells
                .iter()
                .filter(|(&(_, a, f), _)| (a as u64) < i && f as u64 >= i)
                .map(|(_, c)| c.k)
                .sum();
            let want =
                crate::profile::replay::fold_window(&path, Window::at(t), DEFAULT_SHORT_LIVED_NS)
                    .unwrap();
            let want: u64 = want.live.values().map(|t| t.k).sum();
            assert_eq!(page, want, "at {t} ns");
        }
        // b lived 10 units (more than 1 ms): not short-lived; nothing else was freed young.
        assert!(p.short.is_empty());
        // The live set at the peak, as the profile's reading kept it.
        let mut got: HashMap<u32, u64> = HashMap::new();
        for (&(stack, _), t) in &profile.peak_live().unwrap() {
            *got.entry(tree.node(&profile, stack)).or_default() += t.k;
        }
        assert_eq!(got.values().sum::<u64>(), 110, "a and b at 50 units");
        let mut html = Vec::new();
        write_html(&profile, None, &mut html).unwrap();
        let html = String::from_utf8(html).unwrap();
        assert!(html.contains("<script type=\"application/json\" id=\"data\">{\"exe\":"));
        assert!(html.contains(r#""b\u003c\u0026\u003e\"x\""#), "names are escaped");
        assert!(!html.contains("{{"), "every placeholder is filled");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
