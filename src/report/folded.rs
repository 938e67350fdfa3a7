//! Folded ("collapsed") stacks: one line per distinct stack, `root;…;leaf bytes`, the input
//! format of flamegraph tools (inferno, Brendan Gregg's `flamegraph.pl`, speedscope).
//!
//! Stacks are named with [`Profile::frame_names`]; stacks whose names are equal are merged,
//! the value is the estimated bytes rounded to an integer, lines with a value of 0 are left
//! out and lines are sorted. A `;` inside a function name (Rust's `[u8; 8]`) would split the
//! frame, so it is written as `,`; line breaks and other control characters become spaces.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;

use super::export::{ExportOptions, Exporter};
use super::view::{stack_totals, GroupBy, View};
use crate::error::Error;
use crate::profile::{Profile, StackId};
use crate::sys::hash::SeededHash;

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

/// `name` as a folded line has it ([`folded_frame`]), made again only when it must change.
fn folded_name(name: Cow<'_, str>) -> Cow<'_, str> {
    match safe_as_is(&name) {
        true => name,
        false => Cow::Owned(folded_frame(&name)),
    }
}

/// The frame names of a stack's folded line, root first: its span path's first under
/// [`GroupBy::Span`], then its frames ([`merged_lines`] joins them with `;`).
pub(crate) fn folded_names(profile: &Profile, stack: StackId, group: GroupBy) -> Vec<Cow<'_, str>> {
    let mut names = Vec::new();
    if group == GroupBy::Span {
        let spans = GroupBy::span(profile, stack).split(';');
        names.extend(spans.map(|span| Cow::Owned(folded_frame(span))));
    }
    names.extend(profile.frame_names_ref(stack).into_iter().map(folded_name));
    names
}

/// True when `name` goes into a folded line as it is: not empty, no `;`, no control
/// character. Printable ASCII is told byte by byte; any other byte sends the name to the
/// check by character (a C1 control is two bytes of UTF-8).
fn safe_as_is(name: &str) -> bool {
    // Every byte looked at, with no early exit, so that the compiler makes it a vector
    // loop (names are most of a folded line's bytes).
    let printable =
        name.bytes().fold(true, |ok, b| ok & (b.wrapping_sub(0x20) < 0x5f) & (b != b';'));
    !name.is_empty() && (printable || !name.chars().any(|c| c == ';' || c.is_control()))
}

/// Folded stacks of `profile` under `view`, merged by name and sorted.
pub fn collapsed(profile: &Profile, view: View) -> Vec<String> {
    collapsed_grouped(profile, view, GroupBy::Stack)
}

/// [`collapsed`], grouped: with [`GroupBy::Span`] each stack's span path comes first, one
/// root frame per span (`server;handle{endpoint=/upload};main;…;leaf bytes`).
pub fn collapsed_grouped(profile: &Profile, view: View, group: GroupBy) -> Vec<String> {
    let mut lines = merged_lines(profile, view, group);
    // Sorted as lines (not only by stack), which is what flamegraph tools expect.
    lines.sort_unstable();
    lines
}

/// [`collapsed_grouped`]'s lines in no order: for inferno, which sorts them itself.
pub(crate) fn merged_lines(profile: &Profile, view: View, group: GroupBy) -> Vec<String> {
    // Merged in a hash map: an ordered map compared whole stacks, which share long
    // prefixes (an interpreter's loop), at every step of every insertion.
    let mut merged: HashMap<String, f64, SeededHash> = HashMap::default();
    for t in stack_totals(profile, view) {
        let key = folded_names(profile, t.stack, group).join(";");
        *merged.entry(key).or_default() += t.bytes;
    }
    merged
        .into_iter()
        .filter_map(|(mut line, bytes)| {
            let v = bytes.round();
            (v >= 1.0).then(|| {
                line.push_str(&format!(" {v:.0}"));
                line
            })
        })
        .collect()
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

    /// The byte scan answers as the check by character does, for names of every kind: ASCII,
    /// `;`, C0 and C1 controls, DEL, other UTF-8, empty.
    #[test]
    fn names_safe_as_is_are_those_the_characters_allow() {
        let by_chars = |n: &str| !n.is_empty() && !n.chars().any(|c| c == ';' || c.is_control());
        let mut names: Vec<String> = [
            "",
            "main",
            "a;b",
            "tab\there",
            "del\u{7f}",
            "c1\u{85}x",
            "é",
            "<[u8; 8] as F>::f",
            "名前",
            "\u{9f}",
            "\u{a0}",
            " ",
            "~",
        ]
        .map(str::to_owned)
        .to_vec();
        // Every character below U+0100 alone and between letters.
        names.extend((0u32..0x100).filter_map(char::from_u32).map(|c| format!("a{c}b")));
        for n in &names {
            assert_eq!(safe_as_is(n), by_chars(n), "{n:?}");
        }
    }

    #[test]
    fn frames_are_sanitized() {
        assert_eq!(folded_frame("<[u8; 8] as Foo>::bar"), "<[u8, 8] as Foo>::bar");
        assert_eq!(folded_frame("a\nb"), "a b");
        assert_eq!(folded_frame(""), "[unnamed]");
    }
}
