//! The notes on objects whose frames stayed unnamed: stripped, with no debug file found,
//! and which package would have one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
    unresolved_objects_in(profile, None)
}

/// [`unresolved_objects`], the packages' names kept in the symbol cache's directory `dir`
/// (`packages.rs`), when there is one.
pub(crate) fn unresolved_objects_in(profile: &Profile, dir: Option<&Path>) -> Vec<String> {
    let by_module = unnamed_by_module(profile);
    // The stripped objects first, then one question to dpkg for all of them (each
    // `dpkg-query` reads its whole database, however few paths it is asked about).
    let mut found: Vec<(usize, usize, bool)> = Vec::new();
    for (i, addrs) in by_module {
        let module = &profile.modules[i];
        let path = Path::new(&module.path);
        if !module.build_id.is_empty() && build_id(path).as_deref() != Some(&module.build_id[..]) {
            continue;
        }
        let Some(n) = naming(path) else { continue };
        if n.symtab || n.debug_info || debug_file(path).is_some() {
            continue;
        }
        found.push((i, addrs.len(), n.dynsym));
    }
    let paths: Vec<&Path> =
        found.iter().map(|&(i, ..)| Path::new(&profile.modules[i].path)).collect();
    let packages = debian_packages(&paths, dir);
    let mut notes = Vec::new();
    let mut stripped: Vec<(&str, Option<String>)> = Vec::new();
    for (i, frames, dynsym) in found {
        let module = &profile.modules[i];
        let path = Path::new(&module.path);
        let what = if dynsym {
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
        let package = package_of(&packages, path);
        let hint = package
            .as_ref()
            .map(|p| format!(" (Debian: apt install {p}-dbgsym, from the debug archive)"))
            .unwrap_or_default();
        notes.push(format!(
            "{} {what}: {frames} frame{s} shown as offsets; {looked}{hint}",
            module.path
        ));
        stripped.push((module.path.as_str(), package));
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

/// The package of `path` in `packages` ([`debian_packages`]), by its name or its
/// canonical name.
fn package_of(packages: &HashMap<PathBuf, String>, path: &Path) -> Option<String> {
    packages.get(path).or_else(|| packages.get(&std::fs::canonicalize(path).ok()?)).cloned()
}

/// The Debian packages that installed `paths` (each also by its canonical name): dpkg's
/// answers, kept in `dir` (`packages.rs`); paths it does not know are left out.
fn debian_packages(paths: &[&Path], dir: Option<&Path>) -> HashMap<PathBuf, String> {
    let mut asked: Vec<PathBuf> = Vec::new();
    for p in paths {
        asked.push(p.to_path_buf());
        asked.extend(std::fs::canonicalize(p).ok().filter(|c| c != p));
    }
    asked.sort();
    asked.dedup();
    super::packages::debian_packages(&asked, dir)
}
