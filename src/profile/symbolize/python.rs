//! CPython's frames named: the words a sampled stack carries for them
//! ([`crate::engine::python`] §2) turned into a function, a file and a line, by reading
//! the code object in the process's memory while it runs.
//!
//! # 1. What is read
//! For a word's code object, with the layout of the process's CPython version (found from
//! its modules' names: `libpython3.12.so.1.0`, `python3.11`): `co_qualname`, `co_filename`
//! (compact strings: ASCII, Latin-1, UCS-2 or UCS-4), `co_firstlineno` and `co_linetable`,
//! whose entries give the line of the word's instruction (CPython's `PyCode_Addr2Line`:
//! 3.11's location table, the same in 3.12 and 3.13). Everything is read with
//! `process_vm_readv`, which fails cleanly on an address no longer mapped: a code object
//! freed since the sample is not a fault, only a frame named by its address. Everything
//! read is the program's and hostile: lengths are bounded, strings decoded without trust,
//! and a line table that runs out names no line.
//!
//! # 2. When
//! Once per word, when a stack that holds it is first seen (the collector's fold, or the
//! in-process recorder's): the program is running, and its code objects are there. A code
//! object freed and its address reused before the collector read it would name the new
//! one; functions' code objects live as long as their module, so this is left to code
//! made by `exec` and `eval`.

use crate::engine::python::{layout, Layout, CODE_MASK, INDEX_SHIFT, TAG};
use crate::profile::Symbol;

/// The longest name or file name read (characters).
const MAX_CHARS: usize = 4096;
/// The longest line table read (bytes): a code object of this many entries is a module of
/// tens of thousands of lines.
const MAX_TABLE: usize = 1 << 20;

/// Reads code objects of one process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reader {
    pid: i32,
    layout: &'static Layout,
}

/// The minor version of a CPython module named at `path` (`libpython3.12.so.1.0`,
/// `python3.13t`) and what follows its digits (`.so.1.0`, `t`, `` ``), if it is one.
/// One reading of the names for the reader and for `record`'s notes.
pub(crate) fn cpython_module(path: &str) -> Option<(u8, &str)> {
    // Asked of every frame's module by the site rule: no allocation, one backward scan.
    let base = path.rsplit_once('/').map_or(path, |(_, b)| b);
    let rest = base.strip_prefix("libpython3.").or_else(|| base.strip_prefix("python3."))?;
    let n = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, after) = rest.split_at(n);
    if digits.is_empty() || digits.len() > 2 {
        return None;
    }
    Some((digits.bytes().fold(0u8, |v, d| v * 10 + (d - b'0')), after))
}

/// The minor version of the CPython whose module is at `path` (`libpython3.12.so.1.0`,
/// `python3.11`), if it is one whose frames memprof reads the default build of.
pub(crate) fn minor_of_module(path: &str) -> Option<u8> {
    let (minor, after) = cpython_module(path)?;
    // `python3.12`, `python3.12d`, `libpython3.12.so…`; not `python3.12-config`, nor a
    // free-threaded `python3.13t`.
    let ok = after.is_empty() || after.starts_with(".so") || after == "d" || after == "m";
    ok.then_some(minor)
}

impl Reader {
    /// A reader for process `pid`, whose modules' paths are `modules`, when one of them is
    /// a CPython memprof knows.
    pub(crate) fn for_modules<'a>(
        pid: u32,
        modules: impl IntoIterator<Item = &'a str>,
    ) -> Option<Reader> {
        let minor = modules.into_iter().find_map(minor_of_module)?;
        Some(Reader { pid: i32::try_from(pid).ok()?, layout: layout(minor)? })
    }

    /// The frame a Python frame's word names: its function (`co_qualname`), file and line;
    /// `None` when `word` is not one or its code object cannot be read.
    pub(crate) fn name(&self, word: u64) -> Option<Symbol> {
        if word & TAG as u64 == 0 {
            return None;
        }
        let code = (word & CODE_MASK as u64) as usize;
        let index = ((word & !(TAG as u64)) >> INDEX_SHIFT) as usize;
        let l = self.layout;
        let head = self.read(code, l.co_code.max(l.co_linetable + 8))?;
        let word_at = |off: usize| -> Option<usize> {
            Some(u64::from_le_bytes(head.get(off..off + 8)?.try_into().ok()?) as usize)
        };
        let first_line =
            i32::from_le_bytes(head.get(l.co_firstlineno..l.co_firstlineno + 4)?.try_into().ok()?);
        let function =
            self.string(word_at(l.co_qualname)?).or_else(|| self.string(word_at(l.co_name)?))?;
        let file = self.string(word_at(l.co_filename)?);
        let table = self.bytes(word_at(l.co_linetable)?);
        let line = table.and_then(|t| line_of(&t, first_line, index * 2));
        Some(Symbol { function, file, line })
    }

    /// `len` bytes at `addr` of the process, all or nothing.
    fn read(&self, addr: usize, len: usize) -> Option<Vec<u8>> {
        if addr == 0 || len == 0 {
            return None;
        }
        let mut buf = vec![0u8; len];
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: len };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
        // SAFETY: `local` is `buf`, writable for `len` bytes; the remote range is only read
        // by the kernel, which fails on what the process does not map.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        (n == len as isize).then_some(buf)
    }

    /// A `str` object's text (compact strings only, as code objects' names are).
    fn string(&self, obj: usize) -> Option<String> {
        let l = self.layout;
        let head = self.read(obj, l.compact_size)?;
        let length = i64::from_le_bytes(head.get(16..24)?.try_into().ok()?);
        let state = u32::from_le_bytes(head.get(32..36)?.try_into().ok()?);
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
        if compact == 0 || !(0..=MAX_CHARS as i64).contains(&length) {
            return None;
        }
        let n = length as usize;
        let start = if ascii == 1 { l.ascii_size } else { l.compact_size };
        let width = match kind {
            1 | 2 | 4 => kind as usize,
            _ => return None,
        };
        if n == 0 {
            return Some(String::new());
        }
        let data = self.read(obj + start, n * width)?;
        let chars = data.chunks_exact(width).map(|c| match width {
            1 => u32::from(c[0]),
            2 => u32::from(u16::from_le_bytes([c[0], c[1]])),
            _ => u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
        });
        Some(chars.map(|c| char::from_u32(c).unwrap_or('\u{fffd}')).collect())
    }

    /// A `bytes` object's contents.
    fn bytes(&self, obj: usize) -> Option<Vec<u8>> {
        let head = self.read(obj, 32)?;
        let size = i64::from_le_bytes(head.get(16..24)?.try_into().ok()?);
        if !(1..=MAX_TABLE as i64).contains(&size) {
            return None;
        }
        self.read(obj + 32, size as usize)
    }
}

/// The line of the instruction at byte offset `addr` of a code object whose first line is
/// `first_line` and whose location table is `table` (CPython 3.11 to 3.13's format:
/// `Objects/locations.md`), as `PyCode_Addr2Line` computes it; `None` for an instruction
/// without a line or past the table's end.
pub(crate) fn line_of(table: &[u8], first_line: i32, addr: usize) -> Option<u32> {
    let mut line = i64::from(first_line);
    let (mut end, mut i) = (0usize, 0usize);
    while i < table.len() {
        let first = table[i];
        let code = (first >> 3) & 15;
        let delta = match code {
            13 | 14 => signed_varint(table, i + 1)?,
            11 => 1,
            12 => 2,
            _ => 0,
        };
        line += delta;
        let start = end;
        end += (usize::from(first & 7) + 1) * 2;
        if (start..end).contains(&addr) {
            return (code != 15).then(|| u32::try_from(line).ok()).flatten();
        }
        // The entry's other bytes: up to the next byte with its top bit set.
        i += 1;
        while i < table.len() && table[i] & 0x80 == 0 {
            i += 1;
        }
    }
    None
}

/// A varint of 6-bit chunks (bit 6: another follows) at `at`.
fn varint(table: &[u8], mut at: usize) -> Option<u64> {
    let mut b = *table.get(at)?;
    let mut val = u64::from(b & 63);
    let mut shift = 0;
    while b & 64 != 0 {
        at += 1;
        b = *table.get(at)?;
        shift += 6;
        if shift > 60 {
            return None;
        }
        val |= u64::from(b & 63) << shift;
    }
    Some(val)
}

fn signed_varint(table: &[u8], at: usize) -> Option<i64> {
    let u = varint(table, at)?;
    let v = (u >> 1) as i64;
    Some(if u & 1 != 0 { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpython_modules_by_name() {
        assert_eq!(
            minor_of_module("/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0"),
            Some(12)
        );
        assert_eq!(minor_of_module("/usr/bin/python3.11"), Some(11));
        assert_eq!(minor_of_module("/usr/lib/libpython3.13d.so"), None);
        assert_eq!(minor_of_module("/usr/bin/python3.11-config"), None);
        assert_eq!(minor_of_module("/usr/lib/x86_64-linux-gnu/libc.so.6"), None);
        assert_eq!(minor_of_module("python3"), None);
    }

    #[test]
    fn line_table_entries() {
        // First line 10. Entries: a short form (code 0, 2 units, line 10), a one-line form
        // +1 (code 11, 1 unit, line 11, two column bytes), a no-column form with line
        // delta -3 (code 13, 1 unit: svarint 7 = -3, line 8), a no-location entry (code 15,
        // 1 unit), a long form +40 (code 14, 2 units: svarint 80 = 64|16 then 1, then end
        // line, columns).
        let table = [
            0x80 | 1,
            0x05,
            0x80 | (11 << 3),
            0x01,
            0x02,
            0x80 | (13 << 3),
            0x07,
            0x80 | (15 << 3),
            0x80 | (14 << 3) | 1,
            0x40 | 16,
            0x01,
            0x00,
            0x01,
            0x01,
        ];
        assert_eq!(line_of(&table, 10, 0), Some(10));
        assert_eq!(line_of(&table, 10, 2), Some(10));
        assert_eq!(line_of(&table, 10, 4), Some(11));
        assert_eq!(line_of(&table, 10, 6), Some(8));
        assert_eq!(line_of(&table, 10, 8), None, "no location");
        assert_eq!(line_of(&table, 10, 10), Some(48));
        assert_eq!(line_of(&table, 10, 12), Some(48));
        assert_eq!(line_of(&table, 10, 14), None, "past the end");
        // Damaged: a varint that never ends.
        assert_eq!(line_of(&[0x80 | (13 << 3), 0x40], 1, 0), None);
    }
}
