//! The files of a process tree (`memprof record --follow-forks`): the program's own profile
//! `app.mprof`, and a directory beside it, `app.mprof.d/`, with one `<pid>.mprof` per other
//! process (`<pid>.<n>.mprof` for its n-th image after `exec`). A tree is named by either:
//! its root file or its directory.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// The directory of the tree whose root profile is `root`: `<root>.d`.
pub fn dir_of(root: &str) -> String {
    format!("{root}.d")
}

/// The root profile of the tree whose directory is `dir` (the inverse of [`dir_of`]).
pub fn root_of(dir: &str) -> Option<&str> {
    dir.trim_end_matches('/').strip_suffix(".d").filter(|r| !r.is_empty())
}

/// The files of the other processes of the tree whose root is `root`, by pid and image;
/// empty when it has no directory.
pub fn children(root: &Path) -> Vec<PathBuf> {
    let dir = PathBuf::from(dir_of(&root.display().to_string()));
    let mut out: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name();
            let rest = n.to_str()?.strip_suffix(".mprof")?;
            let key: Option<Vec<u32>> = rest.split('.').map(|p| p.parse().ok()).collect();
            let key = key.filter(|k| !k.is_empty() && k.len() <= 2)?;
            e.file_type().ok()?.is_file().then(|| (key, e.path()))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

/// What a path given to `memprof report` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    /// The root profile (the path itself when it is a file).
    pub root: PathBuf,
    /// The other processes' files, when the path names a tree (empty: one profile).
    pub children: Vec<PathBuf>,
    /// The path was the tree's directory.
    pub by_dir: bool,
}

impl Named {
    /// Reads what `path` names: a tree's directory (its root is beside it), a root file
    /// whose directory exists, or one profile.
    pub fn of(path: &Path) -> Named {
        let shown = path.display().to_string();
        let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
        if is_dir {
            if let Some(root) = root_of(&shown) {
                let root = PathBuf::from(root);
                return Named { children: children(&root), root, by_dir: true };
            }
        }
        Named { root: path.to_path_buf(), children: children(path), by_dir: false }
    }

    /// Every file: the root first.
    pub fn files(&self) -> Vec<PathBuf> {
        std::iter::once(self.root.clone()).chain(self.children.iter().cloned()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_named_by_its_root_or_its_directory() {
        let base = std::env::temp_dir().join(format!("memprof-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("a.mprof.d")).unwrap();
        for f in ["a.mprof", "a.mprof.d/12.mprof", "a.mprof.d/9.mprof", "a.mprof.d/9.1.mprof"] {
            std::fs::write(base.join(f), b"").unwrap();
        }
        std::fs::write(base.join("a.mprof.d/x.mprof"), b"").unwrap();
        let root = base.join("a.mprof");
        let kids: Vec<PathBuf> =
            ["9", "9.1", "12"].iter().map(|k| base.join(format!("a.mprof.d/{k}.mprof"))).collect();
        let by_root = Named::of(&root);
        assert_eq!((by_root.children.clone(), by_root.by_dir), (kids.clone(), false));
        let by_dir = Named::of(&base.join("a.mprof.d/"));
        assert_eq!((by_dir.root.clone(), by_dir.children, by_dir.by_dir), (root, kids, true));
        assert!(Named::of(&base.join("b.mprof")).children.is_empty());
        assert_eq!(root_of("x.mprof.d/"), Some("x.mprof"));
        let _ = std::fs::remove_dir_all(&base);
    }
}
