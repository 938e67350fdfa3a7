//! Names that a terminal would act on (escape sequences, BEL, CR, newlines, bidirectional
//! overrides) in a real program's file name, arguments, function symbol and source file
//! name: `record`, `report` and `diff` write none of those characters, only their visible
//! escapes, and the names stay recognizable; the folded stacks keep one stack a line.

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, cc, record, scratch};
use std::path::Path;
use std::process::{Command, Output};

/// The program's file name, one argument, its allocating function's symbol and the source
/// file name of its debug build; then each as the terminal text shows it.
const PROGRAM: &str = "prog\x1b[2J\x07\r";
const ARGUMENT: &str = "arg\x1b[1m\r\n";
const SYMBOL: &str = "evil\x1b[31m\x07\r\u{202e}side;x";
const SOURCE: &str = "src\x1b]0;x\x07\r.c";
const PROGRAM_SHOWN: &str = "prog\\u{1b}[2J\\u{7}\\r";
const ARGUMENT_SHOWN: &str = "arg\\u{1b}[1m\\r\\n";
const SYMBOL_SHOWN: &str = "evil\\u{1b}[31m\\u{7}\\r\\u{202e}side;x";
const SOURCE_SHOWN: &str = "src\\u{1b}]0;x\\u{7}\\r.c";

/// Panics when `bytes` (what memprof wrote to a terminal) hold a character the terminal
/// would act on: a control other than the newline ending a line, or a bidirectional
/// control.
fn assert_inert(what: &str, bytes: &[u8]) {
    let s = std::str::from_utf8(bytes).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"));
    let bidi = |c: char| matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    for (i, c) in s.char_indices() {
        assert!(
            c == '\n' || !(c.is_control() || bidi(c)),
            "{what}: raw {c:?} at byte {i}: {:?}",
            s.get(i.saturating_sub(80)..(i + 40).min(s.len())).unwrap_or(&s[i..])
        );
    }
}

fn assert_quiet_terminal(what: &str, out: &Output) {
    assert_inert(&format!("{what} stderr"), &out.stderr);
    assert_inert(&format!("{what} stdout"), &out.stdout);
}

#[test]
fn hostile_names_reach_the_terminal_escaped() {
    let dir = scratch("escaping");
    // Without debug info the site is named by the ELF symbol; with it, by DWARF, with the
    // source file's name in its location.
    let bare = dir.join(PROGRAM);
    cc("hostile_names.c", &bare, &["-O2", "-g0", "-fno-optimize-sibling-calls"]);
    let source = dir.join(SOURCE);
    std::fs::copy(crate::common::fixture_file("c/hostile_names.c"), &source).unwrap();
    let debug = dir.join("debug");
    let args = ["-O2", "-g", "-fno-optimize-sibling-calls", "-o"].map(std::ffi::OsString::from);
    let mut args = args.to_vec();
    args.extend([debug.clone().into(), source.clone().into()]);
    crate::programs::must_compile("cc", &args, None);
    let elf = std::fs::read(&bare).unwrap();
    assert!(elf.windows(SYMBOL.len()).any(|w| w == SYMBOL.as_bytes()), "the raw symbol");

    let prog = Path::new(".").join(PROGRAM);
    let out = record(
        &dir,
        &["--interval", "1", "-o", "base.mprof", "--backtrace", "3"],
        &prog,
        &[ARGUMENT],
    );
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout), "2 args\n", "the program's own output");
    assert_inert("record stderr", &out.stderr);
    let err = text(&out.stderr);
    for shown in [PROGRAM_SHOWN, ARGUMENT_SHOWN, SYMBOL_SHOWN] {
        assert!(err.contains(shown), "{shown} in record's summary: {err}");
    }
    let out = record(
        &dir,
        &["--interval", "1", "-o", "new.mprof", "--backtrace", "3"],
        &debug,
        &[ARGUMENT, "x"],
    );
    assert_ok(&out, 0);
    assert_inert("record (debug) stderr", &out.stderr);
    assert!(text(&out.stderr).contains(SOURCE_SHOWN), "{}", text(&out.stderr));

    for file in ["base.mprof", "new.mprof"] {
        let folded = dir.join(format!("{file}.folded"));
        let out = Command::new(MEMPROF)
            .current_dir(&dir)
            .args(["report", file, "--backtrace", "4", "--collapsed"])
            .arg(&folded)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_quiet_terminal("report", &out);
        let report = text(&out.stdout);
        assert!(report.contains(PROGRAM_SHOWN) || report.contains("debug"), "{report}");
        assert!(report.contains(ARGUMENT_SHOWN), "{report}");
        assert!(report.contains(SYMBOL_SHOWN), "site and backtrace: {report}");
        assert!(report.contains("short-lived"), "the short-lived section: {report}");
        // Folded stacks: no name breaks a line or a frame; the hostile frame is one frame.
        let folded = std::fs::read_to_string(&folded).unwrap();
        assert_eq!(folded.lines().count(), 2, "{folded:?}");
        for line in folded.lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            assert!(n.parse::<u64>().is_ok(), "{line:?}");
            assert!(!stack.chars().any(char::is_control), "{line:?}");
        }
        let hostile = folded.lines().find(|l| l.contains("evil")).unwrap();
        assert!(hostile.contains(";main;") || hostile.contains("main;"), "{hostile:?}");
        assert!(!hostile.contains("side;x"), "{hostile:?}");
    }
    assert!(
        std::fs::read_to_string(dir.join("new.mprof.folded")).unwrap().contains("side,x"),
        "the separator in a name is written as `,`"
    );

    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["diff", "--all", "base.mprof", "new.mprof"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_quiet_terminal("diff", &out);
    let diff = text(&out.stdout);
    assert!(diff.contains(PROGRAM_SHOWN) && diff.contains(ARGUMENT_SHOWN), "{diff}");
    assert!(diff.contains(SYMBOL_SHOWN), "{diff}");
}
