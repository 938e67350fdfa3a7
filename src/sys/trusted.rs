//! Paths nobody else can change: the check behind every library memprof loads into
//! programs (`files.rs` §1) and every directory it keeps one in.
//!
//! # 1. The rule
//! A path is trusted when nobody but this user and root can change what it names: every
//! directory from `/` down, and the file itself, belongs to this user or root; no
//! directory is writable by its group or by others unless it is sticky (`/tmp`: there the
//! others who can write it cannot rename or remove an entry they do not own, and every
//! entry on the path is this user's or root's); the file is writable by neither group nor
//! others. Group-writable counts: the members of a directory's group are other people, and
//! one of them could exchange the library for their own (`renameat2(RENAME_EXCHANGE)`) in
//! the moment between a check of the path and the loader's open of it.
//!
//! # 2. Checked by descriptor
//! The path is resolved once (`canonicalize`), then walked from `/` one component at a
//! time with `openat(…, O_NOFOLLOW)` from the descriptor of the directory checked just
//! before, each judged by `fstat` of its own descriptor. A rename anywhere during the walk
//! either leaves what was opened in place or fails the walk ("changed while it was
//! checked"); it never makes a check apply to one file and the open to another. The file
//! comes back as an open descriptor: callers read the library's bytes from it, never open
//! the path again (`record/command/bundled.rs` §2 copies them into a private directory that
//! the loader is given).
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

/// What a trusted walk ends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A library to be loaded: opened for reading, a regular file.
    File,
    /// A directory to keep a library in.
    Dir,
}

/// An open file or directory whose every path component passed the rule (§1).
#[derive(Debug)]
pub(crate) struct Trusted {
    /// The descriptor (read-only for a file, `O_PATH` for a directory).
    pub file: File,
    /// `fstat` of `file`.
    pub meta: Metadata,
}

fn euid() -> u32 {
    crate::sys::files::euid()
}

fn trusted_owner(uid: u32) -> bool {
    uid == euid() || uid == 0
}

/// The name of group `gid`, or its number when it has none.
fn group_name(gid: u32) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero `group` is a valid out value for getgrgid_r.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is live for the call, `buf` holds `buf.len()` bytes.
    let r =
        unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
    if r != 0 || out.is_null() || grp.gr_name.is_null() {
        return gid.to_string();
    }
    // SAFETY: on success `gr_name` points to a NUL-terminated string inside `buf`.
    unsafe { std::ffi::CStr::from_ptr(grp.gr_name) }.to_string_lossy().into_owned()
}

/// Why directory `dir` (its `fstat`) cannot be above a trusted path, if it cannot (§1).
/// `what` names the path being judged, for the sentence.
pub(crate) fn judge_dir(meta: &Metadata, dir: &Path, what: &str) -> Result<(), String> {
    let shown = dir.display();
    let as_root = if euid() == 0 { " as root" } else { "" };
    if !trusted_owner(meta.uid()) {
        return Err(format!(
            "{shown} belongs to uid {}, not to this user or root; its owner can replace {what} \
             memprof loads{as_root}",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & libc::S_ISVTX != 0 {
        return Ok(());
    }
    let by = if mode & 0o002 != 0 {
        "others".to_owned()
    } else if mode & 0o020 != 0 {
        format!("group {}", group_name(meta.gid()))
    } else {
        return Ok(());
    };
    Err(format!(
        "{shown} is writable by {by} and not sticky (mode {mode:o}); whoever can write it can \
         replace {what} memprof loads{as_root}"
    ))
}

fn judge_file(meta: &Metadata, path: &Path) -> Result<(), String> {
    let shown = path.display();
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    if !trusted_owner(meta.uid()) {
        return Err(format!(
            "{shown} belongs to uid {}, not to this user or root: its code would run in every \
             profiled program",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by group or others (mode {:o}): its code would run in every \
             profiled program",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

fn open_at(dir: Option<&File>, name: &std::ffi::OsStr, flags: i32) -> std::io::Result<File> {
    let c = CString::new(name.as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `c` is NUL-terminated and `at` is a live descriptor (or AT_FDCWD).
    let fd = unsafe { libc::openat(at, c.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Opens `path` after checking it and every directory above it by descriptor (§1, §2).
/// The error is one sentence naming the path refused and why.
pub(crate) fn open(path: &Path, kind: Kind) -> Result<Trusted, String> {
    let shown = path.display();
    let what = match kind {
        Kind::File => "the library",
        Kind::Dir => "the libraries in it",
    };
    let real = std::fs::canonicalize(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let changed = || format!("{shown} changed while it was checked");
    let dir_flags = libc::O_PATH | libc::O_DIRECTORY;
    let mut at = Path::new("/").to_path_buf();
    let mut cur =
        open_at(None, at.as_os_str(), dir_flags).map_err(|e| format!("cannot read /: {e}"))?;
    let names: Vec<_> = real
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            _ => None,
        })
        .collect();
    for (i, name) in names.iter().enumerate() {
        let meta = cur.metadata().map_err(|e| format!("cannot read {}: {e}", at.display()))?;
        judge_dir(&meta, &at, what).map_err(|why| format!("{shown}: {why}"))?;
        let last = i + 1 == names.len();
        let flags = match (last, kind) {
            (true, Kind::File) => libc::O_RDONLY | libc::O_NONBLOCK,
            _ => dir_flags,
        };
        at.push(name);
        cur = open_at(Some(&cur), name, flags).map_err(|e| match e.raw_os_error() {
            // A symbolic link or a file where `canonicalize` saw a directory: renamed since.
            Some(libc::ELOOP | libc::ENOTDIR | libc::ENOENT) => changed(),
            _ => format!("cannot read {}: {e}", at.display()),
        })?;
    }
    let meta = cur.metadata().map_err(|e| format!("cannot read {shown}: {e}"))?;
    match kind {
        Kind::File => judge_file(&meta, path)?,
        // The reason names `real`; `path` too when a link made them differ.
        Kind::Dir => judge_dir(&meta, &real, what).map_err(|why| {
            if real == path {
                why
            } else {
                format!("{shown}: {why}")
            }
        })?,
    }
    if kind == Kind::File {
        clear_nonblock(&cur);
    }
    Ok(Trusted { file: cur, meta })
}

fn clear_nonblock(f: &File) {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor this process owns; only its status flags change.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
}

/// Whether the file system holding `file` lets the loader map it executable: `/dev/shm`
/// and often `/tmp` are mounted `noexec`, where `LD_PRELOAD` and `dlopen` fail (one page
/// mapped `PROT_EXEC` and unmapped at once tells).
pub(crate) fn can_map_executable(file: &File) -> Result<(), String> {
    // SAFETY: a private read/exec mapping of one page of a file open for reading; nothing
    // reads it, and it is unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => {
                "its file system is mounted noexec: the loader could not map it".to_owned()
            }
            _ => format!("it cannot be mapped executable: {e}"),
        });
    }
    // SAFETY: unmaps the page mapped above, which nothing else uses.
    unsafe { libc::munmap(p, 4096) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        crate::sys::test_dir("trusted", name)
    }

    fn chmod(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn lib_in(dir: &Path) -> PathBuf {
        let lib = dir.join("libx.so");
        fs::write(&lib, b"\x7fELF").unwrap();
        chmod(&lib, 0o755);
        lib
    }

    #[test]
    fn a_group_writable_parent_that_is_not_sticky_is_refused() {
        let d = scratch("group");
        let lib = lib_in(&d);
        assert!(open(&lib, Kind::File).is_ok());
        chmod(&d, 0o775);
        let e = open(&lib, Kind::File).unwrap_err();
        assert!(e.contains("writable by group") && e.contains("not sticky"), "{e}");
        assert!(e.starts_with(&lib.display().to_string()), "names the library: {e}");
        assert!(e.contains(&format!("{} is writable", d.display())), "names the directory: {e}");
        // A directory further up counts the same.
        let inner = d.join("inner");
        fs::create_dir(&inner).unwrap();
        chmod(&inner, 0o755);
        let deep = lib_in(&inner);
        let e = open(&deep, Kind::File).unwrap_err();
        assert!(e.contains(&format!("{} is writable by group", d.display())), "{e}");
        assert!(open(&inner, Kind::Dir).is_err(), "the directory alone too");
        chmod(&d, 0o777);
        let e = open(&deep, Kind::File).unwrap_err();
        assert!(e.contains("writable by others") && e.contains("not sticky"), "{e}");
        chmod(&d, 0o755);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_sticky_parent_is_accepted_for_a_file_of_ours_or_roots() {
        let d = scratch("sticky");
        let lib = lib_in(&d);
        for mode in [0o1777, 0o1775] {
            chmod(&d, mode);
            let t = open(&lib, Kind::File).unwrap();
            assert!(t.meta.is_file());
        }
        // The file itself is never writable by others, sticky parent or not.
        chmod(&lib, 0o666);
        assert!(open(&lib, Kind::File).unwrap_err().contains("writable by group or others"));
        chmod(&lib, 0o755);
        // Another user's file in a sticky directory could be replaced by its owner.
        if euid() == 0 {
            std::os::unix::fs::chown(&lib, Some(65534), None).unwrap();
            assert!(open(&lib, Kind::File).unwrap_err().contains("belongs to uid 65534"));
        }
        chmod(&d, 0o755);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlinks_are_resolved_and_what_is_not_a_file_is_refused() {
        let d = scratch("links");
        let lib = lib_in(&d);
        std::os::unix::fs::symlink(&lib, d.join("link.so")).unwrap();
        let t = open(&d.join("link.so"), Kind::File).unwrap();
        assert_eq!(t.meta.ino(), fs::metadata(&lib).unwrap().ino(), "the file linked to");
        assert!(open(&d, Kind::File).unwrap_err().contains("not a regular file"));
        assert!(open(&d.join("none"), Kind::File).unwrap_err().contains("cannot read"));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_temporary_directory_holds_loadable_code() {
        let d = scratch("exec");
        let lib = lib_in(&d);
        let f = File::open(&lib).unwrap();
        // /tmp may be noexec on some machines: then the message must say so.
        if let Err(e) = can_map_executable(&f) {
            assert!(e.contains("noexec"), "{e}");
        }
        fs::remove_dir_all(&d).unwrap();
    }
}
