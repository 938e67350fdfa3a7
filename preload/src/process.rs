//! The hooks that bring the profile up to date before the process image, or a library in
//! it, goes away: `dlclose`, `_exit`/`_Exit` and the `exec` family; and the hooks that name
//! the programs a process starts without following them (the `exec` family and
//! `posix_spawn`/`posix_spawnp`: see `memprof`'s `record/unfollowed.rs`).

use crate::next_symbol;
use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::AtomicPtr;
use memprof::__private::{around_dlclose, errno, set_errno};

/// `dlclose`: glibc's, inside [`around_dlclose`], which writes what the profile needs from
/// the library while it is still mapped and then lets the DWARF unwinder list the objects
/// still loaded.
///
/// # Safety
/// As C's `dlclose`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let f = next_symbol(&REAL, c"dlclose");
    if f.is_null() {
        return -1;
    }
    // SAFETY: `f` is glibc's dlclose, of this signature.
    let f: unsafe extern "C" fn(*mut c_void) -> c_int = unsafe { core::mem::transmute(f) };
    around_dlclose(handle, || {
        // SAFETY: as the caller's contract.
        unsafe { f(handle) }
    })
}

/// `_exit` (and `_Exit`, the same function in glibc): writes what the profile has so far
/// ([`memprof::__private::before_quick_exit`]), then glibc's `_exit`.
///
/// # Safety
/// As C's `_exit`.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    memprof::__private::before_quick_exit(Some(status));
    let f = next_symbol(&REAL, c"_exit");
    if !f.is_null() {
        // SAFETY: `f` is glibc's _exit, of this signature.
        let f: unsafe extern "C" fn(c_int) -> ! = unsafe { core::mem::transmute(f) };
        // SAFETY: as the caller's contract.
        unsafe { f(status) }
    }
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_Exit`: see [`_exit`].
///
/// # Safety
/// As C's `_Exit`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: the same contract.
    unsafe { _exit(status) }
}

type Argv = *const *const c_char;

/// Names the program `shown` (a NUL-terminated string, or null) for `memprof record` when
/// it is not followed, brings the profile up to date
/// ([`memprof::__private::before_exec`]) and returns glibc's `name` (found once, cached in
/// `slot`), with errno as the caller left it; null with ENOSYS when it cannot be found.
fn before_exec(slot: &AtomicPtr<c_void>, name: &CStr, shown: *const c_char) -> *mut c_void {
    let saved = errno();
    // SAFETY: `shown` is the path or file argument of an exec function, which its caller
    // passes NUL-terminated, or null.
    unsafe { memprof::__private::note_unfollowed(shown) };
    memprof::__private::before_exec();
    let f = next_symbol(slot, name);
    set_errno(if f.is_null() { libc::ENOSYS } else { saved });
    f
}

/// The exec functions with a fixed argument list: each writes what the profile has so far
/// ([`memprof::__private::before_exec`]: the new image never finishes this one's file),
/// then calls glibc's function of its name with the caller's arguments (-1 with ENOSYS
/// when glibc's cannot be found). The other `exec` functions glibc exports call its
/// `execve` internally, past this hook, so they are hooked too.
macro_rules! exec_hooks {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) names $shown:expr;)*) => {
        $(
            $(#[$doc])*
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
                static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
                const NAME: &CStr =
                    match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                        Ok(name) => name,
                        Err(_) => panic!("not a C string"),
                    };
                let f = before_exec(&REAL, NAME, $shown);
                if f.is_null() {
                    return -1;
                }
                type Real = unsafe extern "C" fn($($ty),*) -> c_int;
                // SAFETY: `f` is glibc's function of this name, of this signature.
                let f: Real = unsafe { core::mem::transmute(f) };
                // SAFETY: the caller's contract, which is glibc's function's.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

exec_hooks! {
    /// `execve`: see [`exec_hooks`].
    ///
    /// # Safety
    /// As C's `execve`.
    execve(path: *const c_char, argv: Argv, envp: Argv) names path;
    /// `execv`: see [`exec_hooks`].
    ///
    /// # Safety
    /// As C's `execv`.
    execv(path: *const c_char, argv: Argv) names path;
    /// `execvp`: see [`exec_hooks`].
    ///
    /// # Safety
    /// As C's `execvp`.
    execvp(file: *const c_char, argv: Argv) names file;
    /// `execvpe`: see [`exec_hooks`].
    ///
    /// # Safety
    /// As C's `execvpe`.
    execvpe(file: *const c_char, argv: Argv, envp: Argv) names file;
    /// `fexecve`: see [`exec_hooks`].
    ///
    /// # Safety
    /// As C's `fexecve`.
    fexecve(fd: c_int, argv: Argv, envp: Argv) names core::ptr::null();
}

/// `execl`, `execlp` and `execle`: see [`exec_hooks`]. They are C-variadic, which stable Rust
/// cannot define, so each is a naked function that keeps every argument register (and
/// `al`, the count of vector registers a variadic call passes) and the stack as they came,
/// calls [`before_variadic_exec`] in between, and tail-jumps to glibc's function with the
/// caller's arguments untouched (x86-64; elsewhere glibc's run unhooked).
#[cfg(target_arch = "x86_64")]
mod variadic_exec {
    use super::*;

    /// glibc's `execl`, `execlp` and `execle`, found once.
    static REAL: [AtomicPtr<c_void>; 3] = [const { AtomicPtr::new(core::ptr::null_mut()) }; 3];
    const NAMES: [&core::ffi::CStr; 3] = [c"execl", c"execlp", c"execle"];

    /// Names `path` (the exec function's first argument), brings the profile up to date
    /// and returns glibc's function number `which` (null, with ENOSYS, when it cannot be
    /// found), keeping errno.
    extern "C" fn before_variadic_exec(which: usize, path: *const c_char) -> *mut c_void {
        let which = which.min(2);
        before_exec(&REAL[which], NAMES[which], path)
    }

    /// glibc's function could not be found: -1 (errno is ENOSYS, see `before_exec`).
    extern "C" fn not_found() -> c_int {
        -1
    }

    macro_rules! hook {
        ($name:ident, $which:literal) => {
            /// See the module documentation.
            ///
            /// # Safety
            /// As C's function of this name (declared variadic in C).
            #[no_mangle]
            #[unsafe(naked)]
            pub unsafe extern "C" fn $name() -> c_int {
                core::arch::naked_asm!(
                    // Entry: rsp = 8 mod 16. Seven pushes align it for the call.
                    "push rdi",
                    "push rsi",
                    "push rdx",
                    "push rcx",
                    "push r8",
                    "push r9",
                    "push rax",
                    "mov rsi, rdi",
                    "mov edi, {which}",
                    "call {before}",
                    "mov r11, rax",
                    "pop rax",
                    "pop r9",
                    "pop r8",
                    "pop rcx",
                    "pop rdx",
                    "pop rsi",
                    "pop rdi",
                    "test r11, r11",
                    "jz {fail}",
                    "jmp r11",
                    which = const $which,
                    before = sym before_variadic_exec,
                    fail = sym not_found,
                )
            }
        };
    }

    hook!(execl, 0);
    hook!(execlp, 1);
    hook!(execle, 2);
}

/// `posix_spawn` and `posix_spawnp`: name the program for `memprof record` when it is not
/// followed, then glibc's function with the caller's arguments. glibc's spawn the child
/// with `clone` and run its internal `execve` there, which no hook sees; a followed child
/// is profiled anyway (the program it runs loads the preload library from `LD_PRELOAD`).
macro_rules! spawn_hooks {
    ($($(#[$doc:meta])* $name:ident($what:ident);)*) => {
        $(
            $(#[$doc])*
            #[no_mangle]
            pub unsafe extern "C" fn $name(
                pid: *mut libc::pid_t,
                $what: *const c_char,
                actions: *const c_void,
                attr: *const c_void,
                argv: *const *mut c_char,
                envp: *const *mut c_char,
            ) -> c_int {
                static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
                let saved = errno();
                // SAFETY: the caller passes the program's name NUL-terminated.
                unsafe { memprof::__private::note_unfollowed($what) };
                const NAME: &CStr =
                    match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                        Ok(name) => name,
                        Err(_) => panic!("not a C string"),
                    };
                let f = next_symbol(&REAL, NAME);
                set_errno(saved);
                if f.is_null() {
                    return libc::ENOSYS;
                }
                type Real = unsafe extern "C" fn(
                    *mut libc::pid_t,
                    *const c_char,
                    *const c_void,
                    *const c_void,
                    *const *mut c_char,
                    *const *mut c_char,
                ) -> c_int;
                // SAFETY: `f` is glibc's function of this name, of this signature.
                let f: Real = unsafe { core::mem::transmute(f) };
                // SAFETY: the caller's contract, which is glibc's function's.
                unsafe { f(pid, $what, actions, attr, argv, envp) }
            }
        )*
    };
}

spawn_hooks! {
    /// `posix_spawn`: see [`spawn_hooks`].
    ///
    /// # Safety
    /// As C's `posix_spawn`.
    posix_spawn(path);
    /// `posix_spawnp`: see [`spawn_hooks`].
    ///
    /// # Safety
    /// As C's `posix_spawnp`.
    posix_spawnp(file);
}
