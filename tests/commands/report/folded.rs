use super::*;

fn sum(lines: &[String]) -> u64 {
    lines.iter().map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum()
}

#[test]
fn golden_exact_and_sampled() {
    for (name, exact, view) in [
        ("three_sites.exact.alloc", true, View::Alloc),
        ("three_sites.exact.live", true, View::Live),
        ("three_sites.sampled.alloc", false, View::Alloc),
    ] {
        let p = three_sites(exact);
        let mut out = Vec::new();
        report::write_collapsed(&mut out, &p, view).unwrap();
        golden(&format!("expected/{name}.folded"), &out);
    }
}

#[test]
fn values_sum_to_the_totals_and_lines_are_sorted() {
    let p = three_sites(true);
    let alloc = report::collapsed(&p, View::Alloc);
    let live = report::collapsed(&p, View::Live);
    let t = total(&expected(true));
    assert_eq!(sum(&alloc) as f64, t.alloc_bytes);
    assert_eq!(sum(&live) as f64, t.live_bytes);
    let mut sorted = alloc.clone();
    sorted.sort();
    assert_eq!(alloc, sorted);
    // Stacks 2 and 3 differ in addresses; their names differ too (finish_grow), so they
    // stay apart, while the profiler frames are trimmed from every line.
    assert!(alloc.iter().all(|l| !l.contains("malloc") && !l.contains("__rust_alloc")));
    assert!(alloc.iter().any(|l| l.starts_with("[truncated];app::main;app::cache::fill;")));
    assert!(alloc
        .iter()
        .all(|l| l.starts_with("libc.so.6+0x1234;main;") || l.starts_with("[truncated]")));
}

#[test]
fn identical_names_merge() {
    let mut p = three_sites(true);
    // A second stack with other addresses but the same symbols as stack 3.
    p.symbols.insert(0x3201, p.symbols[&0x3200].clone());
    let mut s = p.stacks[3].clone();
    s.frames[1] = 0x3201;
    p.stacks.push(s);
    p.add_sample(&Sample { id: 9999, stack: 5, time_ns: 0, thread: 1, addr: 0, size: 7, k: 7 });
    let before = report::collapsed(&three_sites(true), View::Alloc);
    let after = report::collapsed(&p, View::Alloc);
    assert_eq!(before.len(), after.len());
    assert_eq!(sum(&after), sum(&before) + 7);
}
