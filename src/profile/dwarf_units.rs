//! An object's DWARF read a compilation unit at a time: a profile names a few hundred
//! addresses of a C library whose DWARF has thousands of units.
//!
//! # 1. Why not one context for the object
//! `addr2line::Context` parses every unit's abbreviations and line program header when it
//! is made: for a C library's separate debug file, over twenty megabytes of tables and
//! tens of milliseconds, for a profile whose stacks pass through a handful of its
//! functions. So the units that cover an address are found first, from `.debug_aranges`
//! (and, for units it leaves out, from each unit's own root entry, read and let go), and
//! a context is made for each unit a lookup needs, over that unit's bytes alone
//! ([`Units::context_for`]). The other sections are shared, not copied.
//!
//! A unit read alone must not refer to another unit: a reference by section offset
//! (`DW_FORM_ref_addr`, as `dwz` and LTO write them, or into a supplementary file) would be
//! read against the unit's own bytes. A unit whose abbreviations allow one is looked up in
//! one context over the whole object instead (made once, as before), and so is every
//! address of an object whose units cannot be listed.

use std::cell::OnceCell;
use std::sync::Arc;

use addr2line::gimli;
use gimli::Reader as _;

/// The DWARF reader: shared bytes, so a context owns what it reads.
pub(crate) type Reader = gimli_dwarf::EndianArcSlice<gimli::RunTimeEndian>;

/// The sections a lookup reads (locations, macros, type units and name indexes are not).
pub(crate) const NEEDED: [gimli::SectionId; 10] = [
    gimli::SectionId::DebugAbbrev,
    gimli::SectionId::DebugAddr,
    gimli::SectionId::DebugAranges,
    gimli::SectionId::DebugInfo,
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
    gimli::SectionId::DebugRanges,
    gimli::SectionId::DebugRngLists,
];

/// An object's DWARF sections, and the contexts made from them so far (§1).
pub(crate) struct Units {
    sections: Vec<(gimli::SectionId, Reader)>,
    endian: gimli::RunTimeEndian,
    index: OnceCell<Option<Index>>,
    whole: OnceCell<Option<addr2line::Context<Reader>>>,
}

/// The units of `.debug_info`, and the address ranges each covers.
struct Index {
    /// (start, end, unit), by start.
    ranges: Vec<(u64, u64, usize)>,
    /// The largest end among `ranges[..=i]`.
    reach: Vec<u64>,
    units: Vec<Unit>,
}

/// One unit: where its bytes are, and its context once a lookup needed it (`None` inside:
/// it refers to other units, and the whole object's context answers for it).
struct Unit {
    offset: usize,
    len: usize,
    ctx: OnceCell<Option<addr2line::Context<Reader>>>,
}

impl Units {
    /// The sections `sections` (by id; a missing one is empty) of an object of `endian`.
    pub(crate) fn new(
        sections: Vec<(gimli::SectionId, Reader)>,
        endian: gimli::RunTimeEndian,
    ) -> Units {
        Units { sections, endian, index: OnceCell::new(), whole: OnceCell::new() }
    }

    fn section(&self, id: gimli::SectionId) -> Reader {
        match self.sections.iter().find(|(s, _)| *s == id) {
            Some((_, r)) => r.clone(),
            None => Reader::new(Arc::from(&[][..]), self.endian),
        }
    }

    /// The object's DWARF, with `info` for its `.debug_info` when given (one unit's bytes,
    /// and no address ranges of the others).
    fn dwarf(&self, info: Option<Reader>) -> gimli::Dwarf<Reader> {
        let empty = Reader::new(Arc::from(&[][..]), self.endian);
        let load = |id: gimli::SectionId| -> Result<Reader, std::convert::Infallible> {
            Ok(match (id, &info) {
                (gimli::SectionId::DebugInfo, Some(unit)) => unit.clone(),
                (gimli::SectionId::DebugAranges, Some(_)) => empty.clone(),
                _ => self.section(id),
            })
        };
        match gimli::Dwarf::load(load) {
            Ok(d) => d,
            Err(never) => match never {},
        }
    }

    /// The context that answers for `probe` (§1): its unit's, or the whole object's.
    /// `None` when no unit covers it (or the DWARF cannot be read).
    pub(crate) fn context_for(&self, probe: u64) -> Option<&addr2line::Context<Reader>> {
        let Some(index) = self.index.get_or_init(|| self.read_index()) else {
            return self.whole();
        };
        let unit = &index.units[index.unit_of(probe)?];
        match unit.ctx.get_or_init(|| self.unit_context(unit)) {
            Some(ctx) => Some(ctx),
            None => self.whole(),
        }
    }

    fn whole(&self) -> Option<&addr2line::Context<Reader>> {
        self.whole.get_or_init(|| addr2line::Context::from_dwarf(self.dwarf(None)).ok()).as_ref()
    }

    /// The units and their ranges: from `.debug_aranges`, and from the root entry of each
    /// unit it leaves out. `None` when the units cannot be listed.
    fn read_index(&self) -> Option<Index> {
        let dwarf = self.dwarf(None);
        let mut units = Vec::new();
        let mut headers = dwarf.units();
        while let Some(h) = headers.next().ok()? {
            if matches!(h.type_(), gimli::UnitType::Type { .. } | gimli::UnitType::SplitType { .. })
            {
                continue;
            }
            let (offset, len) = (h.offset().0, h.length_including_self());
            units.push(Unit { offset, len, ctx: OnceCell::new() });
        }
        let unit_at = |offset: usize| units.binary_search_by_key(&offset, |u| u.offset).ok();
        let mut ranges = Vec::new();
        let mut covered = vec![false; units.len()];
        let mut aranges = dwarf.debug_aranges.headers();
        while let Ok(Some(h)) = aranges.next() {
            let Some(i) = unit_at(h.debug_info_offset().0) else {
                continue;
            };
            let mut entries = h.entries();
            while let Ok(Some(e)) = entries.next() {
                let r = e.range();
                if r.begin < r.end {
                    ranges.push((r.begin, r.end, i));
                    covered[i] = true;
                }
            }
        }
        for (i, u) in units.iter().enumerate().filter(|(i, _)| !covered[*i]) {
            let Ok(header) = dwarf.debug_info.header_from_offset(gimli::DebugInfoOffset(u.offset))
            else {
                continue;
            };
            // Read for its root entry's ranges, then let go.
            let Ok(unit) = dwarf.unit(header) else {
                continue;
            };
            if let Ok(mut iter) = dwarf.unit_ranges(&unit) {
                while let Ok(Some(r)) = iter.next() {
                    if r.begin < r.end {
                        ranges.push((r.begin, r.end, i));
                    }
                }
            }
        }
        ranges.sort_unstable();
        let reach = ranges
            .iter()
            .scan(0u64, |most, r| {
                *most = (*most).max(r.1);
                Some(*most)
            })
            .collect();
        Some(Index { ranges, reach, units })
    }

    /// A context over `unit`'s bytes alone, or `None` when the unit may refer to another
    /// one (§1) or cannot be read alone.
    fn unit_context(&self, unit: &Unit) -> Option<addr2line::Context<Reader>> {
        let mut info = self.section(gimli::SectionId::DebugInfo);
        info.skip(unit.offset).ok()?;
        info.truncate(unit.len).ok()?;
        let dwarf = self.dwarf(Some(info));
        let header = dwarf.units().next().ok()??;
        let abbrev = self.section(gimli::SectionId::DebugAbbrev);
        if !stands_alone(abbrev, header.debug_abbrev_offset().0)? {
            return None;
        }
        addr2line::Context::from_dwarf(dwarf).ok()
    }
}

impl Index {
    /// The unit whose ranges hold `probe` (the one that starts nearest below it).
    fn unit_of(&self, probe: u64) -> Option<usize> {
        let above = self.ranges.partition_point(|r| r.0 <= probe);
        (0..above)
            .rev()
            .take_while(|&i| self.reach[i] > probe)
            .find(|&i| probe < self.ranges[i].1)
            .map(|i| self.ranges[i].2)
    }
}

/// Whether the abbreviations at `offset` of `.debug_abbrev` (`abbrev`) allow no reference
/// out of their unit (§1): no `DW_FORM_ref_addr`, no reference into a supplementary file
/// or a type unit, no form named only in the entry (`DW_FORM_indirect`). `None` when
/// they cannot be read.
fn stands_alone(mut abbrev: Reader, offset: usize) -> Option<bool> {
    use gimli::constants as c;
    abbrev.skip(offset).ok()?;
    loop {
        if abbrev.read_uleb128().ok()? == 0 {
            return Some(true);
        }
        abbrev.read_uleb128().ok()?; // the tag
        abbrev.read_u8().ok()?; // children
        loop {
            let name = abbrev.read_uleb128().ok()?;
            let form = abbrev.read_uleb128().ok()?;
            if name == 0 && form == 0 {
                break;
            }
            let form = c::DwForm(u16::try_from(form).ok()?);
            if form == c::DW_FORM_implicit_const {
                abbrev.read_sleb128().ok()?;
            }
            if matches!(
                form,
                c::DW_FORM_ref_addr
                    | c::DW_FORM_GNU_ref_alt
                    | c::DW_FORM_ref_sup4
                    | c::DW_FORM_ref_sup8
                    | c::DW_FORM_ref_sig8
                    | c::DW_FORM_indirect
            ) {
                return Some(false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::object_file::ObjectFile;

    /// A frame as addr2line gives it: the raw function name, the file and the line.
    type Frame = (Option<String>, Option<String>, Option<u32>);

    fn frames(ctx: Option<&addr2line::Context<Reader>>, probe: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        let Some(Ok(mut iter)) = ctx.map(|c| c.find_frames(probe).skip_all_loads()) else {
            return out;
        };
        while let Ok(Some(f)) = iter.next() {
            let name = f.function.as_ref().and_then(|n| n.raw_name().ok()).map(|n| n.into_owned());
            let file = f.location.as_ref().and_then(|l| l.file.map(str::to_owned));
            out.push((name, file, f.location.as_ref().and_then(|l| l.line)));
        }
        out
    }

    /// Every address of `object` among `probes` has the same frames (inlined ones, files,
    /// lines) looked up in its unit alone as in the whole object's context. Returns how
    /// many had frames, and how many of those were answered by a unit alone.
    fn same_frames(object: &ObjectFile, probes: &[u64]) -> (usize, usize) {
        let units = object.units();
        let (mut named, mut alone) = (0, 0);
        for &probe in probes {
            let whole = frames(units.whole(), probe);
            let own = frames(units.context_for(probe), probe);
            assert_eq!(own, whole, "at {probe:#x}");
            if !whole.is_empty() {
                named += 1;
                let by_unit = units
                    .index
                    .get()
                    .and_then(|i| i.as_ref())
                    .and_then(|i| i.units[i.unit_of(probe)?].ctx.get().map(Option::is_some));
                alone += usize::from(by_unit == Some(true));
            }
        }
        (named, alone)
    }

    /// The middle of every function of the object's symbol table, at most `most` of them.
    fn probes(object: &ObjectFile, most: usize) -> Vec<u64> {
        let all = object.function_addresses();
        let step = (all.len() / most).max(1);
        all.into_iter().step_by(step).collect()
    }

    /// This test program (Rust, inlined generics, many units): a unit alone answers as the
    /// whole object does. (Most of its units refer to others, by `DW_FORM_ref_addr`: the
    /// whole object's context answers for those.)
    #[test]
    fn a_unit_alone_answers_as_the_whole_object() {
        let exe = std::env::current_exe().unwrap();
        let object = ObjectFile::open(&exe).unwrap();
        let (named, alone) = same_frames(&object, &probes(&object, 3000));
        assert!(named > 500, "{named} addresses named");
        assert!(alone > 50, "{alone} of {named} by their unit alone");
    }

    /// The C library's separate debug file, when installed: the same, and most addresses
    /// are answered by their unit alone.
    #[test]
    fn the_c_library_a_unit_at_a_time() {
        let libc = std::path::Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let Some(debug) =
            crate::profile::symbolize::debug_candidates(libc).into_iter().find(|p| p.is_file())
        else {
            return;
        };
        let object = ObjectFile::open(&debug).unwrap();
        let (named, alone) = same_frames(&object, &probes(&object, 2000));
        assert!(named > 200, "{named} addresses named");
        assert!(alone * 2 > named, "{alone} of {named} by their unit alone");
    }
}
