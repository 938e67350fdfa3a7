//! Entry-point patching (x86-64): allocators that the dynamic linker's symbol lookup never
//! sends to this library's exports.
//!
//! # 1. What is patched
//! - **A definer before this library** (the crate's §5): an object earlier in lookup order
//!   that defines `malloc` (rustc's executable, which links jemalloc unprefixed and exports
//!   it; an `LD_PRELOAD` library listed first). Every object's calls of the family bind to
//!   it, and so do its own calls from inside. For each function of the table in `next` that
//!   it defines, the trampoline to its original code goes in that function's `NEXT` slot
//!   (so this library's export forwards to the definer's own allocator: never to another),
//!   then its entry jumps to this library's export of the same name: the exports are the
//!   hooks, unchanged. Loaded late by `memprof attach`, the library comes after every
//!   object, and the definer is glibc itself unless an earlier object defines `malloc`
//!   (§3). Calls made before the constructor (the loader's, libc's, other
//!   libraries' constructors') went to the definer directly and unsampled; their blocks are
//!   freed through the same allocator, which is all that matters.
//! - **Allocators under names of their own** in the executable's `.symtab` (`symtab`): a
//!   function of tikv-jemallocator's `_rjem_*` family or of mimalloc's `mi_*` family gets a
//!   hook of its own (`hooks`), with a slot of its own for its trampoline.
//! - **Rust's allocator shim** (`__rust_alloc`, `__rust_dealloc`, `__rust_realloc`,
//!   `__rust_alloc_zeroed`), only as the fallback: when the executable has the shim, no
//!   family above, and a global allocator that is not the default (no `__rdl_alloc`: the
//!   default's blocks come from `malloc`, hooked already).
//!
//! One layer per allocation path, so no allocation is counted twice: a family is hooked
//! when found, the shim only without one, and the shim never over the default allocator.
//! Where layers still nest (a custom global allocator that calls `malloc`, a `realloc` that
//! calls its own `malloc`), the outer hook runs the original marked busy and puts the
//! countdown back (`entry::inside`), so the inner hook reports nothing. `xallocx`,
//! mimalloc's `mi_heap_*`, `mi_expand` and its string copies are not hooked (see `hooks`).
//!
//! # 2. How
//! For each function: iced-x86 decodes whole instructions from its entry until they cover
//! a 5-byte `jmp rel32` (`code`); its block encoder re-encodes them in a page mapped within
//! ±2 GiB of the object (`near`), RIP-relative operands and branches rewritten to reach
//! what they reached, followed by an absolute jump back to the first instruction left in
//! place: the trampoline, which runs the original function. Beside it a relay, `jmp
//! [rip]` and the hook's address, which the `jmp rel32` written over the entry reaches
//! (this library may be mapped further than 2 GiB away). The page is sealed read-execute,
//! the slot is set, and only then is the entry patched (`write`): from the first patched
//! call on, the hook has its original. A function is left alone, and the reason logged,
//! when its symbol is shorter than the patch, its first bytes do not decode or cannot be
//! re-encoded, or a branch inside it lands in the bytes the patch overwrites; a family is
//! patched whole or not at all (a hooked `malloc` whose `free` is not hooked would leave
//! every sampled block live for ever).
//!
//! # 3. When
//! Once, in the constructor, after the `NEXT` table is resolved and before the session
//! starts, with the thread marked busy: the patcher's own allocations (iced's instruction
//! lists, the symbol names) are the library's, never reported. The process is normally
//! single-threaded then (see `write`). Patches, slots and trampolines are ordinary memory: a
//! forked child inherits them, and an `exec`ed image starts afresh with its own
//! constructor. An unsampled call of a hooked function costs the `jmp rel32`, the relay's
//! indirect jump, the hook's fast path and the trampoline's jump back (`cargo bench --bench
//! hooked` counts them, beside glibc's `malloc` through this library).
//!
//! Loaded into a running process by `memprof attach` (the crate's §6), the same plan is
//! made by [`deferred`] when the attacher asks, and the entry points' writes go back to
//! the attacher, which makes them with every thread stopped (a thread must not be running
//! the bytes a patch replaces): then the process is not single-threaded, and the page is
//! never made writable (the attacher writes through `/proc/PID/mem`). There every object
//! precedes this library, so the definer is the allocator the program's calls are bound
//! to, glibc's own `malloc` family in most programs. The attacher reroutes GOT slots too,
//! but a slot is only one way to the allocator: a pointer to `malloc` the program took
//! before the attach (a table of allocation functions in a PIE's data, filled by a
//! relocation; a copy made at run time; the dynamic loader's `__rtld_malloc`, set at
//! start-up) calls the definition directly, and only its patched entry leads through the
//! hook. Inside glibc, `realloc(NULL, n)` and the aligned allocators call `malloc` and
//! `realloc(p, 0)` calls `free` at their patched entries: the outer export runs them busy
//! (`entry::inside`), so each is reported once.
//!
//! # 4. The log
//! With `MEMPROF_PATCH_LOG` set in its environment, the library writes one line a function
//! to standard error: patched, or left alone and why.

mod code;
mod hooks;
mod near;
mod symtab;
mod write;

use crate::next;
use code::Refusal;
use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};
use memprof::__private::attach_abi::Write;

/// Where a patched function's trampoline goes.
enum Slot {
    /// This library's forwarding table (a definer's function, hooked by the export).
    Next(usize),
    /// A hook's own slot.
    Own(&'static AtomicUsize),
}

/// A function to patch.
struct Target {
    name: String,
    addr: usize,
    size: usize,
    hook: usize,
    slot: Slot,
}

/// Patches what §1 lists. Run once, from the constructor (§3).
pub(crate) fn install() {
    let _busy = memprof::__private::Busy::enter();
    let mut log = Log::new();
    definer(&mut log);
    statics(&mut log);
    log.flush();
}

/// What [`install`] would patch in a process this library was `dlopen`ed into by `memprof
/// attach` (§5): trampolines and slots set up, but each entry point's patch returned as a
/// [`Write`] for the attacher, which makes it with every thread stopped and none inside the
/// bytes it replaces (the write's guarded range). The entry points in `in_place` (patched by
/// an earlier attach, still in place) are left as they are. Loaded late, this library comes
/// after every object, so the definer is whichever object the program's calls are bound
/// to, glibc's `malloc` included (§1). Also returns, for each family refused, a line that
/// says which function and why.
pub(crate) fn deferred(in_place: &[usize]) -> (Vec<Write>, Vec<String>) {
    let _busy = memprof::__private::Busy::enter();
    let mut log = Log::new();
    log.done = in_place.to_vec();
    log.deferred = Some(Vec::new());
    definer(&mut log);
    statics(&mut log);
    log.flush();
    (log.deferred.take().unwrap_or_default(), core::mem::take(&mut log.refusals))
}

/// The definer before this library, if any (§1).
fn definer(log: &mut Log) {
    let prior = next::prior();
    if prior[next::MALLOC].is_none() {
        return;
    }
    // The exports' own addresses: a reference from inside this library would bind to the
    // definer's (it interposes on them), and the patch would jump to itself.
    // The family of the table (`malloc_usable_size`, last, allocates nothing), each at its
    // slot.
    let names = &next::NAMES[..10];
    let slots = 0..10;
    let mut own = [core::ptr::null_mut(); 10];
    memprof::__private::own_definitions(install as *const () as usize, names, &mut own);
    let exports = names
        .iter()
        .zip(slots)
        .zip(own)
        .filter(|(_, hook)| !hook.is_null())
        .map(|((name, i), hook)| (i, name.to_str().unwrap_or("?"), hook as usize));
    let done = log.done.clone();
    let targets = exports
        .filter_map(|(i, name, hook)| {
            let p = prior[i].filter(|p| !done.contains(&p.addr))?;
            Some(Target {
                name: name.to_owned(),
                addr: p.addr,
                size: p.size,
                hook,
                slot: Slot::Next(i),
            })
        })
        .collect();
    let label = match &log.deferred {
        None => "the malloc family defined before the preload library".to_owned(),
        Some(_) => prior[next::MALLOC].map_or_else(String::new, |p| object_of(p.addr)),
    };
    family(&label, targets, log);
}

/// "the malloc family of FILE", FILE the last component of the path of the object that
/// holds `addr` (for the attacher's note, `memprof attach`'s only; never on a hot path).
fn object_of(addr: usize) -> String {
    // SAFETY: `Dl_info` is plain data (pointers and integers): all zeros is a value of it.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's list, compares `addr` with the objects'
    // ranges and writes `info`.
    let found = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    let path = match found && !info.dli_fname.is_null() {
        // SAFETY: on success `dli_fname` is the object's NUL-terminated path, the loader's.
        true => unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy(),
        false => "".into(),
    };
    match path.rsplit('/').next() {
        Some(name) if !name.is_empty() => format!("the malloc family of {name}"),
        _ => "the malloc family of the executable".to_owned(),
    }
}

/// The executable's allocators under names of their own, or Rust's shim (§1).
fn statics(log: &mut Log) {
    let shim = hooks::rust_shim();
    // Every name `keep` below accepts begins so: `_rjem_`, `mi_`, `__rust_`/`__rdl_` and
    // Rust's v0 mangling (`_R`).
    let heads = [*b"_r", *b"mi", *b"__", *b"_R"];
    let Some(functions) = symtab::functions(&heads, |n| {
        n.starts_with("_rjem_")
            || n.starts_with("mi_")
            || (n.contains("__r")
                && (shim.iter().any(|h| symtab::is_rust_symbol(n, h.name))
                    || symtab::is_rust_symbol(n, "__rdl_alloc")))
    }) else {
        return;
    };
    // A function patched already, as the definer's (mimalloc's `malloc` may be an alias of
    // `mi_malloc`), is not patched again: one layer per path.
    let done = log.done.clone();
    let find = |hooks: &[hooks::Hook], rust: bool| -> Vec<Target> {
        hooks
            .iter()
            .filter_map(|h| {
                let f = functions.iter().filter(|f| !done.contains(&f.addr)).find(|f| {
                    if rust {
                        symtab::is_rust_symbol(&f.name, h.name)
                    } else {
                        f.name == h.name
                    }
                })?;
                Some(Target {
                    name: f.name.clone(),
                    addr: f.addr,
                    size: f.size,
                    hook: h.entry,
                    slot: Slot::Own(h.slot),
                })
            })
            .collect()
    };
    // A family is one when it has a function that allocates and one that frees.
    let whole = |hooks: &[hooks::Hook], found: &[Target]| {
        let frees = |t: &Target| hooks.iter().any(|h| h.frees && t.hook == h.entry);
        found.iter().any(frees) && found.iter().any(|t| !frees(t))
    };
    let mut any = false;
    for (label, hooks) in [
        ("jemalloc (_rjem_*)", &hooks::jemalloc()[..]),
        ("mimalloc (mi_*)", &hooks::mimalloc()[..]),
    ] {
        let found = find(hooks, false);
        if whole(hooks, &found) {
            any = true;
            family(label, found, log);
        }
    }
    let default_allocator =
        functions.iter().any(|f| symtab::is_rust_symbol(&f.name, "__rdl_alloc"));
    if !any && !default_allocator {
        let found = find(&shim, true);
        if whole(&shim, &found) {
            family("Rust's allocator shim (a custom global allocator)", found, log);
        }
    }
}

/// Patches a family's functions, all or none (§2).
fn family(label: &str, targets: Vec<Target>, log: &mut Log) {
    if targets.is_empty() {
        return;
    }
    let lo = targets.iter().map(|t| t.addr).min().unwrap_or(0);
    let hi = targets.iter().map(|t| t.addr + t.size).max().unwrap_or(0);
    let Some(mut region) = near::Region::near(lo, hi) else {
        return log.refused(label, &targets, None, Refusal::NoRoom);
    };
    let mut planned: Vec<(usize, [u8; code::JMP_LEN], usize)> = Vec::new();
    for t in &targets {
        match plan(t, &mut region) {
            Ok(p) => planned.push(p),
            Err(why) => return log.refused(label, &targets, Some(&t.name), why),
        }
    }
    if !region.seal() {
        return log.refused(label, &targets, None, Refusal::Protect);
    }
    for (t, (trampoline, _, _)) in targets.iter().zip(&planned) {
        match t.slot {
            Slot::Next(i) => next::set_patched(i, *trampoline as *mut c_void),
            Slot::Own(slot) => slot.store(*trampoline, Ordering::Release),
        }
    }
    for (t, &(_, patch, moved)) in targets.iter().zip(&planned) {
        if let Some(later) = &mut log.deferred {
            let mut w =
                Write { addr: t.addr as u64, len: code::JMP_LEN as u64, ..Write::default() };
            // SAFETY: `t` is a function of a mapped, readable code segment at least
            // `JMP_LEN` bytes long (`code::moved` checked its size).
            let now = unsafe { core::slice::from_raw_parts(t.addr as *const u8, code::JMP_LEN) };
            w.old[..code::JMP_LEN].copy_from_slice(now);
            w.new[..code::JMP_LEN].copy_from_slice(&patch);
            w.guard_lo = t.addr as u64 + 1;
            w.guard_hi = (t.addr + moved) as u64;
            later.push(w);
            log.done.push(t.addr);
            log.patched(label, &t.name, Ok(()));
            continue;
        }
        // SAFETY: `t` is a function of a mapped code segment that `code::moved` found safe
        // to patch, whose trampoline is in its slot; the patcher runs none of its code.
        let result = unsafe { write::write(t.addr, patch) };
        if result.is_ok() {
            log.done.push(t.addr);
        }
        log.patched(label, &t.name, result);
    }
}

/// The trampoline and relay of `t`, in `region`: the trampoline's address and the patch.
fn plan(
    t: &Target,
    region: &mut near::Region,
) -> Result<(usize, [u8; code::JMP_LEN], usize), Refusal> {
    // SAFETY: `t` is a function of a mapped, readable code segment (a dynamic symbol of a
    // loaded object, or a symbol `symtab` found inside an executable segment), `size`
    // bytes long by its symbol.
    let bytes = unsafe { core::slice::from_raw_parts(t.addr as *const u8, t.size) };
    let moved = code::moved(bytes, t.addr as u64)?;
    let relay = region.put(&code::abs_jmp(t.hook as u64)).ok_or(Refusal::NoRoom)?;
    let at = region.next();
    let trampoline = code::trampoline(&moved, t.addr as u64, at as u64)?;
    if region.put(&trampoline) != Some(at) {
        return Err(Refusal::NoRoom);
    }
    let patch = code::rel_jmp(t.addr as u64, relay as u64).ok_or(Refusal::NoRoom)?;
    Ok((at, patch, code::moved_len(&moved)))
}

/// The lines of §4, written at the end when asked for, and the entry points patched.
struct Log {
    on: bool,
    text: String,
    done: Vec<usize>,
    /// For `memprof attach`: the entry points' patches, collected instead of written.
    deferred: Option<Vec<Write>>,
    /// One line for each family refused: `family (function: why)`.
    refusals: Vec<String>,
}

impl Log {
    fn new() -> Log {
        // SAFETY: getenv reads the environment; the name is a C string.
        let on = !unsafe { libc::getenv(c"MEMPROF_PATCH_LOG".as_ptr()) }.is_null();
        Log { on, text: String::new(), done: Vec::new(), deferred: None, refusals: Vec::new() }
    }

    fn patched(&mut self, family: &str, name: &str, result: Result<(), Refusal>) {
        if self.on {
            let what = match result {
                Ok(()) => "patched".to_owned(),
                Err(why) => format!("left alone: {}", why.why()),
            };
            self.text += &format!("memprof: {family}: {name}: {what}\n");
        }
    }

    fn refused(&mut self, family: &str, targets: &[Target], culprit: Option<&str>, why: Refusal) {
        let named = culprit.map_or_else(
            || targets.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
            str::to_owned,
        );
        self.refusals.push(format!("{family} ({named}: {})", why.why()));
        for t in targets {
            let why = match culprit {
                Some(c) if c != t.name => Refusal::Family,
                _ => why,
            };
            self.patched(family, &t.name, Err(why));
        }
    }

    fn flush(&self) {
        if self.on && !self.text.is_empty() {
            // SAFETY: writes our own buffer to standard error.
            unsafe { libc::write(2, self.text.as_ptr().cast(), self.text.len()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of machine code of the test's own, mapped read-write then sealed read-execute.
    fn code_page(bytes: &[u8]) -> usize {
        // SAFETY: a fresh anonymous mapping, written before it is sealed.
        unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len());
            assert_eq!(libc::mprotect(p, 4096, libc::PROT_READ | libc::PROT_EXEC), 0);
            p as usize
        }
    }

    static ORIGINAL: AtomicUsize = AtomicUsize::new(0);

    /// The hook: the original's answer, doubled.
    extern "C" fn doubled(x: u64) -> u64 {
        // SAFETY: the patcher stored the trampoline of a `fn(u64) -> u64` before patching.
        let f: extern "C" fn(u64) -> u64 =
            unsafe { core::mem::transmute(ORIGINAL.load(Ordering::Acquire)) };
        f(x) * 2
    }

    /// A function whose first instruction is a RIP-relative load (`mov rax, [rip + 0xf9]`,
    /// a constant 1,000 at +0x100; `add rax, rdi; ret`) is patched: a call of its entry
    /// reaches the hook, whose call of the trampoline still reads the constant from the
    /// trampoline's page.
    #[test]
    fn a_patched_function_with_a_rip_relative_prologue_runs_the_hook_and_its_original() {
        let mut bytes = vec![0x48, 0x8b, 0x05, 0xf9, 0, 0, 0, 0x48, 0x01, 0xf8, 0xc3];
        bytes.resize(0x100, 0xcc);
        bytes.extend_from_slice(&1000u64.to_le_bytes());
        let f = code_page(&bytes);
        // SAFETY: the page holds that function.
        let call = |x| unsafe { core::mem::transmute::<usize, extern "C" fn(u64) -> u64>(f)(x) };
        assert_eq!(call(5), 1005);
        let mut log = Log::new();
        log.on = true;
        let t = Target {
            name: "f".into(),
            addr: f,
            size: 11,
            hook: doubled as *const () as usize,
            slot: Slot::Own(&ORIGINAL),
        };
        family("test", vec![t], &mut log);
        assert_eq!(log.text, "memprof: test: f: patched\n");
        assert_eq!(call(5), 2010);
        // SAFETY: the patch is a jmp rel32 at the entry (page sealed read-execute again).
        assert_eq!(unsafe { *(f as *const u8) }, 0xe9);
    }

    /// A loop back into the bytes the patch would overwrite, and a function shorter than
    /// the patch, are refused and left as they were, and so is the rest of a family.
    #[test]
    fn awkward_functions_are_refused_and_left_alone() {
        // 0: push rbx; 1: mov ebx, edi; 3: dec ebx; 5: jne 1; 7: pop rbx; 8: ret
        let looping = [0x53, 0x89, 0xfb, 0xff, 0xcb, 0x75, 0xfa, 0x5b, 0xc3];
        let short = [0x31, 0xc0, 0xc3];
        // mov rax, rdi; add rax, rdi; ret: patchable alone.
        let sibling = [0x48, 0x89, 0xf8, 0x48, 0x01, 0xf8, 0xc3];
        let (a, b, c) = (code_page(&looping), code_page(&short), code_page(&sibling));
        let mut log = Log::new();
        log.on = true;
        let target = |name: &str, addr, size| Target {
            name: name.into(),
            addr,
            size,
            hook: doubled as *const () as usize,
            slot: Slot::Own(&ORIGINAL),
        };
        family("test", vec![target("looping", a, looping.len())], &mut log);
        family("test", vec![target("short", b, 3), target("sibling", c, 7)], &mut log);
        assert_eq!(
            log.text,
            "memprof: test: looping: left alone: a branch lands inside the patched bytes\n\
             memprof: test: short: left alone: shorter than the patch\n\
             memprof: test: sibling: left alone: another function of its family was refused\n"
        );
        // SAFETY: both pages hold the test's bytes, readable.
        unsafe {
            assert_eq!(core::slice::from_raw_parts(a as *const u8, looping.len()), looping);
            assert_eq!(core::slice::from_raw_parts(b as *const u8, short.len()), short);
            assert_eq!(core::slice::from_raw_parts(c as *const u8, sibling.len()), sibling);
        }
    }
}
