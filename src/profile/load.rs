//! Reading profiles as `memprof record` and `memprof report` do: one or more `.mprof` files,
//! frames without symbols resolved from the recorded modules, merged into one profile; and
//! the write-back that puts resolved symbols into a just-recorded file, so that it reads
//! the same wherever and whenever it is opened.
#![forbid(unsafe_code)]

use super::Profile;
use crate::error::Error;
use std::path::{Path, PathBuf};

/// How [`load`] treats its files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The files were just recorded (`memprof record`, right after the program exited): the
    /// first is the program's own and the others its followed children's. A complete file
    /// gets its resolved symbols written in ([`rewrite`]), and a child's file that cannot be
    /// read (a child that exec'd or died before its first flush) is left out, with a
    /// warning, rather than failing the whole load.
    pub recorded: bool,
}

/// Something [`load`] has to tell the user; each names its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Part of the data is missing or suspect.
    Warning(String),
    /// For information (a module whose symbols could not be read).
    Note(String),
}

/// What [`load`] read.
#[derive(Debug)]
pub struct Loaded {
    /// The files' profiles, merged.
    pub profile: Profile,
    /// One line per file read: `<path>: <n> samples`.
    pub labels: Vec<String>,
    /// Warnings and notes, in the order they arose.
    pub messages: Vec<Message>,
}

/// Reads one or more profiles (merged when several). Frames without symbols are resolved
/// from the recorded modules, before merging, while the addresses are still each process's
/// own.
pub fn load(files: &[PathBuf], options: LoadOptions) -> Result<Loaded, Error> {
    load_with(files, options, &mut super::symbolize::Loaders::default())
}

/// [`load`] with symbol readers loaded ahead (`memprof record` reads the program's objects
/// while it runs: [`super::symbolize::Loaders`]); objects loaded here are kept in `loaders`.
pub fn load_with(
    files: &[PathBuf],
    options: LoadOptions,
    loaders: &mut super::symbolize::Loaders,
) -> Result<Loaded, Error> {
    let recorded = options.recorded;
    let mut profiles = Vec::with_capacity(files.len());
    let mut labels = Vec::with_capacity(files.len());
    let mut messages = Vec::new();
    // The files read (a child's that cannot be read is left out).
    let mut names: Vec<String> = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let mut p = match Profile::read_file(f) {
            Ok(p) => p,
            Err(e) if recorded && i > 0 => {
                messages.push(Message::Warning(format!("a child's profile is left out: {e}")));
                continue;
            }
            Err(e) => return Err(e),
        };
        for w in &p.warnings {
            messages.push(Message::Warning(format!("{}: {w}", f.display())));
        }
        // A process that died before writing its symbols: resolve them from its modules.
        let unresolved =
            p.stacks.iter().flat_map(|s| &s.frames).any(|a| !p.symbols.contains_key(a));
        if unresolved && !p.modules.is_empty() {
            let before = p.symbols.len();
            for note in super::symbolize::resolve_offline_with(&mut p, loaders) {
                messages.push(Message::Note(format!("{}: {note}", f.display())));
            }
            if recorded && p.complete && p.warnings.is_empty() && p.symbols.len() > before {
                if let Err(e) = rewrite(f, &p) {
                    messages.push(Message::Warning(format!(
                        "{}: symbols not written into the file: {e}",
                        f.display()
                    )));
                }
            }
        }
        labels.push(format!("{}: {} samples", f.display(), p.samples.len()));
        names.push(f.display().to_string());
        profiles.push(p);
    }
    let mut profile = super::merge::merge(profiles, &names)?;
    if names.len() > 1 {
        // Each file's warnings are in `messages` already.
        profile.warnings.clear();
    }
    Ok(Loaded { profile, labels, messages })
}

/// Replaces the profile at `path` with `profile`: written to a new file beside it (same
/// permissions, created exclusively, not following symlinks), synced, then renamed over
/// it, so that a failure at any point leaves the original as it was.
pub fn rewrite(path: &Path, profile: &Profile) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = std::fs::metadata(path)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?
        .permissions()
        .mode()
        & 0o777;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| Error::io(format!("cannot create {}", tmp.display()), e))?;
    let written = profile
        .write_to(std::io::BufWriter::new(file))
        .and_then(|w| w.into_inner().map_err(|e| Error::io("cannot write", e.into_error())))
        .and_then(|mut f| {
            f.flush().and_then(|_| f.sync_all()).map_err(|e| Error::io("cannot write", e))
        })
        .and_then(|_| {
            std::fs::rename(&tmp, path).map_err(|e| Error::io("cannot replace the profile", e))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("memprof-load-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn rewrite_keeps_the_mode_and_load_reads_it_back() {
        let dir = scratch("rewrite");
        let path = dir.join("p.mprof");
        let mut p = Profile::default();
        p.header.pid = 42;
        std::fs::write(&path, b"not a profile").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        rewrite(&path, &p).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let loaded = load(std::slice::from_ref(&path), LoadOptions::default()).unwrap();
        assert_eq!(loaded.profile.header.pid, 42);
        assert_eq!(loaded.labels, [format!("{}: 0 samples", path.display())]);
        // Only the file itself is left (the temporary one was renamed over it).
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unreadable_child_is_left_out_of_a_recording() {
        let dir = scratch("child");
        let root = dir.join("p.mprof");
        rewrite_new(&root, &Profile::default());
        let child = dir.join("p.7.mprof");
        std::fs::write(&child, b"").unwrap();
        let files = [root.clone(), child];
        assert!(load(&files, LoadOptions { recorded: false }).is_err());
        let loaded = load(&files, LoadOptions { recorded: true }).unwrap();
        assert_eq!(loaded.labels.len(), 1);
        assert!(matches!(&loaded.messages[..], [Message::Warning(w)] if w.contains("left out")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn rewrite_new(path: &Path, p: &Profile) {
        std::fs::write(path, b"").unwrap();
        rewrite(path, p).unwrap();
    }
}
