//! A pprof profile of the difference, as `go tool pprof -diff_base` builds one.

use std::collections::HashMap;
use std::io::Write;

use pprof::protos::{self, Message};

use crate::error::Error;
use crate::profile::Profile;
use crate::report::export::DiffExporter;
use crate::report::pprof::{pprof, PprofOptions};
use crate::report::view::View;

/// `memprof diff --pprof`: [`write_diff_pprof`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffPprofExporter;

impl DiffExporter for DiffPprofExporter {
    fn help(&self) -> &'static str {
        "Write a gzip-compressed pprof profile of NEW − BASE (as `go tool pprof -diff_base` \
         builds one: BASE's samples negated; Go heap-profile sample types)"
    }
    fn what(&self, _: View) -> String {
        "pprof profile of NEW − BASE".into()
    }
    fn write(
        &self,
        base: &Profile,
        new: &Profile,
        view: View,
        w: &mut dyn Write,
    ) -> Result<(), Error> {
        write_diff_pprof(base, new, view, w)
    }
}

/// Copies the tables a sample of `from` refers to into `into`, renumbered.
struct Merger<'a> {
    into: &'a mut protos::Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64), u64>,
    mapping: HashMap<u64, u64>,
    location: HashMap<u64, u64>,
}

impl Merger<'_> {
    /// The index of `s` in the merged string table, added if new.
    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&j) = self.strings.get(s) {
            return j;
        }
        let j = self.into.string_table.len() as i64;
        self.into.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), j);
        j
    }

    /// String `i` of `from`, in the merged table.
    fn string(&mut self, from: &protos::Profile, i: i64) -> i64 {
        match usize::try_from(i).ok().and_then(|i| from.string_table.get(i)) {
            Some(s) => self.intern(s),
            None => 0,
        }
    }

    fn function(&mut self, from: &protos::Profile, id: u64) -> u64 {
        let Some(f) = from.function.iter().find(|f| f.id == id) else { return 0 };
        let key = (self.string(from, f.name), self.string(from, f.filename));
        if let Some(&j) = self.functions.get(&key) {
            return j;
        }
        let system_name = self.string(from, f.system_name);
        let j = self.into.function.len() as u64 + 1;
        self.into.function.push(protos::Function {
            id: j,
            name: key.0,
            system_name,
            filename: key.1,
            start_line: f.start_line,
        });
        self.functions.insert(key, j);
        j
    }

    fn mapping(&mut self, from: &protos::Profile, id: u64) -> u64 {
        if id == 0 {
            return 0;
        }
        if let Some(&j) = self.mapping.get(&id) {
            return j;
        }
        let Some(m) = from.mapping.iter().find(|m| m.id == id) else { return 0 };
        let j = self.into.mapping.len() as u64 + 1;
        let mut m = m.clone();
        m.id = j;
        m.filename = self.string(from, m.filename);
        m.build_id = self.string(from, m.build_id);
        self.into.mapping.push(m);
        self.mapping.insert(id, j);
        j
    }

    fn location(&mut self, from: &protos::Profile, id: u64) -> u64 {
        if let Some(&j) = self.location.get(&id) {
            return j;
        }
        let Some(l) = from.location.iter().find(|l| l.id == id) else { return 0 };
        let mapping_id = self.mapping(from, l.mapping_id);
        let line = l
            .line
            .iter()
            .map(|x| protos::Line { function_id: self.function(from, x.function_id), line: x.line })
            .collect();
        let j = self.into.location.len() as u64 + 1;
        self.into.location.push(protos::Location {
            id: j,
            mapping_id,
            address: l.address,
            line,
            is_folded: l.is_folded,
        });
        self.location.insert(id, j);
        j
    }
}

/// The pprof profile of NEW − BASE, as `go tool pprof -diff_base BASE NEW` builds it: NEW's
/// samples, then BASE's with every value negated and a `pprof::base` label (each side's
/// tables copied, renumbered). The sample types are those of our pprof exporter (Go heap
/// profile: alloc and in-use objects and bytes, estimated); the in-use ones are the live
/// set at the end, or at each recording's peak ([`Profile::peak_live`]) with `view` =
/// [`View::Peak`]. The default sample type follows `view`.
pub fn diff_pprof(base: &Profile, new: &Profile, view: View) -> protos::Profile {
    let options = PprofOptions { default_view: view, ..PprofOptions::default() };
    let mut out = super::pprof::pprof(new, &options);
    let from = super::pprof::pprof(base, &options);
    let strings = out.string_table.iter().enumerate().map(|(i, s)| (s.clone(), i as i64));
    let functions = out.function.iter().map(|f| ((f.name, f.filename), f.id)).collect();
    let strings = strings.collect();
    let mut m = Merger {
        into: &mut out,
        strings,
        functions,
        mapping: HashMap::new(),
        location: HashMap::new(),
    };
    let (key, yes) = (m.intern("pprof::base"), m.intern("true"));
    let mut samples = Vec::with_capacity(from.sample.len());
    for s in &from.sample {
        let location_id = s.location_id.iter().map(|&l| m.location(&from, l)).collect();
        let mut label: Vec<protos::Label> = s
            .label
            .iter()
            .map(|l| protos::Label {
                key: m.string(&from, l.key),
                str: m.string(&from, l.str),
                num: l.num,
                num_unit: m.string(&from, l.num_unit),
            })
            .collect();
        label.push(protos::Label { key, str: yes, num: 0, num_unit: 0 });
        let value = s.value.iter().map(|v| -v).collect();
        samples.push(protos::Sample { location_id, value, label });
    }
    let mut comments = vec![format!(
        "memprof diff: NEW − BASE; base: {} (interval {} bytes); new: {} (interval {} bytes); \
         BASE's samples have negated values and the label pprof::base",
        base.header.executable, base.header.interval, new.header.executable, new.header.interval
    )];
    comments.extend(base.warnings.iter().map(|w| format!("base: warning: {w}")));
    let comments: Vec<i64> = comments.iter().map(|c| m.intern(c)).collect();
    out.sample.extend(samples);
    out.comment.extend(comments);
    out
}

/// Writes [`diff_pprof`], gzip-compressed.
pub fn write_diff_pprof(
    base: &Profile,
    new: &Profile,
    view: View,
    w: impl Write,
) -> Result<(), Error> {
    let bytes = diff_pprof(base, new, view).encode_to_vec();
    let io = |e| Error::io("writing pprof profile", e);
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&bytes).map_err(io)?;
    gz.finish().map_err(io)?.flush().map_err(io)
}
