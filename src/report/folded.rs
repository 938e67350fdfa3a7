//! Folded ("collapsed") stacks: one line per distinct stack, `root;…;leaf bytes`, the input
//! format of flamegraph tools (inferno, Brendan Gregg's `flamegraph.pl`, speedscope).
//!
//! Stacks are named with [`Profile::frame_names`]; stacks whose names are equal are merged,
//! the value is the estimated bytes rounded to an integer, lines with a value of 0 are left
//! out and lines are sorted. A `;` inside a function name (Rust's `[u8; 8]`) would split the
//! frame, so it is written as `,`; line breaks and other control characters become spaces.

use std::collections::BTreeMap;
use std::io::Write;

use super::export::{ExportOptions, Exporter};
use super::view::{stack_totals, GroupBy, View};
use crate::error::Error;
use crate::profile::{Profile, StackId};

/// `--collapsed`: the folded stacks of the chosen view ([`write_collapsed_grouped`]);
/// `memprof diff`'s are the differential ones.
#[derive(Clone, Copy, Debug, Default)]
pub struct FoldedExporter;

impl Exporter for FoldedExporter {
    fn name(&self) -> &'static str {
        "collapsed"
    }
    fn value_name(&self) -> &'static str {
        "OUT"
    }
    fn help(&self) -> &'static str {
        "Write folded stacks (`root;…;leaf bytes`, sorted) of the chosen view"
    }
    fn what(&self, options: &ExportOptions<'_>) -> String {
        format!("{} folded stacks", options.view.name())
    }
    fn write(
        &self,
        profile: &Profile,
        options: &ExportOptions<'_>,
        w: &mut dyn Write,
    ) -> Result<(), Error> {
        write_collapsed_grouped(w, profile, options.view, options.group_by)
    }
}

/// A frame name made safe for a folded line.
pub fn folded_frame(name: &str) -> String {
    if name.is_empty() {
        return "[unnamed]".to_owned();
    }
    name.chars()
        .map(|c| {
            if c == ';' {
                ','
            } else if c.is_control() {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// The `root;…;leaf` key of a stack.
pub(crate) fn folded_stack(profile: &Profile, stack: StackId) -> String {
    let mut out = String::new();
    for (i, name) in profile.frame_names_ref(stack).iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        if !name.is_empty() && !name.chars().any(|c| c == ';' || c.is_control()) {
            out.push_str(name);
        } else {
            out.push_str(&folded_frame(name));
        }
    }
    out
}

/// Folded stacks of `profile` under `view`, merged by name and sorted.
pub fn collapsed(profile: &Profile, view: View) -> Vec<String> {
    collapsed_grouped(profile, view, GroupBy::Stack)
}

/// [`collapsed`], grouped: with [`GroupBy::Span`] each stack's span path comes first, one
/// root frame per span (`server;handle{endpoint=/upload};main;…;leaf bytes`).
pub fn collapsed_grouped(profile: &Profile, view: View, group: GroupBy) -> Vec<String> {
    let mut merged: BTreeMap<String, f64> = BTreeMap::new();
    for t in stack_totals(profile, view) {
        let mut key = String::new();
        if group == GroupBy::Span {
            for span in GroupBy::span(profile, t.stack).split(';') {
                key.push_str(&folded_frame(span));
                key.push(';');
            }
        }
        key.push_str(&folded_stack(profile, t.stack));
        *merged.entry(key).or_default() += t.bytes;
    }
    let mut lines: Vec<String> = merged
        .into_iter()
        .filter_map(|(stack, bytes)| {
            let v = bytes.round();
            (v >= 1.0).then(|| format!("{stack} {v:.0}"))
        })
        .collect();
    // Sorted as lines (not only by stack), which is what flamegraph tools expect.
    lines.sort_unstable();
    lines
}

/// Writes [`collapsed`] lines, one per line.
pub fn write_collapsed(w: impl Write, profile: &Profile, view: View) -> Result<(), Error> {
    write_collapsed_grouped(w, profile, view, GroupBy::Stack)
}

/// Writes [`collapsed_grouped`] lines, one per line.
pub fn write_collapsed_grouped(
    mut w: impl Write,
    profile: &Profile,
    view: View,
    group: GroupBy,
) -> Result<(), Error> {
    for line in collapsed_grouped(profile, view, group) {
        writeln!(w, "{line}").map_err(|e| Error::io("writing folded stacks", e))?;
    }
    w.flush().map_err(|e| Error::io("writing folded stacks", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_sanitized() {
        assert_eq!(folded_frame("<[u8; 8] as Foo>::bar"), "<[u8, 8] as Foo>::bar");
        assert_eq!(folded_frame("a\nb"), "a b");
        assert_eq!(folded_frame(""), "[unnamed]");
    }
}
