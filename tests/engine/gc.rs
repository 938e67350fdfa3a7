//! The managed heap: randomized graphs (fixed seeds) checked against a model for both
//! markers, with tiny slice budgets (mutation under the write barrier) and forced
//! mark-stack overflow; the free lists never hand out a block in use; compare/hash
//! properties; and profiling through the GC in exact mode.
//!
//! A module of the engine tests' binary, under its `Sampled<System>` global allocator; every
//! test takes the binary's session lock ([`crate::common::serial`]) because sessions are
//! process-global (and exact mode samples every allocation of every thread).

use std::collections::{BTreeMap, HashMap, HashSet};

use memprof::gc::{Heap, HeapConfig, Marker, ReachedBits, RootId, Value, NO_SCAN_TAG, STRING_TAG};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

// The session lock of the binary's `Sampled<System>` allocator (`tests/common/`).
use crate::common::serial as lock;

// ---------------------------------------------------------------------------------------------
// The model

#[derive(Clone, Copy, Debug, PartialEq)]
enum F {
    Int(i64),
    Ptr(usize),
}

struct Node {
    val: Value,
    tag: u8,
    fields: Vec<F>,
    bytes: Vec<u8>,
}

struct World {
    heap: Heap,
    nodes: Vec<Node>,
    roots: Vec<(RootId, usize)>,
    rng: SmallRng,
}

impl World {
    fn new(config: HeapConfig, seed: u64) -> World {
        World {
            heap: Heap::new(config),
            nodes: Vec::new(),
            roots: Vec::new(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// Allocates a node: mostly small blocks, some large ones, some strings.
    fn alloc(&mut self) -> usize {
        let id = self.nodes.len();
        let r = self.rng.random_range(0..100);
        if r < 10 {
            let len = self.rng.random_range(0..40);
            let bytes: Vec<u8> = (0..len).map(|_| self.rng.random()).collect();
            let val = self.heap.alloc_bytes(&bytes);
            self.nodes.push(Node { val, tag: STRING_TAG, fields: Vec::new(), bytes });
            return id;
        }
        // Large blocks past `SCAN_CHUNK`, mid-sized ones that fit the prefetch ring only
        // when it is nearly empty, blocks of no field (whose headers could sit 8 bytes
        // from the next block's, within one of the marker's reached bits, but for their
        // padding word), and small ones.
        let n = match r {
            ..13 => self.rng.random_range(300..700),
            13..16 => self.rng.random_range(60..=256),
            16..22 => 0,
            _ => self.rng.random_range(1..7),
        };
        let tag = self.rng.random_range(0..4u8);
        let val = self.heap.alloc(tag, n);
        if n == 0 {
            self.nodes.push(Node { val, tag, fields: Vec::new(), bytes: Vec::new() });
            return id;
        }
        let mut fields = vec![F::Int(0); n];
        fields[0] = F::Int(id as i64);
        // SAFETY: val was just allocated; field 0 holds an integer.
        unsafe { self.heap.set_field(val, 0, Value::int(id as i64)) };
        for (i, f) in fields.iter_mut().enumerate().skip(1) {
            let k: i64 = self.rng.random_range(-1000..1000);
            *f = F::Int(k);
            // SAFETY: as above.
            unsafe { self.heap.set_field(val, i, Value::int(k)) };
        }
        self.nodes.push(Node { val, tag, fields, bytes: Vec::new() });
        id
    }

    fn value(&self, f: F) -> Value {
        match f {
            F::Int(k) => Value::int(k),
            F::Ptr(j) => self.nodes[j].val,
        }
    }

    /// Sets field `i >= 1` of scanned node `a`.
    fn set(&mut self, a: usize, i: usize, f: F) {
        let (v, x) = (self.nodes[a].val, self.value(f));
        // SAFETY: the test only uses nodes reachable now (or just allocated): live blocks.
        unsafe { self.heap.set_field(v, i, x) };
        self.nodes[a].fields[i] = f;
    }

    fn root(&mut self, a: usize) {
        // SAFETY: a is reachable or fresh: a live block.
        let id = unsafe { self.heap.register_root(self.nodes[a].val) };
        self.roots.push((id, a));
    }

    fn reachable(&self) -> Vec<bool> {
        let mut seen = vec![false; self.nodes.len()];
        let mut todo: Vec<usize> = self.roots.iter().map(|r| r.1).collect();
        while let Some(i) = todo.pop() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            for f in &self.nodes[i].fields {
                if let F::Ptr(j) = f {
                    todo.push(*j);
                }
            }
        }
        seen
    }

    fn live_list(&self) -> Vec<usize> {
        self.reachable().iter().enumerate().filter(|(_, r)| **r).map(|(i, _)| i).collect()
    }

    fn scanned(&self, live: &[usize]) -> Vec<usize> {
        live.iter().copied().filter(|&i| self.nodes[i].tag < NO_SCAN_TAG).collect()
    }

    /// A field of node `a` (which has more than one) for a pointer: often its last, where
    /// an off-by-one at the end of a scanned range would miss it, else any but field 0.
    fn field_of(&mut self, a: usize) -> usize {
        let n = self.nodes[a].fields.len();
        if self.rng.random_bool(0.3) {
            n - 1
        } else {
            self.rng.random_range(1..n)
        }
    }

    /// One random mutation among reachable nodes.
    fn mutate(&mut self) {
        let live = self.live_list();
        let scanned = self.scanned(&live);
        match self.rng.random_range(0..10) {
            0..=3 => {
                // A new node hung off a reachable one (or rooted).
                let n = self.alloc();
                if self.rng.random_bool(0.3) {
                    self.root(n);
                    return;
                }
                if let Some(&a) = pick(&mut self.rng, &scanned) {
                    if self.nodes[a].fields.len() > 1 {
                        let i = self.field_of(a);
                        self.set(a, i, F::Ptr(n));
                        return;
                    }
                }
                self.root(n);
            }
            4..=6 => {
                // An edge between reachable nodes (may cut another).
                if let (Some(&a), Some(&b)) =
                    (pick(&mut self.rng, &scanned), pick(&mut self.rng, &live))
                {
                    if self.nodes[a].fields.len() > 1 {
                        let i = self.field_of(a);
                        self.set(a, i, F::Ptr(b));
                    }
                }
            }
            7 => {
                // Cut an edge.
                if let Some(&a) = pick(&mut self.rng, &scanned) {
                    if self.nodes[a].fields.len() > 1 {
                        let i = self.rng.random_range(1..self.nodes[a].fields.len());
                        self.set(a, i, F::Int(-7));
                    }
                }
            }
            8 => {
                if self.roots.len() > 8 {
                    let k = self.rng.random_range(0..self.roots.len());
                    let (id, _) = self.roots.swap_remove(k);
                    self.heap.unregister_root(id);
                }
            }
            _ => {
                // Re-point a root at a reachable node.
                if let (false, Some(&b)) = (self.roots.is_empty(), pick(&mut self.rng, &live)) {
                    let k = self.rng.random_range(0..self.roots.len());
                    // SAFETY: b is reachable: a live block.
                    unsafe { self.heap.root_set(self.roots[k].0, self.nodes[b].val) };
                    self.roots[k].1 = b;
                }
            }
        }
    }

    /// Every reachable node has its contents intact.
    fn check(&self) {
        for i in self.live_list() {
            let n = &self.nodes[i];
            // SAFETY: i is reachable: a live block.
            unsafe {
                assert_eq!(self.heap.tag(n.val), n.tag, "node {i}");
                if n.tag == STRING_TAG {
                    assert_eq!(self.heap.bytes(n.val), &n.bytes[..], "node {i}");
                    continue;
                }
                assert_eq!(self.heap.size(n.val), n.fields.len(), "node {i}");
                for (k, f) in n.fields.iter().enumerate() {
                    assert_eq!(self.heap.field(n.val, k), self.value(*f), "node {i} field {k}");
                }
            }
        }
    }

    fn reachable_words(&self) -> usize {
        self.live_list()
            .iter()
            .map(|&i| {
                let n = &self.nodes[i];
                1 + if n.tag == STRING_TAG { n.bytes.len() / 8 + 1 } else { n.fields.len() }
            })
            .sum()
    }
}

fn pick<'a, T>(rng: &mut SmallRng, xs: &'a [T]) -> Option<&'a T> {
    if xs.is_empty() {
        None
    } else {
        Some(&xs[rng.random_range(0..xs.len())])
    }
}

/// Builds, mutates and collects; `budget` None = full cycles, else slices of that budget
/// with a mutation between slices.
fn scenario(marker: Marker, budget: Option<usize>, stack_limit: usize, seed: u64) -> World {
    let config = HeapConfig {
        marker,
        mark_stack_limit: stack_limit,
        chunk_bytes: 64 << 10,
        // One seed in four marks without the prefetching marker's reached bits
        // (`gc::mark` §3): each test below runs it both ways.
        reached_bits: if seed % 4 != 3 { ReachedBits::On } else { ReachedBits::Off },
        ..HeapConfig::default()
    };
    let mut w = World::new(config, seed);
    for _ in 0..4 {
        let a = w.alloc();
        w.root(a);
    }
    for round in 0..6 {
        for _ in 0..400 {
            w.mutate();
        }
        match budget {
            None => w.heap.major_cycle(),
            Some(b) => {
                let mut slices = 0;
                while !w.heap.major_slice(b) {
                    w.mutate();
                    slices += 1;
                    if slices % 64 == 0 {
                        w.check();
                    }
                }
            }
        }
        w.check();
        let _ = round;
    }
    assert!(w.reachable_words() > 1000, "live set too small: {}", w.reachable_words());
    w.heap.major_cycle();
    w.check();
    assert_eq!(
        w.heap.stats().live_words,
        w.reachable_words(),
        "exactly the reachable blocks survive"
    );
    let last = w.heap.cycles().last().unwrap().clone();
    assert_eq!(last.live_words as usize, w.reachable_words());
    assert_eq!(
        last.words_marked as usize,
        w.reachable_words(),
        "each reachable block counted once"
    );
    w
}

#[test]
fn full_cycles_keep_exactly_the_reachable_blocks() {
    let _g = lock();
    for (seed, marker) in [(1, Marker::Prefetch), (2, Marker::DepthFirst), (3, Marker::Prefetch)] {
        scenario(marker, None, 1 << 20, seed);
    }
}

#[test]
fn incremental_slices_with_mutation() {
    let _g = lock();
    for (seed, marker) in [(11, Marker::Prefetch), (12, Marker::DepthFirst)] {
        for budget in [1, 7, 100] {
            let w = scenario(marker, Some(budget), 1 << 20, seed + budget as u64);
            assert!(w.heap.cycles().iter().any(|c| c.slices > 1), "{marker:?} {budget}");
        }
    }
}

#[test]
fn mark_stack_overflow_loses_nothing() {
    let _g = lock();
    for (seed, marker) in [(21, Marker::Prefetch), (22, Marker::DepthFirst)] {
        for limit in [1, 3] {
            let w = scenario(marker, None, limit, seed);
            assert!(w.heap.stats().mark_stack_overflows > 0, "{marker:?} {limit}: no overflow");
            let w = scenario(marker, Some(13), limit, seed + 102);
            assert!(w.heap.stats().mark_stack_overflows > 0);
        }
    }
}

#[test]
fn write_barrier_keeps_a_moved_pointer() {
    let _g = lock();
    for marker in [Marker::Prefetch, Marker::DepthFirst] {
        let mut heap = Heap::new(HeapConfig { marker, ..HeapConfig::default() });
        // root -> a -> b, plus a long chain so marking takes many slices.
        let a = heap.alloc(0, 1);
        let b = heap.alloc(0, 2);
        let mut chain = Value::UNIT;
        // SAFETY: all values are fresh blocks of this heap, used before any collection.
        unsafe {
            heap.set_field(b, 0, Value::int(42));
            heap.set_field(a, 0, b);
            for _ in 0..1000 {
                let c = heap.alloc(0, 1);
                heap.set_field(c, 0, chain);
                chain = c;
            }
        }
        // SAFETY: live blocks.
        let ra = unsafe { heap.register_root(a) };
        // SAFETY: as above.
        let _rc = unsafe { heap.register_root(chain) };
        assert!(!heap.major_slice(1));
        assert!(heap.is_marking());
        // SAFETY: a is rooted; b reachable from a; n fresh.
        let n = unsafe {
            let b = heap.field(a, 0);
            heap.set_field(a, 0, Value::UNIT); // the barrier shades b
            let n = heap.alloc(0, 1); // black
            heap.set_field(n, 0, b);
            heap.root_set(ra, n);
            n
        };
        while !heap.major_slice(3) {}
        heap.major_cycle();
        // SAFETY: n is rooted, b reachable from it.
        unsafe {
            let b = heap.field(heap.root_get(ra), 0);
            assert_eq!(heap.root_get(ra), n);
            assert_eq!(heap.field(b, 0), Value::int(42));
            assert_eq!(heap.size(b), 2);
        }
    }
}

#[test]
fn free_lists_never_hand_out_a_block_in_use() {
    let _g = lock();
    for heuristic in [true, false] {
        let mut heap = Heap::new(HeapConfig {
            free_list_heuristic: heuristic,
            chunk_bytes: 64 << 10,
            ..HeapConfig::default()
        });
        let mut rng = SmallRng::seed_from_u64(7);
        // Live blocks: start address -> (end, root).
        let mut live: BTreeMap<usize, (usize, RootId)> = BTreeMap::new();
        for round in 0..20 {
            for _ in 0..2000 {
                let n = if rng.random_range(0..50) == 0 { 300 } else { rng.random_range(0..40) };
                let v = heap.alloc(0, n);
                let start = v.bits() - 8;
                let end = v.bits() + n * 8;
                if let Some((&s, &(e, _))) = live.range(..end).next_back() {
                    assert!(
                        e <= start || s >= end,
                        "block {start:#x}..{end:#x} overlaps {s:#x}..{e:#x}"
                    );
                }
                // SAFETY: fresh block.
                let id = unsafe { heap.register_root(v) };
                live.insert(start, (end, id));
                // Stamp every field with the block's address, checked below.
                for i in 0..n {
                    // SAFETY: fresh block, i < n.
                    unsafe { heap.set_field(v, i, Value::int(start as i64)) };
                }
            }
            // Drop about half, collect.
            let keys: Vec<usize> = live.keys().copied().collect();
            for k in keys {
                if rng.random_bool(0.5) {
                    let (_, id) = live.remove(&k).unwrap();
                    heap.unregister_root(id);
                }
            }
            heap.major_cycle();
            for (&s, &(_, id)) in &live {
                let v = heap.root_get(id);
                // SAFETY: rooted.
                let n = unsafe { heap.size(v) };
                for i in 0..n {
                    // SAFETY: rooted, i < n.
                    assert_eq!(unsafe { heap.field(v, i) }, Value::int(s as i64), "round {round}");
                }
            }
        }
    }
}

#[test]
fn compare_and_hash() {
    let _g = lock();
    let mut heap = Heap::default();
    // Two equal lists [1; 2; ...; 50] built separately, plus strings and floats.
    let list = |heap: &mut Heap, last: i64| {
        let mut l = Value::int(0);
        for k in (1..=last).rev() {
            let c = heap.alloc(0, 3);
            let s = heap.alloc_bytes(format!("item{k}").as_bytes());
            // SAFETY: fresh blocks.
            unsafe {
                heap.set_field(c, 0, Value::int(k));
                heap.set_field(c, 1, s);
                heap.set_field(c, 2, l);
            }
            l = c;
        }
        l
    };
    let a = list(&mut heap, 50);
    let b = list(&mut heap, 50);
    let c = list(&mut heap, 51);
    // SAFETY: all values are fresh blocks (no collection ran).
    unsafe {
        use std::cmp::Ordering::*;
        assert_eq!(heap.compare(a, b), Equal);
        assert_eq!(heap.hash(a), heap.hash(b));
        assert_eq!(heap.compare(a, a), Equal);
        assert_eq!(heap.compare(Value::int(3), Value::int(5)), Less);
        assert_eq!(heap.compare(Value::int(3), a), Less);
        assert_eq!(heap.compare(a, Value::int(3)), Greater);
        assert_ne!(heap.compare(a, c), Equal);
        assert_eq!(heap.compare(a, c), heap.compare(c, a).reverse());
        // Opaque bytes compared by content.
        let s1 = heap.alloc_bytes(b"abc");
        let s2 = heap.alloc_bytes(b"abd");
        let s3 = heap.alloc_bytes(b"ab");
        let s4 = heap.alloc_bytes(b"abc");
        assert_eq!(heap.compare(s1, s2), Less);
        assert_eq!(heap.compare(s3, s1), Less);
        assert_eq!(heap.compare(s1, s4), Equal);
        assert_eq!(heap.hash(s1), heap.hash(s4));
        assert_ne!(heap.hash(s1), heap.hash(s2));
        assert_eq!(heap.bytes(s3), b"ab");
        let f1 = heap.alloc_floats(&[1.0, 2.5]);
        let f2 = heap.alloc_floats(&[1.0, 3.0]);
        assert_eq!(heap.compare(f1, f2), Less);
        assert_eq!(heap.floats(f1), vec![1.0, 2.5]);
        // Cycles terminate: a 1-cycle and a 2-cycle of the same shape are bisimilar.
        let x = heap.alloc(0, 2);
        heap.set_field(x, 0, Value::int(9));
        heap.set_field(x, 1, x);
        let y1 = heap.alloc(0, 2);
        let y2 = heap.alloc(0, 2);
        heap.set_field(y1, 0, Value::int(9));
        heap.set_field(y2, 0, Value::int(9));
        heap.set_field(y1, 1, y2);
        heap.set_field(y2, 1, y1);
        assert_eq!(heap.compare(x, y1), Equal);
        assert_eq!(heap.hash(x), heap.hash(y1));
        // A cycle that differs somewhere terminates with an order.
        let z1 = heap.alloc(0, 2);
        let z2 = heap.alloc(0, 2);
        heap.set_field(z1, 0, Value::int(9));
        heap.set_field(z2, 0, Value::int(10));
        heap.set_field(z1, 1, z2);
        heap.set_field(z2, 1, z1);
        assert_eq!(heap.compare(x, z1), Less);
        assert_eq!(heap.compare(z1, x), Greater);
        // Deep structures: no recursion on the Rust stack.
        let deep = |heap: &mut Heap| {
            let mut l = Value::int(0);
            for k in 0..200_000 {
                let c = heap.alloc(0, 2);
                heap.set_field(c, 0, Value::int(k));
                heap.set_field(c, 1, l);
                l = c;
            }
            l
        };
        let d1 = deep(&mut heap);
        let d2 = deep(&mut heap);
        assert_eq!(heap.compare(d1, d2), Equal);
        assert_eq!(heap.hash(d1), heap.hash(d2));
        // Big cyclic graphs (past the pair-recording threshold) terminate too.
        let ring = |heap: &mut Heap, n: usize| {
            let first = heap.alloc(0, 2);
            let mut prev = first;
            for _ in 1..n {
                let c = heap.alloc(0, 2);
                heap.set_field(c, 0, Value::int(1));
                heap.set_field(prev, 1, c);
                prev = c;
            }
            heap.set_field(first, 0, Value::int(1));
            heap.set_field(prev, 1, first);
            first
        };
        let r1 = ring(&mut heap, 1000);
        let r2 = ring(&mut heap, 1500);
        assert_eq!(heap.compare(r1, r2), Equal);
    }
}

#[test]
fn cycle_stats_and_hook() {
    let _g = lock();
    let mut heap = Heap::default();
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let s2 = seen.clone();
    heap.set_cycle_hook(Box::new(move |c| s2.borrow_mut().push(c.clone())));
    let mut l = Value::int(0);
    for _ in 0..10_000 {
        let c = heap.alloc(0, 2);
        // SAFETY: fresh blocks.
        unsafe { heap.set_field(c, 1, l) };
        l = c;
    }
    // SAFETY: live block.
    let _r = unsafe { heap.register_root(l) };
    for _ in 0..1000 {
        heap.alloc(0, 3); // garbage
    }
    heap.major_cycle();
    while !heap.major_slice(500) {}
    let cycles = heap.cycles();
    assert_eq!(cycles.len(), 2);
    assert_eq!(*seen.borrow(), cycles.to_vec());
    for c in cycles {
        assert_eq!(c.words_marked, 30_000);
        assert_eq!(c.live_words, 30_000);
        assert!(c.end_ns >= c.start_ns + c.mark_ns.min(c.end_ns - c.start_ns));
        assert!(c.longest_slice_ns <= c.mark_ns);
        assert!(c.heap_words >= c.live_words);
    }
    assert_eq!(cycles[0].slices, 1);
    assert!(cycles[1].slices >= 30_000 / 600, "slices {}", cycles[1].slices);
    assert_eq!(heap.stats().live_words, 30_000);
}

// ---------------------------------------------------------------------------------------------
// Profiling through the GC

#[inline(never)]
fn site_table(heap: &mut Heap) -> Value {
    heap.alloc(0, 4)
}

#[inline(never)]
fn site_temp(heap: &mut Heap) -> Value {
    heap.alloc(1, 2)
}

#[test]
fn profiling_through_gc() {
    let _g = lock();
    let mut heap = Heap::new(HeapConfig { chunk_bytes: 4 << 20, ..HeapConfig::default() });
    // Grow the heap before the session so chunk growth is not in the profile (it is not
    // sampled anyway: chunks come from System directly).
    let config =
        memprof::Config { queue_capacity: 1 << 20, seed: Some(5), ..memprof::Config::exact() };
    let session = memprof::start(config, crate::Witness::default()).unwrap();
    let mut rng = SmallRng::seed_from_u64(99);
    // address -> site of the block currently there (0 table, 1 temp)
    let mut site_at: HashMap<usize, u8> = HashMap::new();
    let mut allocated = [0usize; 2];
    let mut roots: Vec<RootId> = Vec::new();
    for _round in 0..3 {
        for _ in 0..2000 {
            let (v, site) = if rng.random_bool(0.3) {
                (site_table(&mut heap), 0)
            } else {
                (site_temp(&mut heap), 1)
            };
            allocated[site as usize] += 1;
            site_at.insert(v.bits() - 8, site);
            if rng.random_bool(if site == 0 { 0.8 } else { 0.1 }) {
                // SAFETY: fresh block.
                roots.push(unsafe { heap.register_root(v) });
            }
        }
        // Drop a few rooted blocks.
        for _ in 0..100 {
            let k = rng.random_range(0..roots.len());
            heap.unregister_root(roots.swap_remove(k));
        }
        heap.major_cycle();
        memprof::poll();
    }
    let reachable: HashSet<usize> = roots.iter().map(|&r| heap.root_get(r).bits() - 8).collect();
    let seen = crate::Witnessed::from(session.stop().unwrap());
    let profile = &seen.profile;
    assert_eq!(profile.lost.events, 0);
    assert_eq!(profile.lost.untracked, 0);
    let gc_samples: Vec<_> =
        seen.samples.iter().filter(|s| heap.contains(s.addr as usize)).collect();
    // Exact mode: every GC allocation is a sample of its exact size.
    assert_eq!(gc_samples.len(), allocated[0] + allocated[1]);
    let gc_ids: HashSet<u64> = gc_samples.iter().map(|s| s.id).collect();
    let freed: HashSet<u64> = seen.frees.iter().copied().collect();
    let live: Vec<_> = gc_samples.iter().copied().filter(|s| !freed.contains(&s.id)).collect();
    // The profile's live totals (not the witness's record of frees) agree, pair by pair: a
    // profile keeps no single blocks, but the GC sites' pairs have no other blocks.
    let gc_stacks: HashSet<u32> = gc_samples.iter().map(|s| s.stack).collect();
    assert_eq!(
        crate::live_of(profile, |stack| gc_stacks.contains(&stack)),
        crate::pair_totals(live.iter().copied()),
        "the profile's live GC blocks"
    );
    // Live samples are exactly the reachable blocks...
    let live_addrs: HashSet<usize> = live.iter().map(|s| s.addr as usize).collect();
    assert_eq!(live.len(), live_addrs.len());
    assert_eq!(live_addrs, reachable);
    // ...by allocation site: each site's blocks share stacks no other site's blocks have.
    let mut stacks: [HashSet<u32>; 2] = Default::default();
    let mut per_site = [0usize; 2];
    for s in &live {
        let site = site_at[&(s.addr as usize)] as usize;
        stacks[site].insert(s.stack);
        per_site[site] += 1;
        let expected = if site == 0 { 5 * 8 } else { 3 * 8 };
        assert_eq!(s.size, expected);
    }
    assert!(stacks[0].is_disjoint(&stacks[1]));
    let expected_site0 = reachable.iter().filter(|a| site_at[a] == 0).count();
    assert_eq!(per_site, [expected_site0, reachable.len() - expected_site0]);
    // Every GC block that died yields exactly one free.
    let gc_frees: Vec<u64> = seen.frees.iter().copied().filter(|id| gc_ids.contains(id)).collect();
    let unique: HashSet<u64> = gc_frees.iter().copied().collect();
    assert_eq!(gc_frees.len(), unique.len(), "a block freed twice");
    assert_eq!(gc_frees.len(), allocated[0] + allocated[1] - reachable.len());
}
