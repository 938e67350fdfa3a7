//! Merging the profiles of a process tree (`memprof record --follow-forks` writes one file
//! per process) into one [`Profile`] that every report reads as usual.
//!
//! Processes have their own address spaces: the same address may be different code in two
//! of them. So the addresses of the i-th profile (frames, symbol keys, module ranges and
//! load biases alike) are tagged with `i` in bits 48–63, which user-space addresses never
//! use on x86_64 and aarch64; `module + offset` names come out unchanged because the base
//! is tagged too. Stack and sample ids are renumbered so that they stay unique. All
//! profiles must share one sampling interval (a run of `memprof record` does).
#![forbid(unsafe_code)]

use super::{Profile, StackId};
use crate::Error;

/// Bits of an address left to the process; the profile's index goes above.
const TAG_SHIFT: u32 = 48;

/// Merges `profiles` (at least one) in order; the header is the first one's. The result is
/// complete only when every input is; warnings are kept, prefixed with `labels[i]`.
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
    let mut out = Profile { header: first.header.clone(), complete: true, ..Profile::default() };
    let mut next_id = 1u64;
    for (i, p) in std::iter::once(first).chain(rest).enumerate() {
        let label = labels.get(i).cloned().unwrap_or_else(|| format!("profile {}", i + 1));
        if p.header.interval != interval {
            return Err(Error::Config(format!(
                "{label} was recorded with a sampling interval of {} bytes, the first profile \
                 with {interval}: they cannot be merged",
                p.header.interval
            )));
        }
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
        out.stacks.extend(p.stacks.iter().map(|s| {
            let mut s = s.clone();
            s.frames.iter_mut().for_each(|f| *f = t(*f));
            s
        }));
        out.symbols.extend(p.symbols.iter().map(|(a, s)| (t(*a), s.clone())));
        let mut ids = std::collections::HashMap::new();
        for s in &p.samples {
            let mut s = *s;
            ids.insert(s.id, next_id);
            s.id = next_id;
            next_id += 1;
            s.stack += stack_base;
            s.addr = t(s.addr);
            out.samples.push(s);
        }
        out.frees.extend(p.frees.iter().filter_map(|f| {
            let mut f = *f;
            f.id = *ids.get(&f.id)?;
            Some(f)
        }));
        out.moves.extend(p.moves.iter().filter_map(|m| {
            let mut m = *m;
            m.id = *ids.get(&m.id)?;
            m.new_addr = t(m.new_addr);
            Some(m)
        }));
        out.lost.events += p.lost.events;
        out.lost.untracked += p.lost.untracked;
        out.lost.callback_panics += p.lost.callback_panics;
        out.warnings.extend(p.warnings.iter().map(|w| format!("{label}: {w}")));
        out.complete &= p.complete;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Free, Sample, Stack, Symbol};

    fn one(addr: u64, name: &str, size: u64) -> Profile {
        let mut p = Profile { complete: true, ..Profile::default() };
        p.header.interval = 1.0;
        p.stacks.push(Stack { frames: vec![addr], truncated: false });
        p.symbols.insert(addr, vec![Symbol { function: name.into(), file: None, line: None }]);
        p.samples.push(Sample { id: 1, stack: 0, time_ns: 0, thread: 1, addr: 16, size, k: size });
        p.samples.push(Sample { id: 2, stack: 0, time_ns: 0, thread: 1, addr: 32, size, k: size });
        p.frees.push(Free { id: 1, time_ns: 1 });
        p
    }

    #[test]
    fn same_address_different_code() {
        let m = merge(vec![one(0x1000, "parent", 10), one(0x1000, "child", 5)], &[]).unwrap();
        assert_eq!(m.samples.len(), 4);
        assert_eq!(m.site_name(m.samples[0].stack), "parent");
        assert_eq!(m.site_name(m.samples[2].stack), "child");
        assert_eq!(m.live_ids().len(), 2);
        let ids: std::collections::HashSet<u64> = m.samples.iter().map(|s| s.id).collect();
        assert_eq!(ids.len(), 4);
    }

    #[test]
    fn intervals_must_agree() {
        let mut b = one(1, "b", 1);
        b.header.interval = 2.0;
        assert!(merge(vec![one(1, "a", 1), b], &[]).is_err());
    }
}
