//! Hashing of keys the profiler makes itself.
#![forbid(unsafe_code)]

/// A hasher for integer keys the profiler makes itself (sample ids, stack hashes): one
/// multiply, no SipHash. Not for keys an adversary chooses.
pub type FastHash = std::hash::BuildHasherDefault<IdHasher>;

/// The hasher of `FastHash` (re-exported as [`crate::profile::IdHash`]).
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
