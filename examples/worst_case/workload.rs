//! Statmemprof's worst case, ported from OCaml (ocaml/ocaml#8731):
//!
//! ```ocaml
//! let rec recur n f = match n with 0 -> f () | n -> recur (n-1) f + 1
//! Gc.Memprof.start { sampling_rate = 0.01; callstack_size = 10;
//!                    callback = fun _ -> incr samples; None };
//! for i = 1 to 10_000_000 do
//!   let d = recur 20 (fun () ->
//!     Array.make 20 0 |> ignore; ref 42 |> Sys.opaque_identity |> ignore; 0) in
//!   assert (d = 20)
//! done
//! ```
//!
//! Each iteration recurses 20 deep, then allocates an array of 20 words and a 1-word box
//! that die at once. It does nothing but allocate, so it shows the profiler's whole cost.
//! λ = 0.01 per 8-byte word is an interval of 800 bytes: about 0.21 samples an iteration.

use memprof::{Allocation, Config, Tracker};
use std::hint::black_box;

/// Iterations of the original program.
pub const ITERATIONS: u64 = 10_000_000;
/// statmemprof's sampling rate: sample points per 8-byte word.
pub const RATE: f64 = 0.01;
/// statmemprof's `callstack_size`.
pub const DEPTH: usize = 10;
/// Events between two polls: about 2 × 0.21 × POLL_EVERY ≈ 430 (a sample and its free).
/// A ring sized for that (1024 slots of 10 frames, 192 KiB) stays in cache; the default
/// 16 Ki slots would stream through 3 MiB of slots.
pub const QUEUE: usize = 1024;
/// Callbacks run at a safe point every this many iterations (OCaml runs them at its next
/// poll point; here the loop itself is the safe point, so their cost stays on this thread).
pub const POLL_EVERY: u64 = 1024;

/// `recur n f`: recursion `n` deep, then `f ()`, counting the levels on the way out.
#[inline(never)]
pub fn recur(n: u32, f: &dyn Fn() -> u32) -> u32 {
    if n == 0 {
        f()
    } else {
        // black_box keeps LLVM from turning the recursion into a loop.
        black_box(recur(black_box(n - 1), f)) + 1
    }
}

/// `Array.make 20 0 |> ignore; ref 42 |> Sys.opaque_identity |> ignore; 0`
#[inline(never)]
pub fn allocate() -> u32 {
    black_box(vec![0usize; 20]);
    black_box(Box::new(42usize));
    0
}

/// The loop: `iterations` times, recurse 20 deep and allocate.
pub fn run(iterations: u64) {
    for i in 0..iterations {
        let d = recur(20, &allocate);
        assert_eq!(d, 20);
        if i % POLL_EVERY == 0 {
            memprof::poll();
        }
    }
}

/// The callback of the original: count the samples, track nothing.
#[derive(Default)]
pub struct CountSamples(pub u64);

impl Tracker for CountSamples {
    type Token = ();
    fn alloc(&mut self, _: &Allocation<'_>) -> Option<()> {
        self.0 += 1;
        None
    }
}

/// The configuration of the original: λ = 0.01, depth 10.
pub fn config() -> Config {
    Config {
        depth: DEPTH,
        queue_capacity: QUEUE,
        ..Config::with_rate(RATE).expect("0.01 is a valid rate")
    }
}
