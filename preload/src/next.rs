//! The next definitions of the malloc family: where each export forwards (see the crate
//! documentation, §2).
//!
//! Each function has a slot in [`NEXT`], a static read with one load on every call (`malloc`
//! and `free`'s fast paths jump through it in assembly). A slot starts out holding a
//! *first call* of the same signature, which resolves the whole table and then calls
//! through the slot: no flag is tested on the fast path, and the first call of any of the
//! functions, wherever it comes from (the loader, a constructor that runs before this
//! library's, another thread), forwards correctly. Resolution is
//! [`memprof::__private::next_definitions`]: an ELF symbol lookup over the loader's list
//! of objects that allocates nothing and calls neither `dlsym` nor `malloc`, so it may run
//! inside the first `malloc`. It is idempotent (every resolver writes the same values), so
//! threads or signal handlers that race to do it need no lock. The walk takes the loader's
//! lock (recursive: a first call made inside `dl_iterate_phdr` on the same thread goes
//! through), which user code holds only inside its own `dl_iterate_phdr` callbacks; the
//! only call that can wait for it is the process's first allocating call, made during
//! start-up, before the program has started any thread. A function no later object
//! defines (impossible while glibc is loaded) falls back to glibc's own entry point.
//!
//! When an object *before* this library defines `malloc` (the crate's §5), the table holds
//! that object's functions instead ([`prior`]), and a function it lacks gets its fallback,
//! built where it can be on the table's `realloc` or `memalign` (so on that allocator). The
//! patcher then replaces those slots with trampolines to the original code
//! ([`set_patched`]) before it patches the entry points, and no resolver writes them back.

use core::ffi::{c_int, c_void, CStr};
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
}

/// `malloc`'s slot in [`NEXT`].
pub(crate) const MALLOC: usize = 0;
/// `free`'s slot in [`NEXT`].
pub(crate) const FREE: usize = 1;

/// Declares the table: for each function, its slot, its name, its typed accessor, its first
/// call and its fallback.
macro_rules! table {
    ($($i:literal: $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty,
        first $first:ident, fallback $fallback:expr;)*) => {
        const COUNT: usize = [$($i),*].len();
        pub(crate) const NAMES: [&CStr; COUNT] = [$(
            match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("not a C string"),
            }
        ),*];

        /// The next definition of each function, or its first call until resolved.
        pub(crate) static NEXT: [AtomicPtr<c_void>; COUNT] =
            [$(AtomicPtr::new($first as *mut c_void)),*];

        /// The fallback of slot `i` (glibc's entry point, or this library's equivalent).
        fn fallback(i: usize) -> *mut c_void {
            match i {
                $($i => $fallback as *mut c_void,)*
                _ => core::ptr::null_mut(),
            }
        }

        $(
            /// The next definition of the function of this name (see the module
            /// documentation).
            #[inline(always)]
            pub(crate) fn $name() -> unsafe extern "C" fn($($ty),*) -> $ret {
                let f = NEXT[$i].load(Ordering::Relaxed);
                // SAFETY: the slot holds either this function's first call or a function
                // of this signature: the program's definition of a C library function of
                // this name, or the fallback of the same signature.
                unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> $ret>(f) }
            }

            /// The first call of the function: resolves the table, then calls through it.
            unsafe extern "C" fn $first($($arg: $ty),*) -> $ret {
                resolve();
                // SAFETY: the caller's contract, which is the function's.
                unsafe { $name()($($arg),*) }
            }
        )*
    };
}

table! {
    0: malloc(size: usize) -> *mut c_void,
        first first_malloc, fallback __libc_malloc;
    1: free(ptr: *mut c_void) -> (),
        first first_free, fallback __libc_free;
    2: calloc(n: usize, size: usize) -> *mut c_void,
        first first_calloc, fallback __libc_calloc;
    3: realloc(ptr: *mut c_void, size: usize) -> *mut c_void,
        first first_realloc, fallback __libc_realloc;
    4: reallocarray(ptr: *mut c_void, n: usize, size: usize) -> *mut c_void,
        first first_reallocarray, fallback fallback_reallocarray;
    5: memalign(align: usize, size: usize) -> *mut c_void,
        first first_memalign, fallback __libc_memalign;
    6: posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int,
        first first_posix_memalign, fallback fallback_posix_memalign;
    7: aligned_alloc(align: usize, size: usize) -> *mut c_void,
        first first_aligned_alloc, fallback __libc_memalign;
    8: valloc(size: usize) -> *mut c_void,
        first first_valloc, fallback __libc_valloc;
    9: pvalloc(size: usize) -> *mut c_void,
        first first_pvalloc, fallback fallback_pvalloc;
    10: malloc_usable_size(ptr: *mut c_void) -> usize,
        first first_malloc_usable_size, fallback fallback_malloc_usable_size;
}

const _: () = assert!(matches!(NAMES[MALLOC].to_bytes(), b"malloc"));
const _: () = assert!(matches!(NAMES[FREE].to_bytes(), b"free"));

/// Set once the table holds the next definitions.
static RESOLVED: AtomicBool = AtomicBool::new(false);

/// Set once the patcher has put trampolines in the table (`crate::patch`): a late
/// resolver must not write the definer's patched entry points back.
static PATCHED: AtomicBool = AtomicBool::new(false);

/// The definitions of the table's functions in an object that precedes this library in
/// lookup order and defines `malloc` (see the module documentation); all `None` when none
/// does.
pub(crate) fn prior() -> [Option<memprof::__private::Prior>; COUNT] {
    let mut prior = [None; COUNT];
    // Any address inside this library names it: the lookup stops before it.
    let this = resolve as *const () as usize;
    memprof::__private::prior_definitions(this, &NAMES, &mut prior);
    prior
}

/// Puts `f` (a trampoline to the original code of the definer's function in slot `i`) in
/// the table, for good: called by the patcher before it patches that function's entry.
pub(crate) fn set_patched(i: usize, f: *mut c_void) {
    PATCHED.store(true, Ordering::Release);
    NEXT[i].store(f, Ordering::Release);
}

/// Resolves the table (see the module documentation). Allocates nothing; safe to run
/// concurrently, and again.
fn resolve() {
    if PATCHED.load(Ordering::Acquire) {
        return;
    }
    let mut found = [core::ptr::null_mut(); COUNT];
    // Any address inside this library names it: the lookup starts after it.
    let this = resolve as *const () as usize;
    memprof::__private::next_definitions(this, &NAMES, &mut found);
    let prior = prior();
    if prior[MALLOC].is_some() {
        // A definer before this library: every object's calls bind to its functions, so
        // they are the next definitions; one it lacks gets the fallback, which is built on
        // its `realloc` or `memalign` where it can be (never another allocator's).
        for (f, p) in found.iter_mut().zip(prior) {
            *f = p.map_or(core::ptr::null_mut(), |p| p.addr as *mut c_void);
        }
    }
    for (i, (slot, f)) in NEXT.iter().zip(found).enumerate() {
        slot.store(if f.is_null() { fallback(i) } else { f }, Ordering::Release);
    }
    RESOLVED.store(true, Ordering::Release);
}

/// Resolves the table unless some call already did (the constructor calls it, so that the
/// table is settled before the program can `dlopen` anything).
pub(crate) fn resolve_once() {
    if !RESOLVED.load(Ordering::Acquire) {
        resolve();
    }
}

/// `reallocarray` when the allocator defines none: its `realloc` of the product, or ENOMEM.
unsafe extern "C" fn fallback_reallocarray(ptr: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: the caller's contract (realloc's).
        Some(total) => unsafe { realloc()(ptr, total) },
        None => {
            memprof::__private::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `posix_memalign` when no later object defines one: glibc's checks, then `memalign`.
unsafe extern "C" fn fallback_posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    let word = core::mem::size_of::<*mut c_void>();
    if align == 0 || align % word != 0 || !(align / word).is_power_of_two() {
        return libc::EINVAL;
    }
    // SAFETY: no preconditions.
    let p = unsafe { __libc_memalign(align, size) };
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a writable `out`.
    unsafe { *out = p };
    0
}

/// `pvalloc` when the allocator defines none: its `memalign` of whole pages.
unsafe extern "C" fn fallback_pvalloc(size: usize) -> *mut c_void {
    const PAGE: usize = 4096;
    match size.checked_add(PAGE - 1) {
        // SAFETY: no preconditions.
        Some(s) => unsafe { memalign()(PAGE, (s & !(PAGE - 1)).max(PAGE)) },
        None => {
            memprof::__private::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `malloc_usable_size` when no later object defines one: nothing is known to be usable.
unsafe extern "C" fn fallback_malloc_usable_size(_ptr: *mut c_void) -> usize {
    0
}
