//! A profile whose process never wrote its symbols is symbolized from the recorded
//! modules' files, and agrees with what the process itself resolved.
use super::*;

#[inline(never)]
fn offline_site(n: usize) -> Vec<u8> {
    black_box(vec![7u8; n + 40_000])
}

#[test]
fn offline_matches_in_process() {
    let _g = serial();
    let profile = record(Config::exact(), || {
        for i in 0..10 {
            drop(offline_site(i));
        }
    });
    let mut bare = profile.clone();
    bare.symbols.clear();
    let notes = memprof::profile::symbolize::resolve_offline(&mut bare);
    assert!(notes.is_empty(), "{notes:?}");
    let mine: Vec<(StackId, u64)> = profile
        .allocated
        .iter()
        .filter(|((_, size), _)| *size >= 40_000)
        .map(|(&(stack, _), t)| (stack, t.samples))
        .collect();
    assert_eq!(mine.iter().map(|(_, n)| n).sum::<u64>(), 10);
    let stack = mine[0].0;
    assert!(profile.frame_names(stack).iter().any(|f| f.ends_with("offline_site")));
    // Same functions (the inline chains come from the same DWARF), in the same order.
    // A system library without DWARF or a full symbol table (libc's start_thread is a
    // local symbol) may stay `libc.so.6+0x…` offline; every frame of this program agrees.
    let (off, on) = (bare.frame_names(stack), profile.frame_names(stack));
    assert_eq!(off.len(), on.len());
    for (a, b) in off.iter().zip(&on) {
        assert!(a == b || a.contains(".so"), "offline {a:?} vs in-process {b:?}");
    }
    assert!(off.iter().filter(|f| f.contains(".so")).count() <= 2, "{off:?}");
    assert_eq!(bare.site_name(stack), profile.site_name(stack));
}
