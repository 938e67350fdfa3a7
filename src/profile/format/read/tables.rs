//! The decoding of the records that build the profile's tables (modules, stacks, labels,
//! symbols) and of the facts beside the events (a resident split, a GC cycle): each from
//! its payload, checked against what the reader has so far. Untrusted bytes: every count
//! is bounded, every id checked.

use super::super::spec::{unzigzag, MAX_BUILD_ID, MAX_FRAMES, MAX_LIST};
use super::Payload;
use crate::profile::events::{GcCycle, ResidentSplit};
use crate::profile::tables::{Module, Stack, StackId, Symbol};

/// A module record.
pub(super) fn module(p: &mut Payload<'_>) -> Result<Module, String> {
    let path = p.str()?;
    let (base, start, end) = (p.u()?, p.u()?, p.u()?);
    // The build id was appended later (§3): absent in older files.
    let build_id = if p.rest.is_empty() {
        Vec::new()
    } else {
        let n = p.u()?;
        if n > MAX_BUILD_ID as u64 {
            return Err(format!("a build id of {n} bytes exceeds {MAX_BUILD_ID}"));
        }
        p.take(n)?.to_vec()
    };
    // As is the file's identity, after it.
    let (file_size, file_mtime_ns) = if p.rest.is_empty() { (0, 0) } else { (p.u()?, p.u()?) };
    Ok(Module { path, base, start, end, build_id, file_size, file_mtime_ns })
}

/// A stack record, which must define stack `next` (the count so far) and may name one of
/// the `labels` labels defined so far (a stream of `version` 3 or later).
pub(super) fn stack(
    p: &mut Payload<'_>,
    next: usize,
    labels: usize,
    version: u32,
) -> Result<Stack, String> {
    let id = p.u()?;
    if id != next as u64 {
        return Err(format!("stack record defines id {id}, expected {next}"));
    }
    if id > u64::from(StackId::MAX) {
        return Err(format!("stack id {id} does not fit in 32 bits"));
    }
    let truncated = p.u()? & 1 == 1;
    let n = p.count("frames", MAX_FRAMES)?;
    let mut frames = Vec::with_capacity(n);
    let mut prev = 0u64;
    for i in 0..n {
        let v = p.u()?;
        let f = if i == 0 { v } else { prev.wrapping_add(unzigzag(v) as u64) };
        frames.push(f);
        prev = f;
    }
    // The label was appended in version 3 (§2b): absent when 0.
    let label = if p.rest.is_empty() || version < 3 {
        0
    } else {
        let l = p.u()?;
        if l > labels as u64 {
            return Err(format!("stack {id} names label {l} which was never defined"));
        }
        l as u32
    };
    Ok(Stack { frames, truncated, label })
}

/// A label record, which must define label `defined + 1` (labels count from 1).
pub(super) fn label(p: &mut Payload<'_>, defined: usize) -> Result<String, String> {
    let id = p.u()?;
    if id != defined as u64 + 1 {
        return Err(format!("label record defines id {id}, expected {}", defined + 1));
    }
    if id > u64::from(u32::MAX) {
        return Err(format!("label id {id} does not fit in 32 bits"));
    }
    p.str()
}

/// A symbols record: an address and its frames, innermost (inlined) first.
pub(super) fn symbols(p: &mut Payload<'_>) -> Result<(u64, Vec<Symbol>), String> {
    let addr = p.u()?;
    let n = p.count("inline frames", MAX_LIST)?;
    let mut syms = Vec::with_capacity(n);
    for _ in 0..n {
        let function = p.str()?;
        let flags = p.u()?;
        let file = if flags & 1 != 0 { Some(p.str()?) } else { None };
        let line = if flags & 2 != 0 { Some(p.u32("line")?) } else { None };
        syms.push(Symbol { function, file, line });
    }
    Ok((addr, syms))
}

/// A resident-memory split record.
pub(super) fn split(p: &mut Payload<'_>) -> Result<ResidentSplit, String> {
    let (time_ns, resident, allocator) = (p.u()?, p.u()?, p.u()?);
    let (stacks, files, own, other) = (p.u()?, p.u()?, p.u()?, p.u()?);
    let live_bytes = p.f64()?;
    // Appended later (§3): absent in older files.
    let outside = if p.rest.is_empty() { 0 } else { p.u()? };
    Ok(ResidentSplit {
        time_ns,
        resident,
        allocator,
        outside,
        stacks,
        files,
        own,
        other,
        live_bytes,
    })
}

/// A GC cycle record.
pub(super) fn gc_cycle(p: &mut Payload<'_>) -> Result<GcCycle, String> {
    let (cycle, start_ns, end_ns, mark_ns) = (p.u()?, p.u()?, p.u()?, p.u()?);
    let (slices, longest_slice_ns, words_marked) = (p.u()?, p.u()?, p.u()?);
    let ns_per_word = p.f64()?;
    let (sweep_ns, heap_words, live_words) = (p.u()?, p.u()?, p.u()?);
    Ok(GcCycle {
        cycle,
        start_ns,
        end_ns,
        mark_ns,
        slices,
        longest_slice_ns,
        words_marked,
        ns_per_word,
        sweep_ns,
        heap_words,
        live_words,
    })
}
