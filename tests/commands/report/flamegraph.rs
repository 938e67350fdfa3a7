use super::*;

fn render(p: &Profile, view: View) -> String {
    let mut out = Vec::new();
    report::flamegraph(p, &FlameOptions { view, ..FlameOptions::default() }, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn contains_the_sites_and_is_deterministic() {
    let p = three_sites(true);
    let svg = render(&p, View::Alloc);
    assert!(svg.starts_with("<?xml"));
    for name in [CONFIG_LOAD, CACHE_INSERT, PARSE_LINE, "app::main", "libc.so.6+0x1234"] {
        assert!(svg.contains(name), "flamegraph lacks {name}");
    }
    assert!(svg.contains("memprof: allocated bytes (exact)"));
    assert!(svg.contains("bytes"));
    assert_eq!(svg, render(&p, View::Alloc), "two renders differ");

    let sampled = render(&three_sites(false), View::Live);
    assert!(sampled.contains("memprof: live bytes at end (estimated)"));
    assert_eq!(sampled, render(&three_sites(false), View::Live));
}

#[test]
fn all_freed_live_view_is_a_small_valid_svg() {
    let (tables, events) = three_sites_recording(true);
    // Every sample, each freed 1 ns later.
    let all_freed: Vec<Event> = events
        .iter()
        .filter_map(|e| match e {
            Event::Sample(s) => Some(*s),
            _ => None,
        })
        .flat_map(|s| [Event::Sample(s), Event::Free(Free::of(&s, s.time_ns + 1))])
        .collect();
    let p = tables.with_events(&all_freed);
    // Pairs whose blocks were all freed may stay, with zero totals.
    assert!(p.live.values().all(|t| *t == Totals::default()), "{:?}", p.live);
    assert!(p.counts.frees == p.counts.samples && p.counts.orphans == 0, "{:?}", p.counts);
    let svg = render(&p, View::Live);
    assert!(svg.contains("no samples"));
    assert!(svg.contains("memprof: live bytes at end (exact)"));
    assert!(svg.trim_end().ends_with("</svg>"));
}
