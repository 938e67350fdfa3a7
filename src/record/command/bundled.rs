//! The preload library that travels inside the `memprof` executable, and the file it is
//! written to so that the dynamic loader can map it.
//!
//! # 1. Where the file goes
//! `LD_PRELOAD` needs a path, so the library's bytes (embedded by `build.rs`) are written on
//! first use to a file named by their digest, `libmemprof_preload-<version>-<digest>.so`, in
//! the first of these directories that works:
//! 1. `$XDG_CACHE_HOME/memprof`, or `$HOME/.cache/memprof` when `XDG_CACHE_HOME` is unset;
//! 2. `$XDG_RUNTIME_DIR/memprof`;
//! 3. a private temporary directory (`$TMPDIR/memprof-XXXXXX`, else one in `/var/tmp`, mode
//!    0700), removed when the run ends.
//!
//! A library found outside (`MEMPROF_PRELOAD`, `libmemprof_preload.so` beside the
//! executable) goes the same way: it is opened once and checked by its descriptor
//! (`sys/trusted.rs`), its bytes are read from that descriptor, and they are written to
//! `libmemprof_preload-<version>-copy-<digest>.so` in the same directories ([`install_found`]).
//! When they are the bundled library's bytes, as those of the copy that `build.rs` leaves
//! beside the executable are, the bundled library's own file serves instead. Either way the
//! loader is handed a file of ours holding the bytes read from the checked descriptor, never
//! the path that was checked: whoever could rename the original after the check (a member
//! of its directory's group, say) cannot change what is loaded. `memprof attach` into a
//! process of another user (memprof running as root) uses `$TMPDIR/memprof-<uid>-attach`
//! instead (mode 0711, the file 0555): the process must be able to read the file, and
//! still nobody but root can change it.
//!
//! The first two are kept and reused by every later run of the same build; a new build
//! writes a new file beside the old ones, and files not used for 30 days are removed when a
//! new one is written. Removing the directory is always safe: the next run writes it again.
//!
//! # 2. What makes it safe
//! - The `memprof` directory is created with mode 0700, and it is used only when it and
//!   every directory above it up to `/` pass `sys/trusted.rs` §1 (this user's or root's,
//!   writable by group or others only when sticky), checked by descriptor, and it is this
//!   user's and nobody else can write it: whoever can replace the library runs code in every
//!   profiled program, and whoever can rename a directory above it can put another library
//!   at the same path. A `$XDG_CACHE_HOME` inside a world-writable directory, or another
//!   user's `$HOME` kept by `sudo -E`, is passed over with its reason (`preload-path` says
//!   it).
//! - The file is written under a temporary name (`O_CREAT|O_EXCL`, mode 0555), synced, and
//!   renamed into place: a reader sees no file or the whole file. Concurrent first runs each
//!   write their own temporary file and rename it; the contents are identical, so whichever
//!   rename lands last changes nothing.
//! - Before every use the file is opened with `O_NOFOLLOW`, its owner and mode checked, and
//!   its bytes compared with the expected ones; a file that differs (cut by a full disk, a
//!   digest collision, tampering) is replaced. One page of it is then mapped executable: a
//!   directory on a `noexec` file system (`/dev/shm`, some `/tmp`s), where the loader would
//!   fail, is passed over.
//! - A directory that cannot be written (read-only, full, not ours) is skipped with its
//!   reason; when every candidate fails, the error lists each one.

use crate::error::{Error, LaunchError};
use crate::sys::files::owned_and_private;
use crate::sys::trusted::{self, Kind};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Files of other builds unused for this long are removed when a new one is written.
const STALE: Duration = Duration::from_secs(30 * 24 * 3600);
/// A file in use has its modification time refreshed when it is older than this, so that
/// pruning removes only what no run has used.
const REFRESH: Duration = Duration::from_secs(24 * 3600);
const PREFIX: &str = "libmemprof_preload-";
/// Set (to anything but `0`), `record`, `attach` and `report` keep no symbol cache.
pub(crate) const ENV_NO_SYMBOL_CACHE: &str = "MEMPROF_NO_SYMBOL_CACHE";

/// A preload library carried as bytes (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct Bundled {
    /// The library's bytes.
    pub bytes: &'static [u8],
    /// Hex digest of `bytes` (computed by the build script); it names the cached file.
    pub digest: &'static str,
    /// The version of the build, also in the file name (for people reading the directory).
    pub version: &'static str,
}

/// Where a library was installed, and whether it is temporary.
#[derive(Debug)]
pub(crate) struct Installed {
    path: PathBuf,
    /// A private directory removed on drop (the last-resort fallback).
    temp_dir: Option<PathBuf>,
    /// The cache directories passed over before this one, each with why.
    passed_over: Vec<String>,
}

impl Installed {
    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file is removed when this value is dropped (no cache directory worked).
    pub fn is_temporary(&self) -> bool {
        self.temp_dir.is_some()
    }

    /// The cache directories passed over, each with why (for `preload-path`'s error).
    pub fn passed_over(&self) -> &[String] {
        &self.passed_over
    }

    /// A copy that a process of another user can map (`memprof attach` as root, module doc
    /// §1): in `$TMPDIR/memprof-<uid>-attach` (0711), the file 0555, both this user's.
    pub fn shared(&self) -> Result<Installed, Error> {
        let mut f = crate::sys::files::open_ours(&self.path)
            .map_err(|e| Error::io(format!("cannot read {}", self.path.display()), e))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)
            .map_err(|e| Error::io(format!("cannot read {}", self.path.display()), e))?;
        let name = self.path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let image = Image { bytes: &bytes, name, dir_mode: 0o711 };
        let name = format!("memprof-{}-attach", crate::sys::files::euid());
        let dirs: Vec<PathBuf> = temp_dirs().iter().map(|t| t.join(&name)).collect();
        image.install_in(&dirs, &[])
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(d) = &self.temp_dir {
            let _ = fs::remove_dir_all(d);
        }
    }
}

impl Bundled {
    /// The cached file's name.
    pub(crate) fn file_name(&self) -> String {
        format!("{PREFIX}{}-{}.so", self.version, self.digest)
    }

    /// The directories tried in turn, from the environment (module doc, §1), without the
    /// temporary fallback.
    pub(crate) fn cache_dirs() -> Vec<PathBuf> {
        let abs = |v: &str| std::env::var_os(v).map(PathBuf::from).filter(|p| p.is_absolute());
        let mut dirs = Vec::new();
        if let Some(c) = abs("XDG_CACHE_HOME") {
            dirs.push(c.join("memprof"));
        } else if let Some(h) = abs("HOME") {
            dirs.push(h.join(".cache").join("memprof"));
        }
        if let Some(r) = abs("XDG_RUNTIME_DIR") {
            dirs.push(r.join("memprof"));
        }
        dirs
    }

    /// The directory of the symbol cache (`profile/symbolize/cache.rs`): `symbols` inside
    /// the first of [`Bundled::cache_dirs`] that is private as the library's directory
    /// must be (§2), created with mode 0700; `None` when none is, or when
    /// `MEMPROF_NO_SYMBOL_CACHE` is set to anything but `0` or nothing (no cache).
    pub(crate) fn symbol_cache_dir() -> Option<PathBuf> {
        let off = std::env::var_os(ENV_NO_SYMBOL_CACHE).is_some_and(|v| !v.is_empty() && v != "0");
        if off {
            return None;
        }
        Self::cache_dirs()
            .into_iter()
            .map(|d| d.join("symbols"))
            .find(|d| private_dir(d, 0o700).is_ok())
    }

    /// Installs the library in the first of [`Bundled::cache_dirs`] that works, else in a
    /// private temporary directory.
    pub(crate) fn install(&self) -> Result<Installed, Error> {
        self.image().install()
    }

    /// [`Bundled::install`] with explicit candidates: each of `dirs` (created if missing),
    /// then a new private directory inside the first of `tmps` that takes one.
    #[cfg(test)]
    pub(crate) fn install_in(
        &self,
        dirs: &[PathBuf],
        tmps: &[PathBuf],
    ) -> Result<Installed, Error> {
        self.image().install_in(dirs, tmps)
    }

    fn image(&self) -> Image<'static> {
        Image { bytes: self.bytes, name: self.file_name(), dir_mode: 0o700 }
    }
}

/// The temporary directories tried when no cache directory works (module doc, §1).
fn temp_dirs() -> Vec<PathBuf> {
    let mut v = vec![std::env::temp_dir()];
    if v[0] != Path::new("/var/tmp") {
        v.push(PathBuf::from("/var/tmp"));
    }
    v
}

/// A library found outside (`MEMPROF_PRELOAD`, beside the executable), opened once and
/// checked by its descriptor (module doc, §1): the loader never opens `path` itself. When
/// the descriptor holds exactly `bundled`'s bytes (the copy `build.rs` leaves beside the
/// executable does), the bundled library's cached file is used; otherwise a copy of the
/// bytes read from the descriptor.
pub(crate) fn install_found(path: &Path, bundled: Option<&Bundled>) -> Result<Installed, Error> {
    install_found_in(path, bundled, &Bundled::cache_dirs(), &temp_dirs())
}

/// [`install_found`] with explicit candidates ([`Image::install_in`]).
fn install_found_in(
    path: &Path,
    bundled: Option<&Bundled>,
    dirs: &[PathBuf],
    tmps: &[PathBuf],
) -> Result<Installed, Error> {
    let mut checked = trusted::open(path, Kind::File).map_err(LaunchError::PreloadUnsafe)?;
    let cannot_read = |e| Error::io(format!("cannot read {}", path.display()), e);
    if let Some(b) = bundled.filter(|b| checked.meta.len() == b.bytes.len() as u64) {
        // Compared through a small buffer: reading the few megabytes into new memory and
        // hashing them was most of `record`'s start in a cargo build (`record -- true`).
        if same_contents(&mut checked.file, b.bytes) {
            return b.image().install_in(dirs, tmps);
        }
        checked.file.seek(SeekFrom::Start(0)).map_err(cannot_read)?;
    }
    let mut bytes = Vec::with_capacity(checked.meta.len() as usize);
    checked.file.read_to_end(&mut bytes).map_err(cannot_read)?;
    Image::copy_of(&bytes).install_in(dirs, tmps)
}

/// Bytes to install under a file name (module doc, §1).
struct Image<'a> {
    bytes: &'a [u8],
    name: String,
    /// The mode of a directory made for it: 0700, or 0711 for another user's process.
    dir_mode: u32,
}

impl<'a> Image<'a> {
    /// A copy of a library read from elsewhere, named by a digest of its bytes: FNV-1a's
    /// steps over eight bytes at a time (a few megabytes hashed at every run, eight times
    /// faster than byte by byte). Only a name: the file's bytes are compared before use.
    fn copy_of(bytes: &'a [u8]) -> Image<'a> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
            h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
        }
        for &b in words.remainder() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let name = format!("{PREFIX}{}-copy-{h:016x}.so", env!("CARGO_PKG_VERSION"));
        Image { bytes, name, dir_mode: 0o700 }
    }

    fn install(&self) -> Result<Installed, Error> {
        self.install_in(&Bundled::cache_dirs(), &temp_dirs())
    }

    fn install_in(&self, dirs: &[PathBuf], tmps: &[PathBuf]) -> Result<Installed, Error> {
        let mut tried = Vec::new();
        for dir in dirs {
            match self.install_at(dir) {
                Ok(path) => return Ok(Installed { path, temp_dir: None, passed_over: tried }),
                // Every reason `install_at` gives names the path it is about.
                Err(why) => tried.push(why),
            }
        }
        let passed_over = tried.clone();
        for tmp in tmps {
            match self.install_temp(tmp) {
                Ok((path, dir)) => {
                    return Ok(Installed { path, temp_dir: Some(dir), passed_over });
                }
                Err(why) => tried.push(format!("a private directory in {}: {why}", tmp.display())),
            }
        }
        Err(LaunchError::PreloadNotWritten(tried).into())
    }

    /// The cached file in `dir`, verified, written first if missing or wrong. Every reason
    /// it gives names the path it is about (the directory, the file or a directory above).
    fn install_at(&self, dir: &Path) -> Result<PathBuf, String> {
        private_dir(dir, self.dir_mode)?;
        let path = dir.join(&self.name);
        // Missing, cut short, different, not ours or writable by others: whatever is there is
        // replaced (the directory is ours, so the rename is ours to make).
        if self.verify(&path).is_ok() {
            refresh(&path);
            return Ok(path);
        }
        self.write_atomically(dir, &path)?;
        self.verify(&path).map_err(|c| c.to_string())?;
        prune(dir, &path);
        Ok(path)
    }

    fn install_temp(&self, tmp: &Path) -> Result<(PathBuf, PathBuf), String> {
        // Above a directory of ours, a sticky one of root's (`/tmp`) is fine: nobody else can
        // rename what is in it.
        trusted::open(tmp, Kind::Dir)?;
        let dir = make_private_temp_dir(tmp, self.dir_mode)?;
        let path = dir.join(&self.name);
        let done = self
            .write_atomically(&dir, &path)
            .and_then(|()| self.verify(&path).map_err(|c| c.to_string()));
        match done {
            Ok(()) => Ok((path, dir)),
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    fn write_atomically(&self, dir: &Path, path: &Path) -> Result<(), String> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".{}.{}.{}.tmp",
            self.name,
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o555)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(self.bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, path)
        })();
        written.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })
    }

    /// Checks that `path` is a regular file of ours that no one else can write, holding
    /// exactly the expected bytes, on a file system the loader can map code from.
    fn verify(&self, path: &Path) -> Result<(), Check> {
        // A FIFO put in its place must not block the run: `open_ours` never blocks.
        let mut f = match crate::sys::files::open_ours(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Check::Missing(path.to_owned()))
            }
            Err(e) => return Err(Check::Unsafe(format!("cannot use {}: {e}", path.display()))),
        };
        let meta = f
            .metadata()
            .map_err(|e| Check::Unsafe(format!("cannot read {}: {e}", path.display())))?;
        owned_and_private(&meta, path).map_err(Check::Unsafe)?;
        if meta.len() != self.bytes.len() as u64 {
            return Err(Check::Differs(path.to_owned()));
        }
        if !same_contents(&mut f, self.bytes) {
            return Err(Check::Differs(path.to_owned()));
        }
        trusted::can_map_executable(&f)
            .map_err(|why| Check::Unsafe(format!("{}: {why}", path.display())))
    }
}

/// Why a cached file cannot be used as it is.
#[derive(Debug)]
enum Check {
    Missing(PathBuf),
    Differs(PathBuf),
    Unsafe(String),
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Missing(p) => write!(f, "{} vanished after it was written", p.display()),
            Check::Differs(p) => {
                write!(f, "{} does not hold the library just written", p.display())
            }
            Check::Unsafe(why) => write!(f, "{why}"),
        }
    }
}

fn same_contents(f: &mut File, mut expected: &[u8]) -> bool {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => return expected.is_empty(),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        };
        if n > expected.len() || buf[..n] != expected[..n] {
            return false;
        }
        expected = &expected[n..];
    }
}

/// Creates `dir` (mode `mode`; its parents as usual) and checks that it is ours, that
/// nobody else can write it, and that every directory above it passes `sys/trusted.rs` §1,
/// by descriptor.
fn private_dir(dir: &Path, mode: u32) -> Result<(), String> {
    if let Err(e) = fs::DirBuilder::new().recursive(true).mode(mode).create(dir) {
        return Err(format!("cannot create {}: {e}", dir.display()));
    }
    let checked = trusted::open(dir, Kind::Dir)?;
    owned_and_private(&checked.meta, dir)
}

fn make_private_temp_dir(tmp: &Path, mode: u32) -> Result<PathBuf, String> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut last = None;
    for _ in 0..16 {
        let d = tmp.join(format!(
            "memprof-{}-{:x}-{}",
            std::process::id(),
            nanos,
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        // Not recursive: the directory must be new, or someone else made it.
        match fs::DirBuilder::new().mode(mode).create(&d) {
            // The umask may have taken bits away from 0711: the mode is set as asked.
            Ok(()) => {
                use std::os::unix::fs::PermissionsExt;
                let _ = fs::set_permissions(&d, fs::Permissions::from_mode(mode));
                return Ok(d);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(format!("cannot create a directory: {e}")),
        }
    }
    Err(format!("cannot create a directory: {}", last.map(|e| e.to_string()).unwrap_or_default()))
}

/// Marks a file as used (module doc, §1), at most once a day.
fn refresh(path: &Path) {
    let old = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > REFRESH);
    if old {
        if let Ok(f) = File::open(path) {
            let _ = f.set_modified(SystemTime::now());
        }
    }
}

/// Removes other builds' libraries in `dir` that no run has used for [`STALE`].
fn prune(dir: &Path, keep: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if p == keep || !name.starts_with(PREFIX) || !name.ends_with(".so") {
            continue;
        }
        let stale = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE);
        if stale {
            let _ = fs::remove_file(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::PermissionsExt;

    static BYTES: &[u8] = b"\x7fELF pretend library";

    fn lib() -> Bundled {
        Bundled { bytes: BYTES, digest: "0123456789abcdef", version: "0.0.0" }
    }

    fn scratch(name: &str) -> PathBuf {
        crate::sys::test_dir("bundled", name)
    }

    /// A library found outside that holds the bundled bytes is served by the bundled
    /// library's file; one that differs, also by a byte at the same length, by a copy of
    /// its own bytes, also when the bundled file is already there.
    #[test]
    fn a_found_library_with_the_bundled_bytes_uses_the_bundled_file() {
        let root = scratch("found");
        let dir = root.join("cache/memprof");
        let dirs = std::slice::from_ref(&dir);
        let found = root.join("libmemprof_preload.so");
        fs::write(&found, BYTES).unwrap();
        let same = install_found_in(&found, Some(&lib()), dirs, &[]).unwrap();
        assert_eq!(same.path(), dir.join(lib().file_name()));
        assert_eq!(fs::read(same.path()).unwrap(), BYTES);
        let mut other = BYTES.to_vec();
        *other.last_mut().unwrap() ^= 1;
        for bytes in [other.clone(), [BYTES, b"+"].concat()] {
            fs::remove_file(&found).unwrap();
            fs::write(&found, &bytes).unwrap();
            let copy = install_found_in(&found, Some(&lib()), dirs, &[]).unwrap();
            let name = copy.path().file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with("libmemprof_preload-") && name.contains("-copy-"), "{name}");
            assert_eq!(fs::read(copy.path()).unwrap(), bytes);
        }
        // Without a bundled library, the bundled bytes get a copy too.
        fs::remove_file(&found).unwrap();
        fs::write(&found, BYTES).unwrap();
        let copy = install_found_in(&found, None, dirs, &[]).unwrap();
        assert_ne!(copy.path(), same.path());
        assert_eq!(fs::read(copy.path()).unwrap(), BYTES);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn first_use_writes_a_private_file_and_later_uses_reuse_it() {
        let root = scratch("reuse");
        let dir = root.join("cache/memprof");
        let a = lib().install_in(std::slice::from_ref(&dir), &[]).unwrap();
        assert_eq!(a.path(), dir.join("libmemprof_preload-0.0.0-0123456789abcdef.so"));
        assert!(!a.is_temporary());
        assert_eq!(fs::read(a.path()).unwrap(), BYTES);
        let m = fs::metadata(a.path()).unwrap();
        assert_eq!(m.mode() & 0o222, 0, "nobody may write it");
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let ino = m.ino();
        let b = lib().install_in(std::slice::from_ref(&dir), &[]).unwrap();
        assert_eq!(fs::metadata(b.path()).unwrap().ino(), ino, "the file is reused");
        // No temporary files are left behind.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        drop((a, b));
        assert!(dir.join(lib().file_name()).is_file(), "a cached file outlives the run");
        fs::remove_dir_all(&root).unwrap();
    }

    /// Every directory passed over is named in its reason, whichever step refused it: one
    /// that cannot be created (a file in its way), one writable by others, one whose file
    /// is a directory.
    #[test]
    fn every_reason_names_its_path() {
        let root = scratch("reasons");
        fs::write(root.join("file"), b"").unwrap();
        let blocked = root.join("file/memprof");
        let open = root.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let taken = root.join("taken");
        fs::create_dir_all(taken.join(lib().file_name()).join("x")).unwrap();
        fs::set_permissions(&taken, fs::Permissions::from_mode(0o700)).unwrap();
        let dirs = [blocked.clone(), open.clone(), taken.clone()];
        let tmp = root.join("tmp");
        fs::create_dir(&tmp).unwrap();
        let got = lib().install_in(&dirs, std::slice::from_ref(&tmp)).unwrap();
        assert!(got.is_temporary());
        let said = got.passed_over.clone();
        assert_eq!(said.len(), 3, "{said:?}");
        for (why, dir) in said.iter().zip(&dirs) {
            assert!(why.contains(&*dir.to_string_lossy()), "{why} does not name {}", dir.display());
        }
        drop(got);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_damaged_or_foreign_file_is_replaced() {
        let root = scratch("damaged");
        let path = root.join(lib().file_name());
        // Cut short (a full disk), then wrong bytes of the right length.
        fs::write(&path, &BYTES[..4]).unwrap();
        let a = lib().install_in(std::slice::from_ref(&root), &[]).unwrap();
        assert_eq!(fs::read(a.path()).unwrap(), BYTES);
        fs::remove_file(&path).unwrap();
        let mut wrong = BYTES.to_vec();
        wrong[10] ^= 1;
        fs::write(&path, &wrong).unwrap();
        let b = lib().install_in(std::slice::from_ref(&root), &[]).unwrap();
        assert_eq!(fs::read(b.path()).unwrap(), BYTES);
        // Writable by others: replaced too.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        let c = lib().install_in(std::slice::from_ref(&root), &[]).unwrap();
        assert_eq!(fs::metadata(c.path()).unwrap().mode() & 0o222, 0);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_symlink_in_place_of_the_file_is_never_followed() {
        let root = scratch("symlink");
        let victim = root.join("victim");
        fs::write(&victim, b"keep me").unwrap();
        let cache = root.join("cache");
        fs::create_dir(&cache).unwrap();
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&victim, cache.join(lib().file_name())).unwrap();
        let a = lib().install_in(std::slice::from_ref(&cache), &[]).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep me");
        assert!(fs::symlink_metadata(a.path()).unwrap().is_file());
        assert_eq!(fs::read(a.path()).unwrap(), BYTES);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_fifo_in_place_of_the_file_never_blocks_and_is_replaced() {
        let root = scratch("fifo");
        let cache = root.join("cache");
        fs::create_dir(&cache).unwrap();
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).unwrap();
        let c = std::ffi::CString::new(cache.join(lib().file_name()).into_os_string().into_vec())
            .unwrap();
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let dirs = [cache.clone()];
        std::thread::spawn(move || {
            let _ = tx.send(lib().install_in(&dirs, &[]).map(|i| i.path().to_owned()));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("install blocked");
        assert_eq!(fs::read(got.unwrap()).unwrap(), BYTES);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn unusable_directories_fall_back_to_a_private_temporary_one() {
        let root = scratch("fallback");
        let file = root.join("a-file");
        fs::write(&file, b"").unwrap();
        let open = root.join("world-writable");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        // /proc refuses new directories even to root: a read-only place.
        let dirs = [file.join("memprof"), open.clone(), PathBuf::from("/proc/memprof-test")];
        let a = lib().install_in(&dirs, std::slice::from_ref(&root)).unwrap();
        assert!(a.is_temporary());
        let temp = a.path().parent().unwrap().to_owned();
        assert!(temp.starts_with(&root));
        assert_eq!(fs::metadata(&temp).unwrap().mode() & 0o777, 0o700);
        assert_eq!(fs::read(a.path()).unwrap(), BYTES);
        assert_eq!(fs::read_dir(&open).unwrap().count(), 0, "nothing written where others write");
        drop(a);
        assert!(!temp.exists(), "the temporary copy is removed after the run");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_error_lists_every_place_tried() {
        let root = scratch("error");
        let file = root.join("a-file");
        fs::write(&file, b"").unwrap();
        let err =
            lib().install_in(&[file.join("memprof")], &[file.join("tmp")]).unwrap_err().to_string();
        assert!(err.contains(&file.join("memprof").display().to_string()), "{err}");
        assert!(err.contains("a private directory in"), "{err}");
        assert!(err.contains("MEMPROF_PRELOAD"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn concurrent_first_uses_all_get_the_whole_file() {
        let root = scratch("race");
        let dir = root.join("memprof");
        let big: &'static [u8] = Vec::leak((0..4 << 20).map(|i| (i * 7 % 251) as u8).collect());
        let l = Bundled { bytes: big, digest: "feedfacefeedface", version: "0.0.0" };
        let paths: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| l.install_in(std::slice::from_ref(&dir), &[]).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().path().to_owned()).collect()
        });
        for p in &paths {
            assert_eq!(p, &dir.join(l.file_name()));
        }
        assert!(fs::read(&paths[0]).unwrap() == big);
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "temporary files left: {names:?}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn old_builds_are_pruned_and_recent_ones_kept() {
        let root = scratch("prune");
        let old = root.join("libmemprof_preload-0.0.0-00000000000000aa.so");
        let recent = root.join("libmemprof_preload-0.0.0-00000000000000bb.so");
        let other = root.join("unrelated.so");
        for p in [&old, &recent, &other] {
            fs::write(p, b"x").unwrap();
        }
        let long_ago = SystemTime::now() - STALE - Duration::from_secs(3600);
        for p in [&old, &other] {
            File::options().write(true).open(p).unwrap().set_modified(long_ago).unwrap();
        }
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        lib().install_in(std::slice::from_ref(&root), &[]).unwrap();
        assert!(!old.exists());
        assert!(recent.exists() && other.exists());
        fs::remove_dir_all(&root).unwrap();
    }
}
