//! Every heap named: memory outside malloc (a runtime's, a collector's, the program's own
//! `mmap`) is told from what malloc holds free.

use std::process::Command;

use crate::common::{text, MEMPROF};
use crate::record::{assert_ok, fixture, record, scratch};

/// A program with a 256 MiB heap of its own beside 8 MiB of malloc: the split names the
/// 256 MiB as outside malloc, the allocator holds next to nothing free, and no malloc hint
/// is given (malloc_trim could not return a byte of it).
#[test]
fn a_heap_of_its_own_is_outside_malloc() {
    let dir = scratch("own-heap");
    let out = record(&dir, &["-o", "h.mprof", "--interval", "1"], &fixture("own_heap"), &[]);
    assert_ok(&out, 0);
    let table = text(&out.stderr);
    let gap = table
        .lines()
        .find(|l| l.starts_with("resident ") && l.contains(" = live heap "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(gap.contains(" + outside malloc 25"), "{gap}");
    assert!(!table.contains("malloc_trim"), "{table}");
    assert!(table.lines().any(|l| l.contains("is outside malloc: ")), "{table}");
    let json = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["report", "h.mprof", "--json"])
        .output()
        .unwrap();
    assert!(json.status.success(), "{}", text(&json.stderr));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let num = |k: &str| v["gap"][k].as_f64().unwrap_or_else(|| panic!("gap.{k} in {v:#}"));
    let mib = (1u64 << 20) as f64;
    // The 256 MiB written, give or take what the process mapped besides (a few MiB).
    let outside = num("outside_malloc_bytes");
    assert!(outside >= 256.0 * mib && outside < 264.0 * mib, "{v:#}");
    // Exact mode: the 8 MiB kept is the live heap (with stdout's buffer), and malloc keeps
    // little beside it.
    let live = v["heap"]["live_end_bytes"].as_f64().unwrap();
    assert!((8.0 * mib..8.0 * mib + 8192.0).contains(&live), "{v:#}");
    assert!(num("allocator_retained_bytes") < 4.0 * mib, "{v:#}");
    assert!(v["gap"]["hint"].is_null(), "{v:#}");
}
