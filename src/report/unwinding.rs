//! Whether the call stacks of a profile could be walked: a run whose stacks mostly end at
//! the allocating function was unwound with frame pointers through code that omits them
//! (`--unwinder fp` on an ordinary `-O2` C program), and its flamegraph is flat. The
//! reports say so instead of showing that silently.
#![forbid(unsafe_code)]

use crate::profile::{IdHash, Profile};

/// Below this many samples a profile is too small to judge its stacks.
const MIN_SAMPLES: u64 = 20;

/// A one-line note when more than half of the samples have a stack of at most one frame
/// of the program (the profiler's own frames left out, inlined frames counted with the
/// frame they are inlined into); `None` otherwise.
pub fn shallow_stacks_note(profile: &Profile) -> Option<String> {
    let mut shallow = 0u64;
    let mut all = 0u64;
    // Per stack, not per (stack, size): a stack's frames are looked up once.
    let mut by_stack: std::collections::HashMap<crate::profile::StackId, u64, IdHash> =
        Default::default();
    for (&(stack, _), t) in &profile.allocated {
        *by_stack.entry(stack).or_default() += t.samples;
    }
    for (stack, samples) in by_stack {
        all += samples;
        // Borrowed frames: nothing is copied to count them.
        let frames = profile.frame_refs(stack);
        if frames.iter().filter(|f| !f.inlined).count() <= 1 {
            shallow += samples;
        }
    }
    if all < MIN_SAMPLES || shallow * 2 <= all {
        return None;
    }
    Some(format!(
        "{:.0}% of the samples' stacks end after one frame: the unwinder could not walk past \
         the allocating function (code without frame pointers unwound with --unwinder fp?); \
         record again with --unwinder dwarf, the default",
        100.0 * shallow as f64 / all as f64
    ))
}
