//! Structural comparison and hashing of values (after OCaml's `compare` without page-table lookups).
//!
//! # 1. Trusting the invariant
//! Every block value points to a block of the heap (no naked pointers), so both walks read
//! headers and fields directly: no "is this address in the heap?" check, no page table.
//!
//! # 2. Order
//! Integers compare numerically and sort before blocks. Blocks compare by tag, then (for
//! scanned blocks) by number of fields, then field by field, left to right. Opaque blocks:
//! strings by bytes (lexicographic, shorter prefix first), float arrays element-wise with
//! `f64::total_cmp` then by length, other opaque blocks by raw words then length. A block
//! compared with itself is equal without a walk.
//!
//! # 3. No recursion, and cycles terminate
//! The walk keeps an explicit stack of field ranges on the Rust heap, never the Rust call
//! stack. OCaml's `compare` may loop forever on cyclic values; ours does not: after the
//! first `RECORD_AFTER` block pairs it records every pair it enters in a set, and a pair
//! met again is taken as equal (a coinductive reading: the pairs visited form a
//! bisimulation when the answer is `Equal`). Each pair is entered at most once after
//! that, so the walk is finite. Acyclic values compare exactly as with the plain recursive
//! definition; for cyclic ones the result is antisymmetric (`compare(b, a)` walks the
//! mirrored pairs in the same order) and `Equal` means the graphs are bisimilar.
//!
//! # 4. Hash
//! Breadth-first over a bounded queue like OCaml's `caml_hash`: at most `HASH_MEANINGFUL`
//! integers/strings/floats mixed in, at most `HASH_TOTAL` values ever enqueued, so it
//! terminates on cycles and costs O(1) on huge values. Block headers (tag and size, not the
//! colour) are mixed in without counting as meaningful. Bisimilar values produce the same
//! sequence of mixed words, so `compare(a, b) == Equal` implies `hash(a) == hash(b)`.

use core::cmp::Ordering;
use std::collections::HashSet;

use super::heap::{tag, wosize, Value, DOUBLE_ARRAY_TAG, NO_SCAN_TAG, STRING_TAG};

/// Block pairs compared before the cycle guard starts recording pairs.
pub const RECORD_AFTER: usize = 256;
/// Meaningful values (integers, strings, float arrays, opaque blocks) a hash mixes in.
pub const HASH_MEANINGFUL: usize = 10;
/// Values a hash may enqueue in total.
pub const HASH_TOTAL: usize = 256;

/// The bytes of a string block.
///
/// # Safety
/// `v` is a live string block.
pub(crate) unsafe fn string_bytes<'a>(v: Value) -> &'a [u8] {
    // SAFETY: v is a live block (caller); its header precedes field 0.
    let n = wosize(unsafe { *v.header_ptr() }) * 8;
    let p = v.fields_ptr() as *const u8;
    // SAFETY: a string block's last byte holds the padding count (< 8), inside the block.
    let pad = unsafe { *p.add(n - 1) } as usize;
    // SAFETY: the first n - 1 - pad bytes are the string, inside the block.
    unsafe { core::slice::from_raw_parts(p, n - 1 - pad) }
}

/// The raw words of a block's fields.
///
/// # Safety
/// `v` is a live block.
pub(crate) unsafe fn raw_words<'a>(v: Value) -> &'a [u64] {
    // SAFETY: v is a live block (caller).
    let n = wosize(unsafe { *v.header_ptr() });
    // SAFETY: the block has n fields after its header.
    unsafe { core::slice::from_raw_parts(v.fields_ptr(), n) }
}

/// Compares two opaque blocks of the same tag.
///
/// # Safety
/// Both are live blocks with tag `t >= NO_SCAN_TAG`.
unsafe fn compare_opaque(t: u8, a: Value, b: Value) -> Ordering {
    match t {
        // SAFETY: live string blocks (caller).
        STRING_TAG => unsafe { string_bytes(a).cmp(string_bytes(b)) },
        DOUBLE_ARRAY_TAG => {
            // SAFETY: live blocks (caller).
            let (x, y) = unsafe { (raw_words(a), raw_words(b)) };
            for (p, q) in x.iter().zip(y) {
                match f64::from_bits(*p).total_cmp(&f64::from_bits(*q)) {
                    Ordering::Equal => {}
                    o => return o,
                }
            }
            x.len().cmp(&y.len())
        }
        // SAFETY: live blocks (caller).
        _ => unsafe { raw_words(a).cmp(raw_words(b)) },
    }
}

/// Compares `a` and `b` structurally (module doc §2, §3).
///
/// # Safety
/// `a` and `b` are integers or live blocks of one heap, and every block reachable from
/// them is live (true of any value reachable from a root since the last collection).
pub unsafe fn compare(a: Value, b: Value) -> Ordering {
    struct Pending {
        a: *const u64,
        b: *const u64,
        n: usize,
    }
    let mut stack: Vec<Pending> = Vec::new();
    let mut seen: HashSet<(usize, usize)> = HashSet::new();
    let mut pairs = 0usize;
    let (mut x, mut y) = (a, b);
    loop {
        if x != y {
            match (x.as_int(), y.as_int()) {
                (Some(i), Some(j)) => {
                    if i != j {
                        return i.cmp(&j);
                    }
                }
                (Some(_), None) => return Ordering::Less,
                (None, Some(_)) => return Ordering::Greater,
                (None, None) => {
                    // SAFETY: x and y are live blocks (caller; reachable from a or b).
                    let (hx, hy) = unsafe { (*x.header_ptr(), *y.header_ptr()) };
                    let (tx, ty) = (tag(hx), tag(hy));
                    if tx != ty {
                        return tx.cmp(&ty);
                    }
                    if tx >= NO_SCAN_TAG {
                        // SAFETY: live opaque blocks of tag tx.
                        match unsafe { compare_opaque(tx, x, y) } {
                            Ordering::Equal => {}
                            o => return o,
                        }
                    } else {
                        let (sx, sy) = (wosize(hx), wosize(hy));
                        if sx != sy {
                            return sx.cmp(&sy);
                        }
                        pairs += 1;
                        let fresh = pairs <= RECORD_AFTER || seen.insert((x.0, y.0));
                        if fresh && sx > 0 {
                            stack.push(Pending { a: x.fields_ptr(), b: y.fields_ptr(), n: sx });
                        }
                    }
                }
            }
        }
        loop {
            let Some(top) = stack.last_mut() else {
                return Ordering::Equal;
            };
            if top.n == 0 {
                stack.pop();
                continue;
            }
            // SAFETY: n > 0 fields remain in both blocks at these addresses.
            unsafe {
                x = Value(*top.a as usize);
                y = Value(*top.b as usize);
                top.a = top.a.add(1);
                top.b = top.b.add(1);
            }
            top.n -= 1;
            break;
        }
    }
}

#[inline]
fn mix(h: u64, d: u64) -> u64 {
    let k =
        d.wrapping_mul(0x87c3_7b91_1142_53d5).rotate_left(31).wrapping_mul(0x4cf5_ad43_2745_937f);
    (h ^ k).rotate_left(27).wrapping_mul(5).wrapping_add(0x52dc_e729)
}

#[inline]
fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Hashes `v` structurally (module doc §4).
///
/// # Safety
/// As for [`compare`].
pub unsafe fn hash(v: Value) -> u64 {
    let mut queue = [Value::UNIT; HASH_TOTAL];
    let (mut rd, mut wr) = (0usize, 1usize);
    queue[0] = v;
    let mut num = HASH_MEANINGFUL;
    let mut h: u64 = 0;
    while rd < wr && num > 0 {
        let v = queue[rd];
        rd += 1;
        if let Some(i) = v.as_int() {
            h = mix(h, i as u64);
            num -= 1;
            continue;
        }
        // SAFETY: v is a live block (caller; reachable from the argument).
        let hd = unsafe { *v.header_ptr() };
        let t = tag(hd);
        if t >= NO_SCAN_TAG {
            h = mix(h, t as u64);
            if t == STRING_TAG {
                // SAFETY: live string block.
                let s = unsafe { string_bytes(v) };
                for c in s.chunks(8) {
                    let mut w = [0u8; 8];
                    w[..c.len()].copy_from_slice(c);
                    h = mix(h, u64::from_le_bytes(w));
                }
                h = mix(h, s.len() as u64);
            } else {
                // SAFETY: live opaque block.
                let ws = unsafe { raw_words(v) };
                for w in ws {
                    h = mix(h, *w);
                }
                h = mix(h, ws.len() as u64);
            }
            num -= 1;
            continue;
        }
        h = mix(h, (wosize(hd) as u64) << 8 | t as u64);
        for i in 0..wosize(hd) {
            if wr >= HASH_TOTAL {
                break;
            }
            // SAFETY: i < wosize: a field of the live block.
            queue[wr] = Value(unsafe { *v.fields_ptr().add(i) } as usize);
            wr += 1;
        }
    }
    finish(h)
}
