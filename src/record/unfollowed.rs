//! The programs a recorded process started but did not follow: how a process profiled
//! without `--follow-forks` tells `memprof record` what it executed, so that `record` can
//! name them ("sh ran ./prog; --follow-forks profiles it too") instead of leaving the user
//! with one sample of the wrapper.
//!
//! # 1. The channel
//! Not following, the preload library leaves `LD_PRELOAD` without itself: what a process
//! executes is never profiled and can tell nothing. So the process that starts it says so,
//! in the `exec` family's hooks and in `posix_spawn`'s (glibc's `posix_spawn` calls its
//! internal `execve` in the child, past every hook): it appends the name it was given
//! (the path or the file looked up in `PATH`), NUL-terminated, to [`FILE`] in the run's
//! ring directory (`MEMPROF_RINGS`, a 0700 directory of `record`'s). The file is opened,
//! written once (`O_APPEND`: records of concurrent writers do not overlap) and closed on
//! every call, so a program that closes or reuses descriptors cannot break it, a forked
//! child that does not follow (its session gone) still writes, and so does a `vfork` child.
//!
//! # 2. What may run where
//! [`note`] runs in a `vfork` child, between `fork` and `exec`, and in a signal handler if
//! the program execs from one: it allocates nothing, takes no lock, uses only
//! async-signal-safe calls on a stack buffer, and keeps errno. The directory's path is
//! copied into a static buffer once, by the agent's start ([`set_dir`]), before any other
//! thread of ours exists.
//!
//! # 3. Trust
//! Names are whatever the program passed: `record` escapes control characters before it
//! prints them. A file that is not this user's regular file is not written to (the
//! directory may be gone and its name taken by someone else's after `record` ended) and
//! not read.
#![deny(unsafe_op_in_unsafe_fn)]

use core::cell::UnsafeCell;
use core::ffi::c_char;
use core::sync::atomic::{AtomicBool, Ordering};

/// The file in the ring directory.
pub(crate) const FILE: &str = "unfollowed";

/// Longest name recorded (longer ones are cut).
const NAME_MAX: usize = 1024;

/// `<dir>/unfollowed`, NUL-terminated, once [`SET`] is true.
struct LogPath(UnsafeCell<[u8; 512]>);

// SAFETY: written once by `set_dir` before `SET` is published (Release), read only after
// `SET` is seen (Acquire), never written again.
unsafe impl Sync for LogPath {}

static PATH: LogPath = LogPath(UnsafeCell::new([0; 512]));
static SET: AtomicBool = AtomicBool::new(false);

/// Starts recording names into `dir`'s [`FILE`] (a path too long is not recorded). Called
/// once, by the agent's start.
pub(crate) fn set_dir(dir: &str) {
    if SET.load(Ordering::Acquire) {
        return;
    }
    let bytes = dir.as_bytes();
    let total = bytes.len() + 1 + FILE.len();
    if bytes.contains(&0) || total + 1 > 512 {
        return;
    }
    // SAFETY: not yet published (see `LogPath`): no reader, and the agent's start is the
    // only writer.
    let buf = unsafe { &mut *PATH.0.get() };
    buf[..bytes.len()].copy_from_slice(bytes);
    buf[bytes.len()] = b'/';
    buf[bytes.len() + 1..total].copy_from_slice(FILE.as_bytes());
    buf[total] = 0;
    SET.store(true, Ordering::Release);
}

/// Records that this process is about to execute `name` (a NUL-terminated string, or null
/// for an unnamed program: `fexecve`). See §2 for where it may run.
///
/// # Safety
/// `name` is null or points to a NUL-terminated string.
pub unsafe fn note(name: *const c_char) {
    if !SET.load(Ordering::Acquire) {
        return;
    }
    let saved = crate::sys::errno::errno();
    let mut rec = [0u8; NAME_MAX + 1];
    let mut n = 0;
    if name.is_null() {
        let unnamed = b"(fexecve)";
        rec[..unnamed.len()].copy_from_slice(unnamed);
        n = unnamed.len();
    } else {
        // SAFETY: the caller's contract: readable up to its NUL, which ends the loop.
        while n < NAME_MAX && unsafe { *name.add(n) } != 0 {
            // SAFETY: as above, `n` is before the NUL.
            rec[n] = unsafe { *name.add(n) } as u8;
            n += 1;
        }
    }
    rec[n] = 0;
    let flags =
        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: PATH is NUL-terminated and no longer written (SET was seen); open, fstat,
    // write and close are async-signal-safe and take no lock of the program's.
    unsafe {
        let fd = libc::open(PATH.0.get().cast::<c_char>(), flags, 0o600 as libc::c_uint);
        if fd >= 0 {
            let mut st: libc::stat = core::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFREG
                && st.st_uid == libc::getuid()
                && st.st_nlink == 1
            {
                libc::write(fd, rec.as_ptr().cast(), n + 1);
            }
            libc::close(fd);
        }
    }
    crate::sys::errno::set_errno(saved);
}

/// The names recorded in `dir`, in the order they were written (at most `limit` bytes of
/// the file are read). Empty when nothing was recorded, or the file is not this user's
/// regular file.
pub(crate) fn read(dir: &std::path::Path, limit: u64) -> Vec<String> {
    use std::io::Read;
    let Ok(file) = crate::sys::files::open_ours(&dir.join(FILE)) else {
        return Vec::new();
    };
    let mut bytes = Vec::new();
    if file.take(limit).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    bytes
        .split(|&b| b == 0)
        .filter(|r| !r.is_empty())
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_round_trip_through_the_file() {
        let dir = std::env::temp_dir().join(format!("memprof-unfollowed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        super::set_dir(dir.to_str().unwrap());
        // SAFETY: NUL-terminated literals, and null.
        unsafe {
            super::note(c"./prog".as_ptr());
            super::note(c"a\nb\x1b[31m".as_ptr());
            super::note(core::ptr::null());
        }
        let names = super::read(&dir, 1 << 20);
        assert_eq!(names, ["./prog", "a\nb\x1b[31m", "(fexecve)"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
