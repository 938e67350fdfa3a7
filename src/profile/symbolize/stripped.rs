//! The notes on objects whose frames stayed unnamed: stripped, with no debug file found,
//! and which package would have one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::debug_file::{by_build_id, debug_file};
use super::elf::{build_id, debug_link, naming};
use super::offline::unnamed_by_module;
use crate::profile::Profile;

/// One note for each object whose frames stayed unnamed because it is stripped and no
/// separate debug file was found: what it lacks, where a debug file was looked for, and
/// (where dpkg knows the file) the Debian package that would have one. Objects
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
    // The stripped objects first, then one search of dpkg's lists for all of them
    // (`packages.rs` §1: hundreds of files, however few paths are asked about).
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
        let looked = looked_for(path);
        let package = packages.get(path).cloned();
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

/// Where a debug file of `path` was looked for, as the note says it: the build id's path
/// in full, and the debug link's name once for its three places (beside the object, in
/// `.debug` beside it, and under `/usr/lib/debug`: `debug_file::debug_candidates`), so
/// that the note stays a line a terminal shows.
fn looked_for(path: &Path) -> String {
    let by_id = build_id(path).as_deref().and_then(by_build_id);
    let by_link = debug_link(path).map(|name| {
        format!("by its debug link {name} (beside it, in .debug, under /usr/lib/debug)")
    });
    match (by_id, by_link) {
        (Some(id), Some(link)) => format!("no debug file at {} nor {link}", id.display()),
        (Some(id), None) => format!("no debug file at {}", id.display()),
        (None, Some(link)) => format!("no debug file {link}"),
        (None, None) => "it has no build id or debug link to find a debug file by".to_owned(),
    }
}

/// Above this many stripped objects, [`unresolved_objects`] says it in one line.
const MAX_STRIPPED_NOTES: usize = 3;

/// The Debian package that installed each of `paths` (asked by all its [`names`], each
/// path's names worked out once): dpkg's answers, kept in `dir` (`packages.rs`), by the
/// path given; paths it does not know are left out.
fn debian_packages(paths: &[&Path], dir: Option<&Path>) -> HashMap<PathBuf, String> {
    let named: Vec<(&Path, Vec<PathBuf>)> = paths.iter().map(|&p| (p, names(p))).collect();
    let mut asked: Vec<PathBuf> = named.iter().flat_map(|(_, n)| n.iter().cloned()).collect();
    asked.sort();
    asked.dedup();
    let answers = super::packages::debian_packages(&asked, dir);
    named
        .into_iter()
        .filter_map(|(p, n)| {
            Some((p.to_path_buf(), n.iter().find_map(|q| answers.get(q))?.clone()))
        })
        .collect()
}

/// The directories a merged `/usr` makes links to (`/bin` → `usr/bin`).
const MERGED: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// `path`, its canonical name, and each one's other name where `/usr` is merged: a
/// package's list of files may hold `/bin/sleep` or `/lib/x86_64-linux-gnu/libc.so.6` (as
/// Debian 12's do) while the process mapped, and the kernel canonicalizes to,
/// `/usr/bin/sleep`, or the other way round. The other name is only taken where the link
/// is there (`/bin` a symbolic link to `usr/bin`), so on a system with two directories a
/// file of one is never named by a package of the other.
fn names(path: &Path) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    out.extend(std::fs::canonicalize(path).ok().filter(|c| c != path));
    for i in 0..out.len() {
        if let Some(other) = merged_name(&out[i]) {
            out.push(other);
        }
    }
    out.dedup();
    out
}

/// `path`'s other name on a merged `/usr` ([`names`]), when the link is there.
fn merged_name(path: &Path) -> Option<PathBuf> {
    let (rest, other) = match path.strip_prefix("/usr") {
        Ok(rest) => (rest, Path::new("/").join(rest)),
        Err(_) => {
            let rest = path.strip_prefix("/").ok()?;
            (rest, Path::new("/usr").join(rest))
        }
    };
    let dir = rest.components().next()?.as_os_str().to_str()?;
    if !MERGED.contains(&dir) {
        return None;
    }
    let link = std::fs::read_link(Path::new("/").join(dir)).ok()?;
    let usr = Path::new("usr").join(dir);
    (link == usr || link == Path::new("/").join(&usr)).then_some(other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path's other name on a merged `/usr`, both ways, only for the merged directories
    /// and only where this machine has the link.
    #[test]
    fn merged_names_go_both_ways_where_the_link_is() {
        let linked = |d: &str| {
            std::fs::read_link(Path::new("/").join(d)).is_ok_and(|l| l == Path::new("usr").join(d))
        };
        let other = |p: &str| merged_name(Path::new(p));
        let want = |linked: bool, p: &str| linked.then(|| PathBuf::from(p));
        assert_eq!(other("/usr/bin/sleep"), want(linked("bin"), "/bin/sleep"));
        assert_eq!(other("/bin/sleep"), want(linked("bin"), "/usr/bin/sleep"));
        assert_eq!(other("/lib/x/libc.so.6"), want(linked("lib"), "/usr/lib/x/libc.so.6"));
        for p in ["/usr/share/x", "/opt/bin/x", "/usr", "/", "bin/sleep", "/usr/binx/y"] {
            assert_eq!(other(p), None, "{p}");
        }
        let names = names(Path::new("/usr/bin/sleep"));
        assert_eq!(names[0], Path::new("/usr/bin/sleep"));
        assert_eq!(names.contains(&PathBuf::from("/bin/sleep")), linked("bin"), "{names:?}");
    }
}
