//! The lost-sample counters of the sample path: samples skipped because their thread was
//! in the sample path already (a signal handler's allocation, see `sample_path` §1), counted as lost
//! events of the session's queue, and sampled blocks the live table could not follow.

use crate::engine::push::queue;
use core::sync::atomic::AtomicU64;

/// Sampled blocks that the live table could not follow: no memory for them, or a signal
/// handler's free or realloc of a block whose shard its own thread held (its death is then
/// never seen, or reported early).
pub(crate) static UNTRACKED: AtomicU64 = AtomicU64::new(0);

/// Counts a sample skipped for reentrancy (`sample_path` §1) as a lost event of the session's queue
/// (which `memprof record`'s collector reads from outside the process).
#[cold]
#[inline(never)]
pub(crate) fn skipped() {
    if let Some(q) = queue() {
        q.note_lost();
    }
}
