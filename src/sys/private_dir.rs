//! A directory of the profiler's own (a process tree's, `<root>.mprof.d/`): created with
//! `mkdir` (exclusive by nature: it fails on any existing name, a symlink included) with
//! mode 0700, so nobody else can add, replace or read a file in it, or accepted when it
//! already exists only as a real directory (`lstat`: not a symlink) of this user's that
//! nobody else can write. Async-signal-safe: `memprof record` creates it in the child
//! between `fork` and `exec` when its name has the pid in it.
#![deny(unsafe_op_in_unsafe_fn)]

/// Creates the directory at `path` (NUL-terminated); with `accept_ours`, an existing one
/// that is this user's real directory, writable by nobody else, is taken as it is.
/// Returns 0 or an errno (EEXIST for anything else of that name).
pub(crate) fn create(path: &[u8], accept_ours: bool) -> i32 {
    if path.last() != Some(&0) {
        return libc::EINVAL;
    }
    let p = path.as_ptr().cast::<libc::c_char>();
    // SAFETY: `p` is NUL-terminated (checked above); mkdir and lstat are async-signal-safe
    // and write only into `st`, a live out pointer.
    unsafe {
        if libc::mkdir(p, 0o700) == 0 {
            return 0;
        }
        let errno = *libc::__errno_location();
        if errno != libc::EEXIST || !accept_ours {
            return errno;
        }
        let mut st: libc::stat = core::mem::zeroed();
        let ours = libc::lstat(p, &mut st) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFDIR
            && st.st_uid == libc::getuid()
            && st.st_mode & 0o022 == 0;
        if ours {
            0
        } else {
            libc::EEXIST
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn created_once_and_never_through_a_symlink() {
        let base = std::env::temp_dir().join(format!("memprof-private-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let c = |name: &str| {
            let mut v = base.join(name).into_os_string().into_encoded_bytes();
            v.push(0);
            v
        };
        assert_eq!(super::create(&c("t.d"), false), 0);
        assert_eq!(super::create(&c("t.d"), false), libc::EEXIST);
        assert_eq!(super::create(&c("t.d"), true), 0, "ours: taken");
        std::os::unix::fs::symlink(base.join("t.d"), base.join("l.d")).unwrap();
        assert_eq!(super::create(&c("l.d"), true), libc::EEXIST, "a symlink is never taken");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(base.join("t.d")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "nobody else can enter it");
        let _ = std::fs::remove_dir_all(&base);
    }
}
