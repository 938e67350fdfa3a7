//! One policy for every file memprof opens or writes, in one place.
//!
//! # 1. Code that is loaded into programs
//! A library memprof puts in `LD_PRELOAD` (`MEMPROF_PRELOAD`, `libmemprof_preload.so`
//! beside the executable) runs its constructor in every profiled program, so whoever can
//! replace it runs code there. [`check_loadable_library`] takes it only from a regular file
//! owned by this user or root that neither group nor others can write, in a directory owned
//! by this user or root that others cannot write (a sticky, world-writable directory such
//! as `/tmp` is refused too: anyone can create a file there), and under directories up to
//! `/` that each belong to this user or root and that others cannot write unless the
//! directory is sticky (`/tmp` above a directory of ours is fine: nobody else can rename
//! what is in it). The file is judged by its descriptor (`O_NONBLOCK`, `fstat`), and the
//! loader is given its real path, every symbolic link resolved, checked to name that same
//! file. The cached copy of the
//! bundled library (`record/command/bundled.rs`) is stricter still: `owned_and_private`, this
//! user's alone.
//!
//! # 2. Outputs
//! [`create_output`] creates a report's file (`report --html/--pprof/--collapsed/
//! --flamegraph`, `diff`'s, `record`'s companion `.svg` and `.html`) with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`, as `record -o` creates the profile: a symlink is never
//! followed, a FIFO never opened. Asked to replace (`report`'s outputs, `record --force`),
//! it replaces only a regular file of this user's, atomically: the new content goes to a
//! temporary file in the same directory, renamed over the old name once complete, so
//! nothing is ever written through a symlink or into another user's file. Anything else
//! of that name is left alone with an error that says why. [`same_file`] tells an output
//! that names an input (device and inode: through a symlink or a hard link too), which
//! `report` refuses before writing anything.
//!
//! # 3. Inputs
//! [`open_input_regular`] opens a file named by the user or by a profile (a `.mprof`, a
//! module's object file, a debug file) with `O_NONBLOCK`, so that a FIFO or a device never
//! blocks the open, and checks with `fstat` that it is a regular file before anything reads
//! it.
//!
//! # 4. The profile a hand-set preload writes
//! `open_profile_in_process` runs inside the profiled program (no `record`: the program
//! opens `MEMPROF_OUTPUT` itself): `O_NONBLOCK|O_NOFOLLOW`, then `fstat`: a regular file of
//! this user's, empty. A FIFO, a device or another user's file is refused with nothing
//! written, and the program runs on unprofiled. It neither panics nor changes errno.
//!
//! # 5. Files of our own
//! Files memprof itself keeps (the bundled library's cached copy, the list of programs run
//! unprofiled that the preload library leaves in the run's private directory) are read
//! through [`open_ours`]: `O_NOFOLLOW|O_NONBLOCK`, then `fstat` of the descriptor: a
//! regular file owned by this user. Anything else of the name is not read.
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// This process's effective user id.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A file or directory that is this user's alone to change: owned by this user and not
/// writable by group or others (the bundled library's cache, §1).
pub(crate) fn owned_and_private(meta: &fs::Metadata, path: &Path) -> Result<(), String> {
    if meta.uid() != euid() {
        return Err(format!("{} belongs to uid {}, not to this user", path.display(), meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by others (mode {:o})",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

fn trusted_owner(uid: u32) -> bool {
    uid == euid() || uid == 0
}

/// Checks that the library at `path` may be loaded into programs (§1) and returns the
/// path to give the loader: the file's real path, every symbolic link resolved. The file
/// is judged by its descriptor (opened without blocking, then `fstat`), and the real path
/// must still name that same file. The error is one sentence naming the file and why.
pub fn check_loadable_library(path: &Path) -> Result<PathBuf, String> {
    let shown = path.display();
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {shown}: {e}"))?;
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
    let real = fs::canonicalize(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    // The loader opens the library by this path: it must name the file checked above.
    if !fs::metadata(&real).is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino())) {
        return Err(format!("{shown} changed while it was checked"));
    }
    let dir = real.parent().unwrap_or(Path::new("/"));
    let dmeta = fs::metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !trusted_owner(dmeta.uid()) {
        return Err(format!(
            "{shown} is in {}, which belongs to uid {}, not to this user or root",
            dir.display(),
            dmeta.uid()
        ));
    }
    if dmeta.mode() & 0o002 != 0 {
        return Err(format!(
            "{shown} is in {}, which others can write (mode {:o}): anyone could replace it",
            dir.display(),
            dmeta.mode() & 0o7777
        ));
    }
    // Whoever can rename an ancestor directory can put another tree, and another library,
    // at the same path. A sticky directory of a trusted owner (`/tmp`) is safe above: the
    // others who can write it cannot rename what they do not own.
    for up in dir.ancestors().skip(1) {
        let m = fs::metadata(up).map_err(|e| format!("cannot read {}: {e}", up.display()))?;
        if !trusted_owner(m.uid()) {
            return Err(format!(
                "{shown} is under {}, which belongs to uid {}, not to this user or root: \
                 anyone could replace it",
                up.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o002 != 0 && m.mode() & libc::S_ISVTX == 0 {
            return Err(format!(
                "{shown} is under {}, which others can write (mode {:o}, not sticky): anyone \
                 could replace it",
                up.display(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(real)
}

/// Opens `path` for reading only when it is a regular file of this user's (§5): never
/// through a symbolic link (`O_NOFOLLOW`), never blocking on a FIFO or a device
/// (`O_NONBLOCK`), the owner checked on the descriptor (`fstat`), not on the path. The
/// error says what the file is instead (`NotFound` when there is none).
pub fn open_ours(path: &Path) -> io::Result<File> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                io::Error::other("it is a symbolic link, never followed".to_owned())
            }
            _ => e,
        })?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, not_regular(&meta)));
    }
    if meta.uid() != euid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("it belongs to uid {}, not to this user", meta.uid()),
        ));
    }
    clear_nonblock(&f);
    Ok(f)
}

/// Whether `a` and `b` name the same file (device and inode, symlinks followed); false when
/// either cannot be read.
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// Opens `path` for reading without blocking on a FIFO or a device, and only when it is a
/// regular file (§3). The error says what the file is instead.
pub fn open_input_regular(path: &Path) -> io::Result<File> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, not_regular(&meta)));
    }
    clear_nonblock(&f);
    Ok(f)
}

fn not_regular(meta: &fs::Metadata) -> String {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    format!("it is {what}, not a regular file")
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

/// A report's output file being written (§2): [`Output::commit`] makes it the file of its
/// name; dropped uncommitted, a replacement's temporary file is removed and the old file
/// stays, and a new file is removed (a write that failed, a full disk: no empty or half
/// companion is left behind under the name).
#[derive(Debug)]
pub struct Output {
    file: File,
    path: PathBuf,
    /// The temporary file renamed over `path` at commit, when replacing.
    tmp: Option<PathBuf>,
    /// Created under `path` itself (no file was there): removed when dropped uncommitted.
    created: bool,
}

impl Output {
    /// Makes the written content the file at its path (renaming a replacement into place).
    pub fn commit(mut self) -> io::Result<()> {
        self.file.flush()?;
        self.created = false;
        if let Some(tmp) = self.tmp.take() {
            if let Err(e) = fs::rename(&tmp, &self.path) {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Some(tmp) = &self.tmp {
            let _ = fs::remove_file(tmp);
        }
        // Only the file this value made: the name may have been taken over since (removed
        // and made again by someone else), and then it is not ours to remove.
        if self.created {
            let ours = self.file.metadata().ok().map(|m| (m.dev(), m.ino()));
            let named = fs::symlink_metadata(&self.path).ok().map(|m| (m.dev(), m.ino()));
            if ours.is_some() && ours == named {
                let _ = fs::remove_file(&self.path);
            }
        }
    }
}

/// The standard stream an output path names: 1 for `-` and `/dev/stdout`, 2 for
/// `/dev/stderr`.
pub fn stream_of(path: &Path) -> Option<i32> {
    match path.as_os_str().as_encoded_bytes() {
        b"-" | b"/dev/stdout" => Some(1),
        b"/dev/stderr" => Some(2),
        _ => None,
    }
}

fn create_new(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates the output file `path` (§2): a new file, or with `replace` a replacement for an
/// existing regular file of this user's. The error says why anything else is left alone.
/// `-` and `/dev/stdout` name this process's standard output, `/dev/stderr` its standard
/// error (`--collapsed - | flamegraph.pl`): written to the stream as it is, whatever it is.
pub fn create_output(path: &Path, replace: bool) -> io::Result<Output> {
    if let Some(fd) = stream_of(path) {
        use std::os::fd::AsFd;
        let file = match fd {
            1 => io::stdout().as_fd().try_clone_to_owned()?,
            _ => io::stderr().as_fd().try_clone_to_owned()?,
        };
        return Ok(Output {
            file: File::from(file),
            path: path.to_owned(),
            tmp: None,
            created: false,
        });
    }
    match create_new(path) {
        Ok(file) => return Ok(Output { file, path: path.to_owned(), tmp: None, created: true }),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(path)?;
    let refuse = |why: String| Err(io::Error::new(io::ErrorKind::AlreadyExists, why));
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link, never written through; it is left alone".into());
    }
    if !meta.is_file() {
        return refuse(format!("{}; it is left alone", not_regular(&meta)));
    }
    if meta.uid() != euid() {
        return refuse(format!(
            "it belongs to uid {}, not to this user; it is left alone",
            meta.uid()
        ));
    }
    if !replace {
        return refuse("it exists (--force replaces it); it is left alone".into());
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let file = create_new(&tmp)?;
    Ok(Output { file, path: path.to_owned(), tmp: Some(tmp), created: false })
}

/// Opens the profile a process writes itself, inside the profiled program (§4):
/// `exclusive` creates a new file (a followed child's), otherwise an existing file must be
/// an empty regular file of this user's. Never blocks, never panics, keeps errno.
pub(crate) fn open_profile_in_process(path: &str, exclusive: bool) -> io::Result<File> {
    let saved = crate::sys::errno::errno();
    let r = open_profile_checked(path, exclusive);
    crate::sys::errno::set_errno(saved);
    r
}

fn open_profile_checked(path: &str, exclusive: bool) -> io::Result<File> {
    let c = CString::new(Path::new(path).as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut flags = libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    flags |= libc::O_NONBLOCK;
    if exclusive {
        flags |= libc::O_EXCL;
    }
    // SAFETY: `c` is NUL-terminated; the mode is passed as the variadic third argument.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644 as libc::c_uint) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            // A FIFO nobody reads (O_NONBLOCK) and a symlink (O_NOFOLLOW).
            Some(libc::ENXIO) => io::Error::other("it is a FIFO, not a regular file"),
            Some(libc::ELOOP) => io::Error::other("it is a symbolic link, never followed"),
            _ => e,
        });
    }
    // SAFETY: fd is a freshly opened descriptor owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(not_regular(&meta)));
    }
    if meta.uid() != euid() {
        return Err(io::Error::other(format!(
            "it belongs to uid {}, not to this user",
            meta.uid()
        )));
    }
    if meta.len() != 0 {
        return Err(io::Error::other("it is not empty (another run's profile?)"));
    }
    clear_nonblock(&file);
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("memprof-files-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn mkfifo(p: &Path) {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn outputs_are_new_or_replace_only_our_regular_files() {
        let d = scratch("out");
        let p = d.join("a.svg");
        let mut o = create_output(&p, false).unwrap();
        o.write_all(b"one").unwrap();
        o.commit().unwrap();
        assert!(create_output(&p, false).is_err(), "exists, not replaced");
        let mut o = create_output(&p, true).unwrap();
        o.write_all(b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one", "the old file until commit");
        o.commit().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        // Dropped uncommitted: the old file stays, no temporary file is left.
        drop(create_output(&p, true).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        // A symlink and a FIFO are left alone, replace or not.
        std::os::unix::fs::symlink(d.join("target"), d.join("l.svg")).unwrap();
        mkfifo(&d.join("f.svg"));
        for name in ["l.svg", "f.svg"] {
            for replace in [false, true] {
                let e = create_output(&d.join(name), replace).unwrap_err();
                assert!(e.to_string().contains("left alone"), "{e}");
            }
        }
        assert!(!d.join("target").exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn inputs_are_regular_files_opened_without_blocking() {
        let d = scratch("in");
        fs::write(d.join("r"), b"x").unwrap();
        mkfifo(&d.join("f"));
        assert!(open_input_regular(&d.join("r")).is_ok());
        let e = open_input_regular(&d.join("f")).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let e = open_input_regular(&d).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        assert!(open_input_regular(Path::new("/dev/zero")).is_err());
        fs::hard_link(d.join("r"), d.join("h")).unwrap();
        assert!(same_file(&d.join("r"), &d.join("h")));
        assert!(!same_file(&d.join("r"), &d.join("f")));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn libraries_come_only_from_files_nobody_else_can_change() {
        let d = scratch("lib");
        let lib = d.join("libx.so");
        fs::write(&lib, b"\x7fELF").unwrap();
        fs::set_permissions(&lib, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(check_loadable_library(&lib), Ok(fs::canonicalize(&lib).unwrap()));
        fs::set_permissions(&lib, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check_loadable_library(&lib).unwrap_err().contains("writable"));
        fs::set_permissions(&lib, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check_loadable_library(&lib).unwrap_err().contains("others can write"));
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_loadable_library(&d).is_err(), "a directory");
        // Every directory above it too: a parent that others can write (not sticky) could
        // be renamed away with the library in it.
        let inner = d.join("inner");
        fs::create_dir(&inner).unwrap();
        fs::set_permissions(&inner, fs::Permissions::from_mode(0o755)).unwrap();
        let deep = inner.join("libx.so");
        fs::copy(&lib, &deep).unwrap();
        assert!(check_loadable_library(&deep).is_ok());
        fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_loadable_library(&deep).unwrap_err();
        assert!(e.contains("is under") && e.contains("not sticky"), "{e}");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check_loadable_library(&deep).is_ok(), "sticky and ours: {e}");
        // Through a symlink, the loader is given the real path.
        std::os::unix::fs::symlink(&deep, d.join("link.so")).unwrap();
        assert_eq!(
            check_loadable_library(&d.join("link.so")),
            Ok(fs::canonicalize(&deep).unwrap())
        );
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn our_files_are_regular_files_of_ours_never_through_a_symlink() {
        let d = scratch("ours");
        fs::write(d.join("r"), b"x").unwrap();
        mkfifo(&d.join("f"));
        std::os::unix::fs::symlink(d.join("r"), d.join("l")).unwrap();
        assert!(open_ours(&d.join("r")).is_ok());
        let e = open_ours(&d.join("f")).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let e = open_ours(&d.join("l")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(open_ours(&d.join("none")).unwrap_err().kind(), io::ErrorKind::NotFound);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_in_process_profile_is_an_empty_regular_file_of_ours() {
        let d = scratch("agent");
        let p = d.join("p.mprof");
        assert!(open_profile_in_process(p.to_str().unwrap(), false).is_ok());
        assert!(open_profile_in_process(p.to_str().unwrap(), true).is_err(), "exclusive");
        fs::write(&p, b"old").unwrap();
        assert!(open_profile_in_process(p.to_str().unwrap(), false).is_err(), "not empty");
        mkfifo(&d.join("f"));
        let e = open_profile_in_process(d.join("f").to_str().unwrap(), false).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
