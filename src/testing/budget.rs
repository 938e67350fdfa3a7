//! Allocation budgets: ceilings for a test's [`Allocated`], kept in a TOML file beside the
//! tests, so that a change that makes a scope allocate more fails `cargo test`, and one
//! command writes the new figures when the change is meant.
//!
//! ```toml
//! # Allocation budgets of memprof::testing::measure scopes. `MEMPROF_BUDGETS=accept cargo test` rewrites them.
//! [parse_small]
//! blocks = 12
//! bytes = 4096
//! peak_bytes = 4096
//! live_bytes = 0
//! ["parser::tests::big"]
//! bytes = 100000
//! ```
//!
//! Each table is one budget, named as the test names it in [`Budgets::check`] or
//! [`crate::assert_budget!`]; its keys (`blocks`, `bytes`, `peak_bytes`, `live_bytes`) are
//! ceilings, and only the keys present are checked. Any other key, or a value that is not
//! a non-negative integer, is an error: a typo must not silently turn a check off.
//!
//! # Modes
//! `MEMPROF_BUDGETS`, read at each check (or [`Budgets::mode`], for tests of this module,
//! since the environment is the whole process's):
//! - unset or `check`: compare. A figure over its ceiling panics with the figures over, the
//!   scope's sites and the command that accepts them; a budget missing from the file panics
//!   too (CI catches a test added without one). A figure under its ceiling prints a note.
//! - `accept`: write the measured figures into the budget (the keys it has, or all four for
//!   a new one), keeping the other budgets, the comments and the order of the file; never
//!   panics over budget.
//!
//! # Files
//! Tests run in parallel threads (cargo) and processes (nextest), all accepting into one
//! file: each read-modify-write holds an exclusive `flock` on the file's directory (shared
//! to only read it; `flock` locks an open file description, so the threads of one process
//! exclude each other too). The new content is written under the file policy
//! ([`crate::files::create_output`]: a temporary file renamed over a regular file of this
//! user's, never through a symbolic link), so a reader never sees half of it. A file that
//! does not parse is reported with the parser's text and never overwritten.

use super::Allocated;
use crate::sys::files;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use toml_edit::{DocumentMut, Item, Table, TableLike, Value};

/// The variable that chooses the mode of [`BudgetMode::FromEnv`].
const ENV: &str = "MEMPROF_BUDGETS";
/// The command that writes the measured figures, as the messages show it.
const ACCEPT: &str = "MEMPROF_BUDGETS=accept cargo test";
/// The first line of a file that accept creates.
const HEADER: &str = "# Allocation budgets of memprof::testing::measure scopes. \
                      `MEMPROF_BUDGETS=accept cargo test` rewrites them.\n";
/// A budget file larger than this is refused: it is read whole, under the lock.
const MAX_FILE: u64 = 4 << 20;
/// The keys of a budget, in the order a new one is written.
const KEYS: [&str; 4] = ["blocks", "bytes", "peak_bytes", "live_bytes"];

/// What [`Budgets::check`] does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BudgetMode {
    /// As `MEMPROF_BUDGETS` says, read at each check ([`BudgetMode::from_env_value`]).
    #[default]
    FromEnv,
    /// Compare the figures with the budget; panic over it, or when there is none.
    Check,
    /// Write the measured figures into the budget.
    Accept,
}

impl BudgetMode {
    /// The mode a value of `MEMPROF_BUDGETS` asks for: unset, empty or `check` compare,
    /// `accept` writes; anything else is an error saying the values (a misspelt `accept`
    /// must not pass as a check, nor a check as an accept).
    pub fn from_env_value(value: Option<&OsStr>) -> Result<BudgetMode, String> {
        match value.map(|v| v.to_str()) {
            None | Some(Some("" | "check")) => Ok(BudgetMode::Check),
            Some(Some("accept")) => Ok(BudgetMode::Accept),
            Some(v) => Err(format!(
                "{ENV} is {:?}: unset it or set `check` to compare the figures with the \
                 budgets, or set `accept` to write the measured figures into them",
                v.map_or_else(|| value.unwrap_or_default().to_string_lossy(), Into::into)
            )),
        }
    }
}

/// An allocation budget file: [`check`](Budgets::check) compares a scope's [`Allocated`] with
/// the ceilings it keeps under a name, or writes them (`MEMPROF_BUDGETS=accept`), so that a
/// change that makes a scope allocate more fails its test until the new figures are
/// accepted on purpose. [`crate::assert_budget!`] checks against the calling crate's
/// `tests/alloc-budgets.toml`.
///
/// ```toml
/// # Allocation budgets of memprof::testing::measure scopes. `MEMPROF_BUDGETS=accept cargo test` rewrites them.
/// [parse_small]
/// blocks = 12
/// bytes = 4096
/// peak_bytes = 4096
/// live_bytes = 0
/// ["parser::tests::big"]
/// bytes = 100000
/// ```
///
/// A table per budget; its keys are ceilings, and only those present are checked. Another
/// key, or a value that is not a non-negative integer, is an error, so that a typo cannot
/// turn a check off. Accept keeps the other budgets, the comments and the order of the file
/// (it is edited, not regenerated), and writes the keys a budget has (all four for a new
/// one). Tests accepting into one file at once (threads, or nextest's processes) take turns
/// under a `flock` of its directory, and each new content replaces the file atomically.
#[derive(Clone, Debug)]
pub struct Budgets {
    path: PathBuf,
    mode: BudgetMode,
}

/// A figure with its budget: (key, measured, ceiling).
type Figure = (&'static str, u64, u64);
/// A key written by accept: (key, old value, new value).
type Change = (&'static str, Option<u64>, u64);

/// What a check or an accept found.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Every figure within its ceiling; those under it.
    Within(Vec<Figure>),
    /// The figures over their ceilings.
    Over(Vec<Figure>),
    /// No budget of the name; whether the file exists.
    Missing { file: bool },
    /// Accepted: the keys written (key, old value, new value); none when the budget already
    /// said the figures (the file is then left untouched).
    Accepted(Vec<Change>),
}

impl Budgets {
    /// The budgets kept in the file at `path`, in [`BudgetMode::FromEnv`].
    pub fn at(path: impl Into<PathBuf>) -> Budgets {
        Budgets { path: path.into(), mode: BudgetMode::FromEnv }
    }

    /// Chooses the mode instead of `MEMPROF_BUDGETS` (tests that must not depend on the
    /// process's environment).
    pub fn mode(self, mode: BudgetMode) -> Budgets {
        Budgets { mode, ..self }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Compares `stats` with the budget `name` (or writes them into it: see [`BudgetMode`]).
    /// Panics when a figure is over its ceiling, with the figures over, the scope's sites and
    /// the command that accepts them; when the file has no budget `name`; when the file
    /// cannot be read, parsed or written, or holds a key or a value that is not a ceiling.
    #[track_caller]
    pub fn check(&self, name: &str, stats: &Allocated) {
        let mode = match self.mode {
            BudgetMode::FromEnv => {
                match BudgetMode::from_env_value(std::env::var_os(ENV).as_deref()) {
                    Ok(m) => m,
                    Err(e) => panic!("memprof budgets: {e}"),
                }
            }
            m => m,
        };
        let file = self.path.display();
        let figures = measured(stats);
        match self.run(mode, name, figures) {
            Err(e) => panic!("memprof budgets: {e}"),
            Ok(Verdict::Within(under)) => {
                if !under.is_empty() {
                    eprintln!(
                        "memprof budgets: {name:?} ({file}) is under budget: {}; tighten it \
                         with: {ACCEPT}",
                        list(&under)
                    );
                }
            }
            Ok(Verdict::Over(over)) => {
                let mut msg = format!("allocation budget {name:?} ({file}) exceeded:\n");
                for (key, got, max) in &over {
                    let _ = writeln!(msg, "  {key}: {got} measured, budget {max} (+{})", got - max);
                }
                panic!("{msg}{stats}\naccept with: {ACCEPT}");
            }
            Ok(Verdict::Missing { file: exists }) => {
                let why = if exists { "" } else { " (the file does not exist)" };
                panic!(
                    "no allocation budget named {name:?} in {file}{why}; measured: {stats}\n\
                     write it with: {ACCEPT}"
                );
            }
            Ok(Verdict::Accepted(changes)) => {
                if !changes.is_empty() {
                    let changes: Vec<String> = changes
                        .iter()
                        .map(|(key, old, new)| match old {
                            Some(old) => format!("{key} {old} -> {new}"),
                            None => format!("{key} {new}"),
                        })
                        .collect();
                    eprintln!(
                        "memprof budgets: {name:?} ({file}) accepted: {}",
                        changes.join(", ")
                    );
                }
            }
        }
    }

    /// Compares `figures` ([`KEYS`]' order) with the budget `name`, or writes them into it.
    fn run(&self, mode: BudgetMode, name: &str, figures: [u64; 4]) -> Result<Verdict, String> {
        let path = &self.path;
        if files::stream_of(path).is_some() {
            return Err(format!("{} names a standard stream, not a budget file", path.display()));
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if mode == BudgetMode::Accept {
            fs::create_dir_all(dir).map_err(|e| {
                format!("cannot create {} for {}: {e}", dir.display(), name_of(path))
            })?;
        }
        let lock = match DirLock::new(dir, mode == BudgetMode::Accept) {
            Ok(lock) => lock,
            Err(e) if e.kind() == io::ErrorKind::NotFound && mode == BudgetMode::Check => {
                return Ok(Verdict::Missing { file: false });
            }
            Err(e) => {
                return Err(format!("cannot lock {} to read {}: {e}", dir.display(), name_of(path)))
            }
        };
        let text = read(path)?;
        let mut doc = match &text {
            Some(text) => text.parse::<DocumentMut>().map_err(|e| {
                format!(
                    "the budget file {} is not valid TOML (fix or delete it; it was left as it \
                     is):\n{e}",
                    path.display()
                )
            })?,
            None => DocumentMut::new(),
        };
        if mode == BudgetMode::Check {
            let Some(item) = doc.get(name) else {
                return Ok(Verdict::Missing { file: text.is_some() });
            };
            let ceilings = ceilings(entry(item, name, path)?, name, path)?;
            if ceilings.iter().all(Option::is_none) {
                return Err(format!(
                    "the budget {name:?} in {} has no ceiling ({}): it checks nothing; write \
                     the measured figures into it with: {ACCEPT}",
                    path.display(),
                    KEYS.join(", ")
                ));
            }
            let compared = KEYS
                .iter()
                .zip(figures)
                .zip(ceilings)
                .filter_map(|((&key, got), max)| Some((key, got, max?)));
            let (over, rest): (Vec<Figure>, Vec<Figure>) = compared.partition(|f| f.1 > f.2);
            if !over.is_empty() {
                return Ok(Verdict::Over(over));
            }
            return Ok(Verdict::Within(rest.into_iter().filter(|f| f.1 < f.2).collect()));
        }
        let changes = accept(&mut doc, name, path, figures)?;
        if !changes.is_empty() {
            let mut out = String::new();
            if text.as_deref().is_none_or(|t| t.trim().is_empty()) {
                out.push_str(HEADER);
            }
            out.push_str(&doc.to_string());
            write(path, &out)?;
        }
        drop(lock);
        Ok(Verdict::Accepted(changes))
    }
}

/// The figures of `stats` that budgets bound, in [`KEYS`]' order.
fn measured(stats: &Allocated) -> [u64; 4] {
    [stats.blocks, stats.bytes, stats.peak_bytes, stats.live_bytes]
}

/// `key measured of ceiling, ...`.
fn list(figures: &[Figure]) -> String {
    let all: Vec<String> =
        figures.iter().map(|(key, got, max)| format!("{key} {got} of {max}")).collect();
    all.join(", ")
}

/// The file, for messages about the directory it is in.
fn name_of(path: &Path) -> String {
    format!("the budget file {}", path.display())
}

/// The budget's table, or an error saying what the item is instead.
fn entry<'a>(item: &'a Item, name: &str, path: &Path) -> Result<&'a dyn TableLike, String> {
    item.as_table_like().ok_or_else(|| {
        format!(
            "{name:?} in the budget file {} is {}, not a table of ceilings ([{name:?}] with \
             keys {})",
            path.display(),
            item.type_name(),
            KEYS.join(", ")
        )
    })
}

/// The ceilings of a budget, in [`KEYS`]' order (`None`: not checked), or an error naming
/// a key that is not one of them, or a value that is not a non-negative integer.
fn ceilings(table: &dyn TableLike, name: &str, path: &Path) -> Result<[Option<u64>; 4], String> {
    let mut ceilings = [None; 4];
    for (key, item) in table.iter() {
        let Some(i) = KEYS.iter().position(|k| *k == key) else {
            return Err(format!(
                "unknown key {key:?} in the budget {name:?} of {}: the keys are {}",
                path.display(),
                KEYS.join(", ")
            ));
        };
        let value = item.as_value().and_then(Value::as_integer).and_then(|v| u64::try_from(v).ok());
        let Some(value) = value else {
            let shown = match item.as_value() {
                Some(v) => v.to_string().trim().to_owned(),
                None => item.type_name().to_owned(),
            };
            return Err(format!(
                "{key} = {shown} in the budget {name:?} of {}: a ceiling is a non-negative \
                 integer",
                path.display()
            ));
        };
        ceilings[i] = Some(value);
    }
    Ok(ceilings)
}

/// Writes `figures` into the budget `name` of `doc`: the keys it has, or all of them when it
/// is new or has none. Returns the keys whose value changed (old value, new value).
fn accept(
    doc: &mut DocumentMut,
    name: &str,
    path: &Path,
    figures: [u64; 4],
) -> Result<Vec<Change>, String> {
    let int = |v: u64| Value::from(i64::try_from(v).unwrap_or(i64::MAX));
    let Some(item) = doc.get_mut(name) else {
        let mut table = Table::new();
        for (key, v) in KEYS.iter().zip(figures) {
            table.insert(key, Item::Value(int(v)));
        }
        doc.insert(name, Item::Table(table));
        return Ok(KEYS.iter().zip(figures).map(|(&k, v)| (k, None, v)).collect());
    };
    let old = ceilings(entry(item, name, path)?, name, path)?;
    let write_all = old.iter().all(Option::is_none);
    let table = item.as_table_like_mut().expect("checked by entry()");
    let mut changes = Vec::new();
    for ((&key, new), old) in KEYS.iter().zip(figures).zip(old) {
        if old == Some(new) || (old.is_none() && !write_all) {
            continue;
        }
        match table.get_mut(key).and_then(Item::as_value_mut) {
            // The decor kept: a comment after the value stays.
            Some(v) => {
                let decor = v.decor().clone();
                *v = int(new);
                *v.decor_mut() = decor;
            }
            None => {
                table.insert(key, Item::Value(int(new)));
            }
        }
        changes.push((key, old, new));
    }
    Ok(changes)
}

/// The text of the budget file, `None` when there is none.
fn read(path: &Path) -> Result<Option<String>, String> {
    let file = match files::open_input_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the budget file {}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the budget file {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!(
            "the budget file {} is larger than {} MiB: not a budget file?",
            path.display(),
            MAX_FILE >> 20
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| format!("the budget file {} is not UTF-8 text: {e}", path.display()))
}

/// Replaces the budget file with `text`, atomically when it exists.
fn write(path: &Path, text: &str) -> Result<(), String> {
    let fail = |e: io::Error| format!("cannot write the budget file {}: {e}", path.display());
    let mut out = files::create_output(path, true).map_err(fail)?;
    out.write_all(text.as_bytes()).map_err(fail)?;
    out.commit().map_err(fail)
}

/// A `flock` on a directory, released when dropped (the descriptor closed).
struct DirLock {
    _dir: File,
}

impl DirLock {
    /// Opens `dir` and locks it, exclusively or shared; waits for the lock.
    fn new(dir: &Path, exclusive: bool) -> io::Result<DirLock> {
        let dir = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
        loop {
            // SAFETY: flock only takes a descriptor and an operation; `dir` keeps the
            // descriptor open for the call.
            if unsafe { libc::flock(dir.as_raw_fd(), op) } == 0 {
                return Ok(DirLock { _dir: dir });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Checks `stats` (a [`crate::testing::Allocated`]) against the budget `name` in the calling
/// crate's `tests/alloc-budgets.toml`, or in the file `path`:
/// [`Budgets::check`](crate::testing::Budgets::check) in the mode `MEMPROF_BUDGETS` says
/// (unset: compare and panic over budget; `accept`: write the measured figures).
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);
///
/// let (_, stats) = memprof::testing::measure(|| Vec::<u8>::with_capacity(1000));
/// memprof::assert_budget!("with_capacity", stats);
/// ```
#[macro_export]
macro_rules! assert_budget {
    ($name:expr, $stats:expr $(,)?) => {
        $crate::testing::Budgets::at(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/alloc-budgets.toml"
        ))
        .check($name, &$stats)
    };
    ($name:expr, $stats:expr, $path:expr $(,)?) => {
        $crate::testing::Budgets::at($path).check($name, &$stats)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A directory of the test's own, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            static SEQ: AtomicU64 = AtomicU64::new(0);
            let d = std::env::temp_dir().join(format!(
                "memprof-budget-{}-{name}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).unwrap();
            Scratch(d)
        }

        fn file(&self, text: &str) -> PathBuf {
            let p = self.0.join("budgets.toml");
            fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn run(
        path: &Path,
        mode: BudgetMode,
        name: &str,
        figures: [u64; 4],
    ) -> Result<Verdict, String> {
        Budgets::at(path).mode(mode).run(mode, name, figures)
    }

    fn stats(blocks: u64, bytes: u64) -> Allocated {
        Allocated { blocks, bytes, peak_bytes: bytes, live_bytes: 0, ..Allocated::default() }
    }

    fn panic_text(f: impl FnOnce()) -> String {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn the_mode_comes_from_the_variable() {
        let m = |v: Option<&str>| BudgetMode::from_env_value(v.map(OsStr::new));
        assert_eq!(m(None), Ok(BudgetMode::Check));
        assert_eq!(m(Some("")), Ok(BudgetMode::Check));
        assert_eq!(m(Some("check")), Ok(BudgetMode::Check));
        assert_eq!(m(Some("accept")), Ok(BudgetMode::Accept));
        for bad in ["Accept", "accept ", "1", "yes"] {
            let e = m(Some(bad)).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")) && e.contains("`accept`"), "{e}");
        }
        use std::os::unix::ffi::OsStrExt;
        assert!(BudgetMode::from_env_value(Some(OsStr::from_bytes(b"\xff"))).is_err());
        assert_eq!(Budgets::at("x").mode, BudgetMode::FromEnv);
    }

    #[test]
    fn accept_creates_the_file_then_check_compares() {
        let d = Scratch::new("new");
        let p = d.0.join("sub").join("b.toml");
        assert_eq!(
            run(&p, BudgetMode::Check, "a", [1, 2, 3, 4]),
            Ok(Verdict::Missing { file: false })
        );
        let v = run(&p, BudgetMode::Accept, "a", [1, 1000, 1000, 0]).unwrap();
        assert_eq!(
            v,
            Verdict::Accepted(vec![
                ("blocks", None, 1),
                ("bytes", None, 1000),
                ("peak_bytes", None, 1000),
                ("live_bytes", None, 0)
            ])
        );
        assert_eq!(
            fs::read_to_string(&p).unwrap(),
            format!("{HEADER}[a]\nblocks = 1\nbytes = 1000\npeak_bytes = 1000\nlive_bytes = 0\n")
        );
        assert_eq!(
            run(&p, BudgetMode::Check, "b", [1, 2, 3, 4]),
            Ok(Verdict::Missing { file: true })
        );
        assert_eq!(
            run(&p, BudgetMode::Check, "a", [1, 1000, 1000, 0]),
            Ok(Verdict::Within(vec![]))
        );
        assert_eq!(
            run(&p, BudgetMode::Check, "a", [1, 900, 1000, 0]),
            Ok(Verdict::Within(vec![("bytes", 900, 1000)]))
        );
        assert_eq!(
            run(&p, BudgetMode::Check, "a", [2, 900, 1001, 0]),
            Ok(Verdict::Over(vec![("blocks", 2, 1), ("peak_bytes", 1001, 1000)]))
        );
        // Accepting the same figures again leaves the file alone.
        let before = fs::metadata(&p).unwrap().modified().unwrap();
        assert_eq!(
            run(&p, BudgetMode::Accept, "a", [1, 1000, 1000, 0]),
            Ok(Verdict::Accepted(vec![]))
        );
        assert_eq!(fs::metadata(&p).unwrap().modified().unwrap(), before);
    }

    #[test]
    fn accept_keeps_comments_order_and_the_keys_a_budget_has() {
        let d = Scratch::new("merge");
        let text = "inline = { bytes = 10 } # a table too\n\
                    # mine\n\
                    [zeta] # last alphabetically, first here\n\
                    bytes = 4_096 # the parser's buffer\n\
                    \n\
                    # a big one\n\
                    [\"parser::tests::big\"]\n\
                    blocks = 12\n\
                    bytes = 100000\n\
                    peak_bytes = 100000\n\
                    live_bytes = 0\n\
                    # the end\n";
        let p = d.file(text);
        let v = run(&p, BudgetMode::Accept, "zeta", [5, 5000, 6000, 0]).unwrap();
        assert_eq!(v, Verdict::Accepted(vec![("bytes", Some(4096), 5000)]), "only its keys");
        let v = run(&p, BudgetMode::Accept, "inline", [1, 8, 8, 0]).unwrap();
        assert_eq!(v, Verdict::Accepted(vec![("bytes", Some(10), 8)]));
        run(&p, BudgetMode::Accept, "new", [1, 2, 3, 0]).unwrap();
        let expected = text
            .replace("bytes = 4_096 #", "bytes = 5000 #")
            .replace("{ bytes = 10 }", "{ bytes = 8 }")
            .replace(
                "live_bytes = 0\n# the end",
                "live_bytes = 0\n\n[new]\nblocks = 1\nbytes = 2\npeak_bytes = 3\nlive_bytes = 0\n# the end",
            );
        assert_eq!(fs::read_to_string(&p).unwrap(), expected);
        assert_eq!(
            run(&p, BudgetMode::Check, "parser::tests::big", [12, 100000, 1, 0]).unwrap(),
            Verdict::Within(vec![("peak_bytes", 1, 100000)])
        );
        // A budget with no key gets all of them.
        let p = d.file("[empty]\n");
        let e = run(&p, BudgetMode::Check, "empty", [1, 2, 3, 4]).unwrap_err();
        assert!(e.contains("no ceiling"), "{e}");
        assert_eq!(
            run(&p, BudgetMode::Accept, "empty", [1, 2, 3, 4]).unwrap(),
            Verdict::Accepted(KEYS.iter().zip([1, 2, 3, 4]).map(|(&k, v)| (k, None, v)).collect())
        );
        assert_eq!(
            run(&p, BudgetMode::Check, "empty", [1, 2, 3, 4]).unwrap(),
            Verdict::Within(vec![])
        );
    }

    #[test]
    fn hostile_names_are_quoted_by_the_grammar() {
        let d = Scratch::new("names");
        let p = d.0.join("b.toml");
        let names = [
            "parser::tests::big",
            "with \"quotes\" and 'apostrophes'",
            "new\nline\ttab\r\0nul",
            "ünïcødé ✓",
            "[brackets] = 1",
            "a.b",
            "",
            "# not a comment",
            "\\backslash\\",
        ];
        for (i, name) in names.iter().enumerate() {
            run(&p, BudgetMode::Accept, name, [i as u64, 10, 10, 0]).unwrap();
        }
        let doc: DocumentMut = fs::read_to_string(&p).unwrap().parse().unwrap();
        let keys: Vec<&str> = doc.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, names);
        for (i, name) in names.iter().enumerate() {
            assert_eq!(
                run(&p, BudgetMode::Check, name, [i as u64, 10, 10, 0]),
                Ok(Verdict::Within(vec![]))
            );
            assert_eq!(
                run(&p, BudgetMode::Check, name, [i as u64 + 1, 10, 10, 0]),
                Ok(Verdict::Over(vec![("blocks", i as u64 + 1, i as u64)]))
            );
        }
        // `a.b` is one key, not the table b in a.
        assert_eq!(run(&p, BudgetMode::Check, "a", [0; 4]), Ok(Verdict::Missing { file: true }));
    }

    #[test]
    fn what_is_not_a_ceiling_is_an_error_naming_it() {
        let d = Scratch::new("errors");
        let cases = [
            ("[t]\nbyts = 10\n", "unknown key \"byts\" in the budget \"t\""),
            ("[t]\nbytes = -1\n", "bytes = -1 in the budget \"t\""),
            ("[t]\nbytes = 1.5\n", "bytes = 1.5 in the budget \"t\""),
            ("[t]\nbytes = \"10\"\n", "bytes = \"10\" in the budget \"t\""),
            ("[t]\nbytes = [1]\n", "bytes = [1] in the budget \"t\""),
            ("[t.bytes]\n", "bytes = table in the budget \"t\""),
            ("t = 3\n", "\"t\" in the budget file"),
            ("[[t]]\nbytes = 1\n", "is array of tables, not a table"),
        ];
        for (text, want) in cases {
            let p = d.file(text);
            for mode in [BudgetMode::Check, BudgetMode::Accept] {
                let e = run(&p, mode, "t", [1, 1, 1, 1]).unwrap_err();
                assert!(e.contains(want) && e.contains(&p.display().to_string()), "{text}: {e}");
                assert_eq!(fs::read_to_string(&p).unwrap(), text, "left as it was");
            }
            // Other budgets of the file are not concerned.
            assert_eq!(
                run(&p, BudgetMode::Check, "u", [1; 4]),
                Ok(Verdict::Missing { file: true })
            );
        }
    }

    #[test]
    fn a_file_that_does_not_parse_is_never_overwritten() {
        let d = Scratch::new("corrupt");
        for text in ["[t]\nbytes = \n", "[t]\nbytes = 1\n[t]\n", "[t\n"] {
            let p = d.file(text);
            for mode in [BudgetMode::Check, BudgetMode::Accept] {
                let e = run(&p, mode, "t", [1; 4]).unwrap_err();
                assert!(
                    e.contains("not valid TOML") && e.contains("TOML parse error at line"),
                    "{e}"
                );
                assert!(e.contains(&p.display().to_string()), "{e}");
                assert_eq!(fs::read_to_string(&p).unwrap(), text);
            }
        }
        let p = d.0.join("budgets.toml");
        fs::write(&p, b"[t]\nbytes = 1 # \xff\n").unwrap();
        assert!(run(&p, BudgetMode::Accept, "t", [1; 4]).unwrap_err().contains("not UTF-8"));
        fs::write(&p, vec![b'#'; MAX_FILE as usize + 1]).unwrap();
        assert!(run(&p, BudgetMode::Accept, "t", [1; 4])
            .unwrap_err()
            .contains("larger than 4 MiB"));
        assert_eq!(fs::metadata(&p).unwrap().len(), MAX_FILE + 1);
        // Not a regular file: a directory, a symbolic link for writing.
        let e = run(&d.0, BudgetMode::Check, "t", [1; 4]).unwrap_err();
        assert!(e.contains("directory"), "{e}");
        let link = d.0.join("link.toml");
        std::os::unix::fs::symlink(d.0.join("elsewhere.toml"), &link).unwrap();
        let e = run(&link, BudgetMode::Accept, "t", [1; 4]).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!d.0.join("elsewhere.toml").exists());
        assert!(run(Path::new("-"), BudgetMode::Accept, "t", [1; 4])
            .unwrap_err()
            .contains("stream"));
    }

    #[test]
    fn check_panics_with_the_figures_and_the_command() {
        let d = Scratch::new("check");
        let p = d.file("[t]\nblocks = 1\nbytes = 100\n");
        let b = Budgets::at(&p).mode(BudgetMode::Check);
        b.check("t", &stats(1, 100));
        b.check("t", &stats(0, 50));
        let msg = panic_text(|| b.check("t", &stats(2, 150)));
        let file = p.display().to_string();
        assert!(msg.starts_with(&format!("allocation budget \"t\" ({file}) exceeded:\n")), "{msg}");
        assert!(msg.contains("  blocks: 2 measured, budget 1 (+1)\n"), "{msg}");
        assert!(msg.contains("  bytes: 150 measured, budget 100 (+50)\n"), "{msg}");
        assert!(msg.contains("2 blocks, 150 bytes allocated"), "{msg}");
        assert!(msg.ends_with(&format!("\naccept with: {ACCEPT}")), "{msg}");
        let msg = panic_text(|| b.check("other", &stats(1, 1)));
        assert!(msg.starts_with(&format!("no allocation budget named \"other\" in {file};")));
        assert!(msg.ends_with(&format!("write it with: {ACCEPT}")), "{msg}");
        let msg = panic_text(|| {
            Budgets::at(d.0.join("none")).mode(BudgetMode::Check).check("x", &stats(1, 1))
        });
        assert!(msg.contains("(the file does not exist)"), "{msg}");
        // Accept never panics over budget.
        Budgets::at(&p).mode(BudgetMode::Accept).check("t", &stats(2, 150));
        b.check("t", &stats(2, 150));
        assert_eq!(fs::read_to_string(&p).unwrap(), "[t]\nblocks = 2\nbytes = 150\n");
    }

    #[test]
    fn threads_accepting_into_one_file_lose_nothing() {
        let d = Scratch::new("threads");
        let p = d.0.join("b.toml");
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let p = &p;
                s.spawn(move || {
                    for i in 0..5 {
                        run(p, BudgetMode::Accept, &format!("t{t}::{i}"), [t, i, 0, 0]).unwrap();
                        run(p, BudgetMode::Check, &format!("t{t}::{i}"), [t, i, 0, 0]).unwrap();
                    }
                });
            }
        });
        let doc: DocumentMut = fs::read_to_string(&p).unwrap().parse().unwrap();
        assert_eq!(doc.len(), 40);
        assert_eq!(fs::read_dir(&d.0).unwrap().count(), 1, "no temporary file left");
    }
}
