//! A call on another stack that every unwinder can walk back out of (x86-64).
//!
//! [`call_on`] runs a closure with the stack pointer at the top of a stack of the caller's,
//! then comes back. The switch is a function of its own, written in assembly with its call
//! frame information (CFI): while the closure runs, the switch's frame keeps the old stack
//! pointer in `rbp` (pushed `rbp` below it, the frame-pointer chain unbroken) and its CFI
//! says the caller's frame is at `rbp + 16`. So whatever unwinds from inside the closure
//! (a signal handler's `backtrace()`, a CPU profiler's `SIGPROF` walk, `gdb`, `perf` with
//! DWARF or frame pointers) crosses from the other stack back to the thread's own, as it
//! would through any call. An `asm!` block in a Rust function could not say so: the
//! compiler's own CFI for the function would describe the stack pointer, which points into
//! the other stack during the call. Rust's `psm` crate switches stacks the same way.

use core::ffi::c_void;

core::arch::global_asm!(
    ".pushsection .text.memprof_0_1_call_on_stack,\"ax\",@progbits",
    ".p2align 4",
    ".globl memprof_0_1_call_on_stack",
    ".hidden memprof_0_1_call_on_stack",
    ".type memprof_0_1_call_on_stack,@function",
    // (rdi: the closure, passed on; rsi: the new stack's top, 16-byte aligned)
    "memprof_0_1_call_on_stack:",
    ".cfi_startproc",
    "push rbp",
    ".cfi_def_cfa_offset 16",
    ".cfi_offset rbp, -16",
    "mov rbp, rsp",
    ".cfi_def_cfa_register rbp",
    "mov rsp, rsi",
    "call {run}",
    "mov rsp, rbp",
    ".cfi_def_cfa_register rsp",
    "pop rbp",
    ".cfi_def_cfa_offset 8",
    ".cfi_restore rbp",
    "ret",
    ".cfi_endproc",
    ".size memprof_0_1_call_on_stack, .-memprof_0_1_call_on_stack",
    ".popsection",
    run = sym run,
);

extern "C" {
    /// The switch above: calls `run(data)` with the stack pointer at `top`.
    fn memprof_0_1_call_on_stack(data: *mut c_void, top: *mut u8);
}

/// Calls the closure `data` points to (a `&mut dyn FnMut()`), on the other stack.
extern "C" fn run(data: *mut c_void) {
    // SAFETY: `data` is the `&mut &mut dyn FnMut()` `call_on` passed, alive and not
    // otherwise used during the call.
    let f = unsafe { &mut *(data as *mut &mut dyn FnMut()) };
    f();
}

/// Runs `f` with the stack pointer at `top`, then returns on the current stack.
///
/// # Safety
/// `top` is the 16-byte-aligned end of a stack that nothing else uses during the call and
/// that is deep enough for `f` (a guard page below it turns an overflow into a fault). `f`
/// must not unwind: it runs under an `extern "C"` frame, where a panic aborts.
#[inline(always)]
pub(crate) unsafe fn call_on(top: *mut u8, f: &mut dyn FnMut()) {
    let mut f = f;
    // SAFETY: the switch follows the C ABI: it saves and restores `rbp` and the stack
    // pointer around the call and clobbers only what a C call may; the caller vouches for
    // `top` (above); `data` is alive for the call.
    unsafe { memprof_0_1_call_on_stack(&mut f as *mut &mut dyn FnMut() as *mut c_void, top) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack of `bytes` on the heap: the memory and its 16-byte-aligned top.
    fn stack(bytes: usize) -> (Vec<u8>, *mut u8) {
        let mut v = vec![0u8; bytes];
        let end = v.as_mut_ptr_range().end as usize;
        (v, (end & !15) as *mut u8)
    }

    /// The closure runs on the given stack, and the stack pointer is the caller's again
    /// after the call.
    #[test]
    fn runs_on_the_other_stack_and_returns() {
        let (mem, top) = stack(64 * 1024);
        let lo = mem.as_ptr() as usize;
        let mut seen = 0usize;
        let before = &seen as *const usize as usize;
        let mut f = || {
            let here = 0u8;
            seen = core::hint::black_box(&here) as *const u8 as usize;
        };
        // SAFETY: `top` is the aligned end of a 64 KiB stack used by nothing else; the
        // closure does not unwind.
        unsafe { call_on(top, &mut f) };
        assert!(seen > lo && seen < top as usize, "{seen:#x} not in [{lo:#x}, {top:?})");
        let after = 0u8;
        let after = core::hint::black_box(&after) as *const u8 as usize;
        assert!(after.abs_diff(before) < 64 * 1024, "back on the thread's stack");
    }

    /// Calls `f` on a fresh 1 MiB stack: a frame that only the thread's own stack holds.
    #[inline(never)]
    fn beyond_the_switch(f: &mut dyn FnMut()) {
        let (_mem, top) = stack(1 << 20);
        // SAFETY: `top` is the aligned end of a 1 MiB stack used by nothing else, deep
        // enough for a backtrace's capture and its symbols; `f` does not unwind.
        unsafe { call_on(top, f) };
        core::hint::black_box(());
    }

    /// An unwinder that starts on the other stack reaches the caller's frames through the
    /// switch's CFI: the standard library's backtrace (libgcc's DWARF unwinder) from inside
    /// the closure names the switch and the function that called it.
    #[test]
    fn an_unwinder_walks_back_through_the_switch() {
        let mut trace = String::new();
        beyond_the_switch(&mut || {
            trace = format!("{:?}", std::backtrace::Backtrace::force_capture())
        });
        assert!(trace.contains("memprof_0_1_call_on_stack"), "{trace}");
        assert!(trace.contains("beyond_the_switch"), "{trace}");
    }
}
