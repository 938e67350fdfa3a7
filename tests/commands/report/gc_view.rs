use super::*;
use memprof::profile::GcCycle;

/// Times of the GC profile are in units of `U` ns, the exact mode's time unit in a file,
/// so that they survive the file unchanged.
const U: u64 = format::TIME_UNIT_EXACT_NS;

/// Two managed-heap sites and one malloc site, exact mode, two GC cycles; times in `U`.
///
/// | id | site | bytes | alloc t | freed t |
/// |----|------|-------|---------|---------|
/// | 1  | tree | 800   | 10      | never   |
/// | 2  | tree | 160   | 20      | 150 (swept by cycle 1) |
/// | 3  | log  | 400   | 30      | 500 (after cycle 1, before cycle 2) |
/// | 4  | log  | 80    | 120 (during cycle 1) | never |
/// | 5  | malloc site | 4000 | 15 | never |
///
/// cycle 1: 100..200, 2.0 ns/word; cycle 2: 1000..1100, 0.5 ns/word. The events are in
/// time order, each cycle reported at its end, as the collector does.
fn gc_recording() -> (Profile, Vec<Event>) {
    let mut p = with_header(Profile::default(), Header { interval: 1.0, ..Header::default() });
    let named = |p: &mut Profile, addr: u64, f: &str| {
        p.symbols.insert(addr, vec![Symbol { function: f.into(), file: None, line: None }]);
    };
    named(&mut p, 0x10, "memprof::gc::Heap::alloc");
    named(&mut p, 0x20, "app::tree::node");
    named(&mut p, 0x30, "app::log::entry");
    named(&mut p, 0x40, "app::main");
    named(&mut p, 0x50, "app::buffer::make");
    named(&mut p, 0x60, "alloc::raw_vec::RawVec<T>::grow_one");
    named(&mut p, 0x70, "memprof::gc::mark::MarkState::push");
    p.stacks.push(Stack { frames: vec![0x10, 0x20, 0x40], truncated: false, label: 0 });
    p.stacks.push(Stack { frames: vec![0x10, 0x30, 0x40], truncated: false, label: 0 });
    p.stacks.push(Stack { frames: vec![0x50, 0x40], truncated: false, label: 0 });
    // The collector's own mark stack, a malloc block: not a managed-heap block.
    p.stacks.push(Stack { frames: vec![0x60, 0x70, 0x40], truncated: false, label: 0 });
    let samples: Vec<Sample> = [(6, 3, 8000, 5), (1, 0, 800, 10), (5, 2, 4000, 15)]
        .into_iter()
        .chain([(2, 0, 160, 20), (3, 1, 400, 30), (4, 1, 80, 120)])
        .map(|(id, stack, size, t)| Sample {
            id,
            stack,
            time_ns: t * U,
            thread: 1,
            addr: 0,
            size,
            k: size,
        })
        .collect();
    let s = |id| Event::Sample(*samples.iter().find(|s| s.id == id).unwrap());
    let free =
        |id, t: u64| Event::Free(Free::of(samples.iter().find(|s| s.id == id).unwrap(), t * U));
    let cycle = |cycle, start: u64, ns_per_word| {
        Event::GcCycle(GcCycle {
            cycle,
            start_ns: start * U,
            end_ns: (start + 100) * U,
            mark_ns: 60,
            slices: 2,
            longest_slice_ns: 40,
            words_marked: 150,
            ns_per_word,
            sweep_ns: 40,
            heap_words: 4096,
            live_words: 150,
        })
    };
    let events = vec![
        s(6),
        s(1),
        s(5),
        s(2),
        s(3),
        s(4),
        free(2, 150),
        cycle(1, 100, 2.0),
        free(3, 500),
        cycle(2, 1000, 0.5),
    ];
    p.complete = true;
    (p, events)
}

fn gc_profile() -> Profile {
    let (tables, events) = gc_recording();
    tables.with_events(&events)
}

#[test]
fn mark_time_is_live_words_times_ns_per_word() {
    let p = gc_profile();
    // Cycle 1 marks samples 1 (100 words) and 3 (50 words): 150 words × 2.0 ns.
    // Cycle 2 marks 1 (100 words) and 4 (10 words): 110 words × 0.5 ns.
    let per_cycle = report::gc_cycle_samples(&p);
    assert_eq!(per_cycle.len(), 2);
    assert_eq!(
        (per_cycle[0].objects, per_cycle[0].bytes, per_cycle[0].mark_ns),
        (2.0, 1200.0, 300.0)
    );
    assert_eq!(
        (per_cycle[1].objects, per_cycle[1].bytes, per_cycle[1].mark_ns),
        (2.0, 880.0, 55.0)
    );
    let totals = report::stack_totals(&p, View::Gc);
    let by_stack: HashMap<u32, f64> = totals.iter().map(|t| (t.stack, t.bytes)).collect();
    // tree: 100 words × 2.0 + 100 × 0.5 = 250 ns; log: 50 × 2.0 + 10 × 0.5 = 105 ns.
    assert_eq!(by_stack.get(&0), Some(&250.0));
    assert_eq!(by_stack.get(&1), Some(&105.0));
    assert_eq!(by_stack.get(&2), None, "malloc blocks are not marked by the collector");
    assert_eq!(by_stack.get(&3), None, "nor is the collector's own malloc'd mark stack");
    // A free that arrives after the cycle's record but happened before its end (block 2,
    // swept by cycle 1) is taken back out of the cycle: the same attribution.
    let (tables, mut events) = gc_recording();
    events.swap(6, 7);
    assert!(matches!((events[6], events[7]), (Event::GcCycle(_), Event::Free(_))));
    let late = tables.with_events(&events);
    assert_eq!(report::gc_cycle_samples(&late), per_cycle);
    assert_eq!(report::stack_totals(&late, View::Gc), totals);
}

#[test]
fn folded_flamegraph_and_top_table_show_the_gc() {
    let p = gc_profile();
    let lines = report::collapsed(&p, View::Gc);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.ends_with("app::tree::node;memprof::gc::Heap::alloc 250")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with("app::log::entry;memprof::gc::Heap::alloc 105")),
        "{lines:?}"
    );
    let mut svg = Vec::new();
    report::flamegraph(&p, &FlameOptions { view: View::Gc, ..Default::default() }, &mut svg)
        .unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains("GC mark time") && svg.contains("app::tree::node"));
    assert!(!svg.contains("app::buffer::make"));
    let top = report::top_table(&p, &TopOptions::default());
    assert!(top.contains("GC cycles: 2"), "{top}");
    let rows: Vec<&str> = top.lines().skip_while(|l| !l.starts_with("GC cycles")).collect();
    assert_eq!(rows.len(), 4, "{top}");
    assert!(
        rows[2].trim_start().starts_with('1')
            && rows[2].contains("2.00")
            && rows[2].ends_with("2 (1.17 KiB)"),
        "{top}"
    );
    assert!(rows[3].contains("0.50") && rows[3].ends_with("2 (880 B)"), "{top}");
}

#[test]
fn cycles_survive_the_file() {
    let (tables, events) = gc_recording();
    let p = tables.clone().with_events(&events);
    let bytes = format::write_events(Vec::new(), &tables, &events).unwrap();
    let q = Profile::read_from(&bytes[..]).unwrap();
    assert_eq!(q.gc_cycles, p.gc_cycles);
    assert_eq!(report::gc_cycle_samples(&q), report::gc_cycle_samples(&p));
    assert_eq!(report::stack_totals(&q, View::Gc), report::stack_totals(&p, View::Gc));
}
