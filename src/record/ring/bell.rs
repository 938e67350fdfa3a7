//! The ring directory's bell: how a process tells the collector that its new ring is
//! ready, so that the collector need not list the directory every few milliseconds.
//!
//! # 7. The collector's sleep
//! The collector sleeps between its passes (`record/command/collect` §1) on the futex
//! words of every ring it has attached (each queue's `consumer_sleep`, `engine::queue` §6)
//! and on one more, the bell: the first word of the file [`BELL_FILE`] in the ring
//! directory, which `memprof record` (or `attach`) makes before the program runs. A process
//! maps the bell when it creates its ring and rings it ([`ring_bell`]: the word counted
//! up, then a wake) once its ring is ready, so the collector attaches to a new process's
//! ring at once, however long it sleeps otherwise. A process that cannot map the bell, or
//! that runs under a seccomp filter, does not ring it: the collector still lists the
//! directory now and then. The mapping is kept for the life of the process (no
//! descriptor is).

use crate::sys::futex;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// The bell's file in the ring directory.
pub(crate) const BELL_FILE: &str = "bell";

/// Bytes of the bell's file (one page; the word is its first four bytes).
const BELL_BYTES: usize = 4096;

/// This process's bell, once mapped (null: none).
static BELL: AtomicPtr<AtomicU32> = AtomicPtr::new(core::ptr::null_mut());

/// Maps the bell of ring directory `dir` for the rest of the process's life (§7): a file
/// of this user's, regular, a page long. `None` when there is none such.
pub(crate) fn map_bell(dir: &str) -> Option<&'static AtomicU32> {
    let path = format!("{dir}/{BELL_FILE}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: getuid has no preconditions.
    if !meta.is_file() || meta.uid() != unsafe { libc::getuid() } || meta.len() < 4 {
        return None;
    }
    // SAFETY: maps a page of an open regular file, shared; no address hint. A file shorter
    // than the page is read as zeroes past its end, and only its first word is used.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            BELL_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping is page-aligned, at least four bytes of it lie in the file, and
    // it is never unmapped: a `'static` atomic word.
    Some(unsafe { &*(base as *const AtomicU32) })
}

/// Makes the bell's file in ring directory `dir` (§7), before any process may look for it.
#[cfg(feature = "cli")] // by `record` and `attach` only
pub(crate) fn create_bell(dir: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(BELL_FILE))?;
    file.set_len(BELL_BYTES as u64)
}

/// Maps this process's bell in `dir`, to ring later ([`ring_bell`]).
pub(crate) fn keep_bell(dir: &str) {
    if let Some(word) = map_bell(dir) {
        BELL.store(word as *const AtomicU32 as *mut AtomicU32, Ordering::Release);
    }
}

/// Rings this process's bell (§7): the collector looks for new rings at once. Nothing
/// under a seccomp filter, or without a bell.
pub(crate) fn ring_bell() {
    let bell = BELL.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a word of a mapping never unmapped (`map_bell`).
    let Some(word) = (unsafe { bell.as_ref() }) else {
        return;
    };
    if crate::sys::seccomp::filtered() {
        return;
    }
    word.fetch_add(1, Ordering::SeqCst);
    futex::wake(word, 1);
}
