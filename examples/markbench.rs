//! The marking microbenchmark of ocaml/ocaml#10195: a random pointer graph of small blocks, collected
//! with the prefetching and the depth-first marker side by side (alternating, several full
//! major GCs each), then once incrementally with a slice budget.
//!
//! ```text
//! cargo run --release --example markbench -- [--heap-mb 800] [--gcs 5] [--budget 200000] [--seed 1]
//! ```
//!
//! The graph: blocks of three fields (two pointers to random blocks, one integer), every
//! block also referenced from root arrays in shuffled order, so all blocks are live and
//! every visit is a random access. The last line is `prefetch speedup: R`, the depth-first
//! marker's median mark time over the prefetching marker's (medians: a collection that a
//! neighbour on a shared machine slowed down does not move them).

use std::time::Instant;

use memprof::gc::{CycleStats, Heap, HeapConfig, Marker, Value};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

/// Entries per root array (a large block).
const ARRAY: usize = 1 << 16;

struct Args {
    heap_mb: usize,
    gcs: usize,
    budget: usize,
    seed: u64,
}

fn parse() -> Args {
    let mut a = Args { heap_mb: 800, gcs: 5, budget: 200_000, seed: 1 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut num = |name: &str| -> usize {
            it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("markbench: {name} needs a number");
                std::process::exit(2)
            })
        };
        match flag.as_str() {
            "--heap-mb" => a.heap_mb = num("--heap-mb"),
            "--gcs" => a.gcs = num("--gcs").max(1),
            "--budget" => a.budget = num("--budget").max(1),
            "--seed" => a.seed = num("--seed") as u64,
            _ => {
                eprintln!("usage: markbench [--heap-mb N] [--gcs K] [--budget WORDS] [--seed S]");
                std::process::exit(2)
            }
        }
    }
    a
}

/// Builds the graph; returns the number of blocks.
fn build(heap: &mut Heap, heap_mb: usize, rng: &mut SmallRng) -> usize {
    // 4 words per block + 1 root-array slot.
    let n = heap_mb * (1 << 20) / (5 * 8);
    let mut blocks: Vec<Value> = Vec::with_capacity(n);
    for i in 0..n {
        let b = heap.alloc(0, 3);
        // SAFETY: fresh block; no collection runs while the graph is built.
        unsafe { heap.set_field(b, 2, Value::int(i as i64)) };
        blocks.push(b);
    }
    for &b in &blocks {
        let (x, y) = (blocks[rng.random_range(0..n)], blocks[rng.random_range(0..n)]);
        // SAFETY: all blocks are live (no collection yet).
        unsafe {
            heap.set_field(b, 0, x);
            heap.set_field(b, 1, y);
        }
    }
    // Shuffle, then hang everything off root arrays.
    for i in (1..n).rev() {
        blocks.swap(i, rng.random_range(0..=i));
    }
    for part in blocks.chunks(ARRAY) {
        let arr = heap.alloc(0, part.len());
        for (i, &b) in part.iter().enumerate() {
            // SAFETY: as above.
            unsafe { heap.set_field(arr, i, b) };
        }
        // SAFETY: a live block; roots keep everything alive from here on.
        unsafe { heap.register_root(arr) };
    }
    n
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The middle value: a collection slowed by a neighbour on the machine does not move it.
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn summary(name: &str, cs: &[CycleStats]) -> f64 {
    let mark: Vec<f64> = cs.iter().map(|c| c.mark_ns as f64 / 1e9).collect();
    let total: Vec<f64> = cs.iter().map(|c| (c.end_ns - c.start_ns) as f64 / 1e9).collect();
    let npw: Vec<f64> = cs.iter().map(|c| c.ns_per_word).collect();
    println!(
        "{name:<12} mark {:.3} s/GC median  (min {:.3})  {:.2} ns/word  full GC {:.3} s/GC  words marked {}  overflows {}",
        median(&mark),
        mark.iter().cloned().fold(f64::INFINITY, f64::min),
        median(&npw),
        mean(&total),
        cs[0].words_marked,
        cs.iter().map(|c| c.overflows).sum::<u64>(),
    );
    median(&mark)
}

fn main() {
    let args = parse();
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut heap = Heap::new(HeapConfig::default());
    let t = Instant::now();
    let n = build(&mut heap, args.heap_mb, &mut rng);
    let st = heap.stats();
    println!(
        "built {n} blocks: heap {:.0} MB in {} chunks + {} root arrays, {:.1} s",
        st.heap_words as f64 * 8.0 / (1 << 20) as f64,
        st.chunks,
        st.large_blocks,
        t.elapsed().as_secs_f64()
    );
    // Warm-up: one cycle of each (first-touch effects, free-list rebuild).
    for m in [Marker::Prefetch, Marker::DepthFirst] {
        heap.set_marker(m);
        heap.major_cycle();
    }
    let mut pf = Vec::new();
    let mut dfs = Vec::new();
    for round in 0..args.gcs {
        let order = if round % 2 == 0 {
            [Marker::Prefetch, Marker::DepthFirst]
        } else {
            [Marker::DepthFirst, Marker::Prefetch]
        };
        for m in order {
            heap.set_marker(m);
            heap.major_cycle();
            let c = heap.cycles().last().expect("a cycle").clone();
            match m {
                Marker::Prefetch => pf.push(c),
                Marker::DepthFirst => dfs.push(c),
            }
        }
    }
    println!("full major GCs, {} each, alternating:", args.gcs);
    let p = summary("prefetch", &pf);
    let d = summary("depth-first", &dfs);
    println!("max mark stack {} entries", heap.stats().max_mark_stack);
    for m in [Marker::Prefetch, Marker::DepthFirst] {
        heap.set_marker(m);
        while !heap.major_slice(args.budget) {}
        let c = heap.cycles().last().expect("a cycle");
        println!(
            "incremental {:<12} budget {} words: {} slices, longest slice {:.3} ms, mark {:.3} s, {:.2} ns/word",
            format!("{m:?}"),
            args.budget,
            c.slices,
            c.longest_slice_ns as f64 / 1e6,
            c.mark_ns as f64 / 1e9,
            c.ns_per_word
        );
    }
    println!("prefetch speedup: {:.2}", d / p);
}
