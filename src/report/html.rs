//! The interactive HTML report: one self-contained page (no network access, no external
//! scripts or fonts) with a timeline of the heap, a flamegraph of any moment or range, a
//! search box and a table of sites. The page's script and style live beside this file
//! (`html/page.html`, `page.css`, `page.js`) and are included verbatim; the data is
//! embedded as JSON in a `<script type="application/json">` element.
//!
//! # 1. Pre-aggregation
//! A page cannot replay ten million events, so the recording is read once more
//! (`profile::format::Reader`) and folded into what any view needs. The run is divided into at
//! most [`BUCKETS`] buckets of `w` nanoseconds (a multiple of the stream's time unit),
//! bucket `i` covering `[i·w, (i+1)·w)`. Every sampled block falls into one *cell*:
//! (its stack's node, the bucket it was allocated in, the bucket it was freed in or
//! "never" = the number of buckets), which sums the blocks' sample points and counts.
//! From the cells, for a bucket boundary `Bᵢ = i·w`:
//! - live at `Bᵢ` = the cells allocated in a bucket `< i` and freed in a bucket `≥ i` (or
//!   never): exactly the blocks with a time `< Bᵢ` not freed at a time `< Bᵢ`, which is
//!   what `memprof report FILE --at Bᵢns --view live` counts ([`Window::at`](crate::profile::replay::Window::at)); the page
//!   snaps a click to the nearest boundary for that reason;
//! - allocated in buckets `[a, b)` = the cells allocated in them.
//!
//! Frees of blocks the stream never sampled (orphans) are left out as [`Profile::add`]
//! leaves them out. The other views are per node, computed here: the live set at the peak
//! ([`Profile::peak_live`], exact), the short-lived blocks (freed less than
//! [`DEFAULT_SHORT_LIVED_NS`] after their allocation) and the GC mark time
//! ([`stack_totals`] of [`View::Gc`]).
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
//! buckets on the first process's clock: each file is passed over as in §1 into the same
//! frame tree, its times shifted by its start after the first's. Each process also gets its
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
use std::path::Path;

use super::stats;
use super::view::{sampling_summary, sorted, stack_totals, View};
use crate::error::Error;
use crate::profile::format::{Event, Reader};
use crate::profile::{IdHash, Profile, StackId, DEFAULT_SHORT_LIVED_NS};

/// Most buckets of the timeline (and so the resolution of moments and ranges).
pub const BUCKETS: u64 = 200;

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
    name_ids: HashMap<String, u32>,
    /// Node `i + 1`'s parent and name (node 0 is the root, which has neither).
    nodes: Vec<(u32, u32)>,
    children: HashMap<(u32, u32), u32>,
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

/// Sample points and sample count of one cell.
#[derive(Clone, Copy, Default)]
struct Cell {
    k: u64,
    n: u64,
}

/// The buckets of a page: their width and count.
#[derive(Clone, Copy)]
struct Grid {
    w: u64,
    buckets: u64,
}

impl Grid {
    /// The run of `end_ns` in at most [`BUCKETS`] buckets, a whole number of `unit`s wide.
    fn of(end_ns: u64, unit: u64) -> Grid {
        let unit = unit.max(1);
        let span = end_ns.saturating_add(1);
        let w = span.div_ceil(BUCKETS).div_ceil(unit).saturating_mul(unit).max(unit);
        Grid { w, buckets: span.div_ceil(w).max(1) }
    }
}

/// One recording, as a pass reads it into a page's frame tree.
struct Source<'a> {
    /// The profile whose stacks name the frames (the merged one, for a tree).
    names: &'a Profile,
    /// This file's stack `s` is `names`'s stack `base + s`.
    base: StackId,
    /// This file's own profile (its interval, orphans and short-lived threshold).
    own: &'a Profile,
    /// Nanoseconds added to this file's times (its start after the first process's).
    offset: u64,
}

/// Everything one pass over the recording gathers.
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

/// Buckets without events hold the live heap the bucket before them ended with.
fn carry_live(live_max: &mut [f64], live_end: &[f64], had: &[bool]) {
    let mut carry = 0.0;
    for ((m, &end), &had) in live_max.iter_mut().zip(live_end).zip(had) {
        if had {
            carry = end;
        } else {
            *m = carry;
        }
    }
}

/// Reads the recording at `path` once into cells (see the [module documentation](self) §1).
fn pass(profile: &Profile, path: &Path, tree: &mut Tree) -> Result<Pass, Error> {
    let unit = Reader::open(path)?.profile().header.time_unit_ns;
    let src = Source { names: profile, base: 0, own: profile, offset: 0 };
    pass_on(&src, path, Grid::of(profile.end_ns, unit), tree)
}

/// [`pass`] of one file of a tree (§4), on the `grid` of the whole tree.
fn pass_on(src: &Source, path: &Path, grid: Grid, tree: &mut Tree) -> Result<Pass, Error> {
    let mut reader = Reader::open(path)?;
    let unit = reader.profile().header.time_unit_ns.max(1);
    let profile = src.own;
    let interval = profile.header.interval;
    let Grid { w, buckets } = grid;
    let node = |tree: &mut Tree, stack: StackId| tree.node(src.names, src.base + stack);
    let mut p = Pass {
        w,
        buckets,
        cells: HashMap::default(),
        short: HashMap::default(),
        alloc: vec![0.0; buckets as usize],
        freed: vec![0.0; buckets as usize],
        live_max: vec![0.0; buckets as usize],
    };
    let bucket = |t: u64| -> Result<u32, Error> {
        let b = t.saturating_add(src.offset) / w;
        if b >= buckets {
            return Err(Error::Format(format!(
                "{}: an event at {t} ns is past the end of the recording read before ({} ns): \
                 did the file change?",
                path.display(),
                profile.end_ns
            )));
        }
        Ok(b as u32)
    };
    // Allocated per (node, bucket); the blocks never freed are what the frees leave.
    let mut allocated: HashMap<(u32, u32), Cell, IdHash> = HashMap::default();
    // What Profile::add keeps to tell an orphan free (live samples per (stack, size,
    // unit)), needed only when the profile counted orphans.
    let orphans = profile.counts.orphans > 0;
    let mut live: HashMap<(StackId, u64, u64), (u64, u64), IdHash> = HashMap::default();
    let mut live_bytes = 0.0;
    let mut live_end = vec![0.0; buckets as usize];
    let mut had = vec![false; buckets as usize];
    while let Some(e) = reader.next_event() {
        let b = match e {
            Event::Sample(s) => {
                let node = node(tree, s.stack);
                let a = bucket(s.time_ns)?;
                let c = allocated.entry((node, a)).or_default();
                c.k = c.k.wrapping_add(s.k);
                c.n += 1;
                if orphans {
                    let l = live.entry((s.stack, s.size, s.time_ns / unit)).or_default();
                    l.0 += 1;
                    l.1 = l.1.wrapping_add(s.k);
                }
                let bytes = s.k as f64 * interval;
                live_bytes += bytes;
                p.alloc[a as usize] += bytes;
                a
            }
            Event::Free(f) => {
                if orphans {
                    let key = (f.stack, f.size, f.alloc_ns / unit);
                    match live.get_mut(&key) {
                        Some(l) if l.0 > 0 && l.1 >= f.k => {
                            l.0 -= 1;
                            l.1 -= f.k;
                            if l.0 == 0 {
                                live.remove(&key);
                            }
                        }
                        _ => continue,
                    }
                }
                let node = node(tree, f.stack);
                let (a, b) = (bucket(f.alloc_ns)?, bucket(f.time_ns)?);
                let c = p.cells.entry((node, a, b)).or_default();
                c.k = c.k.wrapping_add(f.k);
                c.n += 1;
                if f.lifetime_ns() < profile.lifetimes.short_lived_ns {
                    *p.short.entry(node).or_default() += f.k;
                }
                let bytes = f.k as f64 * interval;
                live_bytes -= bytes;
                p.freed[b as usize] += bytes;
                b
            }
            Event::Move(_) | Event::GcCycle(_) => continue,
        };
        let i = b as usize;
        p.live_max[i] = p.live_max[i].max(live_bytes);
        live_end[i] = live_bytes;
        had[i] = true;
    }
    // The blocks never freed: what each (node, bucket) allocated, less its frees.
    let never = buckets as u32;
    let mut left = allocated;
    for (&(node, a, _), c) in &p.cells {
        if let Some(l) = left.get_mut(&(node, a)) {
            l.k = l.k.wrapping_sub(c.k);
            l.n = l.n.saturating_sub(c.n);
        }
    }
    for ((node, a), c) in left {
        if c.n > 0 || c.k > 0 {
            p.cells.insert((node, a, never), c);
        }
    }
    carry_live(&mut p.live_max, &live_end, &had);
    Ok(p)
}

/// Writes the HTML report of `profile`, which was read from the recording at `path` alone
/// (its stack ids are the file's), into `out`.
pub fn write_html(profile: &Profile, path: &Path, out: impl Write) -> Result<(), Error> {
    if profile.window.is_some() {
        return Err(Error::Config(
            "the HTML report covers the whole recording (its timeline selects moments and \
             ranges): give it without --at, --from or --to"
                .into(),
        ));
    }
    let mut tree = Tree::default();
    let p = pass(profile, path, &mut tree)?;
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
    let json = data_json(profile, &p, &tree, &peak_k, &gc);
    let exe = profile.header.executable.rsplit('/').next().unwrap_or_default();
    let title =
        if exe.is_empty() { "memprof report".to_owned() } else { format!("memprof: {exe}") };
    write_page(&title, &json, out)
}

/// Writes the page of a process tree (§4): `profile` is the merge of the files of
/// `processes`, in that order (what [`crate::profile::load::load`] returns).
pub fn write_tree_html(
    profile: &Profile,
    processes: &[crate::profile::load::Process],
    out: impl Write,
) -> Result<(), Error> {
    if profile.window.is_some() {
        return Err(Error::Config(
            "the HTML report covers the whole recording (its timeline selects moments and \
             ranges): give it without --at, --from or --to"
                .into(),
        ));
    }
    let Some(first) = processes.first() else {
        return Err(Error::Config("no profile to report".into()));
    };
    let unit = Reader::open(&first.file)?.profile().header.time_unit_ns;
    let grid = Grid::of(profile.end_ns, unit);
    let n = grid.buckets as usize;
    let mut all = Pass {
        w: grid.w,
        buckets: grid.buckets,
        cells: HashMap::default(),
        short: HashMap::default(),
        alloc: vec![0.0; n],
        freed: vec![0.0; n],
        live_max: vec![0.0; n],
    };
    let mut tree = Tree::default();
    let mut peak_k: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut procs = Json(String::from("["));
    let mut base: StackId = 0;
    for (i, pr) in processes.iter().enumerate() {
        let own = Profile::read_file(&pr.file)?;
        let offset = own.header.start_unix_ns.saturating_sub(profile.header.start_unix_ns);
        let src = Source { names: profile, base, own: &own, offset };
        let p = pass_on(&src, &pr.file, grid, &mut tree)?;
        for (k, c) in &p.cells {
            let e = all.cells.entry(*k).or_default();
            e.k = e.k.wrapping_add(c.k);
            e.n += c.n;
        }
        for (node, k) in &p.short {
            *all.short.entry(*node).or_default() += k;
        }
        for b in 0..n {
            all.alloc[b] += p.alloc[b];
            all.freed[b] += p.freed[b];
            all.live_max[b] += p.live_max[b];
        }
        if let Some(at_peak) = own.peak_live() {
            for (&(stack, _), t) in sorted(&at_peak) {
                *peak_k.entry(tree.node(profile, base + stack)).or_default() += t.k;
            }
        }
        let root = (!own.stacks.is_empty()).then(|| {
            let leaf = tree.node(profile, base);
            tree.top(leaf)
        });
        if i > 0 {
            procs.raw(",");
        }
        procs.raw("{");
        procs.key("exe");
        procs.str(&pr.executable);
        procs.key("cmd");
        procs.strs(own.header.cmdline.iter().map(String::as_str));
        procs.key("pid");
        procs.num(f64::from(pr.pid));
        procs.key("ppid");
        procs.num(f64::from(pr.ppid));
        procs.key("file");
        procs.str(&pr.file.display().to_string());
        procs.key("node");
        procs.num(root.map_or(-1.0, f64::from));
        procs.key("samples");
        procs.num(pr.samples as f64);
        procs.key("allocated");
        procs.num(pr.allocated);
        procs.key("peak");
        procs.nums([own.peak.bytes, own.peak.time_ns.saturating_add(offset) as f64]);
        procs.key("max");
        procs.nums(p.live_max.iter().copied());
        procs.key("alloc");
        procs.nums(p.alloc.iter().copied());
        procs.raw("}");
        base += own.stacks.len() as StackId;
    }
    procs.raw("]");
    let mut gc: std::collections::BTreeMap<u32, f64> = Default::default();
    for t in stack_totals(profile, View::Gc) {
        *gc.entry(tree.node(profile, t.stack)).or_default() += t.bytes;
    }
    let mut json = data_json(profile, &all, &tree, &peak_k, &gc);
    json.pop();
    json.push_str(",\"procs\":");
    json.push_str(&procs.0);
    json.push('}');
    let exe = profile.header.executable.rsplit('/').next().unwrap_or_default();
    let title = format!("memprof: {exe} and {} other processes", processes.len() - 1);
    write_page(&title, &json, out)
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

fn data_json(
    profile: &Profile,
    p: &Pass,
    tree: &Tree,
    peak: &std::collections::BTreeMap<u32, u64>,
    gc: &std::collections::BTreeMap<u32, f64>,
) -> String {
    let h = &profile.header;
    let mut j = Json(String::with_capacity(1 << 20));
    j.raw("{");
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
    let _ = write!(j.0, "{}", stats::Z95);
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
    j.key("peak");
    j.nums([profile.peak.bytes, profile.peak.time_ns as f64]);
    j.key("short_ns");
    j.num(DEFAULT_SHORT_LIVED_NS as f64);
    // The summary's first fact: how it sampled and what it lost (`report::sampling_summary`),
    // marked as a warning when the numbers lack something.
    j.key("sampling");
    j.str(&sampling_summary(profile));
    j.key("whole");
    j.raw(if profile.lost.nothing_missing() { "true" } else { "false" });
    j.key("warnings");
    let w = warnings(profile);
    j.strs(w.iter().map(String::as_str));
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
    j.key("gcc");
    j.ints(profile.gc_cycles.iter().flat_map(|c| [c.start_ns, c.end_ns]));
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
    j.raw("}");
    j.0
}

/// A recording with the event times of `events`, for the tests.
#[cfg(test)]
fn write_events_file(meta: &Profile, events: &[Event], path: &Path) -> Profile {
    let bytes = crate::profile::format::write_events(Vec::new(), meta, events).unwrap();
    std::fs::write(path, bytes).unwrap();
    Profile::read_file(path).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let p = pass(&profile, &path, &mut tree).unwrap();
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
        write_html(&profile, &path, &mut html).unwrap();
        let html = String::from_utf8(html).unwrap();
        assert!(html.contains("<script type=\"application/json\" id=\"data\">{\"exe\":"));
        assert!(html.contains(r#""b\u003c\u0026\u003e\"x\""#), "names are escaped");
        assert!(!html.contains("{{"), "every placeholder is filled");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
