//! pprof profiles (gzip-compressed protobuf), readable by `go tool pprof`, pprof's web UI,
//! Speedscope, Pyroscope and friends.
//!
//! The profile follows Go's heap-profile conventions, so that viewers treat it as one:
//! - sample types `alloc_objects/count`, `alloc_space/bytes`, `inuse_objects/count`,
//!   `inuse_space/bytes`, and for [`View::Gc`] a fifth, `gc_mark/nanoseconds` (the estimated
//!   mark time of [`View::Gc`], carried by each stack's first sample); the default sample type
//!   follows [`PprofOptions::default_view`]: `alloc_space` for alloc and short-lived,
//!   `inuse_space` for live and peak (as in Go), `gc_mark` for gc;
//! - period type `space/bytes`, period = the sampling interval rounded to bytes;
//! - values are already scaled estimates (like Go's), rounded to integers: every sample
//!   carries alloc values, and inuse values when its block was never freed;
//! - samples with the same stack and allocation size are merged and carry Go's numeric
//!   label `bytes` = the allocation size;
//! - a sample taken under tracing spans (the `tracing` feature's `SpanLayer`, see
//!   [`crate::profile::Stack::label`]) carries the string label `span` = the span path
//!   (`server;handle{endpoint=/upload}`): `go tool pprof -tags` lists the paths and
//!   `-tagfocus=span=…` keeps one (a stack under two paths is two samples).
//!
//! Tables: the string table starts with `""` and is insertion-ordered; functions are unique
//! by (name, file); a location is one return address with its inline chain as `line`
//! entries, innermost first (the last entry is the caller the others were inlined into);
//! mappings come from the profile's modules. Locations and functions are built while
//! walking stacks in id order, so the output is deterministic. Stacks are trimmed of
//! profiler frames like every other report; a stack cut at the configured depth gets a
//! synthetic `[truncated]` root location, and a stack with no frames left a single
//! `[unknown stack]` one, both at address 0.
//!
//! Each sample's leaf is its allocation site ([`crate::profile::site`]): the plumbing frames
//! below it (the runtimes', the standard libraries', known wrappers', the user's
//! `--site-skip` ones) are left out of its locations, so that flat values land on the site
//! in `go tool pprof -top` and every other viewer. Many of those frames are told apart by
//! their module or source file, which no regular expression over names can say; what can be
//! said by name is also in `drop_frames` ([`crate::profile::site::drop_frames_pattern`]),
//! for tools that merge memprof's profiles with others.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use pprof::protos::{self, Message};

use super::export::{ExportOptions, Exporter};
use super::view::{sorted, stack_totals, View};
use crate::error::Error;
use crate::profile::symbolize::{TRUNCATED, UNKNOWN_STACK};
use crate::profile::{Profile, StackId};
use crate::session::recorder::Recorder;

/// `--pprof`: the gzip-compressed pprof profile ([`write_pprof`]); `memprof diff`'s is
/// the profile of the difference.
#[derive(Clone, Copy, Debug, Default)]
pub struct PprofExporter;

impl Exporter for PprofExporter {
    fn name(&self) -> &'static str {
        "pprof"
    }
    fn value_name(&self) -> &'static str {
        "OUT.pb.gz"
    }
    fn help(&self) -> &'static str {
        "Write a gzip-compressed pprof profile (Go heap-profile sample types)"
    }
    fn what(&self, _: &ExportOptions<'_>) -> String {
        "pprof profile".into()
    }
    fn write(
        &self,
        profile: &Profile,
        options: &ExportOptions<'_>,
        w: &mut dyn Write,
    ) -> Result<(), Error> {
        // The default sample type follows the view; the in-use sample types hold the live
        // set at the peak for the peak view.
        let options = PprofOptions { default_view: options.view, ..Default::default() };
        write_pprof(profile, &options, w)
    }
}

/// Options of [`pprof()`] and [`write_pprof`].
#[derive(Clone, Debug)]
pub struct PprofOptions {
    /// The view viewers open first: [`View::Live`] → `inuse_space` (Go's default),
    /// [`View::Alloc`] → `alloc_space`.
    pub default_view: View,
    /// Attach Go's numeric `bytes` label (the allocation size) to every sample.
    pub size_labels: bool,
}

impl Default for PprofOptions {
    fn default() -> Self {
        PprofOptions { default_view: View::Live, size_labels: true }
    }
}

/// Interns strings into an insertion-ordered table whose entry 0 is `""`.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings { table: Vec::new(), index: HashMap::new() };
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// Builds the location and function tables.
struct Tables<'p> {
    profile: &'p Profile,
    strings: Strings,
    functions: Vec<protos::Function>,
    function_ids: HashMap<(String, Option<String>), u64>,
    locations: Vec<protos::Location>,
    location_ids: HashMap<(u64, Vec<(u64, i64)>), u64>,
    mappings: Vec<protos::Mapping>,
}

impl<'p> Tables<'p> {
    /// Empty tables for `profile`'s stacks, the string table holding only its `""`.
    fn new(profile: &'p Profile) -> Self {
        Tables {
            profile,
            strings: Strings::new(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            mappings: Vec::new(),
        }
    }

    /// One mapping per module of the profile, with its build id, so that viewers and
    /// symbolization services can find the code.
    fn add_mappings(&mut self) {
        let profile = self.profile;
        let symbolized = !profile.symbols.is_empty();
        for (i, m) in profile.modules.iter().enumerate() {
            let filename = self.strings.get(&m.path);
            // pprof's build id is a string: the GNU build id in hex, as `go tool pprof` and the
            // symbolization services that read pprof expect it (empty when unknown).
            let hex: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
            let build_id = self.strings.get(&hex);
            self.mappings.push(protos::Mapping {
                id: i as u64 + 1,
                memory_start: m.start,
                memory_limit: m.end,
                file_offset: 0,
                filename,
                build_id,
                has_functions: true,
                has_filenames: symbolized,
                has_line_numbers: symbolized,
                has_inline_frames: symbolized,
            });
        }
    }

    fn function(&mut self, name: &str, file: Option<&str>) -> u64 {
        let key = (name.to_owned(), file.map(str::to_owned));
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let name = self.strings.get(name);
        let filename = file.map_or(0, |f| self.strings.get(f));
        self.functions.push(protos::Function {
            id,
            name,
            system_name: name,
            filename,
            start_line: 0,
        });
        self.function_ids.insert(key, id);
        id
    }

    fn location(&mut self, addr: u64, lines: Vec<(u64, i64)>) -> u64 {
        let key = (addr, lines);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        let mapping_id = if addr == 0 {
            0
        } else {
            let probe = addr.saturating_sub(1);
            self.profile
                .modules
                .iter()
                .position(|m| m.start <= probe && probe < m.end)
                .map_or(0, |i| i as u64 + 1)
        };
        self.locations.push(protos::Location {
            id,
            mapping_id,
            address: addr,
            line: key
                .1
                .iter()
                .map(|&(function_id, line)| protos::Line { function_id, line })
                .collect(),
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    /// Location ids of a stack, innermost first, from its allocation site on (the site
    /// named as reports name it).
    fn stack(&mut self, stack: StackId) -> Vec<u64> {
        let mut frames = self.profile.frame_locations(stack);
        if let Some(site) = self.profile.site(stack) {
            frames.drain(..site.index);
            if let Some(leaf) = frames.first_mut() {
                leaf.function = site.name;
            }
        }
        let mut ids = Vec::new();
        let mut i = 0;
        while i < frames.len() {
            let addr = frames[i].addr;
            let mut lines = Vec::new();
            while i < frames.len() && frames[i].addr == addr {
                let f = &frames[i];
                let fid = self.function(&f.function, f.file.as_deref());
                lines.push((fid, f.line.map_or(0, i64::from)));
                i += 1;
                if !f.inlined {
                    break;
                }
            }
            ids.push(self.location(addr, lines));
        }
        if ids.is_empty() {
            let fid = self.function(UNKNOWN_STACK, None);
            ids.push(self.location(0, vec![(fid, 0)]));
        }
        if self.profile.stacks.get(stack as usize).is_some_and(|s| s.truncated) {
            let fid = self.function(TRUNCATED, None);
            ids.push(self.location(0, vec![(fid, 0)]));
        }
        ids
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Builds the pprof profile of `profile`. The string table is insertion-ordered, so the
/// stages below run in the order that fills it (sample types, mappings, samples, comments).
pub fn pprof(profile: &Profile, options: &PprofOptions) -> protos::Profile {
    let mut t = Tables::new(profile);
    let types = SampleTypes::new(&mut t.strings, options.default_view);
    t.add_mappings();
    let merged = merged_values(profile, options.default_view);
    let width = types.sample_type.len();
    let samples = samples(&mut t, merged, width, options.size_labels.then_some(types.bytes_key));
    let comment = comments(profile).iter().map(|c| t.strings.get(c)).collect();
    let drop_frames = t.strings.get(&crate::profile::site::drop_frames_pattern(&profile.site_skip));
    let h = &profile.header;
    protos::Profile {
        sample_type: types.sample_type,
        sample: samples,
        mapping: t.mappings,
        location: t.locations,
        function: t.functions,
        string_table: t.strings.table,
        drop_frames,
        keep_frames: 0,
        time_nanos: clamp_i64(h.start_unix_ns),
        duration_nanos: clamp_i64(profile.end_ns),
        period_type: Some(types.period_type),
        period: h.interval.round().max(1.0) as i64,
        comment,
        default_sample_type: types.default_sample_type,
    }
}

/// The sample types of Go's heap profiles (and `gc_mark` for the GC view), and which one
/// viewers open first: what makes viewers treat the profile as a heap profile.
struct SampleTypes {
    sample_type: Vec<protos::ValueType>,
    period_type: protos::ValueType,
    default_sample_type: i64,
    /// The string of Go's numeric label of the allocation size.
    bytes_key: i64,
}

impl SampleTypes {
    /// The types of a profile whose viewers should open `view` first. Their strings are
    /// the table's first after `""`, as in Go's own heap profiles.
    fn new(strings: &mut Strings, view: View) -> SampleTypes {
        let mut value_type = |ty: &str, unit: &str| protos::ValueType {
            ty: strings.get(ty),
            unit: strings.get(unit),
        };
        let mut sample_type = vec![
            value_type("alloc_objects", "count"),
            value_type("alloc_space", "bytes"),
            value_type("inuse_objects", "count"),
            value_type("inuse_space", "bytes"),
        ];
        if view == View::Gc {
            sample_type.push(value_type("gc_mark", "nanoseconds"));
        }
        let period_type = value_type("space", "bytes");
        let default_sample_type = match view {
            View::Alloc | View::ShortLived => strings.get("alloc_space"),
            View::Live | View::Peak => strings.get("inuse_space"),
            View::Gc => strings.get("gc_mark"),
        };
        let bytes_key = strings.get("bytes");
        SampleTypes { sample_type, period_type, default_sample_type, bytes_key }
    }
}

/// The sample values by (stack, size): [alloc objects, alloc bytes, inuse objects, inuse
/// bytes, GC mark ns]. Merged so that a stack allocating one size many times is one sample,
/// as in Go's profiles. The short-lived view's profile holds the short-lived allocations
/// (none in use); the peak view's in-use values are the live set at the peak.
fn merged_values(profile: &Profile, view: View) -> BTreeMap<(StackId, u64), [f64; 5]> {
    let other;
    let (allocated, inuse) = match view {
        View::ShortLived => {
            other = HashMap::default();
            (&profile.lifetimes.short, &other)
        }
        View::Peak => {
            other = profile.peak_live().unwrap_or_default();
            (&profile.allocated, &other)
        }
        _ => (&profile.allocated, &profile.live),
    };
    let mut merged: BTreeMap<(StackId, u64), [f64; 5]> = BTreeMap::new();
    for (&(stack, size), t) in sorted(allocated) {
        let v = merged.entry((stack, size)).or_default();
        v[0] += profile.estimated_objects(t.k, size);
        v[1] += profile.estimated_bytes(t.k);
    }
    // In use: at the end, or at the peak for the peak view.
    for (&(stack, size), t) in sorted(inuse) {
        let v = merged.entry((stack, size)).or_default();
        v[2] += profile.estimated_objects(t.k, size);
        v[3] += profile.estimated_bytes(t.k);
    }
    if view == View::Gc {
        // Mark time is known per stack, not per size: the stack's first sample carries it.
        for st in stack_totals(profile, View::Gc) {
            let first = merged.range((st.stack, 0)..=(st.stack, u64::MAX)).next().map(|(k, _)| *k);
            merged.entry(first.unwrap_or((st.stack, 0))).or_default()[4] += st.bytes;
        }
    }
    merged
}

/// The samples of `merged` (their first `width` values, rounded; all-zero ones left out),
/// each with its stack's locations, the size label under `bytes_key` when given, and its
/// span path as a `span` label.
fn samples(
    t: &mut Tables<'_>,
    merged: BTreeMap<(StackId, u64), [f64; 5]>,
    width: usize,
    bytes_key: Option<i64>,
) -> Vec<protos::Sample> {
    let profile = t.profile;
    let mut span_key: Option<i64> = None;
    let mut stack_locations: HashMap<StackId, Vec<u64>> = HashMap::new();
    let mut samples = Vec::with_capacity(merged.len());
    for ((stack, size), v) in merged {
        let value: Vec<i64> = v[..width].iter().map(|x| x.round() as i64).collect();
        if value.iter().all(|&x| x == 0) {
            continue;
        }
        let location_id = stack_locations.entry(stack).or_insert_with(|| t.stack(stack)).clone();
        let mut label = match bytes_key {
            Some(key) => vec![protos::Label { key, str: 0, num: clamp_i64(size), num_unit: 0 }],
            None => Vec::new(),
        };
        if let Some(span) = profile.stack_label(stack) {
            // The key's string goes in at the first labelled sample only: a profile without
            // spans keeps its table (and bytes) as before.
            let key = *span_key.get_or_insert_with(|| t.strings.get("span"));
            label.push(protos::Label { key, str: t.strings.get(span), num: 0, num_unit: 0 });
        }
        samples.push(protos::Sample { location_id, value, label });
    }
    samples
}

/// The profile's comments (`go tool pprof -comments`): what was recorded and how, and what
/// qualifies the numbers, as the top table's header says it.
fn comments(profile: &Profile) -> Vec<String> {
    let h = &profile.header;
    let mut comments = vec![format!("memprof recording of {}", h.executable)];
    if !h.cmdline.is_empty() {
        comments.push(format!("command: {}", h.cmdline.join(" ")));
    }
    if h.attached {
        comments.push(
            "attached to a running process: blocks allocated before it are not in \
             this profile"
                .to_owned(),
        );
    }
    comments.push(format!("mean sampling interval: {} bytes", h.interval));
    match profile.stopped {
        _ if profile.complete => {}
        Some(why) => comments.push(format!("recording ended where {}", why.describe())),
        None => comments.push("incomplete recording (no end record)".to_owned()),
    }
    comments.extend(super::resident::resident_line(profile));
    comments.extend(super::resident::gap_lines(profile));
    comments.extend(super::resident::ended_line(profile));
    comments.extend(profile.notes.iter().map(|n| format!("note: {n}")));
    comments.extend(profile.warnings.iter().map(|w| format!("warning: {w}")));
    if !profile.lost.is_none() {
        comments.push(format!("lost: {}", profile.lost.describe()));
    }
    comments
}

/// Writes the pprof profile of `profile`, gzip-compressed (what `go tool pprof` reads).
pub fn write_pprof(profile: &Profile, options: &PprofOptions, w: impl Write) -> Result<(), Error> {
    let bytes = pprof(profile, options).encode_to_vec();
    let io = |e| Error::io("writing pprof profile", e);
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&bytes).map_err(io)?;
    gz.finish().map_err(io)?.flush().map_err(io)
}

// The running session's pprof lives with the format, not with the session: the session
// layer knows nothing of reports.
impl crate::session::Session<Recorder> {
    /// The running session's profile as a gzip-compressed pprof profile (Go's heap-profile
    /// sample types; the default sample type `inuse_space` for [`View::Live`](View::Live),
    /// `alloc_space` for [`View::Alloc`](View::Alloc)), taken without
    /// stopping the session: see [`live_profile`](crate::session::live_profile), whose copy of the profile this skips.
    pub fn pprof(&self, view: View) -> Result<Vec<u8>, Error> {
        let options = PprofOptions { default_view: view, ..Default::default() };
        crate::session::with_live_profile(|p| {
            let mut out = Vec::new();
            write_pprof(p, &options, &mut out).map(|()| out)
        })?
    }
}
