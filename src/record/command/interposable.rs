//! Whether the preload library can reach the program's allocator, read from its
//! executable: so that a program whose allocations memprof cannot see gets `record` saying
//! what it found and what to do, never an empty report with "no allocations were seen"
//! alone.
//!
//! # 1. What is read, and when
//! The executable, once, in `memprof` (never inside the program), with the `object` crate
//! through a read cache over a descriptor opened under the file policy
//! ([`crate::sys::files::open_input_regular`]): only the headers, the symbol tables' first
//! entries, the dynamic symbols, `.comment` and the read-only data sections are read.
//! Nothing read from the file is printed: the notes name what was found with words of
//! their own, and the program as the user named it, escaped.
//!
//! # 2. What the preload library reaches
//! `LD_PRELOAD` puts its `malloc` family before the C library's in the dynamic loader's
//! lookup. It reaches nothing of
//! - a **statically linked** executable (no `PT_INTERP`): the loader never runs, the
//!   library is never loaded (`record` refuses to run it, [`super::launcher`]);
//! - an allocator **linked into the executable under other names**: a Rust program's
//!   global allocator (tikv-jemallocator's `_rjem_*`, mimalloc's `mi_*`), which the
//!   preload library finds in the executable's symbol table (`.symtab`) and intercepts at
//!   its entry points on x86-64. Without a symbol table (`strip`), or on another
//!   architecture, it cannot: only what reaches the C library's `malloc` is seen (the
//!   Rust runtime's few start-up allocations).
//!
//! An executable that **defines `malloc` itself** (rustc links jemalloc under the standard
//! names and exports them) binds every object's `malloc` to its own, before the preload
//! library's; the preload library intercepts it at its entry, found in the dynamic symbols.
//! Only when nothing at all was seen is that said.
//!
//! # 3. How an allocator is recognised
//! By the messages it carries in its read-only data, which no build option removes:
//! jemalloc's `<jemalloc>: ` prefix, mimalloc's `mimalloc: `. A Rust program by its
//! `.comment` (`rustc version …`) or the standard library's paths in its panic locations.
//!
//! # 4. The allocator named in the profile
//! An executable that defines `malloc` with an allocator recognised by §3 (rustc's
//! jemalloc) gets a note in its profile naming it ([`Executable::linked_note`]). Its
//! allocator's mappings have none of glibc's shapes, so without the note the reports would
//! take them for memory outside malloc (a runtime's heap) and the live heap for barely
//! resident; with it they tell them as the allocator's (`report::resident`). Such an
//! executable's read-only data is read after every run that saw allocations, to name its
//! allocator; the others' only when the allocator may be out of reach.

use std::path::Path;

use crate::profile::object_file::{string_tables, Preread};

use object::{Object as _, ObjectSection as _, ObjectSymbol as _, ObjectSymbolTable as _};

/// Read-only data sections longer than this are not searched (a program's messages are in
/// the first; a section this long is data, not strings worth the read).
const MAX_SCANNED: u64 = 512 << 20;

/// What the read-only data is read in (a buffer reused for every section).
const SCAN_CHUNK: usize = 256 << 10;
/// The messages searched for (§3): jemalloc's, mimalloc's, the standard library's paths.
const JEMALLOC: &[u8] = b"<jemalloc>: ";
const MIMALLOC: &[u8] = b"mimalloc: ";
const RUST_STD: &[u8] = b"library/std/src/";
const NEEDLES: [&[u8]; 3] = [JEMALLOC, MIMALLOC, RUST_STD];

/// An allocator linked into an executable, recognised by its messages (§3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Allocator {
    /// jemalloc (tikv-jemallocator's, rustc's own).
    Jemalloc,
    /// mimalloc.
    Mimalloc,
}

impl Allocator {
    fn name(self) -> &'static str {
        match self {
            Allocator::Jemalloc => "jemalloc",
            Allocator::Mimalloc => "mimalloc",
        }
    }
}

/// What an executable says about its allocator (§2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Executable {
    /// A statically linked allocator, recognised by its messages.
    pub(crate) allocator: Option<Allocator>,
    /// It has a symbol table (`.symtab`) with entries: not stripped.
    pub(crate) symtab: bool,
    /// Its dynamic symbols define `malloc`.
    pub(crate) defines_malloc: bool,
    /// A Rust program.
    pub(crate) rust: bool,
    /// A Go program (its build information's section, in every Go binary, cgo or not):
    /// Go's heap is the Go runtime's, never malloc's (`runtimes`).
    pub(crate) go: bool,
}

/// True when `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

impl Executable {
    /// Reads the executable at `path` (§1); `None` when it is not an object file that can
    /// be read. Unless `whole`, the read-only data is searched only when the allocator may
    /// be out of reach (no symbol table or not x86-64): what [`Executable::unreached`]
    /// needs, without reading a large program's data after every run.
    pub(crate) fn read(path: &Path, whole: bool) -> Option<Executable> {
        let file = crate::sys::files::open_input_regular(path).ok()?;
        let cache = object::ReadCache::new(&file);
        // The dynamic symbols' names read ahead in one go, not each by a read of its own
        // (`object_file::Preread`): `node` exports tens of thousands.
        let tables = string_tables(&object::File::parse(&cache).ok()?, &file, &[".dynstr"]);
        let object = object::File::parse(Preread { cache: &cache, ranges: &tables }).ok()?;
        let mut found = Executable {
            symtab: object.symbol_table().is_some_and(|t| t.symbols().nth(1).is_some()),
            defines_malloc: object.dynamic_symbol_table().is_some_and(|t| {
                t.symbols().any(|s| s.is_definition() && s.name_bytes() == Ok(b"malloc"))
            }),
            ..Default::default()
        };
        found.go = object.section_by_name(".go.buildinfo").is_some()
            || object.section_by_name(".note.go.buildid").is_some();
        if let Some(comment) = object.section_by_name(".comment") {
            found.rust = comment.data().is_ok_and(|d| contains(d, b"rustc version"));
        }
        if !whole && found.allocator_reached() && !found.defines_malloc {
            return Some(found);
        }
        // Read through one buffer, not the read cache: that would keep every section's
        // megabytes in new memory, which cost more than the search (a stripped CPython).
        let mut buf = vec![0u8; SCAN_CHUNK];
        for section in object.sections() {
            use object::SectionKind::{ReadOnlyData, ReadOnlyString};
            if !matches!(section.kind(), ReadOnlyData | ReadOnlyString)
                || section.size() > MAX_SCANNED
            {
                continue;
            }
            let Some((start, len)) = section.file_range() else { continue };
            found.scan(&file, start, len.min(MAX_SCANNED), &mut buf);
        }
        Some(found)
    }

    /// Searches `len` bytes of `file` from `start` for the messages of §3, a chunk at a
    /// time through `buf`, each chunk beginning with the last bytes of the one before (a
    /// message across two chunks is found).
    fn scan(&mut self, file: &std::fs::File, start: u64, len: u64, buf: &mut [u8]) {
        use std::os::unix::fs::FileExt as _;
        let overlap = NEEDLES.iter().map(|n| n.len() - 1).max().unwrap_or(0);
        let (mut at, end, mut kept) = (start, start.saturating_add(len), 0);
        while at < end && !(self.allocator.is_some() && self.rust) {
            let room = (buf.len() - kept).min(usize::try_from(end - at).unwrap_or(usize::MAX));
            let n = match file.read_at(&mut buf[kept..kept + room], at) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let data = &buf[..kept + n];
            if self.allocator.is_none() {
                if contains(data, JEMALLOC) {
                    self.allocator = Some(Allocator::Jemalloc);
                } else if contains(data, MIMALLOC) {
                    self.allocator = Some(Allocator::Mimalloc);
                }
            }
            self.rust = self.rust || contains(data, RUST_STD);
            at += n as u64;
            let keep = overlap.min(data.len());
            buf.copy_within(data.len() - keep..data.len(), 0);
            kept = keep;
        }
    }

    /// True when the preload library can intercept the allocator linked into the
    /// executable at its entry points (§2): it needs the symbol table, on x86-64.
    fn allocator_reached(&self) -> bool {
        (self.symtab || self.defines_malloc) && cfg!(target_arch = "x86_64")
    }

    /// The note naming the allocator the executable defines `malloc` with, when memprof
    /// reached it (§4).
    pub(crate) fn linked_note(&self) -> Option<String> {
        let allocator = self.allocator?;
        (self.defines_malloc && self.allocator_reached())
            .then(|| crate::profile::allocator::linked_allocator_note(allocator.name()))
    }

    /// Why the allocations of the program `shown` (as the user named it, escaped; or "it")
    /// are not seen, whatever was seen (the C library's share may be a few samples): `None`
    /// when nothing says so.
    pub(crate) fn unreached(&self, shown: &str) -> Option<String> {
        let allocator = self.allocator?;
        if self.allocator_reached() {
            return None;
        }
        let name = allocator.name();
        let fix = if self.rust {
            "rebuild it without `strip` (in Cargo, `strip = \"debuginfo\"` keeps the symbol \
             table), or make `memprof::Sampled` its global allocator"
        } else {
            "rebuild it without `strip`"
        };
        Some(if self.symtab || self.defines_malloc {
            format!(
                "{shown} links {name} statically, and memprof intercepts such an allocator \
                 only on x86-64: only allocations through the C library's malloc are seen{}",
                if self.rust { "; make `memprof::Sampled` its global allocator" } else { "" }
            )
        } else {
            format!(
                "{shown} links {name} statically and has no symbol table (stripped), so \
                 memprof cannot find {name}'s entry points: only allocations through the C \
                 library's malloc are seen; {fix}"
            )
        })
    }

    /// What to say when nothing at all was seen in the program `shown` (as the user named
    /// it, escaped; or "it"): [`Executable::unreached`], or what the executable defines itself, or
    /// for a stripped Rust program that its allocator may be one memprof cannot find.
    pub(crate) fn nothing_seen(&self, shown: &str) -> Option<String> {
        if let Some(why) = self.unreached(shown) {
            return Some(why);
        }
        if self.defines_malloc {
            let which = self.allocator.map(|a| format!(" ({})", a.name())).unwrap_or_default();
            return Some(format!(
                "{shown} defines malloc itself{which}, so its allocations never reach the C \
                 library's malloc, and memprof intercepted none of its own"
            ));
        }
        if self.rust && !self.symtab {
            return Some(format!(
                "{shown} is a Rust program without a symbol table (stripped): if its global \
                 allocator is not the system's, memprof cannot find it; rebuild it without \
                 `strip` (in Cargo, `strip = \"debuginfo\"`), or make `memprof::Sampled` its \
                 global allocator"
            ));
        }
        None
    }
}

/// For a statically linked executable (which `record` refuses), read once: whether it is a
/// Rust program, whose allocations `memprof::Sampled` as its global allocator would see,
/// and whether it is a Go program.
pub(crate) fn rust_and_go(path: &Path) -> (bool, bool) {
    Executable::read(path, true).map_or((false, false), |e| (e.rust, e.go))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe(allocator: Option<Allocator>, symtab: bool, defines_malloc: bool) -> Executable {
        Executable { allocator, symtab, defines_malloc, rust: true, go: false }
    }

    #[test]
    fn needles() {
        assert!(contains(b"xx<jemalloc>: Error", b"<jemalloc>: "));
        assert!(contains(b"<<jemalloc>: ", b"<jemalloc>: "));
        assert!(!contains(b"<jemalloc>:", b"<jemalloc>: "));
        assert!(contains(b"abc", b""));
        assert!(!contains(b"", b"a"));
    }

    /// The data is searched a chunk at a time: a message across two chunks, or at the very
    /// end of the range, is found; one just outside the range is not.
    #[test]
    fn messages_are_found_across_chunks_and_only_in_range() {
        let dir = crate::sys::test_dir("interposable", "chunks");
        let path = dir.join("data");
        // The range starts at 200: chunk boundaries fall near 200 + k * SCAN_CHUNK.
        for (at, inside) in [
            (200 + SCAN_CHUNK - 5, true),
            (200 + 2 * SCAN_CHUNK - 20, true),
            (3 * SCAN_CHUNK - JEMALLOC.len(), true),
            (3 * SCAN_CHUNK - JEMALLOC.len() + 1, false),
            (100, false),
        ] {
            let mut bytes = vec![b'm'; 3 * SCAN_CHUNK + 64];
            bytes[at..at + JEMALLOC.len()].copy_from_slice(JEMALLOC);
            std::fs::write(&path, &bytes).unwrap();
            let file = std::fs::File::open(&path).unwrap();
            let mut found = Executable::default();
            let mut buf = vec![0u8; SCAN_CHUNK];
            found.scan(&file, 200, 3 * SCAN_CHUNK as u64 - 200, &mut buf);
            let want = inside.then_some(Allocator::Jemalloc);
            assert_eq!(found.allocator, want, "message at {at}");
            assert!(!found.rust);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stripped_static_allocator_is_unreached() {
        let stripped = exe(Some(Allocator::Jemalloc), false, false);
        let why = stripped.unreached("./app").unwrap();
        assert!(why.starts_with("./app links jemalloc statically and has no symbol table"));
        assert!(why.contains("strip = \"debuginfo\"") && why.contains("memprof::Sampled"));
        assert_eq!(stripped.nothing_seen("./app"), Some(why));
        let c = Executable { rust: false, ..stripped };
        let why = c.unreached("./app").unwrap();
        assert!(why.ends_with("rebuild it without `strip`"), "{why}");
        // With its symbol table (on x86-64) the allocator is intercepted: nothing to say.
        let kept = exe(Some(Allocator::Mimalloc), true, false);
        assert_eq!(kept.unreached("./app").is_none(), cfg!(target_arch = "x86_64"));
        // No allocator of its own: the C library's malloc serves it.
        assert_eq!(exe(None, false, false).unreached("./app"), None);
    }

    #[test]
    fn a_program_defining_malloc_is_named_only_when_nothing_was_seen() {
        let rustc = exe(Some(Allocator::Jemalloc), false, true);
        assert_eq!(rustc.unreached("rustc"), None);
        assert_eq!(
            rustc.nothing_seen("rustc").as_deref(),
            Some(
                "rustc defines malloc itself (jemalloc), so its allocations never reach the \
                 C library's malloc, and memprof intercepted none of its own"
            )
        );
        let stripped_rust = exe(None, false, false);
        assert!(stripped_rust.nothing_seen("./app").unwrap().contains("Rust program without"));
        assert_eq!(exe(None, true, false).nothing_seen("./app"), None);
    }

    /// §4: the allocator an executable defines `malloc` with is named in the profile when
    /// memprof reached it, and only then; the reports read the note back.
    #[test]
    fn an_allocator_defining_malloc_is_named_for_the_reports() {
        let rustc = exe(Some(Allocator::Jemalloc), false, true);
        let note = rustc.linked_note();
        assert_eq!(note.is_some(), cfg!(target_arch = "x86_64"));
        if let Some(note) = note {
            let mut p = crate::profile::Profile::default();
            assert_eq!(crate::profile::allocator::allocator_name(&p), "glibc");
            p.notes.push(note);
            assert_eq!(crate::profile::allocator::allocator_name(&p), "jemalloc");
        }
        // Not defining malloc (its allocator under names of its own, or none): the frames
        // and modules name it, or the C library's serves it.
        assert_eq!(exe(Some(Allocator::Mimalloc), true, false).linked_note(), None);
        assert_eq!(exe(None, false, true).linked_note(), None);
    }
}
