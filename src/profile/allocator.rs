//! Which allocator a recorded program used, and its process's memory by kind of mapping as
//! the reports tell it with that allocator.
//!
//! The readings of the mappings (`ResidentSplit`) count as the allocator's only what has
//! glibc's shapes (`sys::malloc_maps`); another allocator's mappings have none of them and
//! are read as memory outside malloc. The allocator is known by a module's path or a
//! sampled frame's name (a `libjemalloc.so`, tikv-jemallocator's frames), or, for an
//! executable that defines `malloc` with an allocator linked in (rustc's jemalloc), whose
//! entry points no sampled stack reaches, by the note `memprof record` keeps in its profile
//! (`record/command/interposable.rs` §4). Read by the reports' header lines and JSON
//! (`report::resident`) and by each process's line of a tree ([`super::load::Process`]).

use super::{Profile, ResidentSplit};

/// The beginning of the note `record` keeps in the profile of an executable that defines
/// `malloc` with an allocator of its own ([`linked_allocator_note`]).
const LINKED_ALLOCATOR: &str = "the program's allocator is ";

/// The note naming `name`, the allocator linked into the executable ([`LINKED_ALLOCATOR`]).
pub(crate) fn linked_allocator_note(name: &str) -> String {
    format!(
        "{LINKED_ALLOCATOR}{name}, linked into its executable, which defines malloc: the \
         memory {name} holds is told as the allocator's, not as memory outside malloc"
    )
}

/// The allocator a [`linked_allocator_note`] names, if `note` is one (in those words only:
/// a note is a string from a file, and any other form names nothing).
fn linked_allocator(note: &str) -> Option<&'static str> {
    let rest = note.strip_prefix(LINKED_ALLOCATOR)?;
    ["jemalloc", "mimalloc"]
        .into_iter()
        .find(|a| rest.strip_prefix(a).is_some_and(|r| r.starts_with(',')))
}

/// The allocator the recorded program used, as far as its notes, modules and symbols tell:
/// "jemalloc", "mimalloc", "tcmalloc", or "glibc" (the C library's, when none of them).
pub(crate) fn allocator_name(p: &Profile) -> &'static str {
    if let Some(name) = p.notes.iter().find_map(|n| linked_allocator(n)) {
        return name;
    }
    let names = p
        .modules
        .iter()
        .map(|m| m.path.as_str())
        .chain(p.symbols.values().flatten().map(|s| s.function.as_str()))
        .chain(p.symbols.values().flatten().filter_map(|s| s.file.as_deref()));
    for name in names {
        if name.contains("jemalloc") || name.starts_with("_rjem_") || name.starts_with("je_") {
            return "jemalloc";
        }
        if name.contains("mimalloc") || name.starts_with("mi_") {
            return "mimalloc";
        }
        if name.contains("tcmalloc") {
            return "tcmalloc";
        }
    }
    "glibc"
}

/// `r` as the reports tell it for a program whose allocator is `allocator` (its
/// [`allocator_name`], asked once by the caller: it walks every symbol): memory outside
/// glibc's malloc's mappings is the allocator's when the program's allocator is not
/// glibc's (its mappings have none of glibc's shapes, so they cannot be told from another
/// heap's).
pub(crate) fn as_told(allocator: &str, r: &ResidentSplit) -> ResidentSplit {
    match allocator {
        "glibc" => *r,
        _ => ResidentSplit { allocator: r.allocator + r.outside, outside: 0, ..*r },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The note names the allocator only in its own words: any other text, or an allocator
    /// it does not name, leaves the modules and frames to tell (here: glibc's).
    #[test]
    fn a_linked_allocator_is_read_from_its_note_alone() {
        let with = |note: &str| {
            let mut p = Profile::default();
            p.notes.push(note.to_owned());
            allocator_name(&p)
        };
        assert_eq!(with(&linked_allocator_note("jemalloc")), "jemalloc");
        assert_eq!(with(&linked_allocator_note("mimalloc")), "mimalloc");
        assert_eq!(with("the program's allocator is jemallocx, linked"), "glibc");
        assert_eq!(with("the program's allocator is tcmalloc, linked"), "glibc");
        assert_eq!(with("./app's allocator is jemalloc, linked"), "glibc");
        // Told as the allocator's: what glibc's shapes would call outside malloc.
        let mut p = Profile::default();
        p.notes.push(linked_allocator_note("jemalloc"));
        let r = ResidentSplit { allocator: 4096, outside: 89 << 20, ..Default::default() };
        let told = as_told(allocator_name(&p), &r);
        assert_eq!((told.allocator, told.outside), (4096 + (89 << 20), 0));
    }
}
