//! The private directory of a run's shared rings: made for the run, removed after it, and
//! the directories of runs killed before they could remove theirs removed too.
#![deny(unsafe_op_in_unsafe_fn)]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The private directory of a run's shared rings (0700, on a memory file system when
/// there is one), removed with what is left in it when dropped.
pub(crate) struct RingDir(pub(crate) PathBuf);

impl RingDir {
    pub(crate) fn create() -> Option<RingDir> {
        use std::os::unix::fs::DirBuilderExt;
        let shm = Path::new("/dev/shm");
        let parent = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        RingDir::remove_stale(&parent);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for i in 0..100u32 {
            let dir = parent.join(format!("memprof-{}-{nanos:x}{i}", std::process::id()));
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    // Before any process looks for it (`record/ring` §7); without it the
                    // collector finds new rings by listing the directory.
                    let _ = crate::record::ring::create_bell(&dir);
                    return Some(RingDir(dir));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => break,
            }
        }
        None
    }
}

impl RingDir {
    /// Removes the ring directories of `record` processes that are gone (killed before they
    /// could remove their own: a ring their program made before they attached to it stays
    /// there otherwise), when they are this user's.
    fn remove_stale(parent: &Path) {
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        for e in fs::read_dir(parent).into_iter().flatten().flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("memprof-"))
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
            if ours && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}

impl Drop for RingDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
