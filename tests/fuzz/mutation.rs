//! The byte mutations both byte-level targets apply to valid inputs: bit flips, overwritten,
//! inserted and deleted bytes, truncation, and a slice duplicated elsewhere.

use proptest::prelude::*;

#[derive(Clone, Debug)]
pub(crate) enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    Duplicate(usize, usize, usize),
}

/// Any mutation, whose written bytes are drawn from `byte` (a target weights the bytes its
/// parser cares about).
pub(crate) fn mutation_of(byte: BoxedStrategy<u8>) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), byte.clone()).prop_map(|(i, v)| Mutation::Set(i, v)),
        (any::<usize>(), proptest::collection::vec(byte, 1..8))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<usize>(), 1usize..64)
            .prop_map(|(a, b, n)| Mutation::Duplicate(a, b, n)),
    ]
}

/// Applies `m` to `b` (positions wrap around its length; an empty input stays empty).
pub(crate) fn apply(b: &mut Vec<u8>, m: &Mutation) {
    if b.is_empty() {
        return;
    }
    let n = b.len();
    match m {
        Mutation::Flip(i, bit) => b[i % n] ^= 1 << bit,
        Mutation::Set(i, v) => b[i % n] = *v,
        Mutation::Insert(i, v) => {
            let at = i % (n + 1);
            b.splice(at..at, v.iter().copied());
        }
        Mutation::Delete(i, len) => {
            let at = i % n;
            b.drain(at..(at + len).min(n));
        }
        Mutation::Truncate(i) => b.truncate(i % (n + 1)),
        Mutation::Duplicate(from, to, len) => {
            let from = from % n;
            let len = (*len).min(n - from);
            let piece = b[from..from + len].to_vec();
            let to = to % (n + 1);
            b.splice(to..to, piece);
        }
    }
}
