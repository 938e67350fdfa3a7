//! The stacks a process's threads sent whole, kept by the key their later allocations name
//! them by (`engine::known`): such an allocation is handed to the recorder with the frames
//! as they came, so that what follows (interning, the translation across module
//! generations, Python frames) is what it would have been had they come with it.
//!
//! Most stacks are kept as the recorder's own: the stack it interned them as, whose words
//! are the frames as they came when no module generation shifted them. Only frames that
//! the recorder translated are kept apart. A key that names nothing kept (the frames' event
//! was lost, or the process wrote what it liked) loses its allocation, counted with the
//! queue's lost events.

use crate::engine::queue::StackRef;
use crate::profile::StackId;
use crate::session::recorder::Recorder;
use crate::sys::hash::SeededHash;
use std::collections::HashMap;

/// A process's stacks by key.
#[derive(Default)]
pub(super) struct SentStacks {
    by_key: HashMap<u64, Kept, SeededHash>,
    /// The frames of the stack last looked up.
    frames: Vec<usize>,
}

/// A stack kept.
enum Kept {
    /// The recorder's stack of this id holds the frames as they came.
    Interned(StackId),
    /// The frames as they came (the recorder translated them).
    Raw(Box<[usize]>),
}

impl SentStacks {
    /// The frames of an allocation whose stack is `r`, with `frames` what followed its
    /// event: those, or the ones kept under its key; `None` when the key names none.
    pub(super) fn frames<'a>(
        &'a mut self,
        r: StackRef,
        frames: &'a [usize],
        rec: &Recorder,
    ) -> Option<&'a [usize]> {
        let StackRef::Sent(key) = r else {
            return Some(frames);
        };
        self.frames.clear();
        match self.by_key.get(&key)? {
            Kept::Raw(f) => self.frames.extend_from_slice(f),
            Kept::Interned(id) => {
                let stack = rec.profile().stacks.get(*id as usize)?;
                self.frames.extend(stack.frames.iter().map(|&w| w as usize));
            }
        }
        Some(&self.frames)
    }

    /// The stack the recorder interned the frames of `r` as, when it names frames sent
    /// before and they are the words of that stack.
    pub(super) fn interned(&self, r: StackRef) -> Option<StackId> {
        let StackRef::Sent(key) = r else {
            return None;
        };
        match self.by_key.get(&key)? {
            Kept::Interned(id) => Some(*id),
            Kept::Raw(_) => None,
        }
    }

    /// Keeps `frames`, which the recorder interned as stack `id`, when `r` says that later
    /// allocations will name them by key.
    pub(super) fn keep(&mut self, r: StackRef, frames: &[usize], id: StackId, rec: &Recorder) {
        let StackRef::Kept(key) = r else {
            return;
        };
        self.by_key.entry(key).or_insert_with(|| {
            let same =
                rec.profile().stacks.get(id as usize).is_some_and(|s| {
                    crate::engine::callstack::frames::same_words(&s.frames, frames)
                });
            match same {
                true => Kept::Interned(id),
                false => Kept::Raw(frames.into()),
            }
        });
    }
}
