//! Merging the profiles of a process tree (`memprof record --follow-forks` writes one file
//! per process) into one [`Profile`] that every report reads as usual.
//!
//! Processes have their own address spaces: the same address may be different code in two
//! of them. So the addresses of the i-th profile (frames, symbol keys, module ranges and
//! load biases alike) are tagged with `i` in bits 48–63, which user-space addresses never
//! use on x86_64 and aarch64; `module + offset` names come out unchanged because the base
//! is tagged too. Every stack of a merged tree gets one more, outermost frame naming its
//! process (`cc1plus [pid 1234]`), at an address no code has (the tag and all 48 low bits
//! set), so flamegraphs and folded stacks show each program as its own root. Stack and
//! sample ids are renumbered so that they stay unique. All profiles must share one sampling
//! interval (a run of `memprof record` does). The series over time are added bucket by
//! bucket on the first profile's clock (each process's from its own start time), and the
//! peak is the series' highest bucket maximum: an upper bound of the tree's peak, as the
//! processes' maxima within a bucket need not coincide, and, sampled, as each maximum is
//! that of a noisy estimate (biased upward: `report::confidence` §1). No process's cross-fitted
//! peak survives the merge (the halves' moments are each process's own), so the reports
//! state a tree's peak as "at most", without an interval, and have no live set at it.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use super::{IdHash, Profile, StackId, Symbol, Totals};
use crate::error::Error;

/// Bits of an address left to the process; the profile's index goes above.
const TAG_SHIFT: u32 = 48;
/// The address of a process's root frame, below its tag.
const ROOT: u64 = (1 << TAG_SHIFT) - 1;

/// Merges `profiles` (at least one) in order; the header is the first one's. The result is
/// complete when the first is and every other one is complete or ended by `_exit` or
/// `exec`; its `stopped` is the first one's. Warnings are kept, prefixed with `labels[i]`.
pub fn merge(profiles: Vec<Profile>, labels: &[String]) -> Result<Profile, Error> {
    let mut it = profiles.into_iter();
    let Some(first) = it.next() else {
        return Err(Error::Config("no profile to merge".into()));
    };
    let rest: Vec<Profile> = it.collect();
    if rest.is_empty() {
        return Ok(first);
    }
    if rest.len() >= (1 << (64 - TAG_SHIFT)) - 1 {
        return Err(Error::Config(format!("too many profiles to merge ({})", rest.len() + 1)));
    }
    let interval = first.header.interval;
    let start = first.header.start_unix_ns;
    let mut out = Profile { header: first.header.clone(), complete: true, ..Profile::default() };
    for (i, p) in std::iter::once(first).chain(rest).enumerate() {
        let label = labels.get(i).cloned().unwrap_or_else(|| format!("profile {}", i + 1));
        if p.header.interval != interval {
            return Err(Error::Config(format!(
                "{label} was recorded with a sampling interval of {} bytes, the first profile \
                 with {interval}: they cannot be merged",
                p.header.interval
            )));
        }
        let stack_base = add_code(&mut out, &p, i);
        add_totals(&mut out, &p, stack_base);
        let offset = p.header.start_unix_ns.saturating_sub(start);
        add_timing(&mut out, &p, stack_base, offset);
        add_counts(&mut out, &p, &label);
        // A child that ended by `_exit` or `exec` (it said so last) left a whole file; the
        // root's own way of ending is the tree's.
        if i == 0 {
            out.stopped = p.stopped;
            out.ended = p.ended;
        }
        out.complete &= p.complete || (i > 0 && p.stopped.is_some());
    }
    out.peak = out.series.peak();
    out.since_peak.unknown = true;
    Ok(out)
}

/// Adds the code of the `i`-th profile `p` (its modules, symbols and stacks, under a root
/// frame naming its process) in an address space of its own, so that the same address in
/// two processes stays two places (module documentation); returns the id its first stack
/// has in `out`, by which its aggregates are renumbered.
fn add_code(out: &mut Profile, p: &Profile, i: usize) -> StackId {
    let tag = (i as u64) << TAG_SHIFT;
    let t = |a: u64| if a >> TAG_SHIFT == 0 { a | tag } else { a };
    let stack_base = out.stacks.len() as StackId;
    out.modules.extend(p.modules.iter().map(|m| {
        let mut m = m.clone();
        m.base = t(m.base);
        m.start = t(m.start);
        m.end = t(m.end);
        m
    }));
    let root = tag | ROOT;
    out.symbols.insert(root, vec![Symbol { function: process_name(p), file: None, line: None }]);
    // Labels are texts: the same span path in two processes is one label.
    let relabel: Vec<u32> = p.labels.iter().map(|l| out.intern_label(l)).collect();
    out.stacks.extend(p.stacks.iter().map(|s| {
        let mut s = s.clone();
        s.frames.iter_mut().for_each(|f| *f = t(*f));
        s.frames.push(root);
        s.label = s.label.checked_sub(1).map_or(0, |i| relabel[i as usize]);
        s
    }));
    out.symbols.extend(p.symbols.iter().map(|(a, s)| (t(*a), s.clone())));
    stack_base
}

/// Adds what `p` sampled, by stack (allocated, live, short-lived, lifetimes, the live
/// blocks by allocation time), its stacks numbered from `stack_base`.
fn add_totals(out: &mut Profile, p: &Profile, stack_base: StackId) {
    add_renumbered(&mut out.allocated, &p.allocated, stack_base);
    add_renumbered(&mut out.live, &p.live, stack_base);
    let life = &mut out.lifetimes;
    life.short_lived_ns = p.lifetimes.short_lived_ns;
    add_renumbered(&mut life.short, &p.lifetimes.short, stack_base);
    add_renumbered(&mut life.histogram, &p.lifetimes.histogram, stack_base);
    // Allocation times are on each process's clock: the tree's GC cycles are each
    // process's own, attributed when its profile was read.
    for (&(stack, size, unit), tot) in &p.live_by_time.index {
        out.live_by_time.index.insert((stack + stack_base, size, unit), *tot);
    }
    out.live_bytes += p.live_bytes;
}

/// Adds `from`'s totals into `into`, their stacks numbered from `stack_base`.
fn add_renumbered<K: Copy + Eq + std::hash::Hash>(
    into: &mut HashMap<(StackId, K), Totals, IdHash>,
    from: &HashMap<(StackId, K), Totals, IdHash>,
    stack_base: StackId,
) {
    for (&(stack, key), tot) in from {
        let e = into.entry((stack + stack_base, key)).or_default();
        e.samples += tot.samples;
        e.k += tot.k;
    }
}

/// Adds what `p` saw over time (GC cycles, the series, its end) on the first profile's
/// clock: `offset` is how much later than the first it started.
fn add_timing(out: &mut Profile, p: &Profile, stack_base: StackId, offset: u64) {
    for (c, marked) in p.gc_cycles.iter().zip(&p.gc_marked) {
        out.gc_cycles.push(super::GcCycle {
            start_ns: c.start_ns.saturating_add(offset),
            end_ns: c.end_ns.saturating_add(offset),
            ..*c
        });
        out.gc_marked.push(marked.iter().map(|(&s, &m)| (s + stack_base, m)).collect());
    }
    out.series.add(&p.series, offset);
    out.end_ns = out.end_ns.max(p.end_ns.saturating_add(offset));
}

/// Adds `p`'s event counts and losses, and what it says of itself: its warnings, prefixed
/// with `label` (which process), and its notes, once for the tree.
fn add_counts(out: &mut Profile, p: &Profile, label: &str) {
    out.counts.samples += p.counts.samples;
    out.counts.frees += p.counts.frees;
    out.counts.moves += p.counts.moves;
    out.counts.orphans += p.counts.orphans;
    out.lost.events += p.lost.events;
    out.lost.untracked += p.lost.untracked;
    out.lost.callback_panics += p.lost.callback_panics;
    out.lost.frees_replayed += p.lost.frees_replayed;
    out.lost.frees_unknown += p.lost.frees_unknown;
    out.warnings.extend(p.warnings.iter().map(|w| format!("{label}: {w}")));
    // A note names its program itself; the same note of two processes is said once.
    for n in &p.notes {
        if !out.notes.contains(n) {
            out.notes.push(n.clone());
        }
    }
}

/// `program [pid N]`: the executable's file name (else the first argument) and the pid.
fn process_name(p: &Profile) -> String {
    let h = &p.header;
    let exe = if h.executable.is_empty() {
        h.cmdline.first().map(String::as_str).unwrap_or("?")
    } else {
        &h.executable
    };
    let name = exe.rsplit('/').next().unwrap_or(exe);
    format!("{name} [pid {}]", h.pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Free, Sample, Stack};

    fn one(addr: u64, name: &str, exe: &str, size: u64) -> Profile {
        let mut p = Profile { complete: true, ..Profile::default() };
        p.header.interval = 1.0;
        p.header.executable = format!("/usr/bin/{exe}");
        p.header.pid = 7;
        p.stacks.push(Stack { frames: vec![addr], truncated: false, label: 0 });
        p.symbols.insert(addr, vec![Symbol { function: name.into(), file: None, line: None }]);
        let s = Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 16, size, k: size };
        p.add_sample(&s);
        p.add_sample(&Sample { id: 2, addr: 32, ..s });
        p.add_free(&Free::of(&s, 1));
        p
    }

    #[test]
    fn same_address_different_code_under_one_root_per_process() {
        let parts = vec![one(0x1000, "parent", "cc", 10), one(0x1000, "child", "cc1plus", 5)];
        let m = merge(parts, &[]).unwrap();
        assert_eq!(m.counts.samples, 4);
        assert_eq!(m.stacks.len(), 2);
        assert_eq!(m.site_name(0), "parent");
        assert_eq!(m.site_name(1), "child");
        assert_eq!(m.live.values().map(|t| t.samples).sum::<u64>(), 2);
        assert_eq!(m.live_bytes, 15.0);
        let alloc: u64 = m.allocated.values().map(|t| t.k).sum();
        assert_eq!(alloc, 30);
        // Each process's stacks end in a root frame naming it.
        let root = |s: StackId| m.frame_locations(s).last().unwrap().function.clone();
        assert_eq!(root(0), "cc [pid 7]");
        assert_eq!(root(1), "cc1plus [pid 7]");
    }

    /// A child that ended with `_exit` (its file says so last) leaves the tree whole; a
    /// child cut by a crash does not; the root's way of ending is the tree's.
    #[test]
    fn children_ended_by_exit_or_exec_are_whole() {
        let mut child = one(0x1000, "child", "sh", 5);
        child.complete = false;
        child.stopped = Some(crate::profile::Stopped::QuickExit);
        let m = merge(vec![one(0x1000, "parent", "make", 10), child.clone()], &[]).unwrap();
        assert!(m.complete && m.stopped.is_none());
        let mut cut = child.clone();
        cut.stopped = None;
        let m = merge(vec![one(0x1000, "parent", "make", 10), cut], &[]).unwrap();
        assert!(!m.complete);
        let mut root = one(0x1000, "parent", "make", 10);
        root.complete = false;
        root.stopped = Some(crate::profile::Stopped::Exec);
        let m = merge(vec![root, child], &[]).unwrap();
        assert!(!m.complete);
        assert_eq!(m.stopped, Some(crate::profile::Stopped::Exec));
    }

    #[test]
    fn intervals_must_agree() {
        let mut b = one(1, "b", "b", 1);
        b.header.interval = 2.0;
        assert!(merge(vec![one(1, "a", "a", 1), b], &[]).is_err());
    }
}
