//! The notes on objects whose frames stayed unnamed: stripped, with no debug file found,
//! and which package would have one.

use std::collections::HashMap;
use std::path::Path;

use super::debug_file::{debug_candidates, debug_file};
use super::elf::{build_id, naming};
use super::offline::unnamed_by_module;
use crate::profile::Profile;

/// One note for each object whose frames stayed unnamed because it is stripped and no
/// separate debug file was found: what it lacks, where a debug file was looked for, and
/// (where `dpkg-query` knows the file) the Debian package that would have one. Objects
/// that changed since the run or cannot be read are left to the notes of
/// [`resolve_offline`](super::resolve_offline); objects with symbols or debug info whose
/// tables miss a few addresses are not named.
pub fn unresolved_objects(profile: &Profile) -> Vec<String> {
    let by_module = unnamed_by_module(profile);
    let mut notes = Vec::new();
    let mut stripped: Vec<(&str, Option<String>)> = Vec::new();
    let mut packages = HashMap::new();
    for (i, addrs) in by_module {
        let frames = addrs.len();
        let module = &profile.modules[i];
        let path = Path::new(&module.path);
        if !module.build_id.is_empty() && build_id(path).as_deref() != Some(&module.build_id[..]) {
            continue;
        }
        let Some(n) = naming(path) else { continue };
        if n.symtab || n.debug_info || debug_file(path).is_some() {
            continue;
        }
        let what = if n.dynsym {
            "has no symbols but its exported ones (stripped)"
        } else {
            "has no symbols (stripped)"
        };
        let s = if frames == 1 { "" } else { "s" };
        let looked = debug_candidates(path);
        let looked = if looked.is_empty() {
            "it has no build id or debug link to find a debug file by".to_owned()
        } else {
            let list: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            format!("no debug file at {}", list.join(" nor "))
        };
        let hint = debian_package_cached(&mut packages, path)
            .map(|p| format!(" (Debian: apt install {p}-dbgsym, from the debug archive)"))
            .unwrap_or_default();
        notes.push(format!(
            "{} {what}: {frames} frame{s} shown as offsets; {looked}{hint}",
            module.path
        ));
        stripped.push((module.path.as_str(), debian_package_cached(&mut packages, path)));
    }
    // A process tree (a compiler driver and its passes) can name many: then one line.
    if notes.len() > MAX_STRIPPED_NOTES {
        let names: Vec<&str> =
            stripped.iter().map(|(p, _)| p.rsplit('/').next().unwrap_or(p)).collect();
        let mut wanted: Vec<&str> = stripped.iter().filter_map(|(_, p)| p.as_deref()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let hint = if wanted.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = wanted.iter().map(|p| format!("{p}-dbgsym")).collect();
            format!(" (Debian: apt install {}, from the debug archive)", list.join(" "))
        };
        return vec![format!(
            "{} objects have no symbols (stripped), their frames shown as offsets: {}; no \
             debug files for them under /usr/lib/debug{hint}",
            names.len(),
            names.join(", ")
        )];
    }
    notes
}

/// Above this many stripped objects, [`unresolved_objects`] says it in one line.
const MAX_STRIPPED_NOTES: usize = 3;

/// [`debian_package`], asked once per path.
fn debian_package_cached(
    cache: &mut HashMap<std::path::PathBuf, Option<String>>,
    path: &Path,
) -> Option<String> {
    cache.entry(path.to_owned()).or_insert_with(|| debian_package(path)).clone()
}

/// The Debian package that installed `path`, when `dpkg-query` knows it.
fn debian_package(path: &Path) -> Option<String> {
    let query = |p: &Path| -> Option<String> {
        let out = std::process::Command::new("dpkg-query")
            .arg("-S")
            .arg(p)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        let line = text.lines().next()?;
        let (package, _) = line.split_once(": ")?;
        // `libc6:amd64` → `libc6`; a diversion or a list of packages is not a name.
        let package = package.split(':').next()?.trim();
        (out.status.success()
            && !package.is_empty()
            && package.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)))
        .then(|| package.to_owned())
    };
    query(path).or_else(|| query(&std::fs::canonicalize(path).ok()?))
}
