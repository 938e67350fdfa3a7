//! The README and `docs/` kept true: the README stays a front door (its size, the quick
//! start that `.ci/run` runs, `record` on the first screen), the pages generated from the
//! code are what the code says today (`docs/cli.md` from the binary's `--help`,
//! `docs/json.md` and `docs/file-format.md` from their modules' documentation), the crate
//! map names every source file, and every relative link resolves, anchors included.
//!
//! `MEMPROF_BLESS=1 cargo test --release --test commands -- docs::` rewrites the generated
//! pages (as the golden files of `report` are rewritten); run the tests once more after it,
//! since the link check may have read a page while it was being rewritten.

use crate::programs::blessing;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The README's ceiling, in bytes: heaptrack's README is 8 KB and memray's 15 KB.
const README_MAX_BYTES: usize = 15_000;

/// The README's first screen, in lines: where `memprof record -- ./prog` must appear.
const FIRST_SCREEN_LINES: usize = 45;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Compares a generated page (or part of one) with what is committed, or rewrites it under
/// `MEMPROF_BLESS=1`.
fn check_generated(relative: &str, expected: &str, actual: &str, whole_file: &str) {
    if expected == actual {
        return;
    }
    if blessing() {
        std::fs::write(root().join(relative), whole_file).unwrap();
        return;
    }
    let first = expected
        .lines()
        .zip(actual.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
    panic!(
        "{relative} is out of date (first difference at its generated line {}); \
         `MEMPROF_BLESS=1 cargo test --release --test commands -- docs::` rewrites it:\n\
         --- committed\n{}\n--- now\n{}",
        first + 1,
        expected.lines().skip(first).take(5).collect::<Vec<_>>().join("\n"),
        actual.lines().skip(first).take(5).collect::<Vec<_>>().join("\n"),
    );
}

/// The lines of a markdown text outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The README

#[test]
fn readme_is_a_front_door() {
    let readme = read("README.md");
    assert!(
        readme.len() <= README_MAX_BYTES,
        "README.md is {} bytes, over {README_MAX_BYTES}: move the detail to a page of docs/ and link it",
        readme.len()
    );
    let first_screen: Vec<&str> = readme.lines().take(FIRST_SCREEN_LINES).collect();
    assert!(
        first_screen.iter().any(|l| l.trim_start().starts_with("memprof record -- ./")),
        "`memprof record -- ./prog` is not on the README's first {FIRST_SCREEN_LINES} lines"
    );
}

/// The quick start's two commands are exactly what `.ci/run` runs as a new user would.
#[test]
fn readme_quick_start_is_what_ci_runs() {
    const COMMANDS: [&str; 2] = ["cargo run --release -- demo", "cargo test --release"];
    let readme = read("README.md");
    let start = readme.find("## Quick start").expect("the README has a `## Quick start` section");
    let section = &readme[start..];
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the quick start has a ```sh block");
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines, COMMANDS, "the README's quick start commands changed");
    let ci = read(".ci/run");
    for command in COMMANDS {
        assert!(
            ci.lines().any(|l| l.trim() == command),
            ".ci/run no longer runs the README's `{command}` on a line of its own"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// docs/cli.md: the binary's --help

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memprof"))
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .expect("memprof runs");
    assert!(out.status.success(), "memprof {args:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands the top-level help lists, in its order (`help` left out).
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   ")) // a wrapped description's continuation
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

fn cli_reference() -> String {
    let top = help(&[]);
    let subs = subcommands(&top);
    assert!(subs.iter().any(|s| s == "record"), "no `record` in:\n{top}");
    let mut page = String::from(
        "# Command-line reference\n\n\
         <!-- Generated from the binary's `--help` by tests/commands/docs.rs; do not edit:\n\
         `MEMPROF_BLESS=1 cargo test --release --test commands -- docs::` rewrites it. -->\n\n\
         [README](../README.md) · [`record`](record.md) · [`attach`](attach.md) · \
         [reports](report.md) · [install](install.md)\n\n",
    );
    for sub in &subs {
        page.push_str(&format!("- [`memprof {sub}`](#memprof-{sub})\n"));
    }
    let mut section = |title: &str, text: &str| {
        page.push_str(&format!("\n## `{title}`\n\n```text\n{}\n```\n", text.trim_end()));
    };
    section("memprof", &top);
    for sub in &subs {
        section(&format!("memprof {sub}"), &help(&[sub]));
    }
    page
}

#[test]
fn cli_reference_is_the_binary_help() {
    let actual = cli_reference();
    let committed = std::fs::read_to_string(root().join("docs/cli.md")).unwrap_or_default();
    check_generated("docs/cli.md", &committed, &actual, &actual);
}

// ---------------------------------------------------------------------------------------------
// docs/json.md and docs/file-format.md: their modules' documentation

const GENERATED_BEGIN: &str = "<!-- generated: begin -->";
const GENERATED_END: &str = "<!-- generated: end -->";

/// A module's `//!` documentation as plain markdown: headings two levels down (the page has
/// its title and the section the text goes in), rustdoc's intra-doc links as the code they name.
fn module_doc(relative: &str) -> String {
    let source = read(relative);
    let mut out = String::new();
    for line in source.lines().take_while(|l| l.starts_with("//!")) {
        let text = line.strip_prefix("//!").unwrap();
        let text = text.strip_prefix(' ').unwrap_or(text);
        let text = if text.starts_with('#') { format!("##{text}") } else { text.to_owned() };
        out.push_str(&without_intra_doc_links(&text));
        out.push('\n');
    }
    out
}

/// ``[`X`]`` → `` `X` ``, ``[`X`](crate::path)`` → `` `X` ``: rustdoc's links to items, which
/// mean nothing outside rustdoc. Links to pages (a `/` or a `.` in the target) are kept.
fn without_intra_doc_links(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find("[`") {
        let Some(close) = rest[open..].find("`]").map(|c| open + c) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close + 1]);
        rest = &rest[close + 2..];
        if let Some(target) = rest.strip_prefix('(').and_then(|r| r.split_once(')')) {
            if !target.0.contains('/') && !target.0.contains('.') {
                rest = target.1;
            }
        }
    }
    out.push_str(rest);
    out
}

fn check_module_page(page: &str, module: &str) {
    let committed = read(page);
    let (Some(begin), Some(end)) = (committed.find(GENERATED_BEGIN), committed.find(GENERATED_END))
    else {
        panic!("{page} has no `{GENERATED_BEGIN}` … `{GENERATED_END}` block");
    };
    let inner_start = begin + GENERATED_BEGIN.len();
    let expected = &committed[inner_start..end];
    let actual = format!("\n{}", module_doc(module));
    let whole = format!("{}{actual}{}", &committed[..inner_start], &committed[end..]);
    check_generated(page, expected, &actual, &whole);
}

#[test]
fn json_schema_is_the_module_doc() {
    check_module_page("docs/json.md", "src/report/json.rs");
}

#[test]
fn file_format_is_the_module_doc() {
    check_module_page("docs/file-format.md", "src/profile/format/mod.rs");
}

#[test]
fn intra_doc_links_become_code() {
    assert_eq!(without_intra_doc_links("a [`SCHEMA`] b"), "a `SCHEMA` b");
    assert_eq!(
        without_intra_doc_links("[`Free::life_ns`](crate::profile::Free::life_ns) set"),
        "`Free::life_ns` set"
    );
    assert_eq!(without_intra_doc_links("[`x`](docs/x.md)"), "`x`(docs/x.md)");
    assert_eq!(without_intra_doc_links("no [link] here"), "no [link] here");
}

// ---------------------------------------------------------------------------------------------
// docs/architecture.md: every source file named

fn source_files(dir: &Path, out: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root()).unwrap();
            out.insert(relative.to_string_lossy().into_owned());
        }
    }
}

#[test]
fn architecture_names_every_source_file() {
    let map = read("docs/architecture.md");
    let mut files = BTreeSet::new();
    source_files(&root().join("src"), &mut files);
    source_files(&root().join("preload/src"), &mut files);
    assert!(files.contains("src/lib.rs"), "no sources found under {}", root().display());
    let missing: Vec<&String> = files.iter().filter(|f| !map.contains(&format!("`{f}`"))).collect();
    // Paths the map names that are gone (renamed, split, removed).
    let named: BTreeSet<String> = map
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| (s.starts_with("src/") || s.starts_with("preload/src/")) && s.ends_with(".rs"))
        .map(str::to_owned)
        .collect();
    let stale: Vec<&String> = named.difference(&files).collect();
    let list = |v: &[&String]| v.iter().map(|f| format!("  {f}\n")).collect::<String>();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md is out of date: give each missing file a row (`path` | its job), \
         and remove the rows of files that are gone.\nmissing ({}):\n{}gone ({}):\n{}",
        missing.len(),
        list(&missing),
        stale.len(),
        list(&stale)
    );
}

/// The crate-level map in `src/lib.rs` (the map rustdoc shows, whose rows name files from
/// `src/`) names every library file too, and no file that is gone: the two maps are kept
/// true together.
#[test]
fn the_crate_docs_name_every_source_file() {
    let lib = read("src/lib.rs");
    let mut files = BTreeSet::new();
    source_files(&root().join("src"), &mut files);
    let named: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `")?.split_once('`').map(|(f, _)| f.to_owned()))
        .filter(|f| f.ends_with(".rs"))
        .collect();
    let missing: Vec<&String> =
        files.iter().filter(|f| !named.contains(f.trim_start_matches("src/"))).collect();
    let stale: Vec<&String> = named
        .iter()
        .filter(|f| !root().join("src").join(f).exists() && !root().join(f).exists())
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "src/lib.rs's map is out of date: missing {missing:?}, gone {stale:?}"
    );
}

/// The job of each file, as `src/lib.rs`'s map gives it (rustdoc's links made code), by
/// its path from the crate root.
fn crate_map_jobs() -> BTreeMap<String, String> {
    read("src/lib.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `")?.split_once("` | "))
        .filter(|(f, _)| f.ends_with(".rs"))
        .map(|(f, job)| (format!("src/{f}"), without_intra_doc_links(job.trim_end_matches(" |"))))
        .collect()
}

/// The map is written once: each `src/` row of docs/architecture.md gives its file the job
/// that `src/lib.rs`'s map gives it (`src/lib.rs`'s own row apart: each map says what it
/// is), and `MEMPROF_BLESS=1` rewrites the rows that differ from the crate map.
#[test]
fn architecture_rows_are_the_crate_map() {
    let jobs = crate_map_jobs();
    let page = read("docs/architecture.md");
    let mut differ = Vec::new();
    let mut rewritten = String::new();
    for line in page.lines() {
        let row = line.strip_prefix("| `").and_then(|l| l.split_once("` | "));
        match row.and_then(|(f, _)| Some((f, jobs.get(f)?))) {
            Some((f, job)) if f != "src/lib.rs" && line != format!("| `{f}` | {job} |") => {
                differ.push(f.to_owned());
                rewritten.push_str(&format!("| `{f}` | {job} |\n"));
            }
            _ => {
                rewritten.push_str(line);
                rewritten.push('\n');
            }
        }
    }
    if blessing() {
        std::fs::write(root().join("docs/architecture.md"), rewritten).unwrap();
        return;
    }
    assert!(
        differ.is_empty(),
        "docs/architecture.md's rows differ from src/lib.rs's map for {differ:?}: the crate map \
         is the one written; `MEMPROF_BLESS=1 cargo test --release --test commands -- docs::` \
         copies its rows into the page"
    );
}

// ---------------------------------------------------------------------------------------------
// Links

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown page's headings (a repeated one gets `-1`, `-2`, … as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of a line's inline links and images, `[text](target)`, outside code spans.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Code spans hold examples, not links.
    let prose: String = line
        .split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 0 { part } else { "" })
        .collect::<Vec<_>>()
        .join("");
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        out.push(after[..end].to_owned());
        rest = &after[end..];
    }
    out
}

fn markdown_pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

#[test]
fn relative_links_resolve() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in markdown_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        for (number, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((file, anchor)) => (file, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let resolved =
                    if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
                if !resolved.exists() {
                    broken.push(format!("{name}:{number}: {target}: no such file"));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!("{name}:{number}: {target}: no such heading"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 50, "only {checked} links found: is the link parser broken?");
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("Process trees"), "process-trees");
    assert_eq!(slug("`memprof record`"), "memprof-record");
    assert_eq!(
        slug("Serving profiles: `cargo bench --bench live_profile`"),
        "serving-profiles-cargo-bench---bench-live_profile"
    );
    assert_eq!(link_targets("see [a](x.md#b) and `[c](d)` ![e](f.png)"), ["x.md#b", "f.png"]);
}
