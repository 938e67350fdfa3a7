//! Module generations of a recorded process: the same addresses hold different libraries
//! over a run (`dlclose`, then a `dlopen` mapped where the last one was); each library's
//! frames and module records are given a range of their own ([`Generations`]). The
//! recorder writes the module pieces it settles ([`Piece`]).

use crate::profile::Module;

/// Module generations of another process (what `record`'s collector records): the same addresses can hold
/// different libraries over a run (`dlclose`, then a `dlopen` the loader maps where the
/// last one was). Symbols are resolved after the run from the modules' files, by address,
/// so a library mapped where an unloaded one had been is given its own stretch of
/// addresses: a *shift* that moves its frames and its module record to a virtual range
/// above the user address space ([`VIRTUAL_BASE`]). Offsets inside the module are
/// unchanged, so offline symbolization reads the right file at the right offset.
///
/// The lists come in order with the events (`record/ring` §3): `current` is the list
/// of the latest snapshot; a module that leaves it is *retired*. A frame in a retired range
/// that no current module covers belongs to whatever was mapped there since (its list
/// comes later, at the next snapshot): a shift is opened for the range at once, and the
/// module that shows up in it is written with that shift.
///
/// A `dlclose` is bracketed by two more records ([`Generations::closing`] and
/// [`Generations::closed`]), because the list written after it cannot be placed
/// before every event that follows the unmapping: another thread's `dlopen` may map a
/// library where the closed one was, and sample its constructor, between the unmapping
/// and that list. So the objects the `dlclose` may unmap are retired when it starts (their
/// later frames open shifts) and are left out of the lists written meanwhile; when it
/// ends, an object still listed is current again (with the shifts its frames opened), and
/// an object gone takes the shifts no module claimed (its destructors' frames) and
/// closes those bound to it, so the next library mapped there gets a shift of its own.
#[derive(Default)]
pub(crate) struct Generations {
    current: Vec<ModuleKey>,
    retired: Vec<(u64, u64)>,
    shifts: Vec<Shift>,
    next_virtual: u64,
    /// The latest snapshot as listed (closing objects included).
    listed: Vec<ModuleKey>,
    /// Objects of `dlclose` calls under way.
    closing: Vec<Closing>,
}

/// An object of a `dlclose` call under way.
struct Closing {
    /// The call's id.
    id: u64,
    /// The loader's count of objects loaded when the call began.
    adds: u64,
    module: Module,
    /// The shifts its frames went through until then (suspended meanwhile).
    own: Vec<Shift>,
}

/// A module as mapped: what its file holds (its build id; else its path, size and time),
/// base, start, end. Not its path alone: the loader names an object as the program asked
/// for it (`./lib.so`, `/lib/...` through a symlinked directory), `/proc/PID/maps` (where
/// the collector looks up frames no list names yet) by its canonical path, and both must
/// be one module, or a shift bound to one is never ended by the other's `dlclose`.
type ModuleKey = (Vec<u8>, u64, u64, u64);

fn module_key(m: &Module) -> ModuleKey {
    let identity = if m.build_id.is_empty() {
        let mut id = m.path.as_bytes().to_vec();
        id.push(0);
        id.extend_from_slice(&m.file_size.to_le_bytes());
        id.extend_from_slice(&m.file_mtime_ns.to_le_bytes());
        id
    } else {
        m.build_id.clone()
    };
    (identity, m.base, m.start, m.end)
}

/// Frames in `start..end` are recorded at `+ delta`.
#[derive(Clone, Debug)]
struct Shift {
    start: u64,
    end: u64,
    delta: u64,
    /// The module written with this shift, once one is.
    bound: Option<ModuleKey>,
}

/// Where shifted modules go: above the 47-bit user address space.
const VIRTUAL_BASE: u64 = 1 << 48;
/// Room given to each shift.
const VIRTUAL_STRIDE: u64 = 1 << 36;

impl Generations {
    /// True when frames of this process may need translating: a module was retired or a
    /// shift is open.
    pub(crate) fn shifting(&self) -> bool {
        !self.retired.is_empty() || !self.shifts.is_empty()
    }

    fn shift_of(&self, addr: u64) -> Option<&Shift> {
        self.shifts.iter().find(|s| s.start <= addr && addr < s.end)
    }

    fn covered(&self, addr: u64) -> bool {
        self.current.iter().any(|&(_, _, a, b)| a <= addr && addr < b)
    }

    fn new_shift(&mut self, start: u64, end: u64) -> Shift {
        let at = VIRTUAL_BASE + self.next_virtual * VIRTUAL_STRIDE;
        self.next_virtual += 1 + (end - start) / VIRTUAL_STRIDE;
        let s = Shift { start, end, delta: at.wrapping_sub(start), bound: None };
        self.shifts.push(s.clone());
        s
    }

    /// Retires `start..end`: its shifts end, and later frames there open new ones.
    fn retire(&mut self, start: u64, end: u64) {
        self.shifts.retain(|s| s.end <= start || end <= s.start);
        cut(&mut self.retired, start, end);
        self.retired.push((start, end));
    }

    fn is_closing(&self, key: &ModuleKey) -> bool {
        self.closing.iter().any(|c| module_key(&c.module) == *key)
    }

    /// The frame as recorded: shifted when it lies in a shift, or in a retired range no
    /// current module covers (which opens a shift).
    pub(crate) fn translate(&mut self, addr: u64) -> u64 {
        if let Some(s) = self.shift_of(addr) {
            return addr.wrapping_add(s.delta);
        }
        if self.covered(addr) {
            return addr;
        }
        match self.retired.iter().find(|&&(a, b)| a <= addr && addr < b).copied() {
            Some((a, b)) => addr.wrapping_add(self.new_shift(a, b).delta),
            None => addr,
        }
    }
}

/// Takes `lo..hi` out of `ranges`, keeping what lies on either side of it: a library mapped
/// over part of a retired range leaves the rest retired. (Dropping the whole range made
/// the rest plain addresses, which the unloaded library's record still claimed, so the
/// next library mapped there lent it its frames.)
fn cut(ranges: &mut Vec<(u64, u64)>, lo: u64, hi: u64) {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(a, b) in ranges.iter() {
        if b <= lo || hi <= a {
            out.push((a, b));
            continue;
        }
        if a < lo {
            out.push((a, lo));
        }
        if hi < b {
            out.push((hi, b));
        }
    }
    *ranges = out;
}

/// A piece `lo..hi` of a module, recorded at `+ delta`: what the recorder writes (unless
/// written already).
#[derive(Debug)]
pub(crate) struct Piece {
    pub(crate) module: Module,
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) delta: u64,
}

impl Piece {
    fn of(m: &Module, lo: u64, hi: u64, delta: u64) -> Piece {
        Piece { module: m.clone(), lo, hi, delta }
    }
}

impl Generations {
    /// Modules of the recorded process found mapped: those not settled yet are settled.
    pub(crate) fn add_modules(&mut self, modules: Vec<Module>) -> Vec<Piece> {
        let mut out = Vec::new();
        for m in modules {
            // An object whose `dlclose` is under way is settled when the call ends.
            if !self.is_closing(&module_key(&m)) {
                self.admit(m, &mut out);
            }
        }
        out
    }

    /// The recorded process's full module list at this point of its events: modules gone
    /// since the last list are retired, new ones settled. Objects of a `dlclose` under way only take the
    /// frames recorded in their range so far.
    pub(crate) fn snapshot(&mut self, modules: Vec<Module>) -> Vec<Piece> {
        let mut out = Vec::new();
        let listed: Vec<_> = modules.iter().map(module_key).collect();
        let (closing, modules): (Vec<_>, Vec<_>) =
            modules.into_iter().partition(|m| self.is_closing(&module_key(m)));
        for m in &closing {
            self.seal(m, &mut out);
        }
        let g = self;
        let now: Vec<_> = modules.iter().map(module_key).collect();
        let gone: Vec<_> = g.current.iter().filter(|k| !now.contains(k)).cloned().collect();
        for (_, _, start, end) in gone {
            g.retire(start, end);
        }
        g.current = now;
        g.listed = listed;
        for m in modules {
            g.admit(m, &mut out);
        }
        out
    }

    /// `m` is mapped at this point of the events: the frames recorded in its range that no
    /// module claimed are its own. They are written as its, and their shifts end (frames
    /// recorded later open new ones).
    fn seal(&mut self, m: &Module, out: &mut Vec<Piece>) {
        let (hit, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.shifts)
            .into_iter()
            .partition(|s| s.bound.is_none() && s.start < m.end && m.start < s.end);
        self.shifts = rest;
        for s in hit {
            out.push(Piece::of(m, s.start.max(m.start), s.end.min(m.end), s.delta));
        }
    }

    /// A `dlclose` starts (call `id`; the loader had loaded `adds` objects), which may unmap
    /// `modules` (see [`Generations`]): they are mapped now, so what was recorded in their
    /// ranges is theirs (a module no list named yet is settled here); then they are retired until [`Generations::closed`] says what
    /// became of them.
    pub(crate) fn closing(&mut self, id: u64, adds: u64, modules: Vec<Module>) -> Vec<Piece> {
        let mut out = Vec::new();
        for module in modules {
            self.seal(&module, &mut out);
            let key = module_key(&module);
            // Mapped now, and perhaps never listed (loaded and closed between two lists):
            // the frames recorded in its range as they were are its own too.
            if !self.current.contains(&key) && !self.is_closing(&key) {
                self.admit(module.clone(), &mut out);
            }
            let g = &mut *self;
            if g.is_closing(&key) {
                // Another `dlclose` that may unmap it is under way: it is retired already.
                g.closing.push(Closing { id, adds, module, own: Vec::new() });
                continue;
            }
            g.current.retain(|k| *k != key);
            let (own, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut g.shifts)
                .into_iter()
                .partition(|s| s.start < module.end && module.start < s.end);
            g.shifts = rest;
            g.retire(module.start, module.end);
            g.closing.push(Closing { id, adds, module, own });
        }
        out
    }

    /// The `dlclose` call `id` returned (the loader had loaded `adds` objects by then), and
    /// the latest list was read after it. Each of its objects still listed is current
    /// again once no other call may unmap it. One gone ends every call's claim on it, takes
    /// the frames recorded in its range since that no module claimed when no object was
    /// loaded meanwhile (else they may be a library's mapped there since, whose list comes
    /// later), and the shifts bound to it end.
    pub(crate) fn closed(&mut self, id: u64, adds: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        let g = &mut *self;
        let (ended, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut g.closing).into_iter().partition(|c| c.id == id);
        g.closing = rest;
        for Closing { adds: adds_then, module: m, own, .. } in ended {
            let key = module_key(&m);
            let g = &mut *self;
            if g.listed.contains(&key) {
                if let Some(other) = g.closing.iter_mut().find(|c| module_key(&c.module) == key) {
                    other.own.extend(own);
                    continue;
                }
                // Still mapped. Frames recorded meanwhile opened a shift, which it takes;
                // else its frames go on through the shifts they went through before.
                cut(&mut g.retired, m.start, m.end);
                g.current.push(key);
                if !g.shifts.iter().any(|s| s.start < m.end && m.start < s.end) {
                    g.shifts.extend(own);
                }
                g.admit(m, &mut out);
                continue;
            }
            g.closing.retain(|c| module_key(&c.module) != key);
            let mut orphans = Vec::new();
            g.shifts.retain(|s| {
                let overlaps = s.start < m.end && m.start < s.end;
                match &s.bound {
                    _ if !overlaps => true,
                    Some(k) => *k != key,
                    None if adds == adds_then => {
                        orphans.push(s.clone());
                        false
                    }
                    None => true,
                }
            });
            for s in orphans {
                out.push(Piece::of(&m, s.start.max(m.start), s.end.min(m.end), s.delta));
            }
        }
        out
    }

    /// Settles a module of the recorded process (written unless written already), shifted when it is
    /// mapped where a retired one was.
    fn admit(&mut self, m: Module, out: &mut Vec<Piece>) {
        let g = self;
        // The module's range, cut where retired ranges and open shifts begin and end: a
        // piece inside a shift (opened for frames seen before this list came) or inside a
        // retired range is written shifted, the rest as it is, so every frame recorded
        // so far, shifted or not, lies in a record of this module.
        let mut cuts = vec![m.start, m.end];
        let bounds = g.retired.iter().copied().chain(g.shifts.iter().map(|s| (s.start, s.end)));
        for (x, y) in bounds {
            cuts.extend([x, y].into_iter().filter(|&c| m.start < c && c < m.end));
        }
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces: Vec<(u64, u64, u64)> = Vec::new();
        for w in cuts.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let delta = match g.shifts.iter_mut().find(|s| s.start <= lo && lo < s.end) {
                Some(s) => {
                    s.bound = Some(module_key(&m));
                    s.delta
                }
                None if g.retired.iter().any(|&(x, y)| x <= lo && lo < y) => {
                    let delta = g.new_shift(lo, hi).delta;
                    if let Some(s) = g.shifts.last_mut() {
                        s.bound = Some(module_key(&m));
                    }
                    delta
                }
                None => 0,
            };
            match pieces.last_mut() {
                Some(last) if last.1 == lo && last.2 == delta => last.1 = hi,
                _ => pieces.push((lo, hi, delta)),
            }
        }
        // What this module covers is mapped again: no longer retired (its shifts stay for
        // as long as it is mapped).
        cut(&mut g.retired, m.start, m.end);
        for (lo, hi, delta) in pieces {
            out.push(Piece::of(&m, lo, hi, delta));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str, build_id: u8, start: u64) -> Module {
        Module {
            path: path.into(),
            base: start,
            start,
            end: start + 0x4000,
            build_id: vec![build_id; 20],
            file_size: 0,
            file_mtime_ns: 0,
        }
    }

    /// The pieces that cover `addr` as recorded (`translated`), as (path, delta), each once
    /// (the recorder writes a piece once).
    fn covering(pieces: &[Piece], translated: u64) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = pieces
            .iter()
            .filter(|p| {
                let (lo, hi) = (p.lo.wrapping_add(p.delta), p.hi.wrapping_add(p.delta));
                lo <= translated && translated < hi
            })
            .map(|p| (p.module.path.clone(), p.delta))
            .collect();
        out.dedup();
        out
    }

    /// A library loaded, sampled and closed before any list named it (its `dlclose`'s
    /// closing record is the first to name it): its frames, recorded as they were, are
    /// written as its own when the call starts. (They were left outside every module.)
    #[test]
    fn a_library_closed_before_any_list_named_it_keeps_its_frames() {
        let mut g = Generations::default();
        let exe = module("/bin/prog", 1, 0x1000_0000);
        assert!(g.snapshot(vec![exe.clone()]).iter().all(|p| p.module.path == "/bin/prog"));
        let lib = module("./libq.so", 2, 0x7f00_0000_0000);
        let frame = lib.start + 0x123;
        let recorded = g.translate(frame);
        let mut pieces = g.closing(1, 5, vec![lib.clone()]);
        // Another thread's list, written once the library was unmapped, comes before the
        // call's end.
        pieces.extend(g.snapshot(vec![exe.clone()]));
        pieces.extend(g.closed(1, 5));
        assert_eq!(covering(&pieces, recorded), vec![("./libq.so".to_string(), 0)]);
    }

    /// One object named two ways (the loader's relative name, the canonical path of
    /// `/proc/PID/maps`, where the collector looks up frames no list names yet) is one
    /// module: its `dlclose` ends what its frames opened, so the next library mapped there
    /// keeps its own frames. (Read from the maps during the call, it was a second module
    /// whose shift outlived the call and took the next library's frames.)
    #[test]
    fn an_object_named_two_ways_is_one_module() {
        let mut g = Generations::default();
        let mut pieces = Vec::new();
        let c = module("./libc0.so", 1, 0x7f00_0000_0000);
        pieces.extend(g.snapshot(vec![c.clone()]));
        pieces.extend(g.closing(1, 5, vec![c]));
        pieces.extend(g.snapshot(vec![]));
        pieces.extend(g.closed(1, 5));
        let a = module("./liba.so", 2, 0x7f00_0000_0000);
        pieces.extend(g.snapshot(vec![a.clone()]));
        pieces.extend(g.closing(2, 6, vec![a.clone()]));
        g.translate(a.start + 0x100);
        pieces.extend(g.add_modules(vec![Module { path: "/work/liba.so".into(), ..a }]));
        pieces.extend(g.snapshot(vec![]));
        pieces.extend(g.closed(2, 6));
        let b = module("./libb.so", 3, 0x7f00_0000_0000);
        let recorded = g.translate(b.start + 0x200);
        pieces.extend(g.snapshot(vec![b]));
        assert_eq!(covering(&pieces, recorded).len(), 1, "{:?}", covering(&pieces, recorded));
        assert_eq!(covering(&pieces, recorded)[0].0, "./libb.so");
    }

    /// A library mapped over the tail of an unloaded one's range leaves the rest of that
    /// range retired: a later library's frames there are its own, not the unloaded one's.
    #[test]
    fn a_library_over_part_of_a_retired_range_leaves_the_rest_retired() {
        let mut g = Generations::default();
        let mut pieces = Vec::new();
        let old = module("./lib0.so", 1, 0x7f00_0000_8000);
        pieces.extend(g.snapshot(vec![old.clone()]));
        pieces.extend(g.closing(1, 5, vec![old]));
        pieces.extend(g.snapshot(vec![]));
        pieces.extend(g.closed(1, 5));
        // Mapped from the old one's last page on.
        let over = module("./lib0.so", 1, 0x7f00_0000_b000);
        pieces.extend(g.snapshot(vec![over.clone()]));
        pieces.extend(g.closing(2, 6, vec![over]));
        pieces.extend(g.snapshot(vec![]));
        pieces.extend(g.closed(2, 6));
        // Mapped where the old one began.
        let next = module("./lib1.so", 2, 0x7f00_0000_7000);
        let recorded = g.translate(next.start + 0x21fe);
        pieces.extend(g.snapshot(vec![next]));
        assert_eq!(covering(&pieces, recorded).len(), 1, "{:?}", covering(&pieces, recorded));
        assert_eq!(covering(&pieces, recorded)[0].0, "./lib1.so");
    }
}
