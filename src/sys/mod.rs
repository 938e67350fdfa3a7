//! Process primitives the engine is built on: memory from glibc's own entry points,
//! per-thread blocks without destructors, a call on another stack, cache-line padding, errno, futexes, hashing, the loader's
//! list of objects, the next definition of a symbol in it, whether a seccomp filter may refuse
//! the profiler's system calls (`seccomp.rs`), and the one policy for the files the
//! profiler opens or writes (`files.rs`). Nothing here knows about sampling.

#[cfg(test)]
pub(crate) mod alloc_count;
pub(crate) mod elf_lookup;
pub(crate) mod errno;
pub mod files;
pub(crate) mod futex;
pub mod got;
pub(crate) mod hash;
pub(crate) mod loader;
pub(crate) mod malloc_maps;
pub(crate) mod monotonic;
#[cfg(target_arch = "x86_64")]
pub(crate) mod on_stack;
pub(crate) mod own_file;
pub(crate) mod padded;
pub(crate) mod private_dir;
pub(crate) mod procfs;
pub(crate) mod rawmem;
pub(crate) mod seccomp;
pub(crate) mod signals;
pub(crate) mod smaps;
pub(crate) mod tls;
pub(crate) mod trusted;

/// A new, empty directory for one unit test (`memprof-MODULE-PID-NAME` under the temporary
/// directory), mode 0755 whatever the umask, so the file policy's checks pass in it.
#[cfg(test)]
pub(crate) fn test_dir(module: &str, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("memprof-{module}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}
