//! The frames resolved for each module offset, kept on disk by build id, so that the next
//! run of the same program names its frames without reading any DWARF.
//!
//! # 1. What is kept
//! One file per object build, `symbols-<hex build id>.v1`, holds every module offset
//! (the address looked up, `addr - 1 - base`) resolved so far with its inline chain
//! (function, file, line), and the offsets that resolved to nothing (kept as an empty
//! chain, so that they are not looked up again). The build id names one build of the object:
//! its frames do not change while the id stays the same, whatever happens to the file on
//! disk. Objects without a build id are not cached: their identity (size and time of the
//! file) is a weaker promise (a file rewritten within the clock's tick, or copied with its
//! time kept, keeps it), their frames are re-read every run instead. Every object a
//! distribution, a Python wheel or a Rust or C++ toolchain builds has a build id.
//!
//! # 2. Where, and how big
//! In a `symbols` directory inside the preload library's cache directory (the caller
//! finds and checks it: `record/command/bundled.rs`), mode 0700. The files of the
//! directory together stay under [`MOST_TOTAL`]: after each write, the files used least
//! recently (modification time, refreshed when a file is read and is a day old) are removed
//! first. One file holds at most [`MOST_FILE`]; past that, new offsets are resolved and
//! not kept.
//!
//! # 3. Safe to delete, hostile to read
//! A file is written under a temporary name (`O_CREAT|O_EXCL`, mode 0600) and renamed into
//! place: a reader sees the old file or the new one. Runs that write the same file at once
//! each rename their own; the last one stays, the other's additions are resolved again next
//! time. A file is opened only as a regular file of this user's (`O_NOFOLLOW`, checked
//! on the descriptor) that nobody else can write, read up to [`MOST_FILE`], and decoded with
//! every length bounded; its last 8 bytes are a checksum (FNV-1a) of the rest, so a file
//! cut short or damaged is a miss as a whole, never a partial or wrong answer. Nothing it
//! says can panic the reader. The names it holds are shown only as every frame's name is,
//! through the reports' escaping.

use std::collections::HashMap;
use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::profile::Symbol;

/// The cache directory's files together stay under this (§2).
pub const MOST_TOTAL: u64 = 256 << 20;
/// One file is not read nor written past this (§2).
pub const MOST_FILE: u64 = 32 << 20;
/// The longest name or path kept; a longer one is not cached (the frame is resolved again).
const MOST_STRING: usize = 1 << 20;
/// The longest inline chain kept.
const MOST_CHAIN: usize = 1 << 12;
/// The longest build id taken (GNU's are 20 bytes).
const MOST_ID: usize = 64;
const MAGIC: &[u8; 8] = b"MPSYMC1\n";
const PREFIX: &str = "symbols-";
const SUFFIX: &str = ".v1";
/// A file read is marked used (its time set) when its time is older than this.
const REFRESH: Duration = Duration::from_secs(24 * 3600);
/// Temporary files older than this are a crashed writer's, removed when pruning.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// The frames of the objects met so far, by build id, read from and written to `dir`.
#[derive(Debug)]
pub(crate) struct SymbolCache {
    dir: PathBuf,
    modules: HashMap<Vec<u8>, Entry>,
    /// Offsets answered from the cache, and offsets resolved from the files, in all.
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

/// One build's frames by module offset (an empty chain: resolved to nothing).
#[derive(Debug, Default)]
pub(crate) struct Entry {
    frames: HashMap<u64, Vec<Symbol>>,
    /// Bytes the file would take; additions past [`MOST_FILE`] are not kept.
    bytes: u64,
    dirty: bool,
}

impl Entry {
    /// The chain cached for `offset`, if any.
    pub(crate) fn get(&self, offset: u64) -> Option<&Vec<Symbol>> {
        self.frames.get(&offset)
    }

    /// Keeps `chain` as `offset`'s, unless it is too long or the file would grow too big.
    pub(crate) fn insert(&mut self, offset: u64, chain: &[Symbol]) {
        let Some(size) = record_size(chain) else { return };
        if self.bytes + size > MOST_FILE || self.frames.contains_key(&offset) {
            return;
        }
        self.bytes += size;
        self.frames.insert(offset, chain.to_vec());
        self.dirty = true;
    }
}

impl SymbolCache {
    /// A cache kept in `dir`, which the caller has checked is private (§2).
    pub(crate) fn new(dir: PathBuf) -> SymbolCache {
        SymbolCache { dir, modules: HashMap::new(), hits: 0, misses: 0 }
    }

    /// The frames of the build `build_id`, read from its file on first use (a missing,
    /// foreign or damaged file is an empty entry); `None` for an object without a build id.
    pub(crate) fn module(&mut self, build_id: &[u8]) -> Option<&mut Entry> {
        if build_id.is_empty() || build_id.len() > MOST_ID {
            return None;
        }
        if !self.modules.contains_key(build_id) {
            let entry = read_file(&self.path(build_id)).unwrap_or_default();
            self.modules.insert(build_id.to_vec(), entry);
        }
        self.modules.get_mut(build_id)
    }

    /// The directory the files are in.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether a file is kept for `build_id` (its frames then need no symbols loaded ahead).
    pub(crate) fn knows(&self, build_id: &[u8]) -> bool {
        !build_id.is_empty()
            && build_id.len() <= MOST_ID
            && (self.modules.contains_key(build_id) || self.path(build_id).is_file())
    }

    fn path(&self, build_id: &[u8]) -> PathBuf {
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{PREFIX}{hex}{SUFFIX}"))
    }

    /// Writes the entries that gained frames (each atomically, §3), then keeps the
    /// directory under [`MOST_TOTAL`]. Failures are silent: the cache is only a cache.
    pub(crate) fn flush(&mut self) {
        let mut wrote = false;
        let dirty: Vec<Vec<u8>> =
            self.modules.iter().filter(|(_, e)| e.dirty).map(|(id, _)| id.clone()).collect();
        for id in dirty {
            let path = self.path(&id);
            if let Some(e) = self.modules.get_mut(&id) {
                e.dirty = false;
                wrote |= write_file(&self.dir, &path, &encode(&e.frames)).is_ok();
            }
        }
        if wrote {
            prune(&self.dir, MOST_TOTAL);
        }
    }
}

/// The bytes `chain` takes in a file; `None` when it is not to be kept.
fn record_size(chain: &[Symbol]) -> Option<u64> {
    if chain.len() > MOST_CHAIN {
        return None;
    }
    let mut size = 8 + 4;
    for s in chain {
        let file = s.file.as_deref().map_or(0, str::len);
        if s.function.len() > MOST_STRING || file > MOST_STRING {
            return None;
        }
        size += 4 + s.function.len() + 4 + file + 5;
    }
    Some(size as u64)
}

/// 64-bit FNV-1a.
fn checksum(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// The file's bytes: [`MAGIC`], the count, then each offset with its chain (the function's
/// length and bytes, the file's (`u32::MAX`: none), a line tag and line), all little-endian,
/// offsets in order; the checksum last.
fn encode(frames: &HashMap<u64, Vec<Symbol>>) -> Vec<u8> {
    let mut offsets: Vec<&u64> = frames.keys().collect();
    offsets.sort_unstable();
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(offsets.len() as u64).to_le_bytes());
    for off in offsets {
        let chain = &frames[off];
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&(chain.len() as u32).to_le_bytes());
        for s in chain {
            out.extend_from_slice(&(s.function.len() as u32).to_le_bytes());
            out.extend_from_slice(s.function.as_bytes());
            match &s.file {
                Some(f) => {
                    out.extend_from_slice(&(f.len() as u32).to_le_bytes());
                    out.extend_from_slice(f.as_bytes());
                }
                None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
            }
            out.push(u8::from(s.line.is_some()));
            out.extend_from_slice(&s.line.unwrap_or(0).to_le_bytes());
        }
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Reads through bytes that may be anything: every read bounded, `None` past the end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn string(&mut self, len: u32) -> Option<String> {
        let len = len as usize;
        if len > MOST_STRING {
            return None;
        }
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

/// The entry `bytes` hold, or `None` for anything but a whole, undamaged file (§3).
fn decode(bytes: &[u8]) -> Option<Entry> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if checksum(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut c = Cursor(body);
    if c.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let count = c.u64()?;
    // Each record takes at least 12 bytes: a count past what the body holds is damage.
    if count > body.len() as u64 / 12 {
        return None;
    }
    let mut frames = HashMap::with_capacity(count as usize);
    for _ in 0..count {
        let offset = c.u64()?;
        let n = c.u32()? as usize;
        if n > MOST_CHAIN {
            return None;
        }
        let mut chain = Vec::with_capacity(n.min(c.0.len() / 13));
        for _ in 0..n {
            let len = c.u32()?;
            let function = c.string(len)?;
            let file = match c.u32()? {
                u32::MAX => None,
                len => Some(c.string(len)?),
            };
            let tag = c.take(1)?[0];
            let line = c.u32()?;
            let line = match tag {
                0 => None,
                1 => Some(line),
                _ => return None,
            };
            chain.push(Symbol { function, file, line });
        }
        frames.insert(offset, chain);
    }
    if !c.0.is_empty() {
        return None;
    }
    Some(Entry { frames, bytes: bytes.len() as u64, dirty: false })
}

/// The entry in the file at `path`, opened only as a regular file of this user's that
/// nobody else can write (§3); `None` for a missing, foreign, oversized or damaged file.
fn read_file(path: &Path) -> Option<Entry> {
    let (bytes, meta) = read_ours_with(path, MOST_FILE)?;
    let entry = decode(&bytes)?;
    let old = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|a| a > REFRESH);
    if old {
        if let Ok(f) = crate::sys::files::open_ours(path) {
            let _ = f.set_modified(SystemTime::now());
        }
    }
    Some(entry)
}

/// The bytes of the file at `path`, opened only as a regular file of this user's that
/// nobody else can write (§3), when it holds at most `most`; `None` otherwise.
pub(super) fn read_ours(path: &Path, most: u64) -> Option<Vec<u8>> {
    read_ours_with(path, most).map(|(bytes, _)| bytes)
}

/// [`read_ours`], with the file's metadata as read from its descriptor.
fn read_ours_with(path: &Path, most: u64) -> Option<(Vec<u8>, fs::Metadata)> {
    let file = crate::sys::files::open_ours(path).ok()?;
    let meta = file.metadata().ok()?;
    if meta.mode() & 0o022 != 0 || meta.size() > most {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.size() as usize);
    file.take(most + 1).read_to_end(&mut bytes).ok()?;
    // Grown past the bound since it was measured.
    if bytes.len() as u64 > most {
        return None;
    }
    Some((bytes, meta))
}

/// Writes `bytes` to `path` in `dir` under a temporary name, then renames it into place.
pub(super) fn write_file(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp =
        dir.join(format!(".tmp-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes));
    match written.and_then(|()| fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Removes the files of `dir` used least recently until the rest take at most `cap`
/// bytes, and temporary files a crashed writer left (§2).
fn prune(dir: &Path, cap: u64) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Ok(meta) = e.metadata() else { continue };
        let time = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if name.starts_with(".tmp-") {
            if time.elapsed().is_ok_and(|a| a > STALE_TEMP) {
                let _ = fs::remove_file(e.path());
            }
        } else if name.starts_with(PREFIX) && meta.is_file() {
            files.push((time, meta.len(), e.path()));
        }
    }
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    files.sort();
    for (_, size, path) in files {
        if total <= cap {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            total -= size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(f: &str, file: Option<&str>, line: Option<u32>) -> Symbol {
        Symbol { function: f.into(), file: file.map(Into::into), line }
    }

    fn sample() -> HashMap<u64, Vec<Symbol>> {
        let mut m = HashMap::new();
        m.insert(0x1234, vec![sym("inner", Some("a.rs"), Some(3)), sym("outer", None, None)]);
        m.insert(0x99, Vec::new());
        m.insert(7, vec![sym("ünïcode::<T>", Some(""), Some(0))]);
        m
    }

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("memprof-symcache-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
        d
    }

    use std::os::unix::fs::DirBuilderExt as _;

    #[test]
    fn what_is_written_is_read_back() {
        let frames = sample();
        let e = decode(&encode(&frames)).expect("a whole file decodes");
        assert_eq!(e.frames, frames);
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_a_miss() {
        let bytes = encode(&sample());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_none(), "cut at {n}");
        }
        for i in 0..bytes.len() {
            for bit in [0x01, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                assert!(decode(&b).is_none(), "byte {i} flipped");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(0u8..=255, 0..512)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn any_bytes_with_a_good_checksum_decode_without_panic(
            bytes in proptest::collection::vec(0u8..=255, 0..512),
        ) {
            // Past the checksum: the decoder itself meets the bytes.
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&bytes);
            let sum = checksum(&b);
            b.extend_from_slice(&sum.to_le_bytes());
            let _ = decode(&b);
        }
    }

    #[test]
    fn a_cache_round_trips_through_its_directory() {
        let dir = scratch("trip");
        let id = [0xab_u8; 20];
        let mut c = SymbolCache::new(dir.clone());
        assert!(!c.knows(&id));
        let e = c.module(&id).unwrap();
        assert!(e.get(0x10).is_none());
        e.insert(0x10, &[sym("f", Some("f.c"), Some(9))]);
        e.insert(0x20, &[]);
        c.flush();
        let path = c.path(&id);
        let mode = fs::metadata(&path).unwrap().mode();
        assert_eq!(mode & 0o077, 0, "private: {mode:o}");
        let mut again = SymbolCache::new(dir.clone());
        assert!(again.knows(&id));
        let e = again.module(&id).unwrap();
        assert_eq!(e.get(0x10).unwrap()[0].function, "f");
        assert!(e.get(0x20).unwrap().is_empty());
        assert!(again.module(&[]).is_none(), "no build id: not cached");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn foreign_links_and_damaged_files_are_misses() {
        let dir = scratch("hostile");
        let c = SymbolCache::new(dir.clone());
        let (a, b) = ([1u8; 20], [2u8; 20]);
        let target = dir.join("elsewhere");
        fs::write(&target, encode(&sample())).unwrap();
        std::os::unix::fs::symlink(&target, c.path(&a)).unwrap();
        assert!(read_file(&c.path(&a)).is_none(), "a symlink is never followed");
        fs::write(c.path(&b), encode(&sample())).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(c.path(&b), fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read_file(&c.path(&b)).is_none(), "writable by others");
        fs::set_permissions(c.path(&b), fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_file(&c.path(&b)).is_some());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn pruning_removes_the_oldest_first() {
        let dir = scratch("prune");
        let now = SystemTime::now();
        for (i, age) in [300u64, 100, 200].iter().enumerate() {
            let p = dir.join(format!("{PREFIX}{i}{SUFFIX}"));
            fs::write(&p, [0u8; 1000]).unwrap();
            let f = fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(now - Duration::from_secs(*age)).unwrap();
        }
        prune(&dir, 2000);
        let left: Vec<bool> =
            (0..3).map(|i| dir.join(format!("{PREFIX}{i}{SUFFIX}")).exists()).collect();
        assert_eq!(left, [false, true, true], "the oldest went");
        let _ = fs::remove_dir_all(&dir);
    }
}
