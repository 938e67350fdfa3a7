//! The output file and the tree's directory, created before the program runs, or in the
//! child between `fork` and `exec` when the name holds `%p` (§3).
//!
//! # 3. The output
//! The output file is created with `O_CREAT|O_EXCL|O_NOFOLLOW` (mode 0644 before the umask)
//! so that a symlink is never followed and another run's profile never overwritten, unless
//! `--force` replaces it (only a regular file of this user's: anything else is left alone,
//! as `sys/files.rs` §2 does for every output), atomically: a new file under a temporary
//! name in the same directory, renamed over the old one, so that the name never stops
//! naming a file. A name with `%p` (the default, `memprof.%p.mprof`) is created in the
//! child between `fork` and `exec`, where its pid is known; a failure there comes back to
//! this process before the program runs. With `--follow-forks` the tree's directory,
//! `<output>.d/`, is created next to it (`sys/private_dir.rs`: `mkdir`, 0700; `--force`
//! first removes an earlier run's, if it is this user's directory, and unlinks anything
//! else of the name).
#![deny(unsafe_op_in_unsafe_fn)]

use super::RecordOptions;
use crate::error::{Error, LaunchError};
use crate::record::env as config;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Expands `%p`/`%%` of `template` with `pid` into `buf`, NUL-terminated, without
/// allocating (for the child between fork and exec). Returns false when it does not fit.
fn expand_into(template: &[u8], pid: u32, buf: &mut [u8]) -> bool {
    let mut digits = [0u8; 10];
    let n = crate::sys::procfs::write_decimal(&mut digits, pid);
    let mut out = 0;
    let mut put = |b: u8, out: &mut usize| -> bool {
        if *out + 1 >= buf.len() {
            return false;
        }
        buf[*out] = b;
        *out += 1;
        true
    };
    let mut i = 0;
    while i < template.len() {
        let c = template[i];
        if c == b'%' && template.get(i + 1) == Some(&b'p') {
            for d in &digits[..n] {
                if !put(*d, &mut out) {
                    return false;
                }
            }
            i += 2;
            continue;
        }
        if c == b'%' && template.get(i + 1) == Some(&b'%') {
            i += 1;
        }
        if !put(c, &mut out) {
            return false;
        }
        i += 1;
    }
    buf[out] = 0;
    true
}

/// Creates the output file exclusively, or with `force` replaces a regular file of this
/// user's of that name atomically: a new empty file is created under a temporary name in
/// the same directory (`O_CREAT|O_EXCL|O_NOFOLLOW`) and renamed over the old one, so the
/// name never stops naming a file (an unlink then a create left a moment in which anyone
/// who can write the directory could put a symlink or a FIFO there). Async-signal-safe, and
/// no allocation: it runs in the child between fork and exec. Returns 0 or an errno.
pub(crate) fn create_output(path: &[u8], force: bool) -> i32 {
    let p = path.as_ptr().cast::<libc::c_char>();
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated (built by `expand_into` or from a CString); `st` is
    // a live stat buffer.
    let ours = force
        && unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            // Only a regular file of this user's: a FIFO, a device or another user's file is
            // left alone (EEXIST), as `sys/files.rs` §2 leaves them.
            libc::lstat(p, &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFREG
                && st.st_uid == libc::geteuid()
        };
    if ours {
        return replace_output(path);
    }
    // SAFETY: as above; the mode is the variadic third argument.
    unsafe {
        let fd = libc::open(p, flags, 0o644 as libc::c_uint);
        if fd < 0 {
            return *libc::__errno_location();
        }
        libc::close(fd);
    }
    0
}

/// [`create_output`]'s replacement: `<path>.<pid>.<n>.tmp`, created new, renamed over
/// `path`. Async-signal-safe, no allocation.
fn replace_output(path: &[u8]) -> i32 {
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    let mut tmp = [0u8; 4096 + 48];
    if end + 48 > tmp.len() {
        return libc::ENAMETOOLONG;
    }
    tmp[..end].copy_from_slice(&path[..end]);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mut last = libc::EEXIST;
    // A name taken (another run's temporary file, or one put there to stop this one) is
    // passed over for the next.
    for n in 0..16u32 {
        let mut at = end;
        for part in [pid, n] {
            tmp[at] = b'.';
            at += 1;
            at += crate::sys::procfs::write_decimal(&mut tmp[at..], part);
        }
        tmp[at..at + 5].copy_from_slice(b".tmp\0");
        let t = tmp.as_ptr().cast::<libc::c_char>();
        // SAFETY: `tmp` and `path` are NUL-terminated; the mode is the variadic argument.
        unsafe {
            let fd = libc::open(t, flags, 0o644 as libc::c_uint);
            if fd < 0 {
                last = *libc::__errno_location();
                if last == libc::EEXIST {
                    continue;
                }
                return last;
            }
            libc::close(fd);
            // Whatever the name is now, rename replaces the entry itself: a symlink put
            // there meanwhile is replaced, never followed; a directory fails.
            if libc::rename(t, path.as_ptr().cast()) != 0 {
                let e = *libc::__errno_location();
                libc::unlink(t);
                return e;
            }
        }
        return 0;
    }
    last
}

/// Set in the errno the child sends back when it was the tree's directory that could not
/// be created.
pub(super) const TREE_DIR_ERROR: i32 = 1 << 30;

/// `--force` with `--follow-forks`: an earlier run's tree directory is removed, if it is
/// this user's real directory (its files with it); anything else of its name (a symlink, a
/// file) is unlinked, never followed.
fn remove_tree(dir: &Path) {
    let Ok(meta) = fs::symlink_metadata(dir) else { return };
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    if meta.is_dir() {
        if meta.uid() == me {
            let _ = fs::remove_dir_all(dir);
        }
    } else {
        let _ = fs::remove_file(dir);
    }
}

pub(crate) fn create_error(path: &str, errno: i32, force: bool) -> Error {
    let e = std::io::Error::from_raw_os_error(errno);
    if errno == libc::EEXIST && !force {
        LaunchError::OutputExists(path.to_owned()).into()
    } else if errno == libc::EEXIST {
        Error::Other(format!(
            "cannot create the profile {path}: it exists and is not a regular file of this \
             user's (a directory, a FIFO, a device, another user's file); --force replaces \
             only those, and it is left alone"
        ))
    } else {
        Error::io(format!("cannot create the profile {path}"), e)
    }
}

/// Creates the output (and with `--follow-forks` the tree's directory beside it) before the
/// program runs, for a name without `%p`.
pub(super) fn create_now(opts: &RecordOptions, template: &str) -> Result<(), Error> {
    let c = std::ffi::CString::new(template.as_bytes()).map_err(|_| LaunchError::NulInOutput)?;
    let errno = create_output(c.as_bytes_with_nul(), opts.force);
    if errno != 0 {
        return Err(create_error(template, errno, opts.force));
    }
    if opts.settings.follow_forks {
        let dir = config::tree_dir(template);
        if opts.force {
            remove_tree(Path::new(&dir));
        }
        let c = std::ffi::CString::new(dir.as_bytes()).map_err(|_| LaunchError::NulInOutput)?;
        let errno = crate::sys::private_dir::create(c.as_bytes_with_nul(), false);
        if errno != 0 {
            let _ = fs::remove_file(template);
            return Err(create_error(&dir, errno, false));
        }
    }
    Ok(())
}

/// What the child runs between `fork` and `exec` for a name with `%p`: the output created
/// under its pid (and the tree's directory beside it), a failure's errno written to `wr`
/// (with [`TREE_DIR_ERROR`] set when it was the directory) before the `exec` is refused.
pub(super) fn create_in_child(
    template: &str,
    force: bool,
    follow: bool,
    wr: libc::c_int,
) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let tmpl = template.to_owned().into_bytes();
    move || -> std::io::Result<()> {
        let mut buf = [0u8; 4096];
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        let mut errno = if expand_into(&tmpl, pid, &mut buf) {
            create_output(&buf, force)
        } else {
            libc::ENAMETOOLONG
        };
        if errno == 0 && follow {
            // The tree's directory, `<output>.d`, beside it (a fresh pid's: none of an
            // earlier run's is replaced here).
            let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
            errno = if end + 3 <= buf.len() {
                buf[end..end + 3].copy_from_slice(b".d\0");
                crate::sys::private_dir::create(&buf[..end + 3], false)
            } else {
                libc::ENAMETOOLONG
            };
            if errno != 0 {
                buf[end] = 0;
                // SAFETY: `buf` holds the output's NUL-terminated path, created above.
                unsafe { libc::unlink(buf.as_ptr().cast()) };
                errno |= TREE_DIR_ERROR;
            }
        }
        if errno != 0 {
            let bytes = errno.to_ne_bytes();
            // SAFETY: writes 4 bytes from a live buffer to the pipe's write end.
            unsafe { libc::write(wr, bytes.as_ptr().cast(), 4) };
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }
}

/// The error the child sent back (an errno from [`create_in_child`]), for `template`.
pub(super) fn child_error(template: &str, errno: i32, force: bool) -> Error {
    if errno & TREE_DIR_ERROR != 0 {
        let dir = config::tree_dir(template);
        return create_error(&dir, errno & !TREE_DIR_ERROR, false);
    }
    create_error(template, errno, force)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_without_allocating() {
        let mut buf = [0u8; 64];
        assert!(expand_into(b"memprof.%p.mprof", 1234, &mut buf));
        assert_eq!(&buf[..18], b"memprof.1234.mprof");
        assert_eq!(buf[18], 0);
        assert!(expand_into(b"a%%p", 7, &mut buf));
        assert_eq!(&buf[..4], b"a%p\0");
        assert!(!expand_into(b"0123456789", 1, &mut [0u8; 5]));
    }
}
