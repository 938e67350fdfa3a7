use super::*;
use ::pprof::protos;

fn encoded(p: &Profile) -> Vec<u8> {
    let mut out = Vec::new();
    report::write_pprof(p, &PprofOptions::default(), &mut out).unwrap();
    out
}

use crate::common::decode_pprof as decode;

/// Sums of the four sample values.
fn sums(p: &protos::Profile) -> [i64; 4] {
    let mut s = [0i64; 4];
    for sample in &p.sample {
        for (acc, v) in s.iter_mut().zip(&sample.value) {
            *acc += v;
        }
    }
    s
}

fn string(p: &protos::Profile, i: i64) -> &str {
    &p.string_table[i as usize]
}

#[test]
fn decodes_back_with_go_heap_conventions() {
    let p = three_sites(true);
    let d = decode(&encoded(&p));
    assert_eq!(d.string_table[0], "");
    let types: Vec<(&str, &str)> =
        d.sample_type.iter().map(|t| (string(&d, t.ty), string(&d, t.unit))).collect();
    assert_eq!(
        types,
        [
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes")
        ]
    );
    assert_eq!(string(&d, d.default_sample_type), "inuse_space");
    let period = d.period_type.clone().unwrap();
    assert_eq!((string(&d, period.ty), string(&d, period.unit)), ("space", "bytes"));
    assert_eq!(d.period, 1);
    assert_eq!(d.time_nanos, 1_700_000_000_000_000_000);
    assert_eq!(d.mapping.len(), 2);
    assert_eq!(string(&d, d.mapping[1].filename), "/lib/x86_64-linux-gnu/libc.so.6");
    // The GNU build id, in hex (the form pprof's tools look binaries up by).
    assert_eq!(string(&d, d.mapping[0].build_id), "deadbeef01");
    assert_eq!(string(&d, d.mapping[1].build_id), "");

    let t = total(&expected(true));
    assert_eq!(
        sums(&d),
        [t.alloc_objects as i64, t.alloc_bytes as i64, t.live_objects as i64, t.live_bytes as i64]
    );

    // The inline chain at 0x3100 is one location, innermost first, with line numbers.
    let functions: HashMap<u64, &str> =
        d.function.iter().map(|f| (f.id, string(&d, f.name))).collect();
    let loc = d.location.iter().find(|l| l.address == 0x3100).unwrap();
    let chain: Vec<(&str, i64)> =
        loc.line.iter().map(|l| (functions[&l.function_id], l.line)).collect();
    assert_eq!(chain, [(CACHE_INSERT, 10), ("app::cache::fill", 20)]);
    assert_eq!(loc.mapping_id, 1);
    // Functions are unique by (name, file); locations by address and lines.
    let mut keys: Vec<(i64, i64)> = d.function.iter().map(|f| (f.name, f.filename)).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), d.function.len());
    // Profiler frames are gone; the bytes label carries the size.
    assert!(!functions.values().any(|f| *f == "malloc" || *f == "__rust_alloc"));
    let bytes_key = d.string_table.iter().position(|s| s == "bytes").unwrap() as i64;
    for s in &d.sample {
        assert_eq!(s.label.len(), 1);
        assert_eq!(s.label[0].key, bytes_key);
        assert!(s.label[0].num > 0);
    }
}

#[test]
fn sampled_sums_agree_with_site_totals() {
    let p = three_sites(false);
    let d = decode(&encoded(&p));
    assert_eq!(d.period, 512);
    let t = total(&report::site_totals(&p));
    let s = sums(&d);
    // Each merged sample rounds once: the error is at most 0.5 per sample.
    let tol = d.sample.len() as f64 * 0.5;
    for (got, want) in s.iter().zip([t.alloc_objects, t.alloc_bytes, t.live_objects, t.live_bytes])
    {
        assert!((*got as f64 - want).abs() <= tol, "{s:?} vs {t:?}");
    }
    // Bytes are exact multiples of the interval here.
    assert_eq!(s[1] as f64, t.alloc_bytes);
    assert_eq!(s[3] as f64, t.live_bytes);
}

#[test]
fn deterministic_and_alloc_default() {
    let p = three_sites(true);
    assert_eq!(encoded(&p), encoded(&p));
    let d = report::pprof(&p, &PprofOptions { default_view: View::Alloc, size_labels: false });
    assert_eq!(d.string_table[d.default_sample_type as usize], "alloc_space");
    assert!(d.sample.iter().all(|s| s.label.is_empty()));
}

/// Runs `go tool pprof -raw` (an independent protobuf decoder) on the file: see
/// [`crate::common::go_pprof_raw`].
fn go_pprof_raw(path: &Path) -> Option<([i64; 4], String)> {
    crate::common::go_pprof_raw(path.as_os_str(), "the go tool pprof check of our pprof output")
}

#[test]
fn go_tool_pprof_agrees() {
    for exact in [true, false] {
        let p = three_sites(exact);
        let path =
            out_path(&format!("three_sites.{}.pb.gz", if exact { "exact" } else { "sampled" }));
        std::fs::write(&path, encoded(&p)).unwrap();
        let Some((go_sums, text)) = go_pprof_raw(&path) else { return };
        let ours = sums(&decode(&std::fs::read(&path).unwrap()));
        assert_eq!(go_sums, ours, "go tool pprof -raw:\n{text}");
        let t = total(&report::site_totals(&p));
        assert_eq!(go_sums[1] as f64, t.alloc_bytes, "{text}");
        assert_eq!(go_sums[3] as f64, t.live_bytes, "{text}");
        if exact {
            assert_eq!(go_sums[0] as f64, t.alloc_objects, "{text}");
            assert_eq!(go_sums[2] as f64, t.live_objects, "{text}");
        }
        for name in [CONFIG_LOAD, CACHE_INSERT, PARSE_LINE] {
            assert!(text.contains(name), "go tool pprof does not show {name}:\n{text}");
        }
    }
}
