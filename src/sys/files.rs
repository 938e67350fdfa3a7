//! One policy for every file memprof opens or writes, in one place.
//!
//! # 1. Code that is loaded into programs
//! A library memprof puts in `LD_PRELOAD` or `dlopen`s (`MEMPROF_PRELOAD`,
//! `libmemprof_preload.so` beside the executable, the bundled copy) runs its constructor in
//! every profiled program, so whoever can replace it runs code there. `sys/trusted.rs`
//! opens it once and checks it by its descriptor and every directory above it up to `/`
//! (this user's or root's; writable by group or others only when sticky), and the loader is
//! never handed that path: the bytes read from the checked descriptor are copied into a
//! directory of this user's alone (`record/command/bundled.rs` §2, checked the same way and
//! `owned_and_private`), so no rename between the check and the load changes what is
//! loaded.
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

    fn scratch(name: &str) -> PathBuf {
        crate::sys::test_dir("files", name)
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
