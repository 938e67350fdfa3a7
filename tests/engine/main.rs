//! The sampling engine, end to end, under its own `Sampled<System>` global allocator: exact
//! totals in the exact mode, confidence intervals with fixed seeds, the tracker contract
//! (tokens, reallocations, reentrancy, panics, lost events, one session at a time, the drain
//! thread), buffers grown by `realloc` (`realloc.rs`),
//! many threads freeing each other's blocks, and stack truncation.
//!
//! Sessions are process-global, so every test that starts one holds [`serial`]. Allocation
//! sites are `#[inline(never)]` functions whose names the reports must find
//! (`engine::<module>::<site>`); the memory they allocate is known exactly, so every check
//! compares memprof's numbers with the truth computed by the test itself.
//!
//! The managed heap's tests (`gc.rs`) share this binary, its allocator and [`serial`].
#![cfg(feature = "report")]

mod gc;
mod realloc;

use std::alloc::System;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;

use memprof::profile::{GcCycle, Profile, Stack, StackId, Totals};
use memprof::report::{site_totals, SiteTotal};
use memprof::{
    Allocation, Config, Deallocation, Poll, Recorder, SessionCounters, SessionInfo, Tracker,
};

#[global_allocator]
static GLOBAL: memprof::Sampled<System> = memprof::Sampled::new(System);

#[path = "../common/mod.rs"]
mod common;
use common::serial;

/// Runs `work` under a session with a [`Recorder`] and returns the profile.
fn record(config: Config, work: impl FnOnce()) -> Profile {
    let session = memprof::start(config, Recorder::new()).expect("start");
    work();
    session.stop().expect("stop").into_profile()
}

/// A sample as the engine handed it to the tracker, with the stack the recorder interned
/// for it (profiles keep aggregates, not single samples or block addresses).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    pub(crate) id: u64,
    pub(crate) stack: StackId,
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) k: u64,
    pub(crate) thread: u32,
}

/// A [`Recorder`] that also keeps every sample and the sample id of every free, in the
/// order the engine delivered them: for the tests that follow single blocks.
#[derive(Default)]
pub(crate) struct Witness {
    recorder: Recorder,
    samples: Vec<Seen>,
    frees: Vec<u64>,
    /// The recorder's stack ids by stack, for the stacks indexed so far (the recorder
    /// appends new stacks to its profile's table).
    stack_ids: HashMap<Stack, StackId>,
}

/// The recorder's token for a live block (it names the block when it is freed).
type Held = <Recorder as Tracker>::Token;

impl Tracker for Witness {
    type Token = Held;

    fn started(&mut self, info: &SessionInfo) {
        self.recorder.started(info);
    }

    fn alloc(&mut self, a: &Allocation<'_>) -> Option<Held> {
        let token = self.recorder.alloc(a);
        // The recorder has just interned the block's stack (appending it to its table when
        // new) and entered the block in its live totals of its (stack, size) pair.
        let profile = self.recorder.profile();
        for id in self.stack_ids.len()..profile.stacks.len() {
            let again = self.stack_ids.insert(profile.stacks[id].clone(), id as StackId);
            assert_eq!(again, None, "stack {id} interned twice");
        }
        let frames = a.callstack.frames().iter().map(|&f| f as u64).collect();
        let key = Stack { frames, truncated: a.callstack.truncated(), label: 0 };
        let stack = *self.stack_ids.get(&key).expect("stack interned by the recorder");
        let (id, addr, size, k, thread) = (a.id, a.addr as u64, a.size as u64, a.k, a.thread);
        let live = profile.live.get(&(stack, size));
        assert!(live.is_some_and(|t| t.samples > 0 && t.k >= k), "recorded as live: {live:?}");
        self.samples.push(Seen { id, stack, addr, size, k, thread });
        token
    }

    fn dealloc(&mut self, token: Held, d: &Deallocation) {
        self.frees.push(d.id);
        self.recorder.dealloc(token, d);
    }

    fn gc_cycle(&mut self, cycle: &GcCycle) {
        self.recorder.gc_cycle(cycle);
    }

    fn after_poll(&mut self, why: Poll) {
        self.recorder.after_poll(why);
    }

    fn stopped(&mut self, stats: &SessionCounters) {
        self.recorder.stopped(stats);
    }
}

/// What a session with a [`Witness`] saw: the profile, every sample, every freed sample id.
pub(crate) struct Witnessed {
    pub(crate) profile: Profile,
    pub(crate) samples: Vec<Seen>,
    pub(crate) frees: Vec<u64>,
}

impl From<Witness> for Witnessed {
    fn from(w: Witness) -> Self {
        Witnessed { profile: w.recorder.into_profile(), samples: w.samples, frees: w.frees }
    }
}

/// Runs `work` under a session with a [`Witness`].
pub(crate) fn record_witnessed(config: Config, work: impl FnOnce()) -> Witnessed {
    let session = memprof::start(config, Witness::default()).expect("start");
    work();
    session.stop().expect("stop").into()
}

/// Totals per (stack, size) pair of `samples`, as a profile keeps its live blocks.
pub(crate) fn pair_totals<'a>(
    samples: impl IntoIterator<Item = &'a Seen>,
) -> HashMap<(StackId, u64), Totals> {
    let mut totals: HashMap<(StackId, u64), Totals> = HashMap::new();
    for s in samples {
        let t = totals.entry((s.stack, s.size)).or_default();
        t.samples += 1;
        t.k += s.k;
    }
    totals
}

/// The profile's live totals of the (stack, size) pairs whose stack passes `keep`, leaving
/// out the pairs whose blocks were all freed (a profile may keep them with zero totals).
pub(crate) fn live_of(
    profile: &Profile,
    keep: impl Fn(StackId) -> bool,
) -> HashMap<(StackId, u64), Totals> {
    profile
        .live
        .iter()
        .filter(|((stack, _), t)| keep(*stack) && **t != Totals::default())
        .map(|(&p, &t)| (p, t))
        .collect()
}

/// The totals of the site named `name` (all zero when it has no samples).
fn site(profile: &Profile, name: &str) -> SiteTotal {
    site_totals(profile)
        .into_iter()
        .find(|s| s.site == name)
        .unwrap_or_else(|| SiteTotal { site: name.to_owned(), ..SiteTotal::default() })
}

/// Site name of every stack of the profile, by stack id.
fn site_names(profile: &Profile) -> Vec<String> {
    (0..profile.stacks.len() as u32).map(|id| profile.site_name(id)).collect()
}

/// A tiny deterministic generator for workloads (not the sampler's).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

mod callbacks;
mod depth;
mod exact;
mod external_countdown;
mod offline_symbols;
mod statistics;
mod threads;
