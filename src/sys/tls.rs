//! Per-thread blocks of the sample path, reached without a call.
//!
//! A Rust `thread_local!` in a shared library uses the general-dynamic TLS model: every
//! access calls `__tls_get_addr` (about 15 instructions with the call). A sample reaches
//! two such blocks (the busy flag and the pointer to the thread's lazily mapped state,
//! `crate::engine::thread`), which would cost two calls per sample. An object that is loaded when the program
//! starts (the preload library, an executable) may use the initial-exec model instead: its
//! blocks lie at a fixed offset from the thread pointer, which the dynamic linker writes
//! into the GOT once, and an access is two instructions.
//!
//! [`thread_block!`] declares a block either way. With the `static-tls` feature on x86-64
//! Linux it is a `.tbss` symbol read through `@GOTTPOFF`, as the preload library's own
//! countdown is. Otherwise it is a `thread_local!`. Objects built with the feature carry
//! the `STATIC_TLS` flag: such an object cannot be `dlopen`ed once the program runs, unless
//! glibc's spare static TLS happens to fit it. So the feature is for the preload library
//! (and for executables), never for a library that others may load later.
//!
//! Both ways the block starts zeroed, so the types held must be valid, and mean "nothing
//! yet", when every byte is zero: integers, floats, `bool`s, `Cell`s and `UnsafeCell`s of
//! them, and `MaybeUninit`s with a flag that says whether they hold a value. Neither way
//! runs a destructor.
//!
//! Every byte declared here is in the static TLS of every thread of a program that loads the
//! preload library, and glibc takes static TLS out of each thread's stack: blocks stay a
//! few words; larger per-thread state is mapped when a thread first needs it
//! (`crate::engine::thread`).

/// Declares `fn $name() -> *const $ty`, this thread's block of type `$ty`, zeroed when the
/// thread starts (see the module documentation). `$zero` is the all-zero value of `$ty`,
/// written as a constant expression, for the `thread_local!` fallback; `$sym` names the
/// `.tbss` symbol, unique in the program. The pointer is valid, and only for the calling
/// thread, until the thread exits.
macro_rules! thread_block {
    ($(#[$meta:meta])* $vis:vis fn $name:ident() -> $ty:ty = $zero:expr, $sym:literal) => {
        #[cfg(all(feature = "static-tls", target_arch = "x86_64", target_os = "linux"))]
        core::arch::global_asm!(
            ".pushsection .tbss,\"awT\",@nobits",
            ".p2align {align}",
            concat!(".globl ", $sym),
            concat!(".hidden ", $sym),
            concat!(".type ", $sym, ",@object"),
            concat!(".size ", $sym, ",{size}"),
            concat!($sym, ":"),
            ".zero {size}",
            ".popsection",
            size = const core::mem::size_of::<$ty>(),
            align = const core::mem::align_of::<$ty>().trailing_zeros(),
        );

        $(#[$meta])*
        #[cfg(all(feature = "static-tls", target_arch = "x86_64", target_os = "linux"))]
        #[inline(always)]
        $vis fn $name() -> *const $ty {
            let p: *const $ty;
            // SAFETY: `fs:[0]` holds the thread pointer (x86-64 TLS ABI), and the GOT slot
            // holds the symbol's offset from it, written by the dynamic linker before any
            // code of this object runs. The sum is this thread's zeroed block, sized and
            // aligned for `$ty` above. Only registers are written; the result is the same
            // for every call on one thread (`pure`).
            unsafe {
                core::arch::asm!(
                    "mov {p}, qword ptr fs:[0]",
                    concat!("add {p}, qword ptr [rip + ", $sym, "@GOTTPOFF]"),
                    p = out(reg) p,
                    options(nostack, pure, readonly),
                )
            };
            p
        }

        $(#[$meta])*
        #[cfg(not(all(feature = "static-tls", target_arch = "x86_64", target_os = "linux")))]
        #[inline(always)]
        $vis fn $name() -> *const $ty {
            thread_local! {
                static BLOCK: $ty = const { $zero };
            }
            BLOCK.with(|b| b as *const $ty)
        }
    };
}

pub(crate) use thread_block;

/// The calling thread's identity: its thread pointer, unique among the live threads, never
/// 0, and the same in a signal handler as in the code it interrupted (the live table's
/// locks and the queue's slots name their owner with it).
#[inline(always)]
pub(crate) fn thread_id() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let p: usize;
        // SAFETY: `fs:[0]` holds the thread pointer itself (the x86-64 TLS ABI); the load
        // writes one register and reads nothing else.
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr fs:[0]",
                p = out(reg) p,
                options(nostack, pure, readonly, preserves_flags),
            )
        };
        p
    }
    #[cfg(target_arch = "aarch64")]
    {
        let p: usize;
        // SAFETY: reading the thread-pointer register has no preconditions.
        unsafe {
            core::arch::asm!(
                "mrs {p}, tpidr_el0",
                p = out(reg) p,
                options(nostack, nomem, pure, preserves_flags),
            )
        };
        p
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // SAFETY: pthread_self has no preconditions and neither allocates nor locks.
        unsafe { libc::pthread_self() as usize }
    }
}
