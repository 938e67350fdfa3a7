//! A process's resident memory by kind of mapping, from its `/proc/PID/smaps`: what explains
//! the gap between its resident size and its live heap ([`crate::profile::ResidentSplit`]).
//!
//! Each mapping's `Rss` goes to one kind, by its name, its permissions and its neighbour:
//! - `[heap]` (the `brk` area) and the private anonymous mappings are the **allocator's**
//!   (glibc's main arena, its other arenas, its `mmap`ed large blocks; jemalloc's and
//!   mimalloc's extents alike), unless they are one of the next kinds;
//! - `[stack]`, and a private anonymous mapping right above a small inaccessible one (the
//!   guard page `pthread_create` puts below each thread's stack) are **stacks**;
//! - a private anonymous mapping right after a mapped file's last segment is that object's
//!   `.bss`: with the **files** (code, data, and what the program mapped from files);
//! - the event ring of `memprof record` (a file of the run's ring directory) is
//!   **memprof's own**, as is what its library mapped for its live table and buffers
//!   (counted by the library, taken out of the allocator's kind by the caller);
//! - the rest (shared memory, the vDSO, other special mappings) is **other**.
//!
//! The kernel walks every mapping's page tables to write the file, so its cost grows with
//! the resident size: [`Memory`] reads it at a pace bounded by its cost
//! ([`SPLIT_COST_SHARE`]), and `/proc/PID/statm` (one number, a
//! microsecond) every [`RESIDENT_EVERY_MS`]. `memprof record`'s collector
//! reads the processes it records through it, and an in-process session's drain thread
//! reads its own process.

use crate::sys::malloc_maps::MallocMaps;
use crate::sys::monotonic::monotonic_ns;
use crate::sys::own_file::OwnFile;
use std::fs::File;

/// How often `memprof record`'s collector reads each recorded process's resident memory
/// ([`Profile::resident`](crate::profile::Profile::resident)) while it changes: a `pread` of `/proc/PID/statm`, a few microseconds, so a
/// hundredth of a percent of a core. A reading that finds the size unchanged doubles the
/// time to the next, up to [`RESIDENT_IDLE_MS`]; one that finds it changed brings it back
/// to this.
pub const RESIDENT_EVERY_MS: u64 = 10;

/// The longest time between two readings of a process's resident size that stays the
/// same ([`RESIDENT_EVERY_MS`]): a program that sleeps costs the collector a few wake-ups
/// a second, not a hundred.
pub const RESIDENT_IDLE_MS: u64 = 160;

/// The longest time between two regular readings of `/proc/PID/smaps` that find the same
/// resident memory by kind: each such reading doubles the time to the next, from
/// [`SPLIT_EVERY_MS`] up to this.
pub const SPLIT_IDLE_MS: u64 = 1600;

/// The most of one core `memprof record`'s collector spends reading `/proc/PID/smaps` for
/// [`Profile::splits`](crate::profile::Profile::splits), as a fraction: after a reading that took `d`, the next comes no
/// sooner than `d / SPLIT_COST_SHARE` later (and no sooner than [`SPLIT_EVERY_MS`]). The
/// kernel walks the page tables of every mapping for it, so a large process costs more.
pub const SPLIT_COST_SHARE: f64 = 0.002;

/// The most of one core spent on readings of `/proc/PID/smaps` brought forward by a new
/// peak of the heap ([`SPLIT_COST_SHARE`]'s rule with this share, and no floor): a split
/// near the peak is worth more than a regular one.
pub const SPLIT_PEAK_COST_SHARE: f64 = 0.01;

/// The least time between two regular readings of `/proc/PID/smaps`
/// ([`Profile::splits`](crate::profile::Profile::splits)).
pub const SPLIT_EVERY_MS: u64 = 100;

/// A process's memory files, opened once (so a pid reused later reads nothing through
/// them), and when each may be read next. The descriptors are proven to be still the
/// files opened before each read ([`OwnFile`]): in the profiled process itself, a daemon
/// may close them and open its own under their numbers.
#[derive(Debug)]
pub(crate) struct Memory {
    statm: Option<OwnFile>,
    smaps: Option<OwnFile>,
    /// When `statm` was read last ([`monotonic_ns`]).
    resident_at: u64,
    /// The time to the next reading of `statm` (ns), and what the last one read.
    resident_every: u64,
    resident_last: Option<u64>,
    /// The least time to the next regular reading of `smaps` (ns), and what the last one
    /// read.
    split_every: u64,
    split_last: Option<Kinds>,
    /// When `smaps` may be read next.
    split_next: u64,
    /// When its cost allows the next reading at a new peak of the heap
    /// ([`SPLIT_PEAK_COST_SHARE`], without [`SPLIT_EVERY_MS`]'s floor).
    cost_next: u64,
    /// A directory whose files mapped in the process are memprof's (the ring directory).
    own_dir: String,
    /// The process's memory, read to tell malloc's mappings from others.
    malloc: MallocMaps,
}

impl Memory {
    /// Opens the memory files of process `pid` (`None`: this process); `own_dir` as
    /// [`parse`] takes it.
    pub(crate) fn open(pid: Option<u32>, own_dir: String) -> Memory {
        let at = pid.map_or("self".to_owned(), |p| p.to_string());
        let malloc = MallocMaps::of(pid.unwrap_or_else(std::process::id));
        let open = |name: &str| {
            File::open(format!("/proc/{at}/{name}")).ok().and_then(|f| OwnFile::new(f).ok())
        };
        Memory {
            statm: open("statm"),
            smaps: open("smaps"),
            resident_at: 0,
            resident_every: RESIDENT_EVERY_MS * 1_000_000,
            resident_last: None,
            split_every: SPLIT_EVERY_MS * 1_000_000,
            split_last: None,
            split_next: 0,
            cost_next: 0,
            own_dir,
            malloc,
        }
    }

    /// The resident bytes, when a reading is due at `now` or `force`d. `None` when not
    /// due, or the process is gone.
    pub(crate) fn resident(&mut self, now: u64, force: bool) -> Option<u64> {
        if !force && now < self.resident_due() {
            return None;
        }
        self.resident_at = now;
        let bytes = resident_bytes(self.statm.as_mut()?);
        let fastest = RESIDENT_EVERY_MS * 1_000_000;
        self.resident_every = match bytes == self.resident_last {
            true => (self.resident_every * 2).clamp(fastest, RESIDENT_IDLE_MS * 1_000_000),
            false => fastest,
        };
        self.resident_last = bytes;
        bytes
    }

    /// When the next reading of the resident size is due ([`monotonic_ns`]; see
    /// [`RESIDENT_EVERY_MS`]).
    pub(crate) fn resident_due(&self) -> u64 {
        self.resident_at.saturating_add(self.resident_every)
    }

    /// The resident bytes by kind, when a reading is due at `now` or `force`d (and sets
    /// when the next one is: its cost bounds the pace). `None` when not due, or the
    /// process is gone.
    pub(crate) fn kinds(&mut self, now: u64, force: bool) -> Option<Kinds> {
        if !force && now < self.split_next {
            return None;
        }
        self.read_kinds()
    }

    /// The resident bytes by kind now, if the cost bound allows a reading now (sooner than
    /// [`Memory::kinds`] would: for a moment worth it, a new peak of the heap).
    pub(crate) fn kinds_if_affordable(&mut self, now: u64) -> Option<Kinds> {
        if now < self.cost_next {
            return None;
        }
        self.read_kinds()
    }

    /// When the next reading is due ([`monotonic_ns`]): at a new peak
    /// of the heap ([`Memory::kinds_if_affordable`]), or regularly ([`Memory::kinds`]).
    /// `u64::MAX` once the process is gone.
    pub(crate) fn next_due(&self, peak: bool) -> u64 {
        match peak {
            true => self.cost_next,
            false => self.split_next,
        }
    }

    fn read_kinds(&mut self) -> Option<Kinds> {
        let before = monotonic_ns();
        let text = self.smaps.as_mut().and_then(read_whole);
        let after = monotonic_ns();
        let took = after.saturating_sub(before) as f64;
        let (regular, peak) = match text {
            Some(_) => (
                after + (took / SPLIT_COST_SHARE) as u64,
                after + (took / SPLIT_PEAK_COST_SHARE) as u64,
            ),
            None => (u64::MAX, u64::MAX),
        };
        self.cost_next = peak;
        let k = text.map(|t| parse(&t, &self.own_dir, Some(&self.malloc)));
        // The same memory as last time: the next regular reading waits twice as long.
        let floor = SPLIT_EVERY_MS * 1_000_000;
        self.split_every = match k.is_some() && k == self.split_last {
            true => (self.split_every * 2).clamp(floor, SPLIT_IDLE_MS * 1_000_000),
            false => floor,
        };
        self.split_last = k;
        self.split_next = regular.max(after.saturating_add(self.split_every));
        // Nothing resident: the process is gone (its mappings with it).
        k.filter(|k| k.resident > 0)
    }
}

/// The resident bytes `statm` (an open `/proc/PID/statm`) says now: its second field, in
/// pages. `None` when it cannot be read (the process is gone) or says nothing.
fn resident_bytes(statm: &mut OwnFile) -> Option<u64> {
    let mut buf = [0u8; 128];
    let n = statm.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let pages: u64 = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    (pages > 0 && page > 0).then(|| pages.saturating_mul(page as u64))
}

/// The whole text of an open `/proc` file, read from its start. `None` when it cannot be
/// read, or is not text.
fn read_whole(file: &mut OwnFile) -> Option<String> {
    let mut buf = Vec::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = file.read_at(&mut chunk, buf.len() as u64).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        // A process with a very large number of mappings: enough is enough.
        if buf.len() > 256 << 20 {
            return None;
        }
    }
    String::from_utf8(buf).ok()
}

/// Resident bytes by kind (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kinds {
    pub(crate) resident: u64,
    pub(crate) allocator: u64,
    /// Private anonymous memory that glibc's malloc did not map (`sys::malloc_maps`).
    pub(crate) outside: u64,
    pub(crate) stacks: u64,
    pub(crate) files: u64,
    pub(crate) own: u64,
    pub(crate) other: u64,
}

/// The largest inaccessible mapping taken for a thread stack's guard.
const MAX_GUARD: u64 = 1 << 20;

/// One mapping's header line, as far as the kinds need it.
struct Mapping<'a> {
    start: u64,
    end: u64,
    perms: &'a str,
    path: &'a str,
}

fn mapping(line: &str) -> Option<Mapping<'_>> {
    let mut f = line.splitn(6, ' ');
    let range = f.next()?;
    let perms = f.next()?;
    let (_offset, _dev, _inode) = (f.next()?, f.next()?, f.next()?);
    let path = f.next().unwrap_or("").trim_start();
    let (a, b) = range.split_once('-')?;
    let start = u64::from_str_radix(a, 16).ok()?;
    let end = u64::from_str_radix(b, 16).ok()?;
    (perms.len() == 4 && start <= end).then_some(Mapping { start, end, perms, path })
}

/// The kinds of `text`, a `/proc/PID/smaps`; `ring_dir` is the run's ring directory (its
/// files mapped in the process are memprof's). With `malloc` (the process's memory, when
/// it can be read), a private anonymous mapping's resident bytes are the allocator's in
/// the share of it glibc's malloc made and outside malloc for the rest; without, all the
/// allocator's.
pub(crate) fn parse(text: &str, ring_dir: &str, malloc: Option<&MallocMaps>) -> Kinds {
    let mut k = Kinds::default();
    // Whether the process's memory can be read: tried on the first candidate mapping. A
    // process that cannot be read (another user's, gone) keeps the old split.
    let mut readable: Option<bool> = None;
    // The share of the current mapping that is malloc's, for one of undecided kind.
    let mut share: Option<f64> = None;
    // The kind of the current mapping, and what the next one needs of it.
    let mut kind: Option<fn(&mut Kinds) -> &mut u64> = None;
    let mut prev: Option<(u64, bool, bool)> = None; // (end, a small guard, a file)
    for line in text.lines() {
        // A mapping's header starts with its range; the fields' lines with a name.
        let header = line.split(' ').next().is_some_and(|t| t.contains('-'));
        if header {
            kind = None;
            share = None;
        }
        if let Some(m) = header.then(|| mapping(line)).flatten() {
            let anon = m.path.is_empty();
            let private = m.perms.as_bytes()[3] == b'p';
            let after = |what: fn(&(u64, bool, bool)) -> bool| {
                prev.as_ref().is_some_and(|p| p.0 == m.start && what(p))
            };
            kind = Some(if m.path == "[heap]" {
                |k| &mut k.allocator
            } else if m.path == "[stack]" {
                |k| &mut k.stacks
            } else if anon && private && m.perms.starts_with("rw") && after(|p| p.1) {
                |k| &mut k.stacks
            } else if anon && private && after(|p| p.2) {
                |k| &mut k.files
            } else if anon && private {
                if let Some(mm) = malloc.filter(|_| m.perms.starts_with("rw")) {
                    let ok = *readable.get_or_insert_with(|| mm.readable(m.start));
                    if ok && m.end > m.start {
                        let bytes = mm.malloc_bytes(m.start, m.end);
                        share = Some(bytes as f64 / (m.end - m.start) as f64);
                    }
                }
                |k| &mut k.allocator
            } else if !ring_dir.is_empty()
                && m.path.starts_with(ring_dir)
                && m.path.as_bytes().get(ring_dir.len()) == Some(&b'/')
            {
                |k| &mut k.own
            } else if m.path.starts_with('/') && private {
                |k| &mut k.files
            } else if m.path.starts_with('/')
                && !m.path.starts_with("/dev/")
                && !m.path.starts_with("/memfd:")
                && !m.path.starts_with("/SYSV")
                && !m.path.ends_with(" (deleted)")
            {
                // A shared mapping of a file on disk.
                |k| &mut k.files
            } else {
                |k| &mut k.other
            });
            let guard = anon && m.perms.starts_with("---") && m.end - m.start <= MAX_GUARD;
            let file = m.path.starts_with('/') && private;
            prev = Some((m.end, guard, file));
            continue;
        }
        if let (Some(rest), Some(f)) = (line.strip_prefix("Rss:"), kind) {
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            let bytes = kb.saturating_mul(1024);
            k.resident = k.resident.saturating_add(bytes);
            // A mapping only partly malloc's: its resident bytes by the share of its length.
            let outside = share.map_or(0, |s| bytes - ((bytes as f64 * s) as u64).min(bytes));
            k.outside = k.outside.saturating_add(outside);
            let slot = f(&mut k);
            *slot = slot.saturating_add(bytes - outside);
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(range: &str, perms: &str, path: &str, rss_kb: u64) -> String {
        format!("{range} {perms} 00000000 00:00 0          {path}\nSize: 8 kB\nRss:  {rss_kb} kB\nPss: 1 kB\nVmFlags: rd wr\n")
    }

    /// Each kind of mapping lands in its kind, and the kinds sum to the whole.
    #[test]
    fn mappings_by_kind() {
        let text = [
            entry("1000-3000", "r-xp", "/usr/bin/prog", 8),
            entry("3000-4000", "rw-p", "/usr/bin/prog", 4),
            entry("4000-6000", "rw-p", "", 8), // the executable's .bss
            entry("10000-90000", "rw-p", "[heap]", 400),
            entry("100000-101000", "---p", "", 0), // a thread's guard page
            entry("101000-900000", "rw-p", "", 24), // its stack
            entry("a00000-e00000", "rw-p", "", 1000), // an arena or a large block
            entry("e00000-4e00000", "---p", "", 0), // the arena's reserve: not a guard
            entry("4e00000-5e00000", "rw-p", "", 64), // after a large reserve: the allocator's
            entry("6000000-6100000", "rw-s", "/dev/shm/memprof-1-ab/7.0.ring (deleted)", 300),
            entry("7000000-7100000", "rw-s", "/dev/shm/other (deleted)", 50),
            entry("8000000-8001000", "r-xp", "[vdso]", 4),
            entry("7ffd000-7fff000", "rw-p", "[stack]", 132),
        ]
        .concat();
        let k = parse(&text, "/dev/shm/memprof-1-ab", None);
        assert_eq!(k.files, (8 + 4 + 8) * 1024);
        assert_eq!(k.allocator, (400 + 1000 + 64) * 1024);
        assert_eq!(k.stacks, (24 + 132) * 1024);
        assert_eq!(k.own, 300 * 1024);
        assert_eq!(k.other, (50 + 4) * 1024);
        assert_eq!(k.resident, k.files + k.allocator + k.stacks + k.own + k.other);
        // Another run's ring directory is not memprof's own here; a prefix is not a
        // directory.
        assert_eq!(parse(&text, "/dev/shm/memprof-1-a", None).own, 0);
    }

    /// This process's own file parses, and its kinds add up to what `statm` says.
    #[test]
    fn this_process() {
        let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let k = parse(&text, "", Some(&MallocMaps::of(std::process::id())));
        assert!(k.files > 0 && k.allocator > 0 && k.stacks > 0, "{k:?}");
        assert_eq!(k.resident, k.files + k.allocator + k.outside + k.stacks + k.own + k.other);
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        let statm = pages * page;
        // Read at two moments of a running test binary: close, not equal.
        let off = (k.resident as f64 - statm as f64).abs() / statm as f64;
        assert!(off < 0.2, "smaps {} against statm {statm}", k.resident);
    }

    /// Damaged or foreign text gives nothing rather than a panic.
    #[test]
    fn garbage_is_nothing() {
        for t in ["", "Rss: 5 kB\n", "zz-yy rw-p\nRss: x kB\n", "1000-0 rw-p 0 0 0\nRss: 4 kB\n"] {
            assert_eq!(parse(t, "/x", None).resident, 0, "{t:?}");
        }
    }
}
