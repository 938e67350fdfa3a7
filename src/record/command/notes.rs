//! The notes `memprof record` prints after its summary about how the program ran: the
//! programs it started that were not profiled, and CPython's allocator.

use crate::report::text::printable;

/// How many distinct programs a note names before "and N more".
const NAMED: usize = 5;

/// Without `--follow-forks`: the programs that `shown` (the program as the user named it)
/// and its forked children executed or spawned (`names`, in order), each once with its
/// count, the first [`NAMED`] of them. `None` when it started none.
pub(crate) fn unfollowed(shown: &str, names: &[String]) -> Option<String> {
    let mut counted: Vec<(&str, usize)> = Vec::new();
    for n in names {
        match counted.iter_mut().find(|(m, _)| m == n) {
            Some((_, c)) => *c += 1,
            None => counted.push((n, 1)),
        }
    }
    if counted.is_empty() {
        return None;
    }
    let mut list: Vec<String> =
        counted.iter().take(NAMED).map(|(n, c)| format!("{} ({c}×)", printable(n))).collect();
    if counted.len() > NAMED {
        list.push(format!("and {} more", counted.len() - NAMED));
    }
    Some(format!(
        "{} ran other programs that were not profiled: {}; --follow-forks profiles them too",
        printable(shown),
        list.join(", ")
    ))
}

/// True when a process whose executable is `exe` and which mapped `modules` (paths) is
/// CPython: the executable is named `python`, `python3`, `python3.12`, `python3.13t`, … or
/// a `libpython*` library is loaded (a program that embeds the interpreter).
pub(crate) fn is_cpython<'a>(exe: &str, mut modules: impl Iterator<Item = &'a str>) -> bool {
    fn base(p: &str) -> &str {
        p.rsplit('/').next().unwrap_or(p)
    }
    let named = base(exe).strip_prefix("python").is_some_and(|v| {
        let v = v.trim_end_matches(['d', 'm', 't', 'u']);
        v.chars().all(|c| c.is_ascii_digit() || c == '.')
    });
    named || modules.any(|m| base(m).starts_with("libpython"))
}

/// The note for a CPython whose Python frames memprof does not read (a version other than
/// 3.11 to 3.13, or a free-threaded build), from its executable's and modules' names.
pub(crate) fn python_frames<'a>(
    exe: &'a str,
    modules: impl Iterator<Item = &'a str>,
) -> Option<String> {
    fn version(path: &str) -> Option<(u8, bool)> {
        let (minor, after) = crate::profile::symbolize::cpython_module(path)?;
        let free_threaded = after.starts_with('t');
        let tail = after.trim_start_matches(['t', 'd']);
        (tail.is_empty() || tail.starts_with(".so")).then_some((minor, free_threaded))
    }
    let (minor, free_threaded) = std::iter::once(exe).chain(modules).find_map(version)?;
    let v = format!("3.{minor}");
    let known = crate::engine::python::layout(minor).is_some();
    match (known, free_threaded) {
        (true, false) => None,
        (_, true) => Some(format!(
            "free-threaded CPython {v}t: its Python frames are not read; the stacks are the \
             interpreter's C functions"
        )),
        (false, false) => Some(format!(
            "CPython {v}: its Python frames are not read (memprof reads 3.11 to 3.13); the \
             stacks are the interpreter's C functions"
        )),
    }
}

/// The note about CPython's allocator, for a run in which CPython ran: what `record` did
/// (`bypassed`: it set `PYTHONMALLOC=malloc`; `kept`: `--keep-pymalloc` was given) and how
/// to have the other behaviour.
pub(crate) fn cpython(bypassed: bool, kept: bool) -> String {
    if bypassed {
        "CPython ran with PYTHONMALLOC=malloc, so that each Python object is seen (its own \
         allocator, pymalloc, hides them in arenas); --keep-pymalloc keeps pymalloc"
            .to_owned()
    } else if kept {
        "CPython kept its own allocator (--keep-pymalloc): pymalloc's objects are seen as the \
         arenas that hold them"
            .to_owned()
    } else {
        let v = std::env::var("PYTHONMALLOC").unwrap_or_default();
        format!(
            "CPython ran with PYTHONMALLOC={} from the environment (record sets \
             PYTHONMALLOC=malloc only when it is unset)",
            printable(&v)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_counted_bounded_and_escaped() {
        let names: Vec<String> = ["./prog", "cc", "./prog", "a\nb", "x1", "x2", "x3"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let n = unfollowed("sh", &names).unwrap();
        assert_eq!(
            n,
            "sh ran other programs that were not profiled: ./prog (2×), cc (1×), a\\nb (1×), \
             x1 (1×), x2 (1×), and 1 more; --follow-forks profiles them too"
        );
        assert_eq!(unfollowed("sh", &[]), None);
    }

    #[test]
    fn cpython_is_told_from_its_name_or_its_library() {
        let none = std::iter::empty();
        assert!(is_cpython("/usr/bin/python3.11", none.clone()));
        assert!(is_cpython("/usr/bin/python3", none.clone()));
        assert!(is_cpython("/opt/py/bin/python3.13t", none.clone()));
        assert!(!is_cpython("/usr/bin/pythonista", none.clone()));
        assert!(!is_cpython("/usr/bin/pypy3", none.clone()));
        assert!(is_cpython("/usr/bin/app", ["/usr/lib/libpython3.12.so.1.0"].into_iter()));
        assert!(!is_cpython("/usr/bin/app", ["/usr/lib/libc.so.6"].into_iter()));
        let none = || std::iter::empty::<&str>();
        assert_eq!(python_frames("/usr/bin/python3.12", none()), None);
        assert_eq!(python_frames("/usr/bin/app", ["/x/libpython3.13.so.1.0"].into_iter()), None);
        let old = python_frames("/usr/bin/app", ["/x/libpython3.10.so.1.0"].into_iter());
        assert!(old.is_some_and(|n| n.starts_with("CPython 3.10: its Python frames are not read")));
        let t = python_frames("/opt/bin/python3.13t", none());
        assert!(t.is_some_and(|n| n.starts_with("free-threaded CPython 3.13t")));
        assert_eq!(python_frames("/usr/bin/python3-config", none()), None);
    }
}
