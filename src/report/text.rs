//! Text for a terminal: [`printable`], how every string that a profile or a program chose
//! (its path and arguments, module paths, function and site names, span labels, source
//! file names, the files named in notes and warnings) is written by every report that a
//! terminal shows (`record`'s summary, `report`'s tables, `diff`'s table, the notes).
//!
//! A terminal acts on some characters instead of showing them: an escape sequence can
//! recolour, move the cursor, retitle the window or clear the screen; a carriage return or
//! a newline can overwrite or forge a line; a bidirectional override reorders what follows
//! it. Such a character in a name is written as a visible escape, so a name reads as what
//! it is and cannot change the text around it. Machine formats keep their own rules (folded
//! stacks: [`super::folded::folded_frame`]; the HTML page: its JSON strings).

use std::borrow::Cow;
use std::ffi::OsStr;

/// True for a character a terminal would act on: the C0 and C1 controls and DEL (which
/// include ESC, BEL, CR, LF and TAB), the bidirectional marks, embeddings, overrides and
/// isolates, and the line and paragraph separators.
fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with what a terminal would act on escaped: a newline, a tab and a carriage return as
/// `\n`, `\t` and `\r`, the other controls (ESC, BEL, DEL, the C1 controls) and the
/// bidirectional controls as `\u{1b}`, `\u{202e}`; a backslash stays as it is. Borrowed
/// when there is nothing to escape.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(acts_on_terminal) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if acts_on_terminal(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`printable`] of a path or an OS string (bytes that are not UTF-8 shown as U+FFFD).
pub fn printable_os(s: impl AsRef<OsStr>) -> String {
    printable(&s.as_ref().to_string_lossy()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(printable("./prog"), "./prog");
        assert!(matches!(printable("é … ;"), Cow::Borrowed(_)));
        assert_eq!(printable("a\nb\x1b[31m\u{202e}c\\"), "a\\nb\\u{1b}[31m\\u{202e}c\\");
        assert_eq!(printable("é\u{7f}\u{9b}\u{7}\r\t"), "é\\u{7f}\\u{9b}\\u{7}\\r\\t");
        assert_eq!(printable("\u{2066}x\u{2069}\u{200f}"), "\\u{2066}x\\u{2069}\\u{200f}");
        assert_eq!(printable_os(std::path::Path::new("/tmp/p\x1b")), "/tmp/p\\u{1b}");
    }
}
