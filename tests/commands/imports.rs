//! Imports run downward (issue 45): the library's files, read as text, form a graph with no
//! circle, and nothing under `src/sys/` (the bottom layer) reaches a file outside it.
//!
//! # 1. The graph
//! Its nodes are the library's source files: `src/lib.rs` and every file its `mod x;`
//! declarations reach (`x.rs` or `x/mod.rs`; `src/bin/` is another crate). A file has an edge
//! to another when its code names a path into it: `crate::a::b::Item` (in a `use` or in an
//! expression; `$crate::` in a macro too), `super::…`, `self::…`, or a path whose first
//! segment is a child module the file declares (`use per_thread::State;`). A path names the
//! file of the deepest module it spells, and a name a module imports (`use`, `pub use`,
//! `pub(crate) use`, renamed or not, not by `*`) is followed to where it comes from: through
//! `lib.rs`'s `pub use error::Error`, `crate::Error` is an edge to `error.rs`; through
//! `queue/mod.rs`'s `use …::entry::Entry`, a child's `super::Entry` is an edge to `entry.rs`.
//! The import itself is an edge of the file that makes it. A glob import (`use super::*`)
//! is an edge to the module it names.
//!
//! # 2. A folder's face and its files
//! Declaring `mod child;` is no edge. A child that uses an item its parent defines
//! (`super::Profile`) has an edge up to the parent; but a face's edges down into its own
//! folder (a `mod.rs`, `lib.rs` or `x.rs` that re-exports, calls or names the files of
//! `x/`) are left out. A face composes its folder: it stands above its files as their
//! public name and below them when they share its types, and counting both would make
//! every folder whose face defines what its files share (`profile/mod.rs`'s `Profile`,
//! `gc/mod.rs`, the agent's lock, `testing.rs`'s `Allocated`, `queue/mod.rs`'s `Queue`) a
//! circle. What stays forbidden is every other circle: among sibling files, across
//! folders, and through a face to outside its folder and back (a child → its face →
//! another folder → the child). That is the circle issue 45 was about: `live` → `measure`
//! → `sampler` → `lost` → `push` → `live`, each a file the others could not be read without.
//!
//! # 3. What is left out, and why
//! Comments (doc links name paths without depending on them), string literals, `pub(in …)`
//! visibilities, and code under `#[cfg(test)]` or `#[cfg(all(test, …))]`: a file's
//! `mod tests`, test-only files such as `sys/alloc_count.rs` and test-only helpers. Tests
//! reach across layers on purpose (a queue test uses the counting allocator, a push test the
//! queue's test helpers) and are built into no program.
//!
//! # 4. What fails
//! (a) every strongly connected component of more than one file, printed as one closed walk
//! through all its files, each step with the line that makes it; (b) every edge from a file
//! under `src/sys/` to a file outside it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// A token of Rust source: an identifier, `::`, or one punctuation character, with its line.
struct Tok {
    text: String,
    line: usize,
}

/// The tokens of `src` outside comments, strings and character literals (lifetimes lose their
/// quote; numbers become `0`; `$crate` becomes `crate`).
fn tokens(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let ident = |ch: char| ch == '_' || ch.is_alphanumeric();
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(at(i) == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            i += 1;
            while at(i) != '"' {
                line += usize::from(at(i) == '\n');
                i += if at(i) == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                i += 2;
                while at(i) != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1; // a lifetime: its name follows as an identifier
            }
        } else if ch.is_ascii_digit() {
            while ident(at(i)) || (at(i) == '.' && at(i + 1).is_ascii_digit()) {
                i += 1;
            }
            out.push(Tok { text: "0".into(), line });
        } else if ident(ch) || (ch == '$' && ident(at(i + 1))) {
            let start = i;
            i += 1;
            while ident(at(i)) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && (at(i) == '#' || at(i) == '"') && at(i + 1) != '[' && !ident(at(i + 1)) {
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                i += hashes + 1;
                while !(at(i) == '"' && (1..=hashes).all(|k| at(i + k) == '#')) {
                    line += usize::from(at(i) == '\n');
                    i += 1;
                }
                i += hashes + 1;
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                // A byte or C string: the string itself is skipped next round.
            } else {
                let text = word.strip_prefix('$').unwrap_or(&word).to_string();
                out.push(Tok { text, line });
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Tok { text: "::".into(), line });
            i += 2;
        } else {
            out.push(Tok { text: ch.into(), line });
            i += 1;
        }
    }
    out
}

/// A path one file names: where it stands (the module, inline modules included), its
/// segments as written, the line of its last segment, and, for a `use`, the name it binds.
struct Named {
    scope: Vec<String>,
    segs: Vec<String>,
    line: usize,
    binds: Option<String>,
}

/// What one file declares and names, test-only code left out.
#[derive(Default)]
struct Scan {
    children: Vec<String>,
    named: Vec<Named>,
}

fn is_word(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c == '_' || c.is_alphabetic())
}

/// The index after the bracketed group that opens at `i`.
fn close(t: &[Tok], mut i: usize) -> usize {
    let mut depth = 0;
    while i < t.len() {
        match t[i].text.as_str() {
            "{" | "(" | "[" => depth += 1,
            "}" | ")" | "]" => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index after the item that starts at `i`: its `;` or `,`, or its first `{…}` block.
fn skip_item(t: &[Tok], mut i: usize) -> usize {
    while i < t.len() {
        match t[i].text.as_str() {
            "{" => return close(t, i),
            "(" | "[" => i = close(t, i),
            "}" | ")" | "]" => return i,
            ";" | "," => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The leaves of the use tree at `i`: (segments, bound name, line). Returns the index after it.
fn use_tree(t: &[Tok], mut i: usize, prefix: Vec<String>, out: &mut Vec<Named>) -> usize {
    let mut segs = prefix;
    loop {
        match t[i].text.as_str() {
            "::" if segs.is_empty() => {
                segs.push("::".into()); // `::std`: never a module of ours
                i += 1;
            }
            "{" => {
                i += 1;
                while t[i].text != "}" {
                    i = use_tree(t, i, segs.clone(), out);
                    if t[i].text == "," {
                        i += 1;
                    }
                }
                return i + 1;
            }
            "*" => {
                out.push(Named { scope: vec![], segs, line: t[i].line, binds: None });
                return i + 1;
            }
            word => {
                let line = t[i].line;
                if word != "self" || segs.is_empty() {
                    segs.push(word.to_string());
                }
                i += 1;
                if t[i].text == "::" {
                    i += 1;
                    continue;
                }
                let mut name = segs.last().cloned().unwrap_or_default();
                if t[i].text == "as" {
                    name = t[i + 1].text.clone();
                    i += 2;
                }
                out.push(Named { scope: vec![], segs, line, binds: Some(name) });
                return i;
            }
        }
    }
}

fn scan(src: &str, module: &[String]) -> Scan {
    let t = tokens(src);
    let mut s = Scan::default();
    let mut scope = module.to_vec();
    let mut inline: Vec<i32> = Vec::new(); // the brace depth each inline module closes at
    let (mut depth, mut i) = (0i32, 0);
    while i < t.len() {
        let text = t[i].text.as_str();
        let inner = t.get(i + 1).is_some_and(|x| x.text == "!");
        let open = i + 1 + usize::from(inner);
        if text == "#" && t.get(open).is_some_and(|x| x.text == "[") {
            let end = close(&t, open);
            let attr: Vec<&str> = t[open + 1..end - 1].iter().map(|x| x.text.as_str()).collect();
            let test = attr == ["cfg", "(", "test", ")"]
                || (attr.starts_with(&["cfg", "(", "all", "("]) && attr.contains(&"test"));
            i = end;
            if test && inner {
                return Scan::default();
            }
            if test {
                while t.get(i).is_some_and(|x| x.text == "#") {
                    i = close(&t, i + 1);
                }
                i = skip_item(&t, i);
            }
            continue;
        }
        match text {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last() == Some(&depth) {
                    inline.pop();
                    scope.pop();
                }
            }
            "mod" if is_word(&t[i + 1].text) => {
                if t[i + 2].text == ";" {
                    s.children.push(t[i + 1].text.clone());
                } else {
                    scope.push(t[i + 1].text.clone());
                    inline.push(depth);
                }
            }
            "use" => {
                let first = s.named.len();
                i = use_tree(&t, i + 1, vec![], &mut s.named);
                for n in &mut s.named[first..] {
                    n.scope = scope.clone();
                }
                continue;
            }
            _ if is_word(text)
                && t.get(i + 1).is_some_and(|x| x.text == "::")
                && (i == 0 || (t[i - 1].text != "::" && t[i - 1].text != "."))
                && !(i >= 2 && t[i - 1].text == "in" && t[i - 2].text == "(") =>
            {
                let mut segs = vec![text.to_string()];
                let mut line = t[i].line;
                i += 2;
                while i < t.len() && is_word(&t[i].text) {
                    segs.push(t[i].text.clone());
                    line = t[i].line;
                    i += 1;
                    if t.get(i).is_none_or(|x| x.text != "::") {
                        break;
                    }
                    i += 1;
                }
                s.named.push(Named { scope: scope.clone(), segs, line, binds: None });
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    s
}

/// One file's edge to another: the line that makes it and that line's text.
type Edges = BTreeMap<String, BTreeMap<String, (usize, String)>>;

/// The library's files (relative to the package), each with its module path and scan.
fn library(root: &Path) -> BTreeMap<String, (Vec<String>, Scan)> {
    let mut files = BTreeMap::new();
    let mut todo = vec![(PathBuf::from("src/lib.rs"), vec!["crate".to_string()])];
    while let Some((file, module)) = todo.pop() {
        let src = std::fs::read_to_string(root.join(&file))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let s = scan(&src, &module);
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "mod.rs") => file.parent().unwrap().to_path_buf(),
            _ => file.with_extension(""),
        };
        for child in &s.children {
            let flat = dir.join(format!("{child}.rs"));
            let path =
                if root.join(&flat).exists() { flat } else { dir.join(child).join("mod.rs") };
            todo.push((path, [module.clone(), vec![child.clone()]].concat()));
        }
        files.insert(file.to_string_lossy().into_owned(), (module, s));
    }
    files
}

/// Every edge between the library's files.
fn edges(root: &Path) -> Edges {
    let files = library(root);
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut imports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    // Each named path made absolute, or `None` when it leaves the crate.
    let absolute = |module: &[String], children: &[String], n: &Named| -> Option<Vec<String>> {
        let mut segs = n.segs.iter().peekable();
        let mut base = match segs.peek()?.as_str() {
            "crate" => vec![],
            "self" | "super" => n.scope[1..].to_vec(),
            c if n.scope == module && children.iter().any(|k| k == c) => module[1..].to_vec(),
            _ => return None,
        };
        base.insert(0, "crate".into());
        if segs.peek().is_some_and(|s| *s == "crate" || *s == "self") {
            segs.next();
        }
        while segs.peek().is_some_and(|s| *s == "super") {
            segs.next();
            base.pop();
        }
        Some(base.into_iter().chain(segs.cloned()).collect())
    };
    for (file, (module, s)) in &files {
        modules.insert(module.clone(), file.clone());
        for n in &s.named {
            modules.entry(n.scope.clone()).or_insert_with(|| file.clone());
            if let (Some(name), Some(path)) = (&n.binds, absolute(module, &s.children, n)) {
                imports.insert((n.scope.clone(), name.clone()), path);
            }
        }
    }
    let resolve = |mut path: Vec<String>| -> Option<String> {
        for _ in 0..16 {
            let k = (1..=path.len()).rev().find(|k| modules.contains_key(&path[..*k]))?;
            match path.get(k).and_then(|name| imports.get(&(path[..k].to_vec(), name.clone()))) {
                Some(target) => path = [target.clone(), path[k + 1..].to_vec()].concat(),
                None => return Some(modules[&path[..k]].clone()),
            }
        }
        None
    };
    let mut out = Edges::new();
    for (file, (module, s)) in &files {
        let src = std::fs::read_to_string(root.join(file)).unwrap();
        let lines: Vec<&str> = src.lines().collect();
        for n in &s.named {
            let Some(to) = absolute(module, &s.children, n).and_then(&resolve) else { continue };
            // A face's edges into its own folder are ownership, not layering (§2).
            if &to != file && !files[&to].0.starts_with(module) {
                let text = lines[n.line - 1].trim().to_string();
                out.entry(file.clone()).or_default().entry(to).or_insert((n.line, text));
            }
        }
    }
    out
}

/// Tarjan's strongly connected components of more than one node.
fn cycles(g: &Edges) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Edges,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, (n, n));
        s.stack.push(v);
        for w in s.g.get(v).into_iter().flat_map(|m| m.keys()) {
            let low = match s.index.get(w.as_str()) {
                None => {
                    visit(s, w);
                    s.index[w.as_str()].1
                }
                Some(&(i, _)) if s.stack.contains(&w.as_str()) => i,
                Some(_) => continue,
            };
            let me = s.index.get_mut(v).unwrap();
            me.1 = me.1.min(low);
        }
        if s.index[v].0 == s.index[v].1 {
            let at = s.stack.iter().position(|&x| x == v).unwrap();
            let scc: BTreeSet<String> = s.stack.drain(at..).map(String::from).collect();
            if scc.len() > 1 {
                s.found.push(scc.into_iter().collect());
            }
        }
    }
    let mut s = State { g, index: BTreeMap::new(), stack: vec![], found: vec![] };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// The shortest path from `from` to `to` inside `within` (both in it, `to` reachable).
fn shortest(g: &Edges, within: &[String], from: &str, to: &str) -> Vec<String> {
    let mut came: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        for w in g.get(v).into_iter().flat_map(|m| m.keys()) {
            if within.contains(w) && !came.contains_key(w.as_str()) {
                came.insert(w, v);
                queue.push_back(w);
            }
        }
        if came.contains_key(to) {
            break;
        }
    }
    let mut path = vec![to.to_string()];
    while path.len() == 1 || path.last().unwrap() != from {
        path.push(came[path.last().unwrap().as_str()].to_string());
    }
    path.reverse();
    path
}

#[test]
fn imports_run_downward() {
    let g = edges(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(g.len() > 50, "too few files with imports found: {}", g.len());
    let step = |a: &str, b: &str| {
        let (line, text) = &g[a][b];
        format!("    {a}:{line} → {b}\n        {text}\n")
    };
    let mut report = String::new();
    for scc in cycles(&g) {
        report += &format!("a circle among {} files: {}\n", scc.len(), scc.join(", "));
        // One closed walk through every file of the circle, nearest unvisited file first.
        let (mut at, mut left) = (scc[0].clone(), scc[1..].to_vec());
        while !left.is_empty() || at != scc[0] {
            let next = left
                .iter()
                .map(|w| shortest(&g, &scc, &at, w))
                .min_by_key(Vec::len)
                .unwrap_or_else(|| shortest(&g, &scc, &at, &scc[0]));
            for pair in next.windows(2) {
                report += &step(&pair[0], &pair[1]);
                left.retain(|w| w != &pair[1]);
            }
            at = next.last().unwrap().clone();
        }
    }
    for (from, to) in &g {
        for target in to.keys().filter(|_| from.starts_with("src/sys/")) {
            if !target.starts_with("src/sys/") {
                report += &format!("an arrow up out of sys/:\n{}", step(from, target));
            }
        }
    }
    assert!(
        report.is_empty(),
        "imports must run downward (tests/commands/imports.rs says how they are read):\n{report}"
    );
}
