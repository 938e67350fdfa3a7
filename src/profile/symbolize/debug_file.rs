//! Where the separate debug file of an object is looked for, as gdb does.

use std::path::Path;

use super::elf::{build_id, debug_link};

/// The separate debug file of the ELF object at `path`, when one is installed: the first
/// of [`debug_candidates`] that exists (a debug-link candidate only with the object's build
/// id, when both have one).
pub(super) fn debug_file(path: &Path) -> Option<std::path::PathBuf> {
    let own = build_id(path);
    let canonical = std::fs::canonicalize(path).ok();
    debug_candidates(path).into_iter().find(|p| {
        p.is_file()
            && std::fs::canonicalize(p).ok() != canonical
            && (own.is_none() || build_id(p).is_none() || build_id(p) == own)
    })
}

/// Where a separate debug file of the object at `path` is looked for, as gdb does: by GNU
/// build id (`/usr/lib/debug/.build-id/xx/yyyy.debug`), then by the object's
/// `.gnu_debuglink` name next to it, in its `.debug/` and under `/usr/lib/debug/` + its
/// directory.
pub fn debug_candidates(path: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    out.extend(build_id(path).as_deref().and_then(by_build_id));
    if let Some(link) = debug_link(path) {
        let dir = path.parent().unwrap_or(Path::new("/"));
        out.push(dir.join(&link));
        out.push(dir.join(".debug").join(&link));
        out.push(
            Path::new("/usr/lib/debug").join(dir.strip_prefix("/").unwrap_or(dir)).join(&link),
        );
    }
    out
}

/// Where the debug file of the build `id` is installed, as gdb looks for it:
/// `/usr/lib/debug/.build-id/xx/yyyy.debug` (`None` for an id too short to name one).
pub(super) fn by_build_id(id: &[u8]) -> Option<std::path::PathBuf> {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    (hex.len() >= 3).then(|| {
        Path::new("/usr/lib/debug/.build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]))
    })
}
