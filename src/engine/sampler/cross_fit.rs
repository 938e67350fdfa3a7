//! The cross-fitted peak's bookkeeping, shared by a profile's fold (`profile::fold`) and a
//! sampled scope (`engine::measure` §5). The largest value of a live estimate over time
//! picks the sampling noise and reads high; so each sampled block's points are split into
//! two halves, each half chooses the moment its own live points are most, and the *other*
//! half, which did not choose it, measures the heap then (`report::confidence` §1 derives it).

/// Each half's largest live points so far, and the other half's live points at that moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CrossFit {
    best: [u64; 2],
    held_out: [u64; 2],
}

impl CrossFit {
    /// Notes the halves' live points now (`[A, B]`, after an allocation: only one makes a
    /// new largest); for each half, whether this is its new largest.
    pub(crate) fn note(&mut self, live: [u64; 2]) -> [bool; 2] {
        let mut new = [false; 2];
        for half in 0..2 {
            if live[half] > self.best[half] {
                self.best[half] = live[half];
                self.held_out[half] = live[1 - half];
                new[half] = true;
            }
        }
        new
    }

    /// The held-out points, `[K_B(t_A), K_A(t_B)]`: times the interval, their sum is the
    /// peak estimate (each half's count doubled, the two averaged).
    pub(crate) fn held_out(&self) -> [u64; 2] {
        self.held_out
    }

    /// `K_B(t_A) + K_A(t_B)` (saturating: a damaged or hostile file may name any `k`).
    pub(crate) fn points(&self) -> u64 {
        self.held_out[0].saturating_add(self.held_out[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_half_chooses_and_the_other_measures() {
        let mut c = CrossFit::default();
        assert_eq!(c.note([3, 1]), [true, true]);
        assert_eq!(c.note([2, 5]), [false, true]);
        assert_eq!(c.note([2, 4]), [false, false]);
        assert_eq!(c.note([6, 0]), [true, false]);
        assert_eq!(c.held_out(), [0, 2]);
        assert_eq!(c.points(), 2);
    }
}
