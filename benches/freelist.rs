//! Allocation time on the managed heap with and without Emacs's (bug#65491) "last known free
//! index" heuristic, on its fib/bignum pattern: bignums that grow a word at a time while
//! most of them die young, plus small temporaries of mixed sizes. Both variants run side
//! by side (alternating, several rounds); only the allocation phases are timed, not the
//! collections between them.
//!
//! ```text
//! cargo bench --bench freelist
//! ```

use std::time::{Duration, Instant};

use memprof::gc::{Heap, HeapConfig, Value};

/// Allocations between collections.
const PHASE: usize = 20_000;
/// Phases per round.
const PHASES: usize = 40;
/// Rounds per variant.
const ROUNDS: usize = 5;

/// One round: returns (time spent allocating, classes probed, heap words at the end).
fn round(heuristic: bool) -> (Duration, u64, usize) {
    let mut heap =
        Heap::new(HeapConfig { free_list_heuristic: heuristic, ..HeapConfig::default() });
    // fib(n) in "bignums": a(n) = a(n-1) + a(n-2), each a fresh block of ~n/8 words.
    // SAFETY: integers.
    let ra = unsafe { heap.register_root(Value::int(0)) };
    // SAFETY: integers.
    let rb = unsafe { heap.register_root(Value::int(0)) };
    let mut spent = Duration::ZERO;
    let mut n = 0usize;
    for _ in 0..PHASES {
        let t = Instant::now();
        for i in 0..PHASE {
            n += 1;
            let words = 1 + (n / 64) % 200;
            let big = heap.alloc(0, words);
            // Temporaries of mixed small sizes, dead at once.
            heap.alloc(0, 1 + i % 7);
            heap.alloc(0, 2 + (i * 13) % 29);
            // SAFETY: the roots hold live blocks or integers; no collection in the phase.
            unsafe {
                let old = heap.root_get(rb);
                heap.root_set(ra, old);
                heap.root_set(rb, big);
            }
        }
        spent += t.elapsed();
        heap.major_cycle();
    }
    let st = heap.stats();
    (spent, st.free_list_probes, st.heap_words)
}

fn main() {
    let mut with = Vec::new();
    let mut without = Vec::new();
    for r in 0..ROUNDS {
        for h in if r % 2 == 0 { [true, false] } else { [false, true] } {
            let res = round(h);
            if h {
                with.push(res)
            } else {
                without.push(res)
            }
        }
    }
    let report = |name: &str, xs: &[(Duration, u64, usize)]| -> f64 {
        let secs: Vec<f64> = xs.iter().map(|x| x.0.as_secs_f64()).collect();
        let mean = secs.iter().sum::<f64>() / secs.len() as f64;
        let allocs = (PHASE * PHASES * 3) as f64;
        println!(
            "{name:<18} {:.1} ms/round  {:.1} ns/alloc  {:.1} probes/alloc  heap {:.1} MB",
            mean * 1e3,
            mean * 1e9 / allocs,
            xs[0].1 as f64 / allocs,
            xs[0].2 as f64 * 8.0 / 1048576.0
        );
        mean
    };
    let a = report("with heuristic", &with);
    let b = report("without heuristic", &without);
    println!("heuristic speedup: {:.2}", b / a);
}
