//! Writing the patch into a function's code.

use super::code::{Refusal, JMP_LEN};
use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, Ordering};

/// Writes `patch` over the first bytes at `at`: the code page(s) become read-write (not
/// executable) for the write and read-execute again after it, so no page is ever writable
/// and executable at once.
///
/// The patcher runs in the preload library's constructor, before `main`: the process is
/// single-threaded then unless a library's constructor started a thread, and no other
/// thread can be running the page. Even so, when the 5 bytes lie inside one aligned 8-byte
/// word (most entry points are 16-byte aligned) they are written with one 8-byte store, so
/// a reader sees the old instruction or the whole jump, never half of one; otherwise the
/// bytes after the first go first and the opcode last.
///
/// # Safety
/// `at` is the start of a function of a mapped, read-execute code segment, whose first
/// `JMP_LEN` bytes the patch may replace (see `code::moved`), and no code on its page(s)
/// runs while this does (nothing here calls it).
pub(crate) unsafe fn write(at: usize, patch: [u8; JMP_LEN]) -> Result<(), Refusal> {
    let page = 4096;
    let start = at & !(page - 1);
    let len = ((at + JMP_LEN + page - 1) & !(page - 1)) - start;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: the pages hold the function (the caller's contract); only their protection
    // changes.
    if unsafe { libc::mprotect(start as *mut c_void, len, rw) } != 0 {
        return Err(Refusal::Protect);
    }
    let word = at & !7;
    if at - word + JMP_LEN <= 8 {
        // SAFETY: the aligned word lies inside the now writable pages (an entry point's
        // page is the page of its first byte, and the word ends before `at + JMP_LEN`
        // rounded up to 8, inside the same range); an atomic store of a plain integer.
        let w = unsafe { &*(word as *const AtomicU64) };
        let mut bytes = w.load(Ordering::Relaxed).to_le_bytes();
        bytes[at - word..at - word + JMP_LEN].copy_from_slice(&patch);
        w.store(u64::from_le_bytes(bytes), Ordering::Release);
    } else {
        for (i, &b) in patch.iter().enumerate().skip(1).chain(core::iter::once((0, &patch[0]))) {
            // SAFETY: `at + i` is one of the patched bytes, in the writable pages.
            unsafe { core::ptr::write_volatile((at + i) as *mut u8, b) };
        }
    }
    // SAFETY: as above; back to what a code segment is.
    unsafe { libc::mprotect(start as *mut c_void, len, libc::PROT_READ | libc::PROT_EXEC) };
    Ok(())
}
