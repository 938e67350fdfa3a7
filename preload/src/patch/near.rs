//! Executable memory within reach of a `jmp rel32` from a patched object: the relays and
//! trampolines of its patched functions live here.
//!
//! A region is mapped read-write with `MAP_FIXED_NOREPLACE` at addresses tried outward from
//! the object's ends (the kernel refuses an address in use instead of moving the mapping;
//! a kernel older than 4.17 takes the flag as a hint, so the address it returns is checked
//! and a mapping elsewhere is given back). Once everything is written it becomes read and
//! execute only, never both writable and executable.

use core::ffi::c_void;

/// The region's size: room for the relays and trampolines of a few dozen functions.
const LEN: usize = 64 << 10;

/// How far a region may lie from every byte of the object: well inside ±2 GiB, so every
/// `jmp rel32` from the object reaches all of it.
const REACH: usize = (1 << 31) - 2 * LEN;

/// A read-write region being filled, then sealed.
pub(crate) struct Region {
    base: usize,
    used: usize,
}

impl Region {
    /// A region within reach of every byte of `[lo, hi)` (an object's mapped range), or
    /// `None` when no address tried could be mapped (the object is too large or its
    /// surroundings are taken).
    pub(crate) fn near(lo: usize, hi: usize) -> Option<Region> {
        let page = 4096;
        let above = (hi + page - 1) & !(page - 1);
        let below = (lo & !(page - 1)).checked_sub(LEN)?;
        // Right next to the object first, then outward by doubling steps (each try is one
        // system call; a busy neighbourhood is passed over quickly).
        let steps = core::iter::once(0).chain((16..31).map(|b| 1usize << b));
        for step in steps {
            for hint in [above.checked_add(step), below.checked_sub(step)].into_iter().flatten() {
                if hint.saturating_add(LEN) - lo.min(hint) > REACH || hi.max(hint) - hint > REACH {
                    continue;
                }
                // SAFETY: a fresh anonymous mapping; MAP_FIXED_NOREPLACE never replaces an
                // existing mapping, and a result elsewhere is unmapped below.
                let p = unsafe {
                    libc::mmap(
                        hint as *mut c_void,
                        LEN,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                        -1,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    continue;
                }
                if p as usize != hint {
                    // SAFETY: the mapping just made, used by nothing.
                    unsafe { libc::munmap(p, LEN) };
                    continue;
                }
                return Some(Region { base: hint, used: 0 });
            }
        }
        None
    }

    /// Copies `bytes` into the region at a 16-byte boundary and returns their address;
    /// `None` when full.
    pub(crate) fn put(&mut self, bytes: &[u8]) -> Option<usize> {
        let at = (self.used + 15) & !15;
        if at + bytes.len() > LEN {
            return None;
        }
        // SAFETY: `[base + at, base + at + len)` lies inside the region, mapped read-write
        // by `near` and not yet sealed (`seal` consumes the region).
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), (self.base + at) as *mut u8, bytes.len())
        };
        self.used = at + bytes.len();
        Some(self.base + at)
    }

    /// Where the next [`put`](Region::put) would copy to (its bytes' address depends on it:
    /// a trampoline is encoded for the address it runs at).
    pub(crate) fn next(&self) -> usize {
        self.base + ((self.used + 15) & !15)
    }

    /// Makes the region read and execute only; its code can run from now on. False when
    /// `mprotect` refused (the region is then left unused).
    pub(crate) fn seal(self) -> bool {
        // SAFETY: the region's own mapping.
        unsafe {
            libc::mprotect(self.base as *mut c_void, LEN, libc::PROT_READ | libc::PROT_EXEC) == 0
        }
    }
}
