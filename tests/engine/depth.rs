//! Stacks deeper than the configured depth are cut at exactly `depth` frames and marked.
use super::*;
use memprof::profile::symbolize::TRUNCATED;
use memprof::Unwinder;

const DEEP: &str = "engine::depth::deep";

#[inline(never)]
fn deep(n: usize) -> Box<[u8; 333]> {
    if n == 0 {
        Box::new([3; 333])
    } else {
        // Not a tail call: the frame stays on the stack.
        black_box(deep(n - 1))
    }
}

/// The stack of the sampled 333-byte block at `addr`: (frame count, truncated, names).
fn stack_of(seen: &Witnessed, addr: usize) -> (usize, bool, Vec<String>) {
    let s = seen
        .samples
        .iter()
        .find(|s| s.addr == addr as u64 && s.size == 333)
        .expect("the block was sampled");
    let profile = &seen.profile;
    // The only block of its (stack, size) pair, still live in the profile.
    assert_eq!(
        profile.live.get(&(s.stack, s.size)),
        Some(&Totals { samples: 1, k: s.k }),
        "still live, in the profile"
    );
    let stack = &profile.stacks[s.stack as usize];
    (stack.frames.len(), stack.truncated, profile.frame_names(s.stack))
}

fn check(unwinder: Unwinder) {
    for (recursion, depth) in [(200usize, 128usize), (200, 10), (5, 128)] {
        let mut block = None;
        let seen = record_witnessed(Config { depth, unwinder, ..Config::exact() }, || {
            block = Some(deep(recursion))
        });
        let block = block.unwrap();
        let (frames, truncated, names) = stack_of(&seen, block.as_ptr() as usize);
        let deep_frames = names.iter().filter(|n| *n == DEEP).count();
        let what = format!("{unwinder:?}, recursion {recursion}, depth {depth}: {names:?}");
        if recursion > depth {
            assert_eq!(frames, depth, "{what}");
            assert!(truncated, "{what}");
            assert_eq!(names.first().map(String::as_str), Some(TRUNCATED), "{what}");
            // Only a few profiler and allocator frames sit below the recursion.
            assert!(deep_frames + 12 >= depth, "{what}");
        } else {
            assert!(frames < depth, "{what}");
            assert!(!truncated, "{what}");
            assert_eq!(deep_frames, recursion + 1, "{what}");
        }
        let sample = seen.samples.iter().find(|s| s.addr == block.as_ptr() as u64).unwrap();
        assert_eq!(seen.profile.site_name(sample.stack), DEEP, "{what}");
    }
}

#[test]
fn truncation_frame_pointers() {
    let _g = serial();
    check(Unwinder::FramePointer);
}

#[test]
fn truncation_dwarf() {
    let _g = serial();
    // The cached DWARF unwinder walks these stacks itself (to the end of the stack for
    // the whole ones): not one capture is handed to libgcc.
    let fallbacks = memprof::__private::dwarf_fallbacks();
    check(Unwinder::Dwarf);
    #[cfg(target_arch = "x86_64")]
    assert_eq!(memprof::__private::dwarf_fallbacks(), fallbacks, "captures fell back");
    let _ = fallbacks;
}

#[test]
fn truncation_libgcc() {
    let _g = serial();
    check(Unwinder::Libgcc);
}
