//! Hashing: of keys the profiler makes itself (one multiply), of block addresses, and of
//! keys a program or a profile chooses (seeded).
#![forbid(unsafe_code)]

/// A hash of a block's address for the tables indexed by it (the live table, the exact
/// mode's marks of lost allocations): the address past malloc's 16-byte alignment times
/// the golden ratio; a caller takes the bits it needs.
#[inline(always)]
pub fn address(addr: usize) -> u64 {
    ((addr as u64) >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The hash of maps keyed by what a program or a profile chooses (return addresses, frame
/// names): per-process random keys, so that chosen keys cannot make a map's lookups
/// collide, at a fraction of SipHash's cost.
pub type SeededHash = ahash::RandomState;

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

    // Narrower integers (stack ids, lifetime buckets, timeline buckets) take one round as
    // a word does, not one per byte as `write` would give them.
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}
