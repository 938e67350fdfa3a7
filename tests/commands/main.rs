//! The `memprof` command as a user meets it, in one test binary: `cli` (reports of recorded
//! files, exports, the demo, one-line errors), `record` (real C programs and examples run
//! under the preload library, their profiles checked against what they allocate),
//! `report` (every output format against golden files and an independent pprof decoder),
//! `diff` (`memprof diff` of real recordings: its flags, its exact numbers, its exports),
//! `calibration` (every estimate against the truth programs print, for each allocation
//! pattern, over seeds: intervals' coverage, nothing lost, A/A diffs),
//! `harm` (programs that behave like daemons and servers, each run plain and under
//! `record`: the same exit status and output), `forwarding` (programs with their own
//! allocator, allocations before the preload library is ready, small stacks), `children`
//! (programs that start programs: the notes naming them, CPython, process trees), `clones`
//! (children made by a raw `clone` or `clone3`, and trees across PID namespaces),
//! `definers` (allocators reached by patching their entry points: an executable that defines
//! malloc itself, rustc), `first_sample` (every thread's first allocation sampled like any other), `unwinder`
//! (`--unwinder auto` on `-O2` C, the note on one-frame stacks), `sites` (C++, C with
//! wrappers, line-tables-only Rust, stripped programs and C names that look mangled: each
//! allocation site is the program's function, in every report; a wrapper no list knows
//! pointed out with its `--site-skip`), `files` (the one policy for the files memprof
//! loads, writes and reads: preload libraries, outputs, inputs, FIFOs), `escaping` (names
//! that a terminal would act on, from a real program, escaped in every terminal report),
//! `allocators` (a Rust program on tikv-jemallocator, mimalloc and the system allocator,
//! exact at each site; a stripped one explained), `attach` (`memprof attach PID` on a running
//! multi-threaded service: the exact numbers of a phase run while attached, repeated
//! attaches, `--duration`, a target that exits or forks, the refusals; the service unharmed;
//! every way a non-PIE program like node calls malloc, seen at its rate), `sandbox` (a
//! program under a seccomp filter recorded exactly; a preload library of another build
//! refused, and its program run to its end), `docs` (the README and `docs/` kept true: the
//! README's size and quick start, the pages generated from the binary's `--help` and from
//! the modules' documentation, the crate map, every link), `imports` (the library's imports
//! run downward: no circle between its files, no arrow up out of `sys/`), `syscalls` (no
//! system call on the sample path, counted with `strace` in both modes, with and without
//! frame pointers), `own_cost` (what `record` costs beside the program: a program that
//! sleeps, one that allocates once, and bursts after pauses in the exact mode, recorded
//! whole and promptly).
//! What they share with each other and with the other test binaries is in `tests/common/`.

mod allocators;
mod api;
mod attach;
mod browser;
mod calibration;
mod children;
mod cli;
mod clones;
#[path = "../common/mod.rs"]
mod common;
#[cfg(target_arch = "x86_64")]
mod definers;
mod diff;
mod docs;
mod escaping;
mod files;
mod first_sample;
mod forwarding;
mod harm;
mod heaps;
mod imports;
mod launchers;
mod own_cost;
mod programs;
mod python_frames;
mod record;
mod reentrancy;
mod report;
mod sandbox;
mod serve;
mod sites;
mod syscalls;
mod time;
mod unwinder;
