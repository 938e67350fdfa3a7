//! Allocation plumbing by name (rule 3 of the [site rules](super)): the Rust and C++
//! standard libraries' paths, C++'s allocation functions, glibc's internal names, and the
//! allocation wrappers of common C programs and libraries, each family with why it is
//! there; and the same entries as pprof's `drop_frames` expression.

use super::SiteSkip;
use crate::profile::frame::MALLOC_FAMILY;

/// The text of a demangled C++ name that says what function it is: the parameters and a
/// template function's return type left out (`void std::vector<int>::_M_realloc_insert<int
/// const&>(…)` → `std::vector<int>::_M_realloc_insert<int const&>`, `operator new(unsigned
/// long)` → `operator new`). Names without a top-level parameter list (Rust's, C's) are
/// returned whole.
fn cpp_core(name: &str) -> &str {
    let bytes = name.as_bytes();
    let mut depth = 0i32;
    let mut params = None;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' | b'{' | b'[' => depth += 1,
            b'>' | b'}' | b']' => depth -= 1,
            b'(' if depth == 0 => {
                let before = &name[..i];
                // `(anonymous namespace)::` and `operator()` are parts of names.
                if name[i..].starts_with("(anonymous namespace)") || before.ends_with("operator") {
                    continue;
                }
                params = Some(i);
                break;
            }
            _ => {}
        }
    }
    let Some(end) = params else { return name };
    let head = &name[..end];
    // The return type ends at the last top-level space that is not inside `operator new`.
    let mut depth = 0i32;
    let mut start = 0;
    for (i, b) in head.bytes().enumerate() {
        match b {
            b'<' | b'{' | b'[' | b'(' => depth += 1,
            b'>' | b'}' | b']' | b')' => depth -= 1,
            b' ' if depth == 0 && !head[..i].ends_with("operator") => start = i + 1,
            _ => {}
        }
    }
    // An operator's own `<`/`>` unbalance the count: the name is then taken whole.
    if depth != 0 {
        return head;
    }
    &head[start..]
}

/// True for allocation plumbing by name alone (rule 3 of the [site rules](super)).
pub fn is_std_plumbing(name: &str) -> bool {
    let core = cpp_core(name);
    rust_or_cpp_plumbing(core) || c_plumbing(core)
}

/// The Rust standard library, the C++ standard library and C++ allocation entries.
fn rust_or_cpp_plumbing(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "alloc::",
        "<alloc::",
        "core::",
        "<core::",
        "std::",
        "<std::",
        "hashbrown::",
        "<hashbrown::",
        // The managed heap's allocator entry is to a GC block what `malloc` is to a
        // C block: the site is its caller.
        "memprof::gc::",
        "<memprof::gc::",
        // C++: the allocation functions, libstdc++'s allocators and extensions, the ABI
        // library's exception allocation.
        "operator new",
        "__gnu_cxx::",
        "__cxxabiv1::",
        "__cxa_allocate",
        // Rust's allocator shim (`__rustc::__rust_alloc` in v0 mangling) and the global
        // allocators that programs link statically: their frames are to a Rust block what
        // `malloc`'s are to a C block.
        "__rustc::",
        "tikv_jemallocator::",
        "<tikv_jemallocator::",
        "tikv_jemalloc_sys::",
        "jemallocator::",
        "<jemallocator::",
        "jemalloc_sys::",
        "mimalloc::",
        "<mimalloc::",
        "libmimalloc_sys::",
    ];
    if PREFIXES.iter().any(|p| name.starts_with(p)) {
        return true;
    }
    // `<SELF as TRAIT>::method`: a standard trait implemented for a generic parameter, a
    // primitive, a reference, slice or tuple (`<T as Into<U>>::into`,
    // `<u8 as SpecFromElem>::from_elem`) is plumbing too; an impl for a named type of the
    // program (`<my::Node as Clone>::clone`) is the program's code.
    let Some(rest) = name.strip_prefix('<') else {
        return false;
    };
    let Some((self_ty, trait_path)) = split_qualified(rest) else {
        return false;
    };
    let std_trait =
        ["alloc::", "core::", "std::", "hashbrown::"].iter().any(|p| trait_path.starts_with(p));
    let anonymous_self = !self_ty.contains("::")
        || self_ty.starts_with(['&', '[', '(', '*'])
        || PREFIXES.iter().any(|p| self_ty.starts_with(p));
    std_trait && anonymous_self
}

/// glibc's internal names and allocating functions, and the C wrappers that programs and
/// libraries put around `malloc`.
fn c_plumbing(name: &str) -> bool {
    const EXACT: &[&str] = &[
        // glibc functions that allocate for their caller (found by name where the C
        // library's module is not known, as in a static binary).
        "strdup",
        "strndup",
        "__strdup",
        "__strndup",
        "wcsdup",
        "asprintf",
        "__asprintf",
        "vasprintf",
        "__vasprintf",
        "__vasprintf_internal",
        "getline",
        "getdelim",
        "__getdelim",
        "open_memstream",
        "realpath",
        "canonicalize_file_name",
        // Wrappers that abort on failure: gcc/libiberty, make, git, gnulib (coreutils).
        "xmalloc",
        "xcalloc",
        "xzalloc",
        "xrealloc",
        "xnmalloc",
        "xnrealloc",
        "x2realloc",
        "x2nrealloc",
        "xpalloc",
        "xreallocarray",
        "xmallocz",
        "xmallocz_gently",
        "xstrdup",
        "xstrndup",
        "xmemdup",
        "xmemdupz",
        "xcharalloc",
        "ximalloc",
        "xizalloc",
        "xirealloc",
        "do_xmalloc",
        // CPython's allocators.
        "PyObject_Malloc",
        "PyObject_Calloc",
        "PyObject_Realloc",
        "PyType_GenericAlloc",
        // SQLite's internal allocation chain.
        "mallocWithAlarm",
        "dbMallocRawFinish",
        "dbReallocFinish",
        // Rust's allocator shim under legacy mangling.
        "__rust_alloc",
        "__rust_alloc_zeroed",
        "__rust_realloc",
        "__rust_dealloc",
        // jemalloc's non-standard entries, unprefixed.
        "mallocx",
        "rallocx",
        "xallocx",
        "sdallocx",
        "dallocx",
    ];
    const PREFIXES: &[&str] = &[
        // glibc's internal aliases and stdio's buffers.
        "__GI_",
        "__libc_",
        "_IO_",
        // glib (the g_new* macros expand to g_malloc_n and friends).
        "g_malloc",
        "g_malloc0",
        "g_realloc",
        "g_try_malloc",
        "g_try_realloc",
        "g_slice_alloc",
        "g_new",
        "g_strdup",
        "g_strndup",
        "g_memdup",
        "g_aligned_alloc",
        // OpenSSL's OPENSSL_* functions (stacks, hashes, buffers) allocate for their caller.
        "OPENSSL_",
        // CPython.
        "PyMem_",
        "pymalloc_",
        // The allocator shim's global-allocator and default halves (`__rg_alloc`,
        // `__rdl_alloc`).
        "__rg_",
        "__rdl_",
        // jemalloc: tikv-jemalloc-sys's prefixed entries and inside (`_rjem_mallocx`,
        // `_rjem_je_malloc_default`), and the inside of an unprefixed build.
        "_rjem_",
        "je_",
        // mimalloc's allocating entries and its inside.
        "mi_malloc",
        "mi_zalloc",
        "mi_calloc",
        "mi_realloc",
        "mi_rezalloc",
        "mi_recalloc",
        "mi_expand",
        "mi_heap_",
        "mi_new",
        "mi_strdup",
        "mi_strndup",
        "mi_realpath",
        "mi_aligned_",
        "mi_posix_memalign",
        "mi_memalign",
        "mi_valloc",
        "mi_pvalloc",
        "_mi_",
    ];
    // The malloc family itself counts too, where an executable defines it (rustc links
    // jemalloc under these names) and its module is not the C library's.
    if EXACT.contains(&name)
        || MALLOC_FAMILY.contains(&name)
        || PREFIXES.iter().any(|p| name.starts_with(p))
    {
        return true;
    }
    if zmalloc_family(name) {
        return true;
    }
    let allocates = |rest: &str| {
        ["alloc", "Alloc", "dup", "Dup", "New", "Resize", "GC_Link"]
            .iter()
            .any(|w| rest.contains(w))
    };
    if let Some(rest) = name.strip_prefix("CRYPTO_") {
        return rest.ends_with("alloc") || rest.contains("dup");
    }
    if let Some(rest) = name.strip_prefix("_PyObject_").or_else(|| name.strip_prefix("_PyMem_")) {
        return allocates(rest);
    }
    if let Some(rest) = name.strip_prefix("sqlite3") {
        let rest = rest.strip_prefix('_').unwrap_or(rest);
        const WORDS: &[&str] = &[
            "Malloc",
            "malloc",
            "Realloc",
            "realloc",
            "MemMalloc",
            "MemRealloc",
            "DbMalloc",
            "DbRealloc",
            "DbStrDup",
            "DbStrNDup",
            "StrDup",
            "StrNDup",
        ];
        return WORDS.iter().any(|w| rest.starts_with(w));
    }
    false
}

/// redis's and valkey's allocation wrappers (`zmalloc.h`): every allocation of the server
/// goes through one (they count the memory used and abort on failure), so without them the
/// top four sites of redis-server were `zmalloc`, `zcalloc`, `zrealloc` and
/// `ztrymalloc_usable`. Matched whole, as `z`, an optional `try`, `malloc`, `calloc` or
/// `realloc`, an optional `_usable`, `_no_tcache` or `_num` (`zcalloc_num`), an optional
/// `_internal` (the static bodies the others call), and `zstrdup`: `zmalloc_size`,
/// `zmalloc_used_memory` and `zfree` allocate nothing. zlib's `zcalloc` (its default
/// allocator, called through `strm->zalloc`) fits too, and is plumbing for the same reason.
fn zmalloc_family(name: &str) -> bool {
    if name == "zstrdup" {
        return true;
    }
    let Some(rest) = name.strip_prefix('z') else { return false };
    let rest = rest.strip_prefix("try").unwrap_or(rest);
    let Some(rest) = ["malloc", "calloc", "realloc"].iter().find_map(|f| rest.strip_prefix(f))
    else {
        return false;
    };
    let rest = rest.strip_suffix("_internal").unwrap_or(rest);
    matches!(rest, "" | "_usable" | "_no_tcache" | "_num")
}

/// Splits `SELF as TRAIT>::…` (the text after a leading `<`) at the top-level ` as `.
fn split_qualified(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0i32;
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b' ' if depth == 0 && s[i..].starts_with(" as ") => {
                return Some((&s[..i], &s[i + 4..]));
            }
            _ => {}
        }
    }
    None
}

/// The regular expression for pprof's `drop_frames` (matched by viewers against whole
/// function names without their parameters): the C and C++ allocation entries and wrappers
/// of rule 3 (the same families as [`is_std_plumbing`]'s, which a test holds them to)
/// and the user's expressions. Rust's and C++'s `std::`-style prefixes are left
/// out: a viewer drops a matching frame *and every frame below it*, and a program's code
/// runs below `std::thread` and iterator frames (the writer leaves the plumbing below each
/// site out of the samples already, see the [site rules](super) §3).
pub fn drop_frames_pattern(skip: &SiteSkip) -> String {
    let mut alternatives: Vec<String> = [
        "operator new.*",
        "__cxa_allocate.*",
        "__gnu_cxx::new_allocator.*",
        "std::allocator.*",
        "std::__new_allocator.*",
        "alloc::alloc::.*",
        "alloc::raw_vec::.*",
        "__GI_.*",
        "__libc_(malloc|calloc|realloc|memalign).*",
        "(__)?str(n)?dup",
        "x(malloc|calloc|zalloc|realloc|nmalloc|nrealloc|2realloc|2nrealloc|palloc|reallocarray|mallocz|strdup|strndup|memdup|memdupz)",
        "z(try)?(malloc|calloc|realloc)(_usable|_no_tcache|_num)?(_internal)?|zstrdup",
        "g_(malloc|malloc0|realloc|try_malloc|try_realloc|slice_alloc|new|strdup|strndup|memdup).*",
        "CRYPTO_.*(alloc|dup)",
        "OPENSSL_.*",
        "sqlite3(_)?(Malloc|malloc|Realloc|realloc|MemMalloc|MemRealloc|DbMalloc|DbRealloc|DbStrDup|DbStrNDup|StrDup|StrNDup).*",
        "mallocWithAlarm|dbMallocRawFinish|dbReallocFinish",
        "PyMem_.*",
        "PyObject_(Malloc|Calloc|Realloc)",
        "_PyObject_.*(alloc|Alloc|New|Resize|GC_Link).*",
        "_PyMem_.*",
        "pymalloc_.*",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    // A user's unanchored expression, within the viewer's anchored match.
    alternatives.extend(skip.patterns().iter().map(|p| format!(".*(?:{p}).*")));
    alternatives.join("|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::site::is_plumbing_file;

    #[test]
    fn plumbing_through_std_traits() {
        assert!(is_std_plumbing("<T as core::convert::Into<U>>::into"));
        assert!(is_std_plumbing("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem"));
        assert!(is_std_plumbing("<alloc::vec::Vec<T> as core::clone::Clone>::clone"));
        assert!(is_std_plumbing("<&[u8] as core::fmt::Debug>::fmt"));
        assert!(!is_std_plumbing("<app::Node as core::clone::Clone>::clone"));
        assert!(!is_std_plumbing("<app::Node as Clone>::clone"));
        assert!(!is_std_plumbing("<T as app::Make>::make"));
        assert!(!is_std_plumbing("app::leaky_cache::Cache::remember"));
        assert!(!is_std_plumbing("my::std_like::x"));
        assert!(!is_std_plumbing("alloc"));
        assert!(!is_std_plumbing("fill_table"));
    }

    /// The frames between a Rust program's allocation and its statically linked global
    /// allocator, as line-tables-only builds name them: the shim, the crate's
    /// `GlobalAlloc` impl, the allocator's C inside.
    #[test]
    fn global_allocator_frames_are_plumbing() {
        for name in [
            "__rustc::__rust_alloc",
            "__rustc::__rust_realloc",
            "__rustc::__rg_alloc",
            "<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::alloc",
            "tikv_jemallocator::layout_to_flags",
            "tikv_jemalloc_sys::mallocx",
            "<mimalloc::MiMalloc as core::alloc::global::GlobalAlloc>::alloc_zeroed",
            "libmimalloc_sys::mi_malloc_aligned",
            "<jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::dealloc",
        ] {
            assert!(is_std_plumbing(name), "{name}");
        }
        for name in ["allocators::keep_site", "app::mimalloc_stats", "<app::Pool as Drop>::drop"] {
            assert!(!is_std_plumbing(name), "{name}");
        }
        let registry = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
        for file in [
            format!("{registry}/tikv-jemallocator-0.6.1/src/lib.rs"),
            format!("{registry}/mimalloc-0.1.52/src/lib.rs"),
            format!("{registry}/libmimalloc-sys-0.1.49/c_src/mimalloc/v3/src/alloc.c"),
            "/w/target/release/build/tikv-jemalloc-sys-83249cf5d07003ce/out/build/src/jemalloc.c"
                .to_owned(),
        ] {
            assert!(is_plumbing_file(&file), "{file}");
        }
        for file in ["/work/mimalloc-bench/src/main.rs", "/work/app/src/mimalloc.rs"] {
            assert!(!is_plumbing_file(file), "{file}");
        }
    }

    #[test]
    fn cpp_names() {
        for name in [
            "operator new(unsigned long)",
            "operator new[](unsigned long)",
            "operator new(unsigned long, std::nothrow_t const&)",
            "operator new[](unsigned long, std::align_val_t)",
            "operator new(unsigned long, std::align_val_t, std::nothrow_t const&)",
            "__gnu_cxx::new_allocator<int>::allocate(unsigned long, void const*)",
            "std::__new_allocator<long>::allocate(unsigned long, void const*)",
            "std::allocator_traits<std::allocator<long> >::allocate(std::allocator<long>&, unsigned long)",
            "void std::vector<long, std::allocator<long> >::_M_realloc_insert<long>(__gnu_cxx::__normal_iterator<long*, std::vector<long, std::allocator<long> > >, long&&)",
            "long& std::vector<long, std::allocator<long> >::emplace_back<long>(long&&)",
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_construct(unsigned long, char)",
            "std::_Rb_tree_iterator<std::pair<int const, int> > std::_Rb_tree<int, std::pair<int const, int>, std::_Select1st<std::pair<int const, int> >, std::less<int>, std::allocator<std::pair<int const, int> > >::_M_emplace_hint_unique<std::piecewise_construct_t const&, std::tuple<int const&>, std::tuple<> >(std::_Rb_tree_const_iterator<std::pair<int const, int> >, std::piecewise_construct_t const&, std::tuple<int const&>&&, std::tuple<>&&)",
            "std::operator+<char, std::char_traits<char>, std::allocator<char> >(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)",
            "__cxa_allocate_exception",
        ] {
            assert!(is_std_plumbing(name), "{name}");
        }
        for name in [
            "fill(int)",
            "grow_vector(int)",
            "app::Cache::insert(int, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)",
            "std::vector<int, std::allocator<int> > app::make<int>(int)",
            "(anonymous namespace)::build(std::vector<int> const&)",
            "app::Functor::operator()(int) const",
            "fill(int)::{lambda(int)#1}::operator()(int) const",
            "main",
        ] {
            assert!(!is_std_plumbing(name), "{name}");
        }
    }

    #[test]
    fn c_names() {
        for name in [
            "__GI___strdup",
            "__libc_malloc",
            "__libc_calloc",
            "_IO_file_doallocate",
            "strdup",
            "__strndup",
            "getline",
            "__getdelim",
            "__vasprintf_internal",
            "xmalloc",
            "xrealloc",
            "xcalloc",
            "xstrdup",
            "g_malloc",
            "g_malloc0_n",
            "g_realloc_n",
            "g_strdup_printf",
            "g_slice_alloc0",
            "CRYPTO_zalloc",
            "CRYPTO_malloc",
            "CRYPTO_realloc",
            "CRYPTO_strdup",
            "OPENSSL_sk_new",
            "sqlite3Malloc",
            "sqlite3MallocZero",
            "sqlite3MemMalloc",
            "sqlite3MemRealloc",
            "sqlite3DbMallocRawNN",
            "sqlite3DbMallocZero",
            "sqlite3DbRealloc",
            "sqlite3DbStrDup",
            "sqlite3_malloc64",
            "sqlite3_realloc",
            "mallocWithAlarm",
            "PyMem_Malloc",
            "PyMem_RawRealloc",
            "PyObject_Malloc",
            "PyObject_Calloc",
            "PyObject_Realloc",
            "_PyObject_Malloc",
            "_PyObject_GC_New",
            "_PyObject_GC_NewVar",
            "_PyMem_RawMalloc",
            "pymalloc_alloc",
            "malloc",
            "posix_memalign",
            "__rust_alloc",
            "__rust_dealloc",
            "__rg_alloc",
            "__rdl_alloc_zeroed",
            "_rjem_malloc",
            "_rjem_mallocx",
            "_rjem_sdallocx",
            "_rjem_je_malloc_default",
            "je_malloc_default",
            "mallocx",
            "sdallocx",
            "mi_malloc_aligned",
            "mi_zalloc_aligned",
            "mi_heap_malloc_aligned_at",
            "_mi_malloc_generic",
        ] {
            assert!(is_std_plumbing(name), "{name}");
        }
        for name in [
            "xml_parse",
            "x",
            "parse_tokens",
            "CRYPTO_free",
            "sqlite3VdbeExec",
            "sqlite3_prepare_v2",
            "_PyObject_Call",
            "_PyEval_EvalFrameDefault",
            "getline_wrapper",
            "g_main_loop_run",
            "malloc_trim_cache",
            "mi_config_load",
            "rjem_app",
        ] {
            assert!(!is_std_plumbing(name), "{name}");
        }
    }

    /// One name or more of each wrapper family (xmalloc, glib, OpenSSL, CPython, redis's
    /// zmalloc), with the program functions beside them that are not wrappers.
    const WRAPPERS: &[&str] = &[
        "xmalloc",
        "xcalloc",
        "xrealloc",
        "xstrdup",
        "g_malloc",
        "g_malloc0",
        "g_realloc",
        "g_try_malloc",
        "g_try_malloc0_n",
        "g_malloc_n",
        "g_malloc0_n",
        "g_realloc_n",
        "g_slice_alloc",
        "g_slice_alloc0",
        "g_strdup",
        "OPENSSL_malloc",
        "CRYPTO_malloc",
        "CRYPTO_zalloc",
        "CRYPTO_realloc",
        "PyMem_RawMalloc",
        "PyMem_RawCalloc",
        "PyMem_RawRealloc",
        "PyMem_Malloc",
        "PyMem_Calloc",
        "PyMem_Realloc",
        "PyObject_Malloc",
        "PyObject_Calloc",
        "PyObject_Realloc",
        "_PyMem_RawMalloc",
        "_PyObject_Malloc",
        "zmalloc",
        "zcalloc",
        "zrealloc",
        "ztrymalloc",
        "ztrymalloc_usable",
        "ztrycalloc",
        "ztrycalloc_usable",
        "ztryrealloc",
        "ztryrealloc_usable",
        "zmalloc_usable",
        "zcalloc_usable",
        "zrealloc_usable",
        "zmalloc_no_tcache",
        "zcalloc_num",
        "ztrymalloc_usable_internal",
        "zstrdup",
    ];
    const NOT_WRAPPERS: &[&str] = &[
        "zfree",
        "zfree_usable",
        "zmalloc_size",
        "zmalloc_used_memory",
        "zmalloc_get_rss",
        "zlibc_free",
        "zipmapNew",
        "zmallocx",
        "sdsMakeRoomFor",
        "_sdsnewlen",
        "g_main_loop_run",
        "PyObject_Call",
    ];

    /// Every wrapper family is plumbing, and in pprof's `drop_frames`: the two forms of the
    /// list agree.
    #[test]
    fn wrapper_families_are_plumbing_and_dropped() {
        let re = regex::Regex::new(&format!("^(?:{})$", drop_frames_pattern(&SiteSkip::default())))
            .unwrap();
        for name in WRAPPERS {
            assert!(is_std_plumbing(name), "{name}");
            assert!(re.is_match(name), "{name}");
        }
        for name in NOT_WRAPPERS {
            assert!(!is_std_plumbing(name), "{name}");
            assert!(!re.is_match(name), "{name}");
        }
    }

    #[test]
    fn drop_frames_is_a_regex_of_the_wrappers() {
        let mut skip = SiteSkip::default();
        skip.add("my_alloc", "--site-skip").unwrap();
        let re = regex::Regex::new(&format!("^(?:{})$", drop_frames_pattern(&skip))).unwrap();
        for name in ["operator new", "xmalloc", "CRYPTO_zalloc", "g_malloc0_n", "do_my_alloc"] {
            assert!(re.is_match(name), "{name}");
        }
        for name in ["fill", "main", "std::rt::lang_start", "xml_parse", "app::alloc_table"] {
            assert!(!re.is_match(name), "{name}");
        }
    }
}
