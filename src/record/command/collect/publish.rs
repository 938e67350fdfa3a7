//! The root process's profile as folded so far, published for `--serve`: a request asks
//! for a copy and waits, the collector's loop copies its fold in between two drains.

use crate::profile::Profile;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The root process's profile as folded so far, for `--serve`. A request asks for it and
/// waits, and wakes the collector, which copies its fold in between two drains (so serving
/// costs the collector nothing until a request comes, and a snapshot is at most one pass
/// old).
#[derive(Debug, Default)]
pub(crate) struct Published {
    state: Mutex<PublishedState>,
    wanted: AtomicBool,
    ready: Condvar,
    /// Wakes the collector for a request (`collect` §8).
    wake: super::Wake,
}

#[derive(Debug, Default)]
struct PublishedState {
    /// The copy (tables and aggregates; not the timeline), once the session runs.
    profile: Option<Profile>,
    /// Copies made so far.
    generation: u64,
    /// No newer copy will come (the root process is finished).
    ended: bool,
}

impl Published {
    fn lock(&self) -> std::sync::MutexGuard<'_, PublishedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings `mirror` up to the profile as folded now (waiting at most a second for the
    /// collector's next pass). False before the session has started.
    pub(crate) fn snapshot_into(&self, mirror: &mut Profile) -> bool {
        let mut s = self.lock();
        if !s.ended {
            let seen = s.generation;
            self.wanted.store(true, Ordering::Release);
            self.wake.ring();
            s = self
                .ready
                .wait_timeout_while(s, Duration::from_secs(1), |s| s.generation == seen && !s.ended)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        match &s.profile {
            Some(p) => {
                mirror_into(p, mirror);
                true
            }
            None => false,
        }
    }

    /// Copies `p` in when a request asked for it; `last`: no newer copy will come.
    pub(super) fn offer(&self, p: &Profile, last: bool) {
        if !last && !self.wanted.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut s = self.lock();
        mirror_into(p, s.profile.get_or_insert_with(Profile::default));
        s.generation += 1;
        s.ended |= last;
        drop(s);
        self.ready.notify_all();
    }

    /// What wakes the collector for a request.
    pub(super) fn wake(&self) -> &super::Wake {
        &self.wake
    }

    /// No newer copy will come.
    pub(super) fn end(&self) {
        self.lock().ended = true;
        self.ready.notify_all();
    }
}

/// Brings `mirror` up to `p`: the stacks, labels and modules added since it was last
/// brought up (its symbols are kept), and the aggregates (not the timeline).
fn mirror_into(p: &Profile, mirror: &mut Profile) {
    if mirror.header != p.header {
        *mirror = Profile { header: p.header.clone(), ..Profile::default() };
    }
    let known = mirror.stacks.len().min(p.stacks.len());
    mirror.stacks.extend_from_slice(&p.stacks[known..]);
    let known = mirror.labels.len().min(p.labels.len());
    mirror.labels.extend_from_slice(&p.labels[known..]);
    if mirror.modules != p.modules {
        mirror.modules.clone_from(&p.modules);
    }
    for (addr, sym) in &p.symbols {
        mirror.symbols.entry(*addr).or_insert_with(|| sym.clone());
    }
    mirror.lost = p.lost;
    mirror.stopped = p.stopped;
    mirror.clone_aggregates_from(p);
    // Whole as of now (the recording goes on).
    mirror.complete = true;
}
