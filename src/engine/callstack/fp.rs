//! The frame-pointer walk, and the bounds of the thread's stack that keep it inside.

use super::{memo, this_thread, Captured, PerThread, INLINE_FRAMES};
use crate::sys::errno::{errno, set_errno};
use core::mem::MaybeUninit;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) const FP_SUPPORTED: bool = true;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) const FP_SUPPORTED: bool = false;

/// The frame pointer of the calling function's frame.
#[inline(always)]
pub(super) fn frame_pointer() -> usize {
    let fp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads a register; no memory is touched.
    unsafe {
        core::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: reads a register; no memory is touched.
    unsafe {
        core::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        fp = 0;
    }
    fp
}

/// The current stack pointer (approximately: the address of a local).
#[inline(always)]
pub(super) fn stack_pointer() -> usize {
    let marker = 0u8;
    core::hint::black_box(&marker) as *const u8 as usize
}

/// Largest distance between two consecutive frame pointers that is believed.
const MAX_FRAME: usize = 16 << 20;

#[inline(never)]
pub(super) fn capture_fp(out: &mut Captured, depth: usize) {
    out.clear();
    capture_fp_from(out, depth, 0)
}

/// Frame-pointer walk, dropping the `skip` innermost return addresses.
#[inline(always)]
fn capture_fp_from(out: &mut Captured, depth: usize, skip: usize) {
    let hi = stack_hi();
    if hi == 0 {
        return;
    }
    capture_fp_walk(out, depth, skip, frame_pointer(), stack_pointer(), hi, None);
}

/// Frame-pointer walk from the frame record at `fp`, for a stack `[lo, hi)`, after the
/// frames already in `out` (at most one, in the inline buffer). With `log`, every word read
/// is noted there (§4).
#[inline(always)]
pub(super) fn capture_fp_walk(
    out: &mut Captured,
    depth: usize,
    skip: usize,
    fp: usize,
    lo: usize,
    hi: usize,
    mut log: Option<&mut memo::Log>,
) {
    // The highest frame record start that keeps [fp, fp + 16) inside the stack.
    let top = hi.saturating_sub(2 * core::mem::size_of::<usize>());
    let mut fp = fp;
    let mut skip = skip;
    let mut n = out.len;
    // The common case runs in the inline buffer without bounds checks or growth tests.
    let fast_limit = depth.min(INLINE_FRAMES);
    loop {
        // A frame record is [saved fp, return address], word-aligned, inside [lo, hi).
        if fp < lo || fp > top || fp % core::mem::size_of::<usize>() != 0 {
            break;
        }
        let at_limit = if skip == 0 { n >= fast_limit } else { false };
        if at_limit {
            // Inline buffer full or depth reached: hand over to the growing path.
            out.len = n;
            if n >= depth {
                out.truncated = true;
                return;
            }
            return capture_fp_slow(out, depth, fp, lo, top);
        }
        // SAFETY: fp is word-aligned and fp..fp+16 lies inside this thread's stack, which is
        // mapped and readable; the values read are plain integers.
        let (next, ret) =
            unsafe { ((fp as *const usize).read(), (fp as *const usize).add(1).read()) };
        if let Some(log) = log.as_deref_mut() {
            log.note(fp as u64, next as u64);
            log.note(fp as u64 + 8, ret as u64);
        }
        if ret == 0 {
            break;
        }
        if skip > 0 {
            skip -= 1;
        } else {
            // n < fast_limit <= INLINE_FRAMES, and the buffer is still the inline one (the
            // capture started empty: `clear` ran first).
            out.inline[n] = MaybeUninit::new(ret);
            n += 1;
        }
        if next <= fp || next - fp > MAX_FRAME {
            break;
        }
        fp = next;
    }
    out.len = n;
}

/// Continues a frame-pointer walk past the inline buffer, doubling it as needed.
#[cold]
#[inline(never)]
fn capture_fp_slow(out: &mut Captured, depth: usize, mut fp: usize, lo: usize, top: usize) {
    loop {
        if fp < lo || fp > top || fp % core::mem::size_of::<usize>() != 0 {
            break;
        }
        if out.len >= depth {
            out.truncated = true;
            break;
        }
        // SAFETY: as in `capture_fp_from`: the record lies inside this thread's stack.
        let (next, ret) =
            unsafe { ((fp as *const usize).read(), (fp as *const usize).add(1).read()) };
        if ret == 0 || !out.push(ret) {
            break;
        }
        if next <= fp || next - fp > MAX_FRAME {
            break;
        }
        fp = next;
    }
}

/// The top of the current thread's stack, cached per thread.
pub(super) fn stack_hi() -> usize {
    this_thread().map_or(0, thread_hi)
}

#[inline(always)]
pub(super) fn thread_hi(t: &PerThread) -> usize {
    let v = t.hi.get();
    if v != 0 {
        return v;
    }
    let v = query_stack_hi();
    t.hi.set(v);
    v
}

/// Runs the library calls a thread's first sample makes to find its stack top
/// (`pthread_getattr_np`, which calls `realloc` and `pthread_getaffinity_np` through
/// glibc's lazily bound PLT), so that their symbols are bound before a thread on a small
/// stack samples: binding one costs the sample path ~2 KB of stack (`_dl_runtime_resolve`
/// saves the vector registers, then the symbol lookup). Called when a session begins.
pub(crate) fn bind_stack_queries() {
    let saved = errno();
    // SAFETY: as in `query_stack_hi`.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            let mut addr: *mut libc::c_void = core::ptr::null_mut();
            let mut size: libc::size_t = 0;
            libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
        }
    }
    set_errno(saved);
}

fn query_stack_hi() -> usize {
    // SAFETY: getpid/gettid have no preconditions.
    let main = unsafe { libc::getpid() == libc::gettid() };
    if main {
        extern "C" {
            static __libc_stack_end: *const core::ffi::c_void;
        }
        // SAFETY: glibc sets __libc_stack_end before main runs and never changes it.
        // Frames of the main thread all lie below it.
        return unsafe { __libc_stack_end } as usize;
    }
    let saved = errno();
    // pthread_getattr_np allocates (the thread's CPU set): the profiler's own allocations.
    // SAFETY: pthread_attr_t is plain data initialised by pthread_getattr_np and destroyed
    // once; the out-pointers are valid locals.
    let hi = crate::engine::sampler::Busy::own_allocations(|| unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            0
        } else {
            let mut addr: *mut libc::c_void = core::ptr::null_mut();
            let mut size: libc::size_t = 0;
            let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
            libc::pthread_attr_destroy(&mut attr);
            if r == 0 {
                addr as usize + size
            } else {
                0
            }
        }
    });
    set_errno(saved);
    hi
}
