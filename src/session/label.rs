//! The label registry: label ids (what the sample path copies from the thread's word, see
//! [`crate::engine::label`]) and their texts, for the whole process.
//!
//! Interning ([`intern`]) runs in user context (the span layer of `memprof::tracing`): it
//! takes a mutex, allocates, and leaks each new text (a program has as many labels as
//! distinct span paths, a bounded set; the table holds at most [`MAX_LABELS`] − 1, after
//! which [`intern`] answers 0, no label). Reading a text back ([`text`]) is what the drain
//! does for every sampled allocation: it takes no lock and allocates nothing (a two-level
//! table of `OnceLock`s, each set once under the mutex and read with one acquire load), so
//! a drain never waits for a thread that is interning, nor for a lock the program holds.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Labels per chunk of the table.
const CHUNK: usize = 1024;
/// Chunks of the table.
const CHUNKS: usize = 1024;
/// Label ids run from 1 to `MAX_LABELS - 1` (0 is "no label").
pub(crate) const MAX_LABELS: usize = CHUNK * CHUNKS;

type Chunk = [OnceLock<&'static str>; CHUNK];

/// Texts by id: chunk `id / CHUNK`, entry `id % CHUNK`.
static TABLE: [OnceLock<Box<Chunk>>; CHUNKS] = [const { OnceLock::new() }; CHUNKS];

/// Ids by text, and the next id: writers only.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
static IDS: Mutex<(BTreeMap<&'static str, u32>, u32)> = Mutex::new((BTreeMap::new(), 1));

/// The id of `text`, interned when new; 0 when the table is full. Not on the sample path.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) fn intern(text: &str) -> u32 {
    let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&id) = ids.0.get(text) {
        return id;
    }
    let id = ids.1;
    if id as usize >= MAX_LABELS {
        return 0;
    }
    let leaked: &'static str = Box::leak(text.to_owned().into_boxed_str());
    let chunk =
        TABLE[id as usize / CHUNK].get_or_init(|| Box::new([const { OnceLock::new() }; CHUNK]));
    // Set once: ids are handed out once, under the mutex.
    let _ = chunk[id as usize % CHUNK].set(leaked);
    ids.0.insert(leaked, id);
    ids.1 = id + 1;
    id
}

/// The text of label `id`; `None` for 0 and for ids never handed out. Lock-free, allocates
/// nothing.
pub(crate) fn text(id: u32) -> Option<&'static str> {
    let id = id as usize;
    if id == 0 || id >= MAX_LABELS {
        return None;
    }
    TABLE[id / CHUNK].get()?[id % CHUNK].get().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_once_read_back() {
        let a = intern("label-test;a");
        let b = intern("label-test;b");
        assert!(a != 0 && b != 0 && a != b);
        assert_eq!(intern("label-test;a"), a);
        assert_eq!(text(a), Some("label-test;a"));
        assert_eq!(text(b), Some("label-test;b"));
        assert_eq!(text(0), None);
        assert_eq!(text(u32::MAX), None);
    }
}
