//! The stacks a thread has sent whole to a consumer in another process, so that its later
//! allocations from the same place name their stack by its key instead of carrying it
//! again ([`StackRef`]).
//!
//! # 1. Why
//! In the exact mode every allocation is an event with its call stack, and the queue's
//! cells cross between the program's cores and the collector's (`queue::event` §1): a
//! stack of a dozen frames is a cell more than the event, an interpreter's hundred frames
//! seven more, each two lines that cross twice. A program allocates from far fewer places
//! than it allocates: its first allocation from a place sends the frames, the others send
//! a key.
//!
//! # 2. The rule that keeps it right
//! A thread names a stack by its key ([`StackRef::Sent`]) only after one of its own pushes
//! carried the frames ([`StackRef::Kept`]) into the same queue in the same session, and
//! succeeded. One thread's events are taken in the order it pushed them (`queue` §2), so
//! the consumer has read the frames before it meets the key; it keeps every stack it was
//! handed so (`record/command/collect/deliver.rs`) and hands the allocation on with its
//! frames, as if they had come with it. Nothing else changes: frames that came back by
//! key go through the same translation across module generations as frames that came
//! with their event.
//!
//! The table remembers which stacks went out, not the frames: [`KNOWN`] keys, one place
//! per key (its low bits), a newer key taking an older one's place (whose stack is then
//! sent whole again). It belongs to the session's epoch: a new session, or the child of a
//! `fork` (whose session and queue are new, `session::fork`), finds the epoch changed and
//! starts empty. A key is a 64-bit hash of the frames and the truncation flag
//! ([`frames::key`]); two stacks of one thread with the same key would be taken one for the
//! other, which is as likely as any two of a run's stacks colliding in 64 bits.
//!
//! A consumer in this process never gets a key: its events carry their frames
//! ([`StackRef::Here`]).

use crate::engine::callstack::frames;
use crate::engine::queue::StackRef;
use core::cell::Cell;

/// Keys a thread's table holds (4 KiB).
pub(crate) const KNOWN: usize = 512;

/// A thread's table of stacks sent (in its lazily mapped block, `engine::thread`; all
/// zero is an empty table of no session).
pub(crate) struct Known {
    /// The session the keys were sent in.
    epoch: Cell<u64>,
    keys: [Cell<u64>; KNOWN],
}

impl Known {
    /// How an allocation of session `epoch` whose stack is `frames` (`truncated` when
    /// deeper than the depth) refers to it: by its key when this thread sent it before,
    /// else with its frames, kept under the key once [`Known::sent`] says they went.
    #[inline(always)]
    pub(crate) fn stack_ref(&self, epoch: u64, frames: &[usize], truncated: bool) -> StackRef {
        self.by_key(epoch, frames::key(frames, truncated))
    }

    /// [`Known::stack_ref`] of a stack whose key is known.
    #[inline(always)]
    pub(crate) fn by_key(&self, epoch: u64, key: u64) -> StackRef {
        if self.epoch.get() != epoch {
            self.keys.iter().for_each(|k| k.set(0));
            self.epoch.set(epoch);
        }
        match key {
            // 0 stands for no key on the wire.
            0 => StackRef::Here,
            key if self.place(key).get() == key => StackRef::Sent(key),
            key => StackRef::Kept(key),
        }
    }

    /// The event that referred to its stack as `r` was pushed: a [`StackRef::Kept`] stack
    /// may be named by its key from now on.
    #[inline(always)]
    pub(crate) fn sent(&self, r: StackRef) {
        if let StackRef::Kept(key) = r {
            self.place(key).set(key);
        }
    }

    fn place(&self, key: u64) -> &Cell<u64> {
        &self.keys[key as usize & (KNOWN - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Box<Known> {
        Box::new(Known { epoch: Cell::new(0), keys: [const { Cell::new(0) }; KNOWN] })
    }

    /// A stack goes whole until a push of it succeeded, then by key; a new epoch forgets.
    #[test]
    fn whole_once_then_by_key_within_a_session() {
        let t = empty();
        let frames = [0x401000, 0x402000, 0x403000];
        let key = frames::key(&frames, false);
        assert_eq!(t.stack_ref(7, &frames, false), StackRef::Kept(key));
        // Not pushed (a full queue dropped it): still whole.
        assert_eq!(t.stack_ref(7, &frames, false), StackRef::Kept(key));
        t.sent(StackRef::Kept(key));
        assert_eq!(t.stack_ref(7, &frames, false), StackRef::Sent(key));
        // The same frames truncated are another stack.
        let cut = frames::key(&frames, true);
        assert_eq!(t.stack_ref(7, &frames, true), StackRef::Kept(cut));
        // Another session (a fork's child, a new `start`) sends it whole again.
        assert_eq!(t.stack_ref(8, &frames, false), StackRef::Kept(key));
        // A key that takes the same place evicts the older one.
        t.sent(StackRef::Kept(key));
        let other = key ^ (1 << 40);
        assert_eq!(t.by_key(8, other), StackRef::Kept(other));
        t.sent(StackRef::Kept(other));
        assert_eq!(t.by_key(8, key), StackRef::Kept(key));
        assert_eq!(t.by_key(8, 0), StackRef::Here);
    }
}
