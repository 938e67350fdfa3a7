use super::*;

/// `--view` orders the table (and the JSON's sites) by its own bytes: with one row
/// shown, the row is the site with the most of them, and the JSON's sites never rise.
#[test]
fn views_order_the_sites() {
    for exact in [true, false] {
        let p = three_sites(exact);
        let sites = report::site_totals(&p);
        for view in [View::Alloc, View::Live, View::Peak, View::ShortLived] {
            let bytes = |s: &SiteTotal| report::view_bytes(s, view);
            let most = sites.iter().map(bytes).fold(0.0, f64::max);
            let options = TopOptions { limit: 1, view, ..TopOptions::default() };
            let text = report::top_table(&p, &options);
            // The one row shown: the line after the table's header.
            let mut lines = text.lines().skip_while(|l| !l.starts_with("alloc bytes"));
            let row = lines.nth(1).unwrap();
            let shown = sites.iter().find(|s| row.contains(s.site.as_str())).unwrap();
            assert_eq!(bytes(shown), most, "{view:?}: {}\n{text}", shown.site);
            if view != View::Alloc {
                assert!(text.contains(&format!("(--view {})", view.name())), "{text}");
            }
            let options = TopOptions { view, ..TopOptions::default() };
            let v = report::json::summary(&p, &[], Default::default(), &options);
            let key = match view {
                View::Alloc => "alloc_bytes",
                View::Live => "live_bytes",
                View::Peak => "peak_bytes",
                _ => continue,
            };
            let got: Vec<f64> =
                v["sites"].as_array().unwrap().iter().map(|s| s[key].as_f64().unwrap()).collect();
            assert!(got.windows(2).all(|w| w[0] >= w[1]), "{view:?}: {got:?}");
        }
    }
}

/// The view orders differ on this profile (the test above would pass with any one order
/// otherwise).
#[test]
fn the_views_disagree_on_three_sites() {
    let sites = report::site_totals(&three_sites(false));
    let first = |view| {
        let mut s = sites.clone();
        report::sort_sites(&mut s, view);
        s[0].site.clone()
    };
    assert_ne!(first(View::Alloc), first(View::Live));
}

#[test]
fn exact_totals_are_exact() {
    let p = three_sites(true);
    let got = report::site_totals(&p);
    let want = expected(true);
    assert_eq!(got, want);
    let t = total(&got);
    assert_eq!(t.alloc_bytes, 7656.0);
    assert_eq!(t.alloc_objects, 36.0);
    assert_eq!(t.live_bytes, 100.0 + 300.0 + 5.0 * 64.0 + 2000.0 + 4096.0);
    assert_eq!(t.live_objects, 10.0);
}

#[test]
fn sampled_totals_are_k_times_interval() {
    let p = three_sites(false);
    let got = report::site_totals(&p);
    let want = expected(false);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.site, w.site);
        assert!(close(g.alloc_bytes, w.alloc_bytes), "{g:?} vs {w:?}");
        assert!(close(g.alloc_objects, w.alloc_objects), "{g:?} vs {w:?}");
        assert!(close(g.live_bytes, w.live_bytes), "{g:?} vs {w:?}");
        assert!(close(g.live_objects, w.live_objects), "{g:?} vs {w:?}");
        assert!(close(g.peak_bytes, w.peak_bytes), "{g:?} vs {w:?}");
        assert!(close(g.short_bytes, w.short_bytes), "{g:?} vs {w:?}");
    }
}

#[test]
fn table_exact_golden() {
    let p = three_sites(true);
    let text = report::top_table(&p, &TopOptions { human_bytes: false, ..TopOptions::default() });
    assert!(text.contains("sampling: exact"));
    let totals = text.lines().find(|l| l.ends_with("total (3 sites)")).unwrap();
    assert!(totals.contains("7656"), "{totals}");
    // Objects are integers in the exact mode.
    assert!(!text.contains(".0 "), "{text}");
    golden("expected/three_sites.exact.top.txt", text.as_bytes());
}

#[test]
fn table_sampled_golden_with_limit_and_warnings() {
    let mut p = three_sites(false);
    p.complete = false;
    p.warnings
        .push("profile was cut at byte 999 (the program may have crashed); read 3 samples".into());
    p.lost.events = 4;
    let text = report::top_table(&p, &TopOptions { limit: 2, ..TopOptions::default() });
    assert!(text.contains("INCOMPLETE"));
    assert!(text.contains("warning: profile was cut at byte 999"));
    // What was lost is said on the sampling line and on the totals line.
    let header = text.lines().find(|l| l.starts_with("sampling: ")).unwrap();
    // Numbers short of what was lost are never called unbiased.
    assert!(!header.contains("unbiased"), "{text}");
    assert!(
        header.contains(
            "but 4 events lost: estimates are low by what was lost, beyond their ± intervals"
        ) && header.contains("the recording was cut at"),
        "{text}"
    );
    assert!(text.contains("total (3 sites, 2 shown; 4 events lost)"), "{text}");
    assert!(!text.contains(CONFIG_LOAD), "the smallest site is past the limit");
    golden("expected/three_sites.sampled.top.txt", text.as_bytes());
}

/// An exact profile says "every allocation recorded" only while nothing is missing from
/// its numbers: frees that were replayed keep it so (and are mentioned); anything else
/// lost makes it "exact, but …", on the totals line too.
#[test]
fn exact_header_says_what_was_lost() {
    let mut p = three_sites(true);
    let table = |p: &Profile| report::top_table(p, &TopOptions::default());
    let header = |t: &str| t.lines().find(|l| l.starts_with("sampling: ")).unwrap().to_owned();
    assert_eq!(header(&table(&p)), "sampling: exact (every allocation recorded)");
    p.lost.events = 5;
    p.lost.frees_replayed = 5;
    let t = table(&p);
    assert_eq!(
        header(&t),
        "sampling: exact (every allocation recorded; 5 frees did not fit in the queue and \
         were replayed at their time)"
    );
    assert!(t.lines().any(|l| l.ends_with("total (3 sites)")), "{t}");
    p.lost.events = 9;
    p.lost.frees_unknown = 2;
    let t = table(&p);
    assert_eq!(
        header(&t),
        "sampling: exact, but 9 events lost (5 frees replayed, 2 frees lost for good, 2 \
         other events); live figures may count up to 2 blocks that had ended"
    );
    let totals = "total (3 sites; 9 events lost, up to 2 ended blocks counted live)";
    assert!(t.lines().any(|l| l.ends_with(totals)), "{t}");
    assert!(!t.contains("every allocation recorded"));
}

#[test]
fn empty_profile() {
    let text = report::top_table(&Profile::default(), &TopOptions::default());
    assert!(text.contains("no samples"));
}
