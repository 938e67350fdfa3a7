//! A managed-heap workload: a steady table of long-lived records with churn.
//!
//! The table (a large block, rooted) holds `records` records; each record is a 3-field
//! block (key, a name string, a payload block of 8 fields). Every step allocates
//! short-lived temporaries (a small tuple and a string), and one step in `REPLACE_EVERY`
//! replaces a random record, so the old one dies. Every `SLICE_EVERY` steps the GC runs
//! one incremental slice. In a live view, `make_record` holds the heap; in an alloc view,
//! `make_temp` dominates.

use memprof::gc::{CycleRecord, Heap, HeapConfig, HeapTotals, Value};

/// The sampling configuration the example and the demo use: a 16 KiB mean interval, so a
/// live set of a few MB holds hundreds of samples.
pub fn config() -> memprof::Config {
    memprof::Config::with_interval(16.0 * 1024.0)
}

/// Records in the table.
pub const RECORDS: usize = 50_000;
/// Steps in a default run.
pub const STEPS: usize = 2_000_000;
/// One step in this many replaces a record.
pub const REPLACE_EVERY: usize = 8;
/// One GC slice every this many steps.
pub const SLICE_EVERY: usize = 1_000;
/// Budget of a slice, in words.
pub const SLICE_BUDGET: usize = 20_000;

/// What a run did.
pub struct Report {
    /// Completed GC cycles.
    pub cycles: Vec<CycleRecord>,
    /// Heap totals at the end.
    pub stats: HeapTotals,
    /// Sum of the keys still in the table (a checksum).
    pub checksum: i64,
}

/// A long-lived record.
#[inline(never)]
pub fn make_record(heap: &mut Heap, key: i64) -> Value {
    let name = heap.alloc_bytes(format!("record-{key:08}").as_bytes());
    let payload = heap.alloc(0, 8);
    let r = heap.alloc(0, 3);
    // SAFETY: fresh blocks; no collection between these allocations and the stores.
    unsafe {
        for i in 0..8 {
            heap.set_field(payload, i, Value::int(key * 8 + i as i64));
        }
        heap.set_field(r, 0, Value::int(key));
        heap.set_field(r, 1, name);
        heap.set_field(r, 2, payload);
    }
    r
}

/// A short-lived temporary (dead by the next step).
#[inline(never)]
pub fn make_temp(heap: &mut Heap, i: usize) -> Value {
    let s = heap.alloc_bytes(&(i as u64).to_le_bytes());
    let t = heap.alloc(0, 2);
    // SAFETY: fresh blocks.
    unsafe {
        heap.set_field(t, 0, Value::int(i as i64));
        heap.set_field(t, 1, s);
    }
    t
}

/// Runs `steps` steps over a table of `records` records and finishes with a full major GC.
pub fn run(records: usize, steps: usize) -> Report {
    let mut heap = Heap::new(HeapConfig::default());
    let table = heap.alloc(0, records);
    // SAFETY: fresh block.
    let root = unsafe { heap.register_root(table) };
    for k in 0..records {
        let r = make_record(&mut heap, k as i64);
        // SAFETY: table is rooted and no collection ran since it was read; r is fresh.
        unsafe { heap.set_field(heap.root_get(root), k, r) };
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut temps = 0i64;
    for i in 0..steps {
        let t = make_temp(&mut heap, i);
        // SAFETY: t is fresh (no collection since).
        temps = temps.wrapping_add(unsafe { heap.field(t, 0) }.as_int().unwrap_or(0));
        if i % REPLACE_EVERY == 0 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % records as u64) as usize;
            let r = make_record(&mut heap, (records + i) as i64);
            // SAFETY: the table is rooted; r is fresh. The overwrite runs the barrier.
            unsafe { heap.set_field(heap.root_get(root), k, r) };
        }
        if i % SLICE_EVERY == SLICE_EVERY - 1 {
            heap.major_slice(SLICE_BUDGET);
        }
    }
    heap.major_cycle();
    let table = heap.root_get(root);
    let mut checksum = 0i64;
    for k in 0..records {
        // SAFETY: the table is rooted, its records reachable from it.
        checksum = checksum
            .wrapping_add(unsafe { heap.field(heap.field(table, k), 0) }.as_int().unwrap_or(0));
    }
    std::hint::black_box(temps);
    Report { cycles: heap.cycles().to_vec(), stats: heap.stats(), checksum }
}
