//! Frames as reports name them: a stack's return addresses expanded to their inline
//! chains, the profiler's own frames trimmed from the leaf end, unresolved addresses
//! named `module+0xoffset` (the rules: `profile::symbolize`'s documentation, section 2).
//! The site rules (`site/`) and the symbolizer both read these; this file reads
//! neither.

use std::borrow::Cow;

use super::{Module, Profile, StackId};

/// How many expanded frames, from the innermost, are searched for profiler machinery.
pub const TRIM_WINDOW: usize = 24;

/// Name given to a stack that has no frames left to show.
pub const UNKNOWN_STACK: &str = "[unknown stack]";

/// Root frame added by [`Profile::frame_names`] above stacks cut at the configured depth.
pub const TRUNCATED: &str = "[truncated]";

/// True for frames of the profiler itself, which are trimmed from the leaf end of stacks.
pub fn is_profiler_frame(name: &str) -> bool {
    // Every report asks this of the first frames of every stack: a name whose first two
    // bytes begin none of the names below is answered without comparing it with each
    // (`profiler_prefixes_begin_with_the_first_bytes` keeps the list in step). Two, not
    // one: CPython's functions begin with `_P`, and the profiler's `__r`.
    let [a, b, ..] = *name.as_bytes() else {
        return false;
    };
    if !PROFILER_FIRST_BYTES.contains(&[a, b]) {
        return false;
    }
    PROFILER_PREFIXES.iter().any(|p| name.starts_with(p)) || MALLOC_FAMILY.contains(&name)
}

/// The first two bytes of [`PROFILER_PREFIXES`] and of [`MALLOC_FAMILY`].
const PROFILER_FIRST_BYTES: &[[u8; 2]] = &[
    *b"me", *b"<m", *b"ba", *b"__", *b"st", *b"ma", *b"ca", *b"re", *b"po", *b"al", *b"va", *b"pv",
];

/// The beginnings of the profiler's own functions' names ([`is_profiler_frame`]).
const PROFILER_PREFIXES: &[&str] = &[
    // The sample path (src/engine/) and the safe points (src/session/).
    "memprof::engine::",
    "<memprof::engine::",
    "memprof::session::",
    // The same code under its module paths before the layout of src/engine/, for
    // profiles recorded by earlier versions.
    "memprof::alloc::",
    "<memprof::alloc::",
    "memprof::callstack::",
    "memprof::sampler::",
    "memprof::tracker::",
    "memprof::postponed::",
    "memprof_preload::",
    "memprof_preload_",
    "backtrace::",
    "__rustc::",
    "__rust_alloc",
    "__rust_realloc",
    "__rust_alloc_zeroed",
    "__rust_dealloc",
    "__rg_",
    "__rdl_",
    "std::alloc::__default_lib_allocator",
];

/// The allocating functions of the malloc family: the preload library's exports, and what
/// an executable that defines the family itself (rustc, with jemalloc) names its own.
pub(crate) const MALLOC_FAMILY: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
];

/// [`FrameLocation`], borrowed from the profile.
#[derive(Clone, Debug)]
pub(crate) struct FrameRef<'a> {
    pub(crate) function: Cow<'a, str>,
    pub(crate) file: Option<&'a str>,
    pub(crate) line: Option<u32>,
    pub(crate) addr: u64,
    pub(crate) inlined: bool,
    /// False for an address without symbols (named `module+0xoffset`).
    pub(crate) resolved: bool,
}

/// One source-level frame of a stack, as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FrameLocation {
    /// Function name (demangled), or `module+0xoffset` / `0xaddr` when unresolved.
    pub function: String,
    /// Source file, when known.
    pub file: Option<String>,
    /// Line, when known.
    pub line: Option<u32>,
    /// The return address this frame belongs to.
    pub addr: u64,
    /// True when this frame is inlined into the next (outer) frame at the same address.
    pub inlined: bool,
}

impl Profile {
    /// The module whose segments contain `addr`.
    pub fn module_of(&self, addr: u64) -> Option<&Module> {
        self.modules.iter().find(|m| m.start <= addr && addr < m.end)
    }

    /// Name of an address without symbols: `basename+0xoffset` inside a module, else `0xaddr`.
    pub fn unresolved_name(&self, addr: u64) -> String {
        match self.module_of(addr.saturating_sub(1)) {
            Some(m) => {
                let base = m.path.rsplit('/').next().unwrap_or(&m.path);
                format!("{base}+{:#x}", addr.wrapping_sub(m.base))
            }
            None => format!("{addr:#x}"),
        }
    }

    /// The frames of a stack, innermost first, inline chains expanded, profiler frames
    /// trimmed from the leaf end (see [`crate::profile::symbolize`], section 2). Empty for an
    /// unknown stack id or when nothing is left.
    pub fn frame_locations(&self, stack: StackId) -> Vec<FrameLocation> {
        self.frame_refs(stack)
            .into_iter()
            .map(|f| FrameLocation {
                function: f.function.into_owned(),
                file: f.file.map(str::to_owned),
                line: f.line,
                addr: f.addr,
                inlined: f.inlined,
            })
            .collect()
    }

    /// [`Profile::frame_locations`], borrowing what the profile holds.
    pub(crate) fn frame_refs(&self, stack: StackId) -> Vec<FrameRef<'_>> {
        let Some(stack) = self.stacks.get(stack as usize) else { return Vec::new() };
        // Room for a frame inlined into each, without growing on the way.
        let mut out = Vec::with_capacity(2 * stack.frames.len());
        for &addr in &stack.frames {
            match self.symbols.get(&addr) {
                Some(chain) if !chain.is_empty() => {
                    let last = chain.len() - 1;
                    out.extend(chain.iter().enumerate().map(|(i, s)| FrameRef {
                        function: Cow::Borrowed(s.function.as_str()),
                        file: s.file.as_deref(),
                        line: s.line,
                        addr,
                        inlined: i < last,
                        resolved: true,
                    }));
                }
                _ => out.push(FrameRef {
                    function: Cow::Owned(self.unresolved_name(addr)),
                    file: None,
                    line: None,
                    addr,
                    inlined: false,
                    resolved: false,
                }),
            }
        }
        let cut = out
            .iter()
            .take(TRIM_WINDOW)
            .rposition(|f| is_profiler_frame(&f.function))
            .map_or(0, |i| i + 1);
        out.drain(..cut);
        out
    }

    /// Function names of a stack, outermost (root) first, leaf last, after trimming. A stack
    /// cut at the configured depth gets a [`TRUNCATED`] root; a stack with nothing left is
    /// named [`UNKNOWN_STACK`].
    pub fn frame_names(&self, stack: StackId) -> Vec<String> {
        self.frame_names_ref(stack).into_iter().map(Cow::into_owned).collect()
    }

    /// [`Profile::frame_names`], borrowing the names the profile holds (a flamegraph of a
    /// program with tens of thousands of deep stacks would otherwise copy every name).
    pub fn frame_names_ref(&self, stack: StackId) -> Vec<Cow<'_, str>> {
        let Some(s) = self.stacks.get(stack as usize) else {
            return vec![Cow::Borrowed(UNKNOWN_STACK)];
        };
        let inner = self.inner_names(stack);
        let mut names = Vec::with_capacity(inner.len() + 2);
        if s.truncated {
            names.push(Cow::Borrowed(TRUNCATED));
        }
        if inner.is_empty() {
            names.push(Cow::Borrowed(UNKNOWN_STACK));
        }
        names.extend(inner.into_iter().rev());
        names
    }

    /// The function names of a stack, innermost first, after trimming (borrowed where the
    /// profile holds them): [`Profile::frame_locations`]' functions.
    fn inner_names(&self, stack: StackId) -> Vec<Cow<'_, str>> {
        self.frame_refs(stack)
            .into_iter()
            .map(|f| match is_python_word(f.addr) && f.resolved {
                true => Cow::Owned(python_frame_name(&f.function, f.file, f.line)),
                false => f.function,
            })
            .collect()
    }

    /// The names [`Profile::frame_names`] gives the Python frames of the profile's stacks
    /// (`engine::python`), each once: a flamegraph colours them apart.
    pub(crate) fn python_frame_names(&self) -> std::collections::BTreeSet<String> {
        self.symbols
            .iter()
            .filter(|(&addr, _)| is_python_word(addr))
            .filter_map(|(_, chain)| chain.first())
            .map(|s| python_frame_name(&s.function, s.file.as_deref(), s.line))
            .collect()
    }
}

/// True for a stack word that is a Python frame (`engine::python` §2), not an address.
pub(crate) fn is_python_word(addr: u64) -> bool {
    addr & crate::engine::python::TAG as u64 != 0
}

/// A Python frame's name where frames are named by one string (folded stacks,
/// flamegraphs, trees): `function (file:line)`, the file by its last component, as py-spy
/// names them, so that a Python function is told from a C function of the same name.
pub(crate) fn python_frame_name(function: &str, file: Option<&str>, line: Option<u32>) -> String {
    let file = file.map(|f| f.rsplit('/').next().unwrap_or(f));
    match (file, line) {
        (Some(f), Some(l)) => format!("{function} ({f}:{l})"),
        (Some(f), None) => format!("{function} ({f})"),
        _ => function.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Stack, Symbol};

    #[test]
    fn profiler_frames_by_module_path() {
        for name in [
            "memprof::engine::alloc::on_alloc",
            "<memprof::engine::alloc::Sampled<A> as core::alloc::global::GlobalAlloc>::alloc",
            "memprof::engine::sample_path::record_alloc",
            "memprof::engine::callstack::capture",
            "memprof::session::poll",
            "memprof::tracker::hot::record_alloc",
            "memprof_preload::fast::malloc_slow",
            "malloc",
        ] {
            assert!(is_profiler_frame(name), "{name}");
        }
        for name in ["memprof::gc::Heap::alloc", "memprof::report::top_table", "app::main"] {
            assert!(!is_profiler_frame(name), "{name}");
        }
    }

    #[test]
    fn profiler_prefixes_begin_with_the_first_bytes() {
        for name in PROFILER_PREFIXES.iter().chain(MALLOC_FAMILY) {
            assert!(
                PROFILER_FIRST_BYTES.contains(&[name.as_bytes()[0], name.as_bytes()[1]]),
                "{name}"
            );
            assert!(is_profiler_frame(name), "{name}");
        }
        assert!(!is_profiler_frame(""));
    }

    fn sym(f: &str) -> Symbol {
        Symbol { function: f.into(), file: Some("src/x.rs".into()), line: Some(7) }
    }

    fn profile() -> Profile {
        let mut p = Profile::default();
        p.modules.push(Module {
            path: "/usr/lib/libfoo.so".into(),
            base: 0x7000,
            start: 0x8000,
            end: 0x9000,
            ..Default::default()
        });
        let table: &[(u64, &[&str])] = &[
            (0x10, &["malloc"]),
            (
                0x20,
                &[
                    "memprof::alloc::hook",
                    "<memprof::alloc::Sampled<A> as core::alloc::global::GlobalAlloc>::alloc",
                ],
            ),
            (0x30, &["__rust_alloc"]),
            (0x40, &["alloc::raw_vec::finish_grow", "alloc::raw_vec::RawVec<T>::grow"]),
            (0x50, &["<alloc::vec::Vec<T> as core::clone::Clone>::clone"]),
            (0x60, &["app::load", "app::main"]),
            (0x70, &["std::rt::lang_start"]),
            (0x80, &["main"]),
        ];
        for (addr, names) in table {
            p.symbols.insert(*addr, names.iter().map(|n| sym(n)).collect());
        }
        p.stacks.push(Stack {
            frames: vec![0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80],
            truncated: false,
            label: 0,
        });
        p.stacks.push(Stack { frames: vec![0x8123, 0x60, 0xdead], truncated: true, label: 0 });
        p.stacks.push(Stack { frames: vec![0x10, 0x40], truncated: false, label: 0 });
        p.stacks.push(Stack { frames: vec![0x10, 0x20], truncated: false, label: 0 });
        p.stacks.push(Stack { frames: vec![], truncated: false, label: 0 });
        p
    }

    #[test]
    fn names_are_trimmed_and_outermost_first() {
        let p = profile();
        assert_eq!(
            p.frame_names(0),
            [
                "main",
                "std::rt::lang_start",
                "app::main",
                "app::load",
                "<alloc::vec::Vec<T> as core::clone::Clone>::clone",
                "alloc::raw_vec::RawVec<T>::grow",
                "alloc::raw_vec::finish_grow",
            ]
        );
        assert_eq!(p.site_name(0), "app::load");
    }

    #[test]
    fn unresolved_and_truncated() {
        let p = profile();
        assert_eq!(
            p.frame_names(1),
            ["[truncated]", "0xdead", "app::main", "app::load", "libfoo.so+0x1123"]
        );
        // An unresolved leaf is not plumbing: it is the site.
        assert_eq!(p.site_name(1), "libfoo.so+0x1123");
    }

    #[test]
    fn all_plumbing_or_nothing_left() {
        let p = profile();
        assert_eq!(p.site_name(2), "alloc::raw_vec::finish_grow");
        assert_eq!(p.frame_names(3), [UNKNOWN_STACK]);
        assert_eq!(p.site_name(3), UNKNOWN_STACK);
        assert_eq!(p.frame_names(4), [UNKNOWN_STACK]);
        assert_eq!(p.frame_names(99), [UNKNOWN_STACK]);
        assert_eq!(p.site_name(99), UNKNOWN_STACK);
    }

    #[test]
    fn trimming_only_looks_at_the_leaf_window() {
        let mut p = profile();
        // A profiler-looking frame deep in the stack (e.g. a user function named malloc far
        // from the leaf) is kept.
        let mut frames = vec![0x60; TRIM_WINDOW];
        frames.push(0x10);
        p.stacks.push(Stack { frames, truncated: false, label: 0 });
        let names = p.frame_names(5);
        assert_eq!(names.first().map(String::as_str), Some("malloc"));
        assert_eq!(names.len(), 2 * TRIM_WINDOW + 1);
    }

    #[test]
    fn locations_mark_inlining() {
        let p = profile();
        let locs = p.frame_locations(0);
        let inl: Vec<(u64, bool)> = locs.iter().map(|f| (f.addr, f.inlined)).collect();
        assert_eq!(
            inl,
            [
                (0x40, true),
                (0x40, false),
                (0x50, false),
                (0x60, true),
                (0x60, false),
                (0x70, false),
                (0x80, false)
            ]
        );
        assert_eq!(locs[0].line, Some(7));
    }
}
