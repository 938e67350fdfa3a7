//! Version-1 streams: every record an outer record, events included.
//!
//! # 1. Events by id
//! A version-1 free or move names its block by the sample's id only (the layout is
//! [the format](crate::profile::format) §2), while the aggregates need the block's stack,
//! size and points: the reader keeps the samples not freed yet, by id, and a free or move
//! of an unknown id is returned as an orphan (stack [`StackId::MAX`]). Table records are
//! applied as in later versions; bytes after the end record are ignored with a warning.

use std::io::Read;

use super::{Payload, Reader, State};
use crate::profile::events::{Free, Move, Sample};
use crate::profile::format::spec::{
    Event, MAX_RECORD, TAG_BLOCK, TAG_FREE, TAG_MOVE, TAG_PAIR, TAG_SAMPLE,
};
use crate::profile::tables::StackId;

impl<R: Read> Reader<R> {
    /// A version-1 record: events are returned, the rest applied.
    pub(super) fn apply_v1(
        &mut self,
        tag: u8,
        p: &mut Payload<'_>,
    ) -> Result<Option<Event>, String> {
        let e = match tag {
            TAG_SAMPLE => {
                let id = p.u()?;
                let stack = p.u()?;
                if stack >= self.profile.stacks.len() as u64 {
                    return Err(format!(
                        "sample {} names stack {stack} which was never defined",
                        self.seen[0]
                    ));
                }
                let stack = stack as StackId; // < stacks.len() ≤ StackId::MAX + 1
                let time_ns = p.u()?;
                let thread = p.u32("thread")?;
                let (addr, size, k) = (p.u()?, p.u()?, p.u()?);
                self.seen[0] += 1;
                let s = Sample { id, stack, time_ns, thread, addr, size, k };
                self.v1_live.insert(id, s);
                Event::Sample(s)
            }
            TAG_FREE => {
                self.seen[1] += 1;
                let (id, time_ns) = (p.u()?, p.u()?);
                match self.v1_live.remove(&id) {
                    Some(s) => Event::Free(Free::of(&s, time_ns)),
                    // Names no block: the aggregates count it as an orphan.
                    None => {
                        Event::Free(Free { id, time_ns, stack: StackId::MAX, ..Free::default() })
                    }
                }
            }
            TAG_MOVE => {
                let (id, time_ns, new_addr, new_size) = (p.u()?, p.u()?, p.u()?, p.u()?);
                self.seen[2] += 1;
                match self.v1_live.get(&id) {
                    Some(s) => Event::Move(Move { new_addr, ..Move::of(s, time_ns, new_size) }),
                    None => Event::Move(Move {
                        id,
                        time_ns,
                        new_addr,
                        new_size,
                        stack: StackId::MAX,
                        ..Move::default()
                    }),
                }
            }
            TAG_PAIR | TAG_BLOCK => {
                return Err(format!("unknown record kind {tag} (written by a newer memprof?)"))
            }
            _ => {
                let r = self.apply(tag, p);
                if self.end_counts.is_some() {
                    // Version 1: nothing may follow the end record.
                    self.state = State::Done;
                    let mut rest = Vec::new();
                    let extra = (&mut self.input.inner)
                        .take(MAX_RECORD)
                        .read_to_end(&mut rest)
                        .map_err(|e| format!("reading after the end record: {e}"))?;
                    if extra > 0 {
                        self.profile.warnings.push(format!(
                            "ignored {}{extra} bytes after the end record at byte {}",
                            if extra as u64 == MAX_RECORD { "at least " } else { "" },
                            self.block_start
                        ));
                    }
                }
                return r;
            }
        };
        self.stopping = None;
        Ok(Some(e))
    }
}
