//! Replays: a recording's events read again, in order, to see the heap as it was at one
//! moment of the run. The aggregates of a [`Profile`] hold the end of the run (what was
//! allocated, what is still live) and the peak's size and time; what was live *at* the
//! peak is found by folding the events into a fresh profile until its own peak is that one.
//! Memory is that of one profile's aggregates, never the events.

use super::format::Reader;
use super::{IdHash, Peak, Profile, StackId, Totals};
use crate::error::Error;
use std::collections::HashMap;
use std::path::Path;

/// The sampled blocks live at the peak `peak` of the recording at `path` (its
/// [`Profile::peak`]), totalled per (stack, size) as [`Profile::live`] is. The events are
/// folded in the order they were recorded with the arithmetic that found the peak, so the
/// live set is that of the moment right after the event that made it: in the exact mode,
/// the program's true live heap at its peak. An error when the file cannot be read or its
/// events never reach that peak (not the file the peak came from).
pub fn live_at_peak(
    path: &Path,
    peak: Peak,
) -> Result<HashMap<(StackId, u64), Totals, IdHash>, Error> {
    let mut reader = Reader::open(path)?;
    let mut p = Profile { header: reader.profile().header.clone(), ..Profile::default() };
    if peak.bytes <= 0.0 {
        return Ok(HashMap::default());
    }
    while let Some(e) = reader.next_event() {
        p.add(&e);
        if p.peak == peak && p.live_bytes == peak.bytes {
            p.live.retain(|_, t| t.samples > 0);
            return Ok(p.live);
        }
    }
    Err(Error::Format(format!(
        "{}: its events never reach the peak of {} bytes at {} ns",
        path.display(),
        peak.bytes,
        peak.time_ns
    )))
}

impl Profile {
    /// Fills [`Profile::peak_live`] from the recording at `path`, which this profile was read
    /// from (see [`live_at_peak`]).
    pub fn fill_peak_live(&mut self, path: &Path) -> Result<(), Error> {
        self.peak_live = Some(live_at_peak(path, self.peak)?);
        Ok(())
    }
}
