//! Hashing of keys the profiler makes itself.
#![forbid(unsafe_code)]

/// A hasher for integer keys the profiler makes itself (sample ids, stack hashes): one
/// multiply, no SipHash. Not for keys an adversary chooses.
pub type FastHash = std::hash::BuildHasherDefault<IdHasher>;

/// The hasher of [`FastHash`].
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
}

/// A hasher for sample ids, which the sampler hands out in per-thread runs of consecutive
/// numbers: the low 57 bits of the hash are the id itself, so that the blocks a thread
/// allocated one after the other sit in neighbouring buckets (a free of a young block
/// finds its entry in a cache line the allocations just touched), and the top 7 bits, which
/// the table uses as its tag, are mixed. For maps of millions of live blocks (an exact-mode
/// recording of an interpreter) this halves the drain thread's cache misses.
pub(crate) type SeqHash = std::hash::BuildHasherDefault<SeqHasher>;

/// The hasher of [`SeqHash`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SeqHasher(u64);

impl std::hash::Hasher for SeqHasher {
    fn finish(&self) -> u64 {
        const LOW: u64 = (1 << 57) - 1;
        (self.0 & LOW) | (self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) & !LOW)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
