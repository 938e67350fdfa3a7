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
        // The trim takes at most TRIM_WINDOW frames, each address's at least one: a stack of
        // more addresses than that and one keeps two (no need to name its frames).
        let addrs = profile.stacks.get(stack as usize).map_or(0, |s| s.frames.len());
        if addrs > crate::profile::symbolize::TRIM_WINDOW + 1 {
            continue;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::symbolize::TRIM_WINDOW;
    use crate::profile::{Stack, StackId, Totals};

    /// A profile of stacks of `n` unnamed frames, each with `samples` samples.
    fn of(stacks: &[(usize, u64)]) -> Profile {
        let mut p = Profile::default();
        for (i, &(n, samples)) in stacks.iter().enumerate() {
            let frames = (0..n as u64).map(|f| 0x1000 + 16 * f).collect();
            p.stacks.push(Stack { frames, truncated: false, label: 0 });
            p.allocated.insert((i as StackId, 16), Totals { samples, k: samples });
        }
        p
    }

    /// Stacks of one frame are shallow; stacks deeper than the trim window and one are
    /// not, whether they are looked at frame by frame or (the deepest) by their length.
    #[test]
    fn shallow_is_one_frame_left_after_the_trim() {
        assert!(shallow_stacks_note(&of(&[(1, 30), (2, 10)])).is_some());
        assert!(shallow_stacks_note(&of(&[(1, 30), (TRIM_WINDOW + 2, 40)])).is_none());
        assert!(shallow_stacks_note(&of(&[(1, 30), (TRIM_WINDOW + 1, 40)])).is_none());
        assert!(shallow_stacks_note(&of(&[(1, 10)])).is_none(), "too few samples");
    }
}
