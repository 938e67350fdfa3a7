//! The rings found in the ring directory, mapped and attached (§1), each with the process
//! that made it as this process's `/proc` names it.
//!
//! # 7. Which process, across PID namespaces
//! Everything above reads `/proc/<pid>`, so a ring's pid must be the process's in this
//! process's `/proc`, not in its own PID namespace: two programs started by `unshare -p -f`
//! are both pid 1 there, and `/proc/1` here is `init`. The ring's header says how `/proc`
//! names its maker, and whether the maker found that `/proc` to be the collector's view
//! (`ring` §5); when it could not, [`process::ring_owner`] finds the maker among this
//! `/proc`'s processes by its start time, its innermost pid and, among several, the ring's
//! file in its maps. Images of one process follow one another by that pid (a namespace's
//! pid 1 replaces no other namespace's pid 1), the file is named by it and records it, and
//! the parent is the one `/proc` names. A maker not found has ended (nothing more comes
//! through its ring): its ring is drained and finished at once, its file named by the
//! header's pid, and no `/proc` file is read for it.

use super::super::process;
use super::Attached;
use crate::engine::queue::Queue;
use crate::record::env;
use crate::record::ring::{self, Ring};
use crate::sys::smaps::Memory;
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Attaches to the rings that appeared in `dir` (§1), oldest image first per pid; each
/// ring's process found as this process's `/proc` names it (§7).
pub(super) fn attach_new(
    dir: &Path,
    rings: &mut Vec<Attached>,
    images: &mut HashMap<u32, u32>,
    messages: &mut Vec<String>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut found: Vec<(u32, u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let (pid, n) = name.strip_suffix(".ring")?.split_once('.')?;
            Some((pid.parse().ok()?, n.parse().ok()?, e.path()))
        })
        .collect();
    found.sort();
    let mut mapped = Vec::new();
    for (pid, n, path) in found {
        match map_ring(&path, pid) {
            Ok(Some((ring, queue, file))) => {
                if ring.header().pid != pid {
                    continue;
                }
                let owner = process::ring_owner(ring.header(), file);
                let made = ring.header().made_ns;
                mapped.push((owner.unwrap_or(0), made, n, pid, ring, queue));
            }
            Ok(None) => {}
            Err(e) => messages.push(e),
        }
    }
    // The images of one process in the order they were made (their rings' names may
    // differ: an image that mounted its namespace's own `/proc` before `exec`).
    mapped.sort_by_key(|m| (m.0, m.1, m.2));
    for (pid, _, _, named, ring, queue) in mapped {
        let h = ring.header();
        let proc_start = h.proc_start;
        // A process seen under another pid in its own namespace: its parent as `/proc`
        // names it (its own `getppid` names a process of its namespace, or none).
        let ppid = (pid != 0 && pid != h.ns_pid).then(|| process::parent_of(pid)).flatten();
        if pid != 0 {
            for older in rings.iter_mut().filter(|r| r.pid == pid) {
                older.replaced = true;
            }
        }
        // A ring whose process was not found is named by its header's pid, from the first
        // name not taken (`create_child`).
        let image = if pid == 0 { &mut 0 } else { images.entry(pid).or_insert(0) };
        rings.push(Attached {
            ring,
            queue,
            pid,
            shown: if pid == 0 { named } else { pid },
            ppid,
            proc_start,
            image: *image,
            out: None,
            replaced: false,
            done: false,
            // Opened now, the file is this process's: a pid reused later reads
            // nothing through it (nor pid 0: no process).
            memory: Memory::open(Some(pid), dir.display().to_string()),
            zombie_status: None,
            ending_seen: 0,
            pidfd: (pid != 0).then(|| process::open_pidfd(pid, proc_start)).flatten(),
        });
        *image += 1;
    }
}

/// A ring mapped, its queue, and its file's device and inode (§7).
type Mapped = (Ring, Queue, (u64, u64));

/// Maps a ring file (made by process `pid`) and unlinks it (the mapping keeps it). `None`:
/// not a ring of ours, or not yet. The error is a message for stderr.
fn map_ring(path: &Path, pid: u32) -> Result<Option<Mapped>, String> {
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    // SAFETY: getuid has no preconditions.
    if !meta.is_file() || meta.uid() != unsafe { libc::getuid() } {
        return Ok(None);
    }
    let len = meta.len() as usize;
    if len == 0 {
        // Not sized yet: the next pass looks again.
        return Ok(None);
    }
    use std::os::fd::AsRawFd;
    // SAFETY: maps `len` bytes of an open regular file, shared; no address hint.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(cannot(std::io::Error::last_os_error()));
    }
    // SAFETY: `base` maps `len` bytes; the ring (or this function) unmaps it.
    match unsafe { Ring::attach(base as *mut u8, len) } {
        Ok((ring, queue)) => {
            // Attached: the mapping keeps the memory, and nothing is left behind on the
            // file system whatever happens to either process.
            let _ = std::fs::remove_file(path);
            Ok(Some((ring, queue, (meta.dev(), meta.ino()))))
        }
        Err(ring::NotAttached::Refused { version }) => {
            // Another build's preload library (`ring` §6): told, it stops waiting and runs
            // on unprofiled; its file is not looked at again.
            let _ = std::fs::remove_file(path);
            // SAFETY: unmaps the mapping made above, which nothing references.
            unsafe { libc::munmap(base, len) };
            let library = process::preload_library(pid).unwrap_or_else(|| "unknown".into());
            Err(format!(
                "process {pid} is not profiled: its preload library ({library}) is of another \
                 memprof build (shared ring version {version}, this memprof's is {}); it runs \
                 on unprofiled. Use the library built with this memprof (see {})",
                ring::VERSION,
                env::ENV_PRELOAD
            ))
        }
        Err(ring::NotAttached::NotYet) => {
            // Not set up yet (the next pass looks again), or never will be: a process
            // that died while setting up leaves its file to the directory's removal.
            // SAFETY: unmaps the mapping made above, which nothing references.
            unsafe { libc::munmap(base, len) };
            Ok(None)
        }
    }
}
