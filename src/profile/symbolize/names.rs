//! Names as the demanglers leave them: a legacy Rust hash dropped, a C++ name the
//! demangler gave back mangled read from its prefix.

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

    #[test]
    fn hashes_are_stripped() {
        assert_eq!(strip_hash("foo::bar::h0123456789abcdef"), "foo::bar");
        assert_eq!(strip_hash("foo::bar::hello"), "foo::bar::hello");
        assert_eq!(strip_hash("foo"), "foo");
    }
}
