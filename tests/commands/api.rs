//! The public API is a decision: every item a user of the crate can name (a `pub` item
//! reachable through `pub` modules from `src/lib.rs`, a `pub` field, a `pub` method of an
//! inherent `impl`, a `pub use`) is listed in `tests/public-api.txt`, and this test fails
//! when the list the sources give differs from it. A change to the API is then a visible
//! change to that file in the same commit: `MEMPROF_BLESS=1 cargo test --release --test
//! commands -- api::` rewrites it.
//!
//! The sources are read with `syn`, not through rustdoc's JSON (which needs a nightly
//! toolchain): items under `#[cfg(test)]` are left out; items under a feature gate are
//! listed whatever the features (the list is of the whole crate); trait implementations
//! are not listed (a trait's methods are the trait's), nor are enum variants and trait
//! items one by one (they are public with their enum or trait).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::{ImplItem, Item, Visibility};

const SNAPSHOT: &str = "tests/public-api.txt";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn is_pub(v: &Visibility) -> bool {
    matches!(v, Visibility::Public(_))
}

/// True for `#[cfg(test)]` (what only the crate's own tests compile).
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>().is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The `#[path = "…"]` of a module declaration, if it has one.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The file of module `name` declared in `file` (whose own modules live in `dir`).
fn module_file(dir: &Path, name: &str, attrs: &[syn::Attribute]) -> PathBuf {
    if let Some(p) = path_attr(attrs) {
        return dir.join(p);
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

/// The directory where the modules declared in `file` live: its own directory for
/// `lib.rs` and `mod.rs`, else a directory named after the file.
fn child_dir(file: &Path) -> PathBuf {
    let stem = file.file_stem().unwrap().to_str().unwrap();
    let parent = file.parent().unwrap();
    if stem == "mod" || stem == "lib" {
        parent.to_owned()
    } else {
        parent.join(stem)
    }
}

fn tokens(t: &impl quote::ToTokens) -> String {
    t.to_token_stream().to_string()
}

/// What the walk gathers: the public items of the modules a user can reach, and every
/// inherent `impl`'s public methods, by the name of their type (an `impl` may sit in any
/// module, private ones included, and its methods are public wherever its type is).
#[derive(Default)]
struct Found {
    items: BTreeSet<String>,
    /// (the type's last path segment, `method` or `const`, the name).
    impls: Vec<(String, &'static str, String)>,
}

/// Walks `items` (module path `at`, files under `dir`); `reachable`: a user can name the
/// module's public items (every module from the root to it is public).
fn walk(items: &[Item], at: &str, dir: &Path, reachable: bool, found: &mut Found) {
    for item in items {
        match item {
            Item::Mod(m) if !test_only(&m.attrs) => {
                let path = format!("{at}::{}", m.ident);
                let reach = reachable && is_pub(&m.vis);
                if reach {
                    found.items.insert(format!("mod {path}"));
                }
                match &m.content {
                    Some((_, inner)) => {
                        walk(inner, &path, &dir.join(m.ident.to_string()), reach, found)
                    }
                    None => {
                        let file = module_file(dir, &m.ident.to_string(), &m.attrs);
                        let text = std::fs::read_to_string(&file)
                            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                        let parsed = syn::parse_file(&text)
                            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                        walk(&parsed.items, &path, &child_dir(&file), reach, found);
                    }
                }
            }
            Item::Impl(i) if i.trait_.is_none() && !test_only(&i.attrs) => {
                let ty = match &*i.self_ty {
                    syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                    _ => None,
                };
                let Some(ty) = ty else { continue };
                for it in &i.items {
                    match it {
                        ImplItem::Fn(f) if is_pub(&f.vis) && !test_only(&f.attrs) => {
                            found.impls.push((ty.clone(), "method", f.sig.ident.to_string()))
                        }
                        ImplItem::Const(c) if is_pub(&c.vis) => {
                            found.impls.push((ty.clone(), "const", c.ident.to_string()))
                        }
                        _ => {}
                    }
                }
            }
            _ if !reachable => {}
            Item::Fn(f) if is_pub(&f.vis) && !test_only(&f.attrs) => {
                found.items.insert(format!("fn {at}::{}", f.sig.ident));
            }
            Item::Struct(s) if is_pub(&s.vis) && !test_only(&s.attrs) => {
                found.items.insert(format!("struct {at}::{}", s.ident));
                for (i, f) in s.fields.iter().enumerate() {
                    if is_pub(&f.vis) {
                        let name = f.ident.as_ref().map_or(i.to_string(), |n| n.to_string());
                        found.items.insert(format!("field {at}::{}::{name}", s.ident));
                    }
                }
            }
            Item::Enum(e) if is_pub(&e.vis) && !test_only(&e.attrs) => {
                found.items.insert(format!("enum {at}::{}", e.ident));
            }
            Item::Trait(t) if is_pub(&t.vis) && !test_only(&t.attrs) => {
                found.items.insert(format!("trait {at}::{}", t.ident));
            }
            Item::Const(c) if is_pub(&c.vis) && !test_only(&c.attrs) => {
                found.items.insert(format!("const {at}::{}", c.ident));
            }
            Item::Static(s) if is_pub(&s.vis) && !test_only(&s.attrs) => {
                found.items.insert(format!("static {at}::{}", s.ident));
            }
            Item::Type(t) if is_pub(&t.vis) && !test_only(&t.attrs) => {
                found.items.insert(format!("type {at}::{}", t.ident));
            }
            Item::Use(u) if is_pub(&u.vis) && !test_only(&u.attrs) => {
                found.items.insert(format!("use {at}::{{{}}}", tokens(&u.tree).replace(' ', "")));
            }
            Item::Macro(m) if m.ident.is_some() => {
                found.items.insert(format!("macro {}", m.ident.as_ref().unwrap()));
            }
            _ => {}
        }
    }
}

/// The public API as the sources give it, one line an item, sorted.
fn public_api() -> String {
    let lib = root().join("src/lib.rs");
    let parsed = syn::parse_file(&std::fs::read_to_string(&lib).unwrap()).unwrap();
    let mut found = Found::default();
    walk(&parsed.items, "memprof", &root().join("src"), true, &mut found);
    // A type is public when a reachable module defines it or re-exports it: its inherent
    // methods are listed under every public path that names it.
    let mut paths: Vec<(String, String)> = Vec::new();
    for line in &found.items {
        let (kind, path) = line.split_once(' ').unwrap();
        if matches!(kind, "struct" | "enum" | "trait" | "type") {
            let name = path.rsplit("::").next().unwrap();
            paths.push((name.to_owned(), path.to_owned()));
        }
        if kind == "use" {
            let names = path.split(|c: char| !c.is_alphanumeric() && c != '_');
            for name in names.filter(|n| n.starts_with(|c: char| c.is_ascii_uppercase())) {
                paths.push((name.to_owned(), format!("{name} (re-exported)")));
            }
        }
    }
    let mut out = found.items;
    for (ty, kind, name) in found.impls {
        for (_, path) in paths.iter().filter(|(n, _)| *n == ty) {
            out.insert(format!("{kind} {path}::{name}"));
        }
    }
    out.into_iter().map(|l| l + "\n").collect()
}

#[test]
fn the_public_api_is_the_snapshot() {
    let now = public_api();
    let committed = std::fs::read_to_string(root().join(SNAPSHOT)).unwrap_or_default();
    if now == committed {
        return;
    }
    if crate::programs::blessing() {
        std::fs::write(root().join(SNAPSHOT), &now).unwrap();
        return;
    }
    let now_set: BTreeSet<&str> = now.lines().collect();
    let then: BTreeSet<&str> = committed.lines().collect();
    let added: Vec<&str> = now_set.difference(&then).copied().collect();
    let removed: Vec<&str> = then.difference(&now_set).copied().collect();
    panic!(
        "the public API changed; if that is the decision, `MEMPROF_BLESS=1 cargo test \
         --release --test commands -- api::` records it in {SNAPSHOT}\nadded ({}):\n  {}\n\
         removed ({}):\n  {}",
        added.len(),
        added.join("\n  "),
        removed.len(),
        removed.join("\n  ")
    );
}

/// The lister sees what it must: a public item of a public module, a re-export, a public
/// method, and nothing of a private module.
#[test]
fn the_lister_follows_visibility() {
    let api = public_api();
    for expected in [
        "mod memprof::profile\n",
        "struct memprof::profile::Profile\n",
        "use memprof::{config::{Config,Unwinder}}\n",
        "method memprof::profile::Profile::read_file\n",
        "method Sampled (re-exported)::new\n",
    ] {
        assert!(api.contains(expected), "{expected}");
    }
    assert!(!api.contains("memprof::engine::"), "a private module's items are not the API");
}
