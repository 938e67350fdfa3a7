//! Which of a process's anonymous mappings glibc's malloc made, told by what they hold.
//!
//! The resident-memory split (`sys::smaps`) long counted every private anonymous mapping
//! that is neither a stack nor an object's `.bss` as the allocator's. A heap of another
//! kind then read as memory malloc held free: Go's heap, V8's, GCC's collected heap, a
//! program's own `mmap`ed arena, with a `malloc_trim` hint that could not help. glibc
//! 2.36 does not name its mappings (2.39's `glibc.mem.decorate_maps` would), so they are
//! recognised by their first words, read from the process with `process_vm_readv` (no
//! stop, no ptrace; a page that is gone or unreadable reads as nothing):
//! - **an arena's heap** (every arena but the main one, which is `[heap]`) starts at a
//!   multiple of `HEAP_MAX_SIZE` (64 MiB) with its `heap_info`: the arena, the previous
//!   heap, its size and the size made readable (`mprotect_size`, a whole number of pages,
//!   at least the size and at most 64 MiB): the readable part is the arena's;
//! - **a block too large for an arena** (`mmap`ed by `malloc`) is its own mapping, whose
//!   first words are the chunk's header: 0 (no alignment correction) and its size, a whole
//!   number of pages, with the `IS_MMAPPED` bit.
//!
//! The kernel merges neighbouring anonymous mappings of the same permissions into one, so a
//! mapping is walked from its start: one arena heap or block after another while they are
//! recognised; what follows the last one is not malloc's. Bounded: at most [`MAX_STEPS`]
//! recognised pieces per mapping. A user mapping that starts, by chance, with words of
//! that exact shape would be counted as malloc's; the sizes must also fit the mapping.

/// glibc's `HEAP_MAX_SIZE` on 64-bit targets (`2 × DEFAULT_MMAP_THRESHOLD_MAX`).
const HEAP_MAX: u64 = 64 << 20;
/// The chunk header's bit of a block `mmap`ed on its own.
const IS_MMAPPED: u64 = 2;
/// The chunk header's bit of a block of an arena other than the main one.
const NON_MAIN_ARENA: u64 = 4;
/// Pieces of one mapping recognised at most (merged neighbours of large blocks).
const MAX_STEPS: usize = 4096;
const PAGE: u64 = 4096;

/// Reads the first words of a process's mappings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MallocMaps {
    pid: libc::pid_t,
}

impl MallocMaps {
    /// For process `pid`.
    pub(crate) fn of(pid: u32) -> MallocMaps {
        MallocMaps { pid: pid as libc::pid_t }
    }

    /// True when the process's memory can be read at all (the first words of `addr`, a
    /// readable mapping of it).
    pub(crate) fn readable(&self, addr: u64) -> bool {
        self.words(addr).is_some()
    }

    /// The first four words at `addr` in the process, `None` when they cannot be read.
    fn words(&self, addr: u64) -> Option<[u64; 4]> {
        let mut w = [0u64; 4];
        let local = libc::iovec { iov_base: w.as_mut_ptr().cast(), iov_len: 32 };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: 32 };
        // SAFETY: `local` describes `w`, 32 writable bytes alive for the call; the remote
        // range is only read by the kernel, which checks it (an unmapped page fails the
        // call with EFAULT rather than faulting here). Errno is the caller's to ignore:
        // this runs off the sample path (the collector's or the drain thread's readings).
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        (n == 32).then_some(w)
    }

    /// Bytes of the private anonymous mapping `start..end` that glibc's malloc made, from
    /// its start on (see the module documentation).
    pub(crate) fn malloc_bytes(&self, start: u64, end: u64) -> u64 {
        let mut at = start;
        for _ in 0..MAX_STEPS {
            if at >= end {
                break;
            }
            let Some(w) = self.words(at) else {
                break;
            };
            match piece(at, end, w) {
                Some(len) => at += len,
                None => break,
            }
        }
        at.min(end) - start
    }
}

/// The length of the piece of malloc's that starts at `at` (a mapping ending at `end`)
/// with words `w`, if it is one.
fn piece(at: u64, end: u64, w: [u64; 4]) -> Option<u64> {
    let room = end - at;
    // An arena's heap: heap_info { ar_ptr, prev, size, mprotect_size }.
    let (ar_ptr, size, protected) = (w[0], w[2], w[3]);
    if at % HEAP_MAX == 0
        && ar_ptr != 0
        && size > 0
        && size <= protected
        && protected <= HEAP_MAX
        && protected % PAGE == 0
    {
        return Some(protected.min(room));
    }
    // A block mmapped on its own: prev_size 0, then its size with IS_MMAPPED.
    let len = w[1] & !7;
    if w[0] == 0
        && w[1] & IS_MMAPPED != 0
        && w[1] & NON_MAIN_ARENA == 0
        && len >= PAGE
        && len % PAGE == 0
        && len <= room
    {
        return Some(len);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping of this process that holds `addr`: (start, end).
    fn mapping_of(addr: u64) -> (u64, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| {
                let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
            })
            .find(|&(a, b)| a <= addr && addr < b)
            .unwrap()
    }

    /// A block large enough to be mmapped on its own is malloc's; a mapping of the
    /// program's own is not; an arena's heap (a thread's allocations) is.
    #[test]
    fn malloc_s_mappings_are_told_from_the_program_s() {
        let me = MallocMaps::of(std::process::id());
        // SAFETY: malloc/free of a block this test owns; 96 MiB is above glibc's largest
        // mmap threshold and larger than an arena's heap, so the block has a mapping of its
        // own (a 32 MiB one came from the top of a thread arena's heap when other tests'
        // threads had freed that much there).
        let big = unsafe { libc::malloc(96 << 20) } as u64;
        assert_ne!(big, 0);
        let (start, end) = mapping_of(big);
        // The block's mapping may have merged with neighbours: it is malloc's from its
        // own start (its header is 16 bytes below the pointer).
        assert_eq!(me.malloc_bytes(big - 16, end), end - (big - 16));
        assert!(start <= big - 16);
        // SAFETY: an anonymous mapping of this test's own, unmapped below.
        let own = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                8 << 20,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(own, libc::MAP_FAILED);
        // SAFETY: 8 MiB of the fresh mapping, writable.
        unsafe { core::ptr::write_bytes(own.cast::<u8>(), 7, 8 << 20) };
        let own = own as u64;
        assert_eq!(me.malloc_bytes(own, own + (8 << 20)), 0);
        // A thread's arena: its heap starts at a multiple of 64 MiB.
        let small = std::thread::spawn(|| {
            // SAFETY: a block kept for the check below (leaked on purpose: freeing it
            // could shrink the heap away).
            unsafe { libc::malloc(1000) as u64 }
        })
        .join()
        .unwrap();
        let heap = small & !(HEAP_MAX - 1);
        let (s0, s1) = mapping_of(small);
        // (When every arena was taken, the thread shares one, maybe the main one.)
        if s0 <= heap {
            assert_eq!(me.malloc_bytes(heap, s1), s1 - heap);
        }
        // SAFETY: the test's own block and mapping.
        unsafe {
            libc::free(big as *mut libc::c_void);
            libc::munmap(own as *mut libc::c_void, 8 << 20);
        }
    }

    /// Words of the shapes malloc writes, and of others.
    #[test]
    fn pieces_by_their_words() {
        let m = 64 << 20;
        // An arena heap with 132 KiB readable.
        assert_eq!(piece(m, m + (132 << 10), [m + 32, 0, 132 << 10, 132 << 10]), Some(132 << 10));
        // Not at a multiple of 64 MiB: not a heap.
        assert_eq!(piece(m + PAGE, m + (1 << 20), [m + 32, 0, 1 << 16, 1 << 16]), None);
        // A block of 2 MiB mmapped on its own, in a mapping of 3 MiB.
        assert_eq!(piece(PAGE, PAGE + (3 << 20), [0, (2 << 20) | 2, 0, 0]), Some(2 << 20));
        // Its size beyond the mapping, or not whole pages, or without the bit: no.
        assert_eq!(piece(PAGE, PAGE + (1 << 20), [0, (2 << 20) | 2, 0, 0]), None);
        assert_eq!(piece(PAGE, PAGE + (3 << 20), [0, ((2 << 20) + 16) | 2, 0, 0]), None);
        assert_eq!(piece(PAGE, PAGE + (3 << 20), [0, 2 << 20, 0, 0]), None);
        // Zeroes (a fresh mapping of the program's): no.
        assert_eq!(piece(m, m + (1 << 20), [0; 4]), None);
    }
}
