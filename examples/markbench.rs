//! The marking microbenchmark of ocaml/ocaml#10195: a random pointer graph of small blocks, collected
//! with the prefetching marker (with and without its reached bits, `HeapConfig::reached_bits`)
//! and the depth-first marker side by side (alternating, several full major GCs each), then
//! once incrementally with a slice budget.
//!
//! ```text
//! cargo run --release --example markbench -- [--heap-mb 800] [--gcs 5] [--budget 200000] [--seed 1]
//!     [--huge-pages on|off] [--reached-bits auto|on|off]
//! ```
//!
//! In the same run, on memory of the heap's size, it measures what the machine allows
//! (`limit`): random visits of 64-byte nodes along 1 to 32 independent pointer chains
//! interleaved (each chain's next node is known only once its current one is read, as a
//! marker's child is known only once its parent is scanned; more chains keep more misses in
//! flight). The fastest is the limit a marker can reach, and each marker's time per block
//! is printed as a multiple of it. Sweep gets the same: its time per block beside a
//! sequential pass that reads and writes one word per block over the chunks' size.
//! `--huge-pages` asks for transparent huge pages for the heap's chunks and the probe's
//! memory alike (`HeapConfig::huge_pages`), so the two are compared on the same pages.
//!
//! `own work` separates a marker's loop from the memory system: the same graph in a
//! 256 KiB heap, which the caches hold, marked the same ways (the prefetching marker with
//! reached bits forced on and with none, and depth-first), each time per block beside the
//! large heap's limit. A marker is no faster on the large heap than on this one, so its
//! own work is a floor for its time on the large heap.
//!
//! The graph: blocks of three fields (two pointers to random blocks, one integer), every
//! block also referenced from root arrays in shuffled order, so all blocks are live and
//! every visit is a random access. The last lines are the reached bits' speedup (the
//! prefetching marker's median mark time without them over with them, as `--reached-bits`
//! sets them: `auto`, the default, uses them only for heap sizes where they pay) and
//! `prefetch speedup: R`, the depth-first marker's over the prefetching marker's (medians: a
//! collection that a neighbour on a shared machine slowed down does not move them).

use std::time::Instant;

use memprof::gc::{CycleRecord, Heap, HeapConfig, Marker, ReachedBits, Value};
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
    huge: bool,
    bits: ReachedBits,
}

fn parse() -> Args {
    let mut a = Args {
        heap_mb: 800,
        gcs: 5,
        budget: 200_000,
        seed: 1,
        huge: HeapConfig::default().huge_pages,
        bits: HeapConfig::default().reached_bits,
    };
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
            "--reached-bits" => {
                a.bits = match it.next().as_deref() {
                    Some("auto") => ReachedBits::Auto,
                    Some("on") => ReachedBits::On,
                    Some("off") => ReachedBits::Off,
                    _ => {
                        eprintln!("markbench: --reached-bits needs auto, on or off");
                        std::process::exit(2)
                    }
                }
            }
            "--huge-pages" => {
                a.huge = match it.next().as_deref() {
                    Some("on") => true,
                    Some("off") => false,
                    _ => {
                        eprintln!("markbench: --huge-pages needs on or off");
                        std::process::exit(2)
                    }
                }
            }
            _ => {
                eprintln!(
                    "usage: markbench [--heap-mb N] [--gcs K] [--budget WORDS] [--seed S] \
                     [--huge-pages on|off] [--reached-bits auto|on|off]"
                );
                std::process::exit(2)
            }
        }
    }
    a
}

/// Builds the graph; returns the number of blocks.
fn build(heap: &mut Heap, bytes: usize, rng: &mut SmallRng) -> usize {
    // 4 words per block + 1 root-array slot.
    let n = bytes / (5 * 8);
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

/// The heap size of `own_work`, in KiB: half this VM's L2 cache per core, so that the
/// heap, its bitmap and the marker's ring and stack stay in it.
const OWN_KIB: usize = 256;

/// A way of marking: the marker, and when it keeps reached bits.
type Way = (Marker, ReachedBits);

fn set(heap: &mut Heap, (m, bits): Way) {
    heap.set_marker(m);
    heap.set_reached_bits(bits);
}

/// Full major cycles of `heap` in each of `ways`: one of each to warm up (first-touch
/// effects, free-list rebuild), then `rounds` of each, alternating in a different order
/// each round (a neighbour slowing the machine for a while slows all three alike).
/// Returns each way's cycles.
fn alternate(heap: &mut Heap, ways: [Way; 3], rounds: usize) -> [Vec<CycleRecord>; 3] {
    for way in ways {
        set(heap, way);
        heap.major_cycle();
    }
    let mut runs: [Vec<CycleRecord>; 3] = Default::default();
    for round in 0..rounds {
        for k in 0..3 {
            let i = (round + k) % 3;
            set(heap, ways[i]);
            heap.major_cycle();
            runs[i].push(heap.cycles().last().expect("a cycle").clone());
        }
    }
    runs
}

/// The time per marked block of each of `ways` on the benchmark's graph in an `OWN_KIB`
/// heap (medians of 101 alternating cycles each), the first with reached bits forced on:
/// what each loop costs when no visit misses to main memory.
fn own_work(huge: bool, mut ways: [Way; 3], rng: &mut SmallRng) -> [f64; 3] {
    let mut heap = Heap::new(HeapConfig { huge_pages: huge, ..HeapConfig::default() });
    let n = build(&mut heap, OWN_KIB << 10, rng);
    let blocks = (n + heap.stats().large_blocks) as f64;
    // `Auto` would leave the bits off in a heap this small.
    ways[0].1 = ReachedBits::On;
    alternate(&mut heap, ways, 101).map(|cs| {
        let per_block: Vec<f64> = cs.iter().map(|c| c.mark_ns as f64 / blocks).collect();
        median(&per_block)
    })
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

fn summary(name: &str, cs: &[CycleRecord]) -> f64 {
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
    let mut heap = Heap::new(HeapConfig { huge_pages: args.huge, ..HeapConfig::default() });
    let t = Instant::now();
    let n = build(&mut heap, args.heap_mb << 20, &mut rng);
    let st = heap.stats();
    println!(
        "built {n} blocks: heap {:.0} MB in {} chunks + {} root arrays, {:.1} s",
        st.heap_words as f64 * 8.0 / (1 << 20) as f64,
        st.chunks,
        st.large_blocks,
        t.elapsed().as_secs_f64()
    );
    // The three ways of marking compared: the prefetching marker with its reached bits
    // (the default), without them, and depth-first.
    let ways = [
        (Marker::Prefetch, args.bits),
        (Marker::Prefetch, ReachedBits::Off),
        (Marker::DepthFirst, ReachedBits::Off),
    ];
    let runs = alternate(&mut heap, ways, args.gcs);
    println!("full major GCs, {} each, alternating:", args.gcs);
    let p = summary("prefetch", &runs[0]);
    let nb = summary("  no bits", &runs[1]);
    let d = summary("depth-first", &runs[2]);
    println!("max mark stack {} entries", heap.stats().max_mark_stack);
    for m in [Marker::Prefetch, Marker::DepthFirst] {
        set(&mut heap, (m, args.bits));
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
    // The limit, on memory of the heap's size, after the markers (their heap stays
    // allocated: the probe's memory is as far from the caches as the heap was).
    let heap_bytes = st.heap_words * 8;
    let (limit, per_chain) = limit(heap_bytes, args.huge, &mut rng);
    let chains: Vec<String> = per_chain.iter().map(|(k, ns)| format!("{k}: {ns:.1}")).collect();
    println!(
        "limit (random 64-byte visits, ns per visit by chains interleaved): {}",
        chains.join(", ")
    );
    let blocks = (n + st.large_blocks) as f64;
    let (p_block, d_block) = (p * 1e9 / blocks, d * 1e9 / blocks);
    let nb_block = nb * 1e9 / blocks;
    println!(
        "per marked block: prefetch {p_block:.1} ns = {:.2}× the limit {limit:.1} ns; \
         without reached bits {nb_block:.1} ns = {:.2}×; depth-first {d_block:.1} ns = {:.2}×",
        p_block / limit,
        nb_block / limit,
        d_block / limit
    );
    let sweep: Vec<f64> = runs.iter().flatten().map(|c| c.sweep_ns as f64 / n as f64).collect();
    let seq = sequential(n * 32, args.huge, n);
    println!(
        "sweep per block: {:.2} ns = {:.2}× a sequential pass over the chunks ({seq:.2} ns \
         a block: read and write one word per block)",
        median(&sweep),
        median(&sweep) / seq
    );
    // A marker reads the header of every block a pointer reaches, marked already or not:
    // here each block is reached by two fields and one root-array entry.
    let reads = (3 * n) as f64;
    let (p_read, nb_read) = (p * 1e9 / reads, nb * 1e9 / reads);
    println!(
        "per pointer followed (3 per marked block here: 2 fields and a root entry): prefetch \
         {p_read:.1} ns = {:.2}× the limit; without reached bits {nb_read:.1} ns = {:.2}×",
        p_read / limit,
        nb_read / limit
    );
    // The loops' own work, apart from the memory system: the same graph in a heap the
    // caches hold.
    let [own_bits, own_plain, own_dfs] = own_work(args.huge, ways, &mut rng);
    println!(
        "own work (the same graph in a {OWN_KIB} KiB heap, which the caches hold): prefetch \
         {own_bits:.1} ns per marked block with reached bits = {:.2}× the limit; without \
         them {own_plain:.1} ns = {:.2}×; depth-first {own_dfs:.1} ns = {:.2}×",
        own_bits / limit,
        own_plain / limit,
        own_dfs / limit
    );
    println!("huge pages: {}", if args.huge { "asked for" } else { "not asked for" });
    let used = runs[0].iter().filter(|c| c.reached_bits).count();
    println!(
        "reached bits ({:?}): used in {used} of {} cycles; speedup {:.2} (mark time without \
         them over with them)",
        args.bits,
        runs[0].len(),
        nb / p
    );
    println!("prefetch speedup: {:.2}", d / p);
}

/// Anonymous memory for the probes, 2 MiB-aligned, with or without transparent huge pages
/// asked for (as `HeapConfig::huge_pages` asks for the heap's chunks).
struct Region {
    base: *mut u8,
    len: usize,
}

const HUGE: usize = 2 << 20;

impl Region {
    fn new(bytes: usize, huge: bool) -> Region {
        let len = (bytes + HUGE - 1) & !(HUGE - 1);
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + HUGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "markbench: no memory for the probe");
        let base = ((p as usize + HUGE - 1) & !(HUGE - 1)) as *mut u8;
        let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
        // SAFETY: [base, base + len) lies inside the mapping (HUGE bytes were added for
        // the alignment); advice changes no content.
        unsafe { libc::madvise(base.cast(), len, advice) };
        Region { base, len }
    }
}

/// The machine's limit for a marker's random visits: `bytes / 64` nodes of 64 bytes, one
/// random cycle through all of them, walked by k chains interleaved (k = 1, 2, …, 32; each
/// chain starts `nodes / k` places after the last along the cycle, so no two meet). Returns
/// the fastest time per visit and each k's.
fn limit(bytes: usize, huge: bool, rng: &mut SmallRng) -> (f64, Vec<(usize, f64)>) {
    let region = Region::new(bytes, huge);
    let nodes = region.len / 64;
    let next = region.base as *mut u64;
    // The cycle's order: a shuffled permutation; each node's first word names the next.
    let mut order: Vec<u32> = (0..nodes as u32).collect();
    for i in (1..nodes).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    for i in 0..nodes {
        let (a, b) = (order[i] as usize, order[(i + 1) % nodes] as usize);
        // SAFETY: node `a` is inside the region (a < nodes); its first word.
        unsafe { *next.add(a * 8) = b as u64 };
    }
    let visits = nodes.min(8 << 20);
    let mut out = Vec::new();
    for k in [1usize, 2, 4, 8, 16, 32] {
        let mut at: Vec<usize> = (0..k).map(|j| order[j * nodes / k] as usize).collect();
        let steps = visits / k;
        let t = Instant::now();
        for _ in 0..steps {
            for a in at.iter_mut() {
                // SAFETY: every node's first word names a node below `nodes`.
                *a = unsafe { *next.add(*a * 8) } as usize;
            }
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / (steps * k) as f64;
        std::hint::black_box(&at);
        out.push((k, ns));
    }
    // SAFETY: the mapping is the probe's own and no longer used.
    unsafe { libc::munmap(region.base.cast(), region.len) };
    let best = out.iter().map(|&(_, ns)| ns).fold(f64::INFINITY, f64::min);
    (best, out)
}

/// A sequential pass over `bytes` that reads and writes one word per 32-byte block (the
/// benchmark's blocks: a header and three fields), as sweep reads and rewrites each
/// header: the median of three passes, per block of the `blocks` the chunks hold.
fn sequential(bytes: usize, huge: bool, blocks: usize) -> f64 {
    let region = Region::new(bytes, huge);
    let words = region.len / 8;
    let w = region.base as *mut u64;
    // Touched once first: the chunks' pages are resident when sweep runs.
    // SAFETY: every index is below the region's words.
    (0..words).step_by(512).for_each(|i| unsafe { *w.add(i) = 1 });
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut i = 0;
        while i < words {
            // SAFETY: as above.
            unsafe { *w.add(i) = std::hint::black_box(*w.add(i)) & !3 };
            i += 4;
        }
        times.push(t.elapsed().as_secs_f64() * 1e9 / blocks as f64);
    }
    // SAFETY: the mapping is the probe's own and no longer used.
    unsafe { libc::munmap(region.base.cast(), region.len) };
    median(&times)
}
