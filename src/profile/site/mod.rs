//! Allocation sites: which frames of a stack are allocation plumbing, and which frame the
//! reports name as the *site* (the top table's rows, `diff`'s and the HTML report's sites,
//! the leaf of pprof's samples).
//!
//! # 1. The rule
//! A stack's site is its innermost frame, once the profiler's own frames are trimmed
//! ([`Profile::frame_locations`]), that is not allocation plumbing; when every frame is
//! plumbing, the innermost is the site. A frame is plumbing when
//! 1. its **module** is the C or C++ runtime (libc, the loader, libstdc++, libc++: see
//!    [`is_runtime_module`]): what `strdup`, `getline`, `fopen`, `dlopen` or libstdc++'s
//!    exported `operator new` allocate is their caller's. Decided by the frame's address,
//!    so it holds for stripped runtimes whose frames have no names at all;
//! 2. its **source file** is the Rust standard library's (`…/library/{alloc,core,std}/src/…`,
//!    its vendored crates under `/rust/deps/`), a registry copy of `hashbrown`, or a copy
//!    or build directory of a global allocator's crate (tikv-jemallocator, mimalloc and
//!    their `-sys` crates) ([`is_plumbing_file`]): built with `debug = "line-tables-only"`, inlined frames carry
//!    short DWARF names (`alloc`, `repeat<u8>`, `with_capacity_in<…>`) that no name rule can
//!    tell from the program's own, while a user's function named `alloc` lives in the
//!    user's file;
//! 3. its **name** is a known allocation function or wrapper ([`is_std_plumbing`]): Rust's
//!    `alloc::`/`core::`/`std::`/`hashbrown::` paths and std traits implemented for
//!    anonymous types; C++'s `operator new` (every variant), `std::` and `__gnu_cxx::`
//!    (containers, strings, allocators; a template function's return type is skipped
//!    first, so `void std::vector<…>::_M_realloc_insert<…>(…)` is `std::`); glibc's
//!    internal aliases (`__GI_*`, `__libc_*`, `_IO_*`) and allocating functions; and the
//!    common C wrappers: `xmalloc` and friends (gcc, make, git, coreutils), glib's
//!    `g_malloc*`/`g_new*`, OpenSSL's `CRYPTO_*alloc` and `OPENSSL_*`, SQLite's
//!    `sqlite3Malloc`/`sqlite3MemMalloc`/`sqlite3DbMalloc*`, CPython's `PyMem_*`,
//!    `PyObject_Malloc`/`Calloc`/`Realloc`, `_PyObject_*`/`_PyMem_*` allocation helpers and
//!    `pymalloc_*`, redis's and valkey's `zmalloc` family (`zmalloc`, `zcalloc`,
//!    `zrealloc`, their `ztry*`, `_usable`, `_no_tcache` variants, `zstrdup`); the malloc
//!    family itself where an executable defines it (rustc); Rust's allocator shim
//!    (`__rustc::*`, `__rust_alloc`, `__rg_*`, `__rdl_*`) and the global allocators
//!    programs link statically: tikv-jemallocator's and mimalloc's crates, jemalloc's
//!    `_rjem_*`/`je_*`/`mallocx` family, mimalloc's allocating `mi_*` entries and `_mi_*`.
//!    Every family is listed once, in `names.rs`, with why it is there;
//! 4. its name matches one of the user's expressions ([`SiteSkip`], `--site-skip` and
//!    `MEMPROF_SITE_SKIP`): a program's own wrappers. A site that looks like one (called
//!    by several functions, none holding most of its bytes) is pointed out by the reports,
//!    with the expression that would skip it (`wrappers.rs`, [`Profile::wrappers`]).
//!
//! 5. its module is the CPython interpreter (`libpython3.N`, a static `python3.N`) and a
//!    Python frame lies further out with only the interpreter's frames between: what
//!    `PyUnicode_New` or `list_resize` allocate for a line of Python is that line's. An
//!    extension's frame in between (numpy's) is a site of its own.
//!
//! An address without symbols that plumbing calls is plumbing too: the inside of an
//! allocator whose library is stripped (SQLite's static `sqlite3MemMalloc` under its
//! exported `sqlite3Malloc`). When every frame is plumbing, the innermost is the site.
//!
//! Frames of the program that only look like the standard library are not plumbing: a
//! function of the user's named `alloc` (in the user's file), `<app::Node as Clone>::clone`
//! (a std trait for the program's type), `my::std_like::x`.
//!
//! # 2. The site's name
//! A closure's short name (`{closure#0}`) says nothing alone: it is qualified by the nearest
//! enclosing frame of the program (`fill_table::{closure#0}`). Short names of whole
//! functions are qualified earlier, when addresses are resolved from the ELF symbol table
//! ([`crate::profile::symbolize`]).
//!
//! # 3. pprof
//! pprof's `drop_frames` is a regular expression over function names, which can express
//! rule 3's C and C++ entries and rule 4 ([`drop_frames_pattern`]), not rules 1 and 2: the
//! pprof writer therefore leaves the plumbing frames below the site out of each sample's
//! locations itself, so that flat values land on the site in every viewer.

use std::borrow::Cow;

use super::frame::{is_python_word, FrameRef, UNKNOWN_STACK};
use super::{Profile, StackId};

mod names;
#[cfg(feature = "report")]
mod wrappers;

pub use names::{drop_frames_pattern, is_std_plumbing};
#[cfg(feature = "report")]
pub use wrappers::Wrapper;

/// The allocation site of a stack ([`Profile::site`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The site's name: the frame's function, a closure qualified by its enclosing function.
    pub name: String,
    /// The site frame's source file, when known.
    pub file: Option<String>,
    /// The site frame's line (for a caller, the line of its call), when known.
    pub line: Option<u32>,
    /// The site's index among [`Profile::frame_locations`] (innermost first): the frames
    /// before it are plumbing.
    pub index: usize,
}

impl Site {
    /// `file:line` with the file's last path component (`map.cpp:12`), when both are known.
    pub fn location(&self) -> Option<String> {
        let file = self.file.as_deref()?;
        let base = file.rsplit('/').next().unwrap_or(file);
        Some(format!("{base}:{}", self.line?))
    }
}

/// Expressions given by the user (`--site-skip`, `MEMPROF_SITE_SKIP`) whose matching frames
/// are plumbing, like the program's own allocation wrappers. Unanchored: `^my_alloc$`
/// matches that function only.
#[derive(Clone, Debug, Default)]
pub struct SiteSkip {
    patterns: Vec<String>,
    #[cfg(feature = "report")]
    compiled: Vec<regex::Regex>,
}

impl SiteSkip {
    /// Adds `pattern`; `origin` names where it came from (`--site-skip`,
    /// `MEMPROF_SITE_SKIP`) in the error when it is not a regular expression (Rust `regex`
    /// syntax, as bounded in size as that crate's default limits make it).
    #[cfg(feature = "report")]
    pub fn add(&mut self, pattern: &str, origin: &str) -> Result<(), crate::error::Error> {
        let re = regex::Regex::new(pattern).map_err(|e| {
            // The crate's syntax errors draw a caret diagram over several lines; the last
            // line says what is wrong.
            let text = e.to_string();
            let why = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("invalid");
            let why = why.trim().trim_start_matches("error: ");
            crate::error::Error::Config(format!(
                "{origin} {pattern:?} is not a valid regular expression: {why}"
            ))
        })?;
        self.patterns.push(pattern.to_owned());
        self.compiled.push(re);
        Ok(())
    }

    /// The expressions, in the order given.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// True when some expression matches `name`.
    pub fn matches(&self, name: &str) -> bool {
        #[cfg(feature = "report")]
        {
            self.compiled.iter().any(|re| re.is_match(name))
        }
        #[cfg(not(feature = "report"))]
        {
            let _ = name;
            false
        }
    }
}

/// True for the objects of the C and C++ runtime, whose frames are allocation plumbing
/// (their caller is the site): glibc's and musl's C library, the dynamic loader, glibc's
/// split-off libraries, libstdc++, libc++ and its ABI library.
pub fn is_runtime_module(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    const PREFIXES: &[&str] = &[
        "libc.so",
        "libc-2.",
        "libc.musl",
        "ld-musl",
        "ld-linux",
        "libpthread.so",
        "libpthread-2.",
        "libdl.so",
        "libstdc++.so",
        "libc++.so",
        "libc++abi.so",
    ];
    PREFIXES.iter().any(|p| base.starts_with(p))
}

/// True for source files of the Rust standard library (`/rustc/<hash>/library/alloc/src/…`,
/// a local toolchain's `…/lib/rustlib/src/rust/library/core/src/…`, its vendored crates
/// under `/rust/deps/`) and of a registry's `hashbrown` (`…/hashbrown-0.15.2/src/…`).
pub fn is_plumbing_file(file: &str) -> bool {
    // Every pattern is looked for at the start of the path or of one of its components
    // only: a report names every frame of every stack, and a substring search per pattern
    // (a searcher built for each) was most of the time a large report spent naming sites.
    const STD: [&str; 4] =
        ["library/alloc/src/", "library/core/src/", "library/std/src/", "hashbrown-"];
    file.starts_with("/rust/deps/")
        || component_starts(file).any(|i| {
            let rest = &file[i..];
            STD.iter().any(|p| rest.starts_with(p))
                || ALLOCATOR_CRATES.iter().any(|c| crate_copy_at(rest, c))
        })
}

/// The offsets at which a component of `file` starts: 0 and each one after a `/` (so each
/// is a character boundary).
fn component_starts(file: &str) -> impl Iterator<Item = usize> + '_ {
    let after_slash = file.bytes().enumerate().filter(|&(_, b)| b == b'/').map(|(i, _)| i + 1);
    std::iter::once(0).chain(after_slash)
}

/// The crates of the global allocators that Rust programs link statically: a registry copy
/// (`…/tikv-jemallocator-0.6.1/src/lib.rs`, `…/libmimalloc-sys-0.1.49/c_src/…`) or a build
/// directory (`…/build/tikv-jemalloc-sys-83249cf5d07003ce/out/…`) of one holds the
/// allocator's inside, never the program's code.
const ALLOCATOR_CRATES: &[&str] = &[
    "tikv-jemallocator",
    "tikv-jemalloc-sys",
    "jemallocator",
    "jemalloc-sys",
    "mimalloc",
    "libmimalloc-sys",
];

/// True when `rest`, the path from the start of one of its components, is `krate-`
/// followed by a version or a build hash (a digit, or for the `-sys` crates' build
/// directories a hex digit): `mimalloc-0.1.52/`, not a project of the user's named
/// `mimalloc-bench/`.
fn crate_copy_at(rest: &str, krate: &str) -> bool {
    let sys = krate.ends_with("-sys");
    let Some(after) = rest.as_bytes().strip_prefix(krate.as_bytes()) else {
        return false;
    };
    let next = after.get(1).copied().unwrap_or(0);
    after.first() == Some(&b'-') && (next.is_ascii_digit() || (sys && next.is_ascii_hexdigit()))
}

/// True for a closure's short name (`{closure#0}`, `{{closure}}`), which needs its
/// enclosing function to mean anything.
fn is_bare_closure(name: &str) -> bool {
    name.starts_with("{closure") || name.starts_with("{{closure")
}

/// The path of the function that defines the closure `{closure#N}`, read from the generic
/// arguments of the frames it is inlined into: short DWARF names still spell a closure's
/// type in full (`fold<…, records::load_records::{closure_env#0}, …>`). This names the
/// closure right when its function is not on the stack (it tail-called the iterator that
/// runs the closure).
fn closure_owner<'a>(closure: &str, outer: impl Iterator<Item = &'a str>) -> Option<String> {
    let n = closure.trim_start_matches('{').strip_prefix("closure#")?.trim_end_matches('}');
    let needle = format!("::{{closure_env#{n}}}");
    for name in outer {
        for (at, _) in name.match_indices(&needle) {
            let start = name[..at]
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(0, |i| i + 1);
            let path = name[start..at].trim_start_matches(':');
            // The standard library's own closures (`map_fold`'s) wrap the program's.
            let std =
                ["alloc::", "core::", "std::", "hashbrown::"].iter().any(|p| path.starts_with(p));
            if !path.is_empty() && !std {
                return Some(path.to_owned());
            }
        }
    }
    None
}

/// Which frames of one stack are plumbing ([`Profile::site`]'s rule), each found when first
/// asked for, with the frames' modules.
struct Plumbing<'p, 'f> {
    profile: &'p Profile,
    frames: &'f [FrameRef<'p>],
    modules: Vec<Option<Option<&'p super::Module>>>,
    known: Vec<Option<bool>>,
}

impl<'p, 'f> Plumbing<'p, 'f> {
    fn new(profile: &'p Profile, frames: &'f [FrameRef<'p>]) -> Self {
        let n = frames.len();
        let mut p = Plumbing { profile, frames, modules: vec![None; n], known: vec![None; n] };
        p.interpreter_plumbing();
        p
    }

    /// Rule 5: a frame of the CPython interpreter's own module (`libpython3.N`, a static
    /// `python3.N`) with a Python frame further out, and only the interpreter's frames
    /// between, is the plumbing of that Python code (a string, list or dict it made). An
    /// extension's frame (numpy's) between them is the extension's allocation: the
    /// interpreter's frames inside it stay, and the extension's frame is the site.
    fn interpreter_plumbing(&mut self) {
        if !self.frames.iter().any(|f| is_python_word(f.addr)) {
            return;
        }
        let mut python_outside = false;
        // Whether each module met is the interpreter's, asked once per module.
        let mut seen: Vec<(*const super::Module, bool)> = Vec::new();
        for k in (0..self.frames.len()).rev() {
            if is_python_word(self.frames[k].addr) {
                python_outside = true;
                continue;
            }
            let interpreter = self.module(k).is_some_and(|m| {
                let key = m as *const super::Module;
                match seen.iter().find(|(p, _)| *p == key) {
                    Some(&(_, known)) => known,
                    None => {
                        let is =
                            crate::profile::symbolize::python_minor_of_module(&m.path).is_some();
                        seen.push((key, is));
                        is
                    }
                }
            });
            if interpreter && python_outside {
                self.known[k] = Some(true);
            } else if !interpreter {
                python_outside = false;
            }
        }
    }

    fn module(&mut self, i: usize) -> Option<&'p super::Module> {
        let (profile, frames) = (self.profile, self.frames);
        *self.modules[i].get_or_insert_with(|| profile.module_of(frames[i].addr.saturating_sub(1)))
    }

    /// Frames `i` and `i + 1` are of one object.
    fn same_object(&mut self, i: usize) -> bool {
        if i + 1 >= self.frames.len() {
            return false;
        }
        match (self.module(i), self.module(i + 1)) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }

    /// Whether frame `i` is plumbing: a frame that depends on the next one (no symbols,
    /// the same object, not plumbing by itself) has the next one's answer, so the walk
    /// goes out until an answer is known and gives it to every frame it passed.
    fn at(&mut self, i: usize) -> bool {
        let mut passed = Vec::new();
        let mut j = i;
        let answer = loop {
            if let Some(known) = self.known[j] {
                break known;
            }
            let module = self.module(j);
            if self.profile.is_plumbing(&self.frames[j], module) {
                self.known[j] = Some(true);
                break true;
            }
            if self.frames[j].resolved || !self.same_object(j) {
                self.known[j] = Some(false);
                break false;
            }
            passed.push(j);
            j += 1;
        };
        for k in passed {
            self.known[k] = Some(answer);
        }
        answer
    }
}

impl Profile {
    /// True when a frame is allocation plumbing (the [module documentation](self)'s rule).
    /// `module` is the frame's ([`Profile::module_of`] its address), found once by the caller.
    fn is_plumbing(&self, f: &FrameRef<'_>, module: Option<&super::Module>) -> bool {
        if f.file.is_some_and(is_plumbing_file) || is_std_plumbing(&f.function) {
            return true;
        }
        if self.site_skip.matches(&f.function) {
            return true;
        }
        module.is_some_and(|m| is_runtime_module(&m.path))
    }

    /// The allocation site of a stack: its innermost frame (after trimming) that is not
    /// allocation plumbing, or the innermost frame if all of them are; `None` for an unknown
    /// stack or one with no frames left.
    pub fn site(&self, stack: StackId) -> Option<Site> {
        self.site_in(&self.frame_refs(stack))
    }

    /// [`Profile::site`] of a stack's frames ([`Profile::frame_refs`]).
    fn site_in(&self, frames: &[FrameRef<'_>]) -> Option<Site> {
        if frames.is_empty() {
            return None;
        }
        // An address without symbols called by plumbing of its own object is the
        // allocator's inside (a stripped library's static `sqlite3MemMalloc` under its
        // exported `sqlite3Malloc`). Plumbing of another object says nothing about it: a
        // stripped program's `main` is called by the C library's start-up frames. So
        // frame i is plumbing when it is by its own name, file or module, or when it has
        // no symbols and frame i + 1, of the same object, is plumbing. Frames are looked at
        // from the innermost and only as far as the answer needs (a site is most often a
        // few frames in, and stacks can be a hundred deep).
        let mut look = Plumbing::new(self, frames);
        let index = (0..frames.len()).find(|&i| !look.at(i)).unwrap_or(0);
        let f = &frames[index];
        let mut name: Cow<'_, str> = f.function.clone();
        if is_bare_closure(&name) {
            let owner = closure_owner(&name, frames[index + 1..].iter().map(|f| &*f.function));
            let outer = (index + 1..frames.len())
                .find(|&j| !look.at(j) && !is_bare_closure(&frames[j].function));
            if let Some(owner) = owner {
                name = Cow::Owned(format!("{owner}::{name}"));
            } else if let Some(j) = outer {
                name = Cow::Owned(format!("{}::{name}", frames[j].function));
            }
        }
        Some(Site { name: name.into_owned(), file: f.file.map(str::to_owned), line: f.line, index })
    }

    /// The name of a stack's allocation site ([`Profile::site`]), or [`UNKNOWN_STACK`].
    pub fn site_name(&self, stack: StackId) -> String {
        self.site(stack).map_or_else(|| UNKNOWN_STACK.to_owned(), |s| s.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Module, Stack, Symbol};

    #[test]
    fn std_files() {
        for file in [
            "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/alloc/src/alloc.rs",
            "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/iter/traits/iterator.rs",
            "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/collections/hash/map.rs",
            "/home/u/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/lib/rustlib/src/rust/library/alloc/src/raw_vec/mod.rs",
            "library/alloc/src/str.rs",
            "/rust/deps/hashbrown-0.16.1/src/raw/mod.rs",
            "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/hashbrown-0.15.2/src/map.rs",
        ] {
            assert!(is_plumbing_file(file), "{file}");
        }
        for file in [
            "/work/app/src/main.rs",
            "src/alloc.rs",
            "/work/mylibrary/alloc/src/x.rs",
            "/work/app/src/core/src/lib.rs",
            "map.cpp",
        ] {
            assert!(!is_plumbing_file(file), "{file}");
        }
    }

    #[test]
    fn runtime_modules() {
        for path in [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "/lib64/ld-linux-x86-64.so.2",
            "/lib/libc.musl-x86_64.so.1",
            "/usr/lib/libc++.so.1",
        ] {
            assert!(is_runtime_module(path), "{path}");
        }
        for path in ["/usr/bin/git", "/usr/lib/libcrypto.so.3", "/usr/lib/libcurl.so.4", "a.out"] {
            assert!(!is_runtime_module(path), "{path}");
        }
    }

    fn sym(f: &str, file: &str) -> Symbol {
        Symbol { function: f.into(), file: Some(file.into()), line: Some(12) }
    }

    const STD_ALLOC: &str = "/rustc/0123/library/alloc/src/alloc.rs";
    const STD_VEC: &str = "/rustc/0123/library/alloc/src/vec/mod.rs";
    const MAIN: &str = "/work/app/src/main.rs";

    /// A profile of line-tables-only Rust (short names), C++ and C frames.
    fn profile(chains: &[(u64, Vec<Symbol>)], stacks: &[&[u64]]) -> Profile {
        let mut p = Profile::default();
        p.modules.push(Module {
            path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            base: 0x7000_0000,
            start: 0x7000_0000,
            end: 0x7010_0000,
            ..Default::default()
        });
        for (addr, chain) in chains {
            p.symbols.insert(*addr, chain.clone());
        }
        for frames in stacks {
            p.stacks.push(Stack { frames: frames.to_vec(), truncated: false, label: 0 });
        }
        p
    }

    #[test]
    fn short_rust_names_by_file() {
        let p = profile(
            &[
                (0x10, vec![sym("__rust_alloc", STD_ALLOC)]),
                (
                    0x20,
                    vec![
                        sym("alloc", STD_ALLOC),
                        sym("with_capacity_in<u8>", STD_VEC),
                        sym("repeat<u8>", "/rustc/0123/library/alloc/src/slice.rs"),
                        sym("fill_table", MAIN),
                    ],
                ),
                (0x30, vec![sym("main", MAIN)]),
                // The program's own function named `alloc`.
                (0x40, vec![sym("alloc", STD_ALLOC), sym("alloc", MAIN)]),
                // A closure of the program, inlined into iterator plumbing.
                (
                    0x50,
                    vec![
                        sym("alloc", STD_ALLOC),
                        sym("format", "/rustc/0123/library/alloc/src/fmt.rs"),
                        sym("{closure#0}", MAIN),
                        sym("fold<u64>", "/rustc/0123/library/core/src/iter/range.rs"),
                        sym("fill_table", MAIN),
                    ],
                ),
            ],
            &[&[0x10, 0x20, 0x30], &[0x10, 0x40, 0x30], &[0x10, 0x50, 0x30]],
        );
        let site = p.site(0).unwrap();
        assert_eq!(site.name, "fill_table");
        assert_eq!(site.location().as_deref(), Some("main.rs:12"));
        assert_eq!(site.index, 3);
        assert_eq!(p.site_name(1), "alloc");
        assert_eq!(p.site(1).unwrap().file.as_deref(), Some(MAIN));
        assert_eq!(p.site_name(2), "fill_table::{closure#0}");
    }

    #[test]
    fn runtime_frames_by_module_and_user_skips() {
        let p = profile(
            &[
                (0x7000_1000, vec![Symbol { function: "__strdup".into(), file: None, line: None }]),
                (0x60, vec![sym("app_new_block", "w.c")]),
                (0x70, vec![sym("make_blocks", "w.c")]),
            ],
            // An unresolved libc frame (a stripped C library) below the program's call.
            &[&[0x7000_2000, 0x60, 0x70], &[0x7000_1000, 0x60, 0x70]],
        );
        assert_eq!(p.site_name(0), "app_new_block");
        assert_eq!(p.site_name(1), "app_new_block");
        let mut p = p;
        p.site_skip.add("^app_new_", "--site-skip").unwrap();
        assert_eq!(p.site_name(0), "make_blocks");
        let err = SiteSkip::default().add("(unclosed", "--site-skip").unwrap_err().to_string();
        assert!(
            err.contains("--site-skip \"(unclosed\" is not a valid regular expression"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    #[test]
    fn unnamed_frames_under_plumbing_are_plumbing() {
        let c = |f: &str| Symbol { function: f.into(), file: None, line: None };
        let mut p = profile(
            &[(0x9020, vec![c("sqlite3Malloc")]), (0x9040, vec![c("sqlite3BtreeInsert")])],
            // sqlite3MemMalloc (no symbol) ← sqlite3Malloc ← a static caller (no symbol).
            &[&[0x9100, 0x9020, 0x9300, 0x9040], &[0x9100, 0x9040]],
        );
        p.modules.push(Module {
            path: "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0".into(),
            start: 0x9000,
            end: 0xa000,
            ..Default::default()
        });
        assert_eq!(p.site_name(0), "libsqlite3.so.0+0x9300");
        assert_eq!(p.site(0).unwrap().index, 2);
        // Without plumbing above it, an unnamed frame is the site.
        assert_eq!(p.site_name(1), "libsqlite3.so.0+0x9100");
    }

    /// The rule of [`Profile::site`] as it was first written: every frame's answer, from
    /// the outermost in. The lazy walk must find the same site in every stack.
    fn eager_index(p: &Profile, stack: StackId) -> Option<usize> {
        let frames = p.frame_refs(stack);
        if frames.is_empty() {
            return None;
        }
        let modules: Vec<Option<&Module>> =
            frames.iter().map(|f| p.module_of(f.addr.saturating_sub(1))).collect();
        let mut plumbing = vec![false; frames.len()];
        for i in (0..frames.len()).rev() {
            let same_object = match (modules[i], modules.get(i + 1).copied().flatten()) {
                (Some(a), Some(b)) => std::ptr::eq(a, b),
                _ => false,
            };
            let called_by_plumbing = plumbing.get(i + 1).copied().unwrap_or(false) && same_object;
            plumbing[i] = p.is_plumbing(&frames[i], modules[i])
                || (!frames[i].resolved && called_by_plumbing);
        }
        Some(plumbing.iter().position(|p| !p).unwrap_or(0))
    }

    #[test]
    fn the_lazy_walk_finds_the_eager_rules_site() {
        let c = |f: &str| Symbol { function: f.into(), file: None, line: None };
        let named = [
            (0x9020, vec![c("sqlite3Malloc")]),
            (0x9040, vec![c("sqlite3BtreeInsert")]),
            (0x7000_1000, vec![c("__strdup")]),
            (0x60, vec![sym("app_new_block", "w.c")]),
            (0x20, vec![sym("alloc", STD_ALLOC), sym("fill_table", MAIN)]),
            (0x10, vec![sym("__rust_alloc", STD_ALLOC)]),
        ];
        let pool = [
            0x9020,
            0x9040,
            0x9100,
            0x9300,
            0x7000_0100,
            0x7000_2000,
            0x7000_1000,
            0x1100,
            0x60,
            0x20,
            0x10,
        ];
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.random::<u64>();
        let stacks: Vec<Vec<u64>> = (0..3000)
            .map(|_| {
                (0..1 + next() % 8).map(|_| pool[(next() % pool.len() as u64) as usize]).collect()
            })
            .collect();
        let refs: Vec<&[u64]> = stacks.iter().map(Vec::as_slice).collect();
        let mut p = profile(&named, &refs);
        p.modules.push(Module {
            path: "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0".into(),
            start: 0x9000,
            end: 0xa000,
            ..Default::default()
        });
        for id in 0..stacks.len() as StackId {
            assert_eq!(
                p.site(id).map(|s| s.index),
                eager_index(&p, id),
                "{:#x?}",
                stacks[id as usize]
            );
        }
    }

    #[test]
    fn a_closure_is_named_after_the_function_that_defines_it() {
        let outer = [
            "fold<core::ops::range::Range<u64>, (), core::iter::adapters::map::map_fold::{closure_env#0}<u64, (u64, alloc::string::String), (), records::load_records::{closure_env#0}, ()>>",
            "records::main",
        ];
        let owner = closure_owner("{closure#0}", outer.into_iter());
        assert_eq!(owner.as_deref(), Some("records::load_records"));
        assert_eq!(closure_owner("{closure#1}", outer.into_iter()), None);
        assert_eq!(closure_owner("main", outer.into_iter()), None);
    }

    /// A stripped program's frames are called, at the root, by the C library's start-up
    /// (plumbing by its module): that makes none of them plumbing.
    #[test]
    fn a_stripped_programs_frames_stay_sites() {
        let mut p = profile(&[], &[&[0x1100, 0x1200, 0x7000_0100]]);
        p.modules.push(Module {
            path: "/usr/bin/prog".into(),
            start: 0x1000,
            end: 0x2000,
            ..Default::default()
        });
        assert_eq!(p.site_name(0), "prog+0x1100");
    }
}

#[cfg(test)]
mod plumbing_file_tests {
    use super::*;

    /// The search by substring that [`is_plumbing_file`] replaced: the same answer for
    /// every path built from components that match, nearly match and overlap.
    fn by_substring(file: &str) -> bool {
        let component = |pat: &str| {
            file.match_indices(pat).any(|(i, _)| i == 0 || file.as_bytes()[i - 1] == b'/')
        };
        let copy = |krate: &str| {
            let sys = krate.ends_with("-sys");
            file.match_indices(krate).any(|(i, _)| {
                let starts = i == 0 || file.as_bytes()[i - 1] == b'/';
                let rest = &file.as_bytes()[i + krate.len()..];
                let next = rest.get(1).copied().unwrap_or(0);
                starts
                    && rest.first() == Some(&b'-')
                    && (next.is_ascii_digit() || (sys && next.is_ascii_hexdigit()))
            })
        };
        ["library/alloc/src/", "library/core/src/", "library/std/src/"].iter().any(|p| component(p))
            || file.starts_with("/rust/deps/")
            || component("hashbrown-")
            || ALLOCATOR_CRATES.iter().any(|c| copy(c))
    }

    #[test]
    fn components_agree_with_the_substring_search() {
        let parts = [
            "",
            "rust",
            "deps",
            "library",
            "alloc",
            "src",
            "core",
            "std",
            "liballoc",
            "x",
            "hashbrown-0.15.2",
            "hashbrown",
            "myhashbrown-1",
            "mimalloc-0.1.52",
            "mimalloc-bench",
            "libmimalloc-sys-0.1.49",
            "tikv-jemalloc-sys-83249cf5d07003ce",
            "jemalloc-sys-f",
            "tikv-jemallocator-0.6.1",
            "jemallocator-x",
            "lib.rs",
            "é",
            "mimalloc-",
        ];
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.random::<u64>();
        for _ in 0..20_000 {
            let n = 1 + next() % 6;
            let mut path = String::new();
            if next() % 2 == 0 {
                path.push('/');
            }
            for i in 0..n {
                if i > 0 {
                    path.push('/');
                }
                path.push_str(parts[(next() % parts.len() as u64) as usize]);
            }
            assert_eq!(is_plumbing_file(&path), by_substring(&path), "{path}");
        }
    }
}
