//! Whether the call stacks of a profile could be walked: a run whose stacks mostly end at
//! the allocating function was unwound with frame pointers through code that omits them
//! (`--unwinder fp` on an ordinary `-O2` C program), and its flamegraph is flat. The
//! reports say so instead of showing that silently.
#![forbid(unsafe_code)]

use crate::profile::Profile;

/// Below this many samples a profile is too small to judge its stacks.
const MIN_SAMPLES: u64 = 20;

/// A one-line note when more than half of the samples have a stack of at most one frame
/// of the program (the profiler's own frames left out, inlined frames counted with the
/// frame they are inlined into); `None` otherwise.
pub fn shallow_stacks_note(profile: &Profile) -> Option<String> {
    let mut shallow = 0u64;
    let mut all = 0u64;
    for (&(stack, _), t) in &profile.allocated {
        all += t.samples;
        let frames = profile.frame_locations(stack);
        if frames.iter().filter(|f| !f.inlined).count() <= 1 {
            shallow += t.samples;
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
