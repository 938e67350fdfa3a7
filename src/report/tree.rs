//! Reports of a process tree (`memprof record --follow-forks`): the table of its processes,
//! one row each, printed above the merged top table; and [`printable`], how every name a
//! program chose (its path, its arguments, the programs it ran) is printed on a terminal.

/// `s` with what a terminal would act on escaped: control characters (a newline, an escape
/// sequence) as `\n`, `\t`, `\r` or `\u{1b}`, and the bidirectional overrides and isolates
/// (which reorder what follows them) as `\u{202e}`; a backslash stays as it is.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    let bad =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !s.chars().any(bad) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if bad(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(printable("./prog"), "./prog");
        assert_eq!(printable("a\nb\x1b[31m\u{202e}c\\"), "a\\nb\\u{1b}[31m\\u{202e}c\\");
        assert_eq!(printable("é\u{7f}"), "é\\u{7f}");
    }
}
