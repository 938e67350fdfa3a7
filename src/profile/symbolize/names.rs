//! Symbols' raw names as reports show them: [`demangle`], the one function every path
//! that names a frame goes through (this process's symbols, the ELF symbol tables, DWARF).
//! Only a mangled name is handed to a demangler: a legacy Rust hash dropped, a C++ name
//! the demangler cannot read read from its prefix; every other name is kept as it is.

/// The name reports show for a symbol whose raw (linkage) name is `raw`: demangled when it
/// is mangled (Rust's legacy `_ZN…17h<hash>E` and v0 `_R…`, Itanium C++'s `_Z…` and GCC's
/// `_GLOBAL__…` constructors; each also behind Mach-O's extra `_`), `raw` itself otherwise.
///
/// Why the prefix is checked here and not left to the demanglers: cpp_demangle, as
/// libiberty does, reads a bare type encoding as a whole symbol, so a C function named
/// `f`, `w`, `Pi`, `Dn` or `Sa` came out as `float`, `wchar_t`, `int*`,
/// `std::nullptr_t` or `std::allocator` (and the last two, taken for the C++ library's
/// plumbing, were folded into their caller). A name with a mangling's prefix that its
/// demangler cannot read is read from its prefix ([`unmangled`]), else kept as it is.
pub fn demangle(raw: &str) -> String {
    // `__Z…`/`__R…`: Mach-O prefixes every symbol with `_`; ELF does not.
    let bare = raw.strip_prefix('_').filter(|r| r.starts_with("_Z") || r.starts_with("_R"));
    let bare = bare.unwrap_or(raw);
    // Legacy Rust names are Itanium-shaped (`_ZN…E`): tried as Rust first, which fails on a
    // C++ name's parameter types after the `E`, as addr2line does.
    if bare.starts_with("_ZN") || bare.starts_with("_R") {
        if let Ok(d) = rustc_demangle::try_demangle(bare) {
            // `{:#}` leaves the legacy hash out.
            return strip_hash(&format!("{d:#}")).to_owned();
        }
    }
    if bare.starts_with("_Z") || bare.starts_with("_GLOBAL_") {
        return cpp_demangled(bare).or_else(|| cpp_prefix(bare)).unwrap_or_else(|| raw.to_owned());
    }
    raw.to_owned()
}

/// An Itanium C++ name demangled, if cpp_demangle reads it.
#[cfg(feature = "report")]
fn cpp_demangled(mangled: &str) -> Option<String> {
    cpp_demangle::Symbol::new(mangled.as_bytes()).ok()?.demangle().ok()
}

/// Without `report` (the preload library's build, which names no frame) there is no C++
/// demangler: a C++ name is read from its prefix ([`unmangled`]).
#[cfg(not(feature = "report"))]
fn cpp_demangled(_: &str) -> Option<String> {
    None
}

/// Drops a trailing legacy-mangling hash (`::h0123456789abcdef`) from a demangled name.
pub fn strip_hash(name: &str) -> &str {
    if let Some(pos) = name.rfind("::h") {
        let hash = &name[pos + 3..];
        if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return &name[..pos];
        }
    }
    name
}

/// `name`, or, for a C++ name the demangler could not read (it gives some template names
/// with expressions back mangled: `std::make_shared`'s `enable_if<!is_array<T>::value>`),
/// the qualified name its mangling starts with: `_ZSt11make_sharedI…` is
/// `std::make_shared<…>`. That is enough to read it and to know whose code it is.
pub fn unmangled(name: &str) -> String {
    cpp_prefix(name).unwrap_or_else(|| name.to_owned())
}

/// The qualified name at the start of an Itanium-mangled name (`_Z`, then `N…` nested
/// or a single name, each component `St` or `<length><identifier>`), with `<…>` for
/// template arguments and `::…` for what could not be read after them.
fn cpp_prefix(name: &str) -> Option<String> {
    let rest = name.strip_prefix("_Z")?.as_bytes();
    let nested = rest.first() == Some(&b'N');
    let mut i = usize::from(nested);
    while nested && matches!(rest.get(i), Some(b'K' | b'V' | b'r')) {
        i += 1;
    }
    let mut parts: Vec<String> = Vec::new();
    let mut tail = "";
    loop {
        match rest.get(i) {
            Some(b'S') if rest.get(i + 1) == Some(&b't') => {
                parts.push("std".into());
                i += 2;
                continue;
            }
            Some(b'0'..=b'9') => {
                let digits = rest[i..].iter().take_while(|b| b.is_ascii_digit()).count();
                let len: usize = std::str::from_utf8(&rest[i..i + digits]).ok()?.parse().ok()?;
                let start = i + digits;
                let ident = rest.get(start..start.checked_add(len)?)?;
                parts.push(String::from_utf8_lossy(ident).into_owned());
                i = start + len;
            }
            Some(b'I') => {
                tail = if nested { "<…>::…" } else { "<…>" };
                break;
            }
            Some(b'E') | None => break,
            Some(_) => {
                tail = "::…";
                break;
            }
        }
        if !nested {
            if rest.get(i) == Some(&b'I') {
                tail = "<…>";
            }
            break;
        }
    }
    // A name whose first component could not be read is left as it is.
    if parts.is_empty() || parts.iter().all(|p| p == "std") {
        return None;
    }
    Some(format!("{}{tail}", parts.join("::")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_demangler_gives_back_are_read_from_their_prefix() {
        let make_shared = "_ZSt11make_sharedINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEJicEESt10shared_ptrINSt9enable_ifIXntsrSt8is_arrayIT_E5valueES9_E4typeEEDpOT0_";
        assert_eq!(unmangled(make_shared), "std::make_shared<…>");
        assert_eq!(unmangled("_ZNSt6vectorIiSaIiEE9push_backERKi"), "std::vector<…>::…");
        assert_eq!(unmangled("_ZN3app5Cache6insertEv"), "app::Cache::insert");
        assert_eq!(unmangled("_Z4fillv"), "fill");
        for kept in ["fill(int)", "_Z", "_Zx", "_ZSt", "_Z99short", "main"] {
            assert_eq!(unmangled(kept), kept);
        }
    }

    /// C functions whose names are also Itanium type encodings keep their names; real
    /// manglings of both schemes are demangled; a name with a mangling's prefix that does
    /// not parse is kept.
    #[test]
    fn only_mangled_names_are_demangled() {
        for name in ["w", "f", "Pi", "Dn", "Sa", "main", "xmalloc", "f.constprop.0", "_start"] {
            assert_eq!(demangle(name), name);
        }
        for kept in ["_Zfoo", "_Z", "_R", "_Rfoo", "__Zfoo", "_GLOBAL_x"] {
            assert_eq!(demangle(kept), kept);
        }
        let cpp = [
            ("_Z4fillv", "fill()"),
            ("_Z4filli", "fill(int)"),
            ("_ZN3app5Cache6insertEi", "app::Cache::insert(int)"),
            (
                "_ZNSt6vectorIiSaIiEE9push_backERKi",
                "std::vector<int, std::allocator<int> >::push_back(int const&)",
            ),
            ("_Znwm", "operator new(unsigned long)"),
            ("_Z4fillv.cold", "fill() [clone .cold]"),
            ("__Z4fillv", "fill()"),
        ];
        for (raw, want) in cpp {
            assert_eq!(demangle(raw), want, "{raw}");
        }
        let rust = [
            ("_ZN5sites10fill_table17h0123456789abcdefE", "sites::fill_table"),
            ("_ZN4core3ptr13drop_in_place17hbfa3c6b5a79a2a52E", "core::ptr::drop_in_place"),
            // From rustc, `-C symbol-mangling-version=v0` and the default (legacy).
            ("_RNvCsfq2Zq5gqAK1_2v010fill_table", "v0::fill_table"),
            ("_ZN2v010fill_table17h2b229ab48d4217e6E", "v0::fill_table"),
            ("_RNvNtCs1234_5alloc5alloc12___rust_alloc", "alloc::alloc::__rust_alloc"),
        ];
        for (raw, want) in rust {
            assert_eq!(demangle(raw), want, "{raw}");
        }
        // GCC's constructors of a translation unit, as c++filt reads them.
        assert_eq!(demangle("_GLOBAL__I__Z3foov"), "global constructors keyed to foo()");
        assert_eq!(demangle("_GLOBAL__sub_I_main.cpp"), "_GLOBAL__sub_I_main.cpp");
        // A C++ template name the demangler gives up on is read from its prefix.
        let make_shared = "_ZSt11make_sharedINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEJicEESt10shared_ptrINSt9enable_ifIXntsrSt8is_arrayIT_E5valueES9_E4typeEEDpOT0_";
        assert!(
            demangle(make_shared).starts_with("std::make_shared<"),
            "{}",
            demangle(make_shared)
        );
    }

    #[test]
    fn hashes_are_stripped() {
        assert_eq!(strip_hash("foo::bar::h0123456789abcdef"), "foo::bar");
        assert_eq!(strip_hash("foo::bar::hello"), "foo::bar::hello");
        assert_eq!(strip_hash("foo"), "foo");
    }
}
