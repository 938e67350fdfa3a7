//! Addresses resolved from the recorded modules' files: each module's file (and its
//! separate debug file) read once by [`Loaders`], and only when it is the object that ran.

use std::collections::HashMap;
use std::path::Path;

use super::cache::SymbolCache;
use super::debug_file::debug_candidates;
use super::names::demangle;
use crate::profile::object_file::ObjectFile;
use crate::profile::{Module, Profile, Symbol};

/// Resolves, from the files of the recorded modules, every stack address that has no
/// symbols yet: the path for profiles whose process did not write its symbols (the preload
/// library leaves them to the reader; a process that crashed or was killed never got to).
/// Uses the DWARF of each module (inline chains, file and line; Rust and C++ names
/// demangled), or of its separate debug file where the distribution installs one
/// (`/usr/lib/debug/.build-id/xx/yyyy.debug`, found by the module's GNU build id), and
/// falls back to the ELF symbol tables. A module recorded with a build id is only read
/// from a file with the same build id; one without, only from a file of the size and
/// modification time the run saw.
/// Returns a note for each module that could not be read; addresses it cannot resolve keep
/// their `module+0xoffset` names.
pub fn resolve_offline(profile: &mut Profile) -> Vec<String> {
    resolve_offline_with(profile, &mut Loaders::default())
}

/// [`resolve_offline`] with symbol readers loaded earlier (by [`Loaders::load`], for example
/// while the program still ran), which are used where they were read from the same file as
/// the module's; others are loaded now and kept in `loaders` for the next profile.
pub(crate) fn resolve_offline_with(profile: &mut Profile, loaders: &mut Loaders) -> Vec<String> {
    let by_module = unnamed_by_module(profile);
    let mut notes = Vec::new();
    // Out of `loaders` while they are borrowed; put back at the end.
    let mut cache = loaders.cache.take();
    for (i, mut addrs) in by_module {
        let module = &profile.modules[i];
        let (base, build_id) = (module.base, module.build_id.clone());
        // Offsets resolved by an earlier run of the same build: no file is read for them.
        if let Some(entry) = cache.as_mut().and_then(|c| c.module(&build_id)) {
            let before = addrs.len();
            addrs.retain(|&addr| match entry.get(probe(addr, base)) {
                Some(chain) => {
                    if !chain.is_empty() {
                        profile.symbols.insert(addr, chain.clone());
                    }
                    false
                }
                None => true,
            });
            if let Some(c) = cache.as_mut() {
                c.hits += (before - addrs.len()) as u64;
            }
        }
        if addrs.is_empty() {
            continue;
        }
        let module = &profile.modules[i];
        let loaded = match loaders.for_module(module) {
            Ok(l) => l,
            Err(e) => {
                notes.push(e);
                continue;
            }
        };
        // The separate debug file has the same addresses as the module.
        let objects: Vec<&ObjectFile> = loaded.debug.iter().chain([&loaded.main]).collect();
        let mut entry = cache.as_mut().and_then(|c| c.module(&build_id));
        for &addr in &addrs {
            let chain = resolve_one(&objects, probe(addr, base));
            if let Some(e) = entry.as_deref_mut() {
                e.insert(probe(addr, base), &chain);
            }
            if !chain.is_empty() {
                profile.symbols.insert(addr, chain);
            }
        }
        if let Some(c) = cache.as_mut() {
            c.misses += addrs.len() as u64;
        }
    }
    if let Some(c) = cache.as_mut() {
        c.flush();
        if std::env::var_os("MEMPROF_DEBUG_SYMBOL_CACHE").is_some() {
            eprintln!("memprof: symbol cache: {} from the cache, {} resolved", c.hits, c.misses);
        }
    }
    loaders.cache = cache;
    notes
}

/// The address looked up for return address `addr` of a module loaded at `base`: the
/// call's own (`addr - 1`), as an offset into the object (what the cache is keyed by).
fn probe(addr: u64, base: u64) -> u64 {
    addr.saturating_sub(1).wrapping_sub(base)
}

/// The inline chain (innermost first) of `probe` in the first of `objects` that names
/// it: DWARF's frames, the outermost named in full from the symbol table; else the
/// symbol table's name alone; empty when nothing names it.
fn resolve_one(objects: &[&ObjectFile], probe: u64) -> Vec<Symbol> {
    let mut chain = Vec::new();
    for loader in objects {
        if !chain.is_empty() {
            break;
        }
        let Ok(Some(mut frames)) = loader.find_frames(probe) else {
            continue;
        };
        while let Ok(Some(frame)) = frames.next() {
            // The raw name, demangled by the one rule of every path (`names.rs`): not
            // addr2line's, which hands any name to both demanglers.
            let Some(raw) = frame.function.as_ref().and_then(|f| f.raw_name().ok()) else {
                continue;
            };
            let (file, line) = match &frame.location {
                Some(l) => (l.file.map(str::to_owned), l.line),
                None => (None, None),
            };
            let function = demangle(&raw);
            chain.push(Symbol { function, file, line });
        }
        // Line-tables-only DWARF names the function without its path: the symbol table
        // has the full name of the outermost frame's function.
        if let Some(outer) = chain.last_mut() {
            if let Some(full) = loader.find_symbol(probe).map(demangle) {
                if qualifies(&outer.function, &full) {
                    outer.function = full;
                }
            }
        }
    }
    if chain.is_empty() {
        if let Some(name) = objects.iter().find_map(|l| l.find_symbol(probe)) {
            chain.push(Symbol { function: demangle(name), file: None, line: None });
        }
    }
    chain
}

/// True when `full` (a symbol table's name) is the full path of the DWARF name `short`, a
/// name without its module path (`fill_table` of `sites::fill_table`, `{closure#0}` of
/// `sites::main::{{closure}}`). Names that have a path or parameters already (C++'s, full
/// Rust names) and names that match exactly (C's) are kept.
fn qualifies(short: &str, full: &str) -> bool {
    if short.contains("::") || short.contains('(') || short == full {
        return false;
    }
    let base = short.split('<').next().unwrap_or(short);
    let Some(last) = full.rsplit("::").next() else { return false };
    let last = last.split('<').next().unwrap_or(last);
    full.contains("::")
        && (last == base || (base.starts_with("{closure") && last.starts_with("{{closure")))
}

/// The return addresses of the profile's stacks that have no symbols yet, each once, by
/// the index of the module that holds them (addresses outside every module are left out).
pub(super) fn unnamed_by_module(profile: &Profile) -> std::collections::BTreeMap<usize, Vec<u64>> {
    let mut by_module: std::collections::BTreeMap<usize, Vec<u64>> = Default::default();
    let mut seen = std::collections::HashSet::new();
    for stack in &profile.stacks {
        for &addr in &stack.frames {
            if profile.symbols.contains_key(&addr) || !seen.insert(addr) {
                continue;
            }
            let lookup = addr.saturating_sub(1);
            if let Some(i) =
                profile.modules.iter().position(|m| m.start <= lookup && lookup < m.end)
            {
                by_module.entry(i).or_default().push(addr);
            }
        }
    }
    by_module
}

/// Symbol readers (addr2line over the DWARF and symbol tables) of object files by path, with
/// what identified each file when it was read. Loading one means reading and decompressing
/// its debug sections: tens of milliseconds for a C library with its separate debug file,
/// the bulk of what `memprof record` did after the program exited. `memprof record` loads
/// the program's objects while the program runs ([`Loaders::load`] from another thread:
/// the value is `Send`), so that little is left to do after it exits.
#[derive(Default)]
pub(crate) struct Loaders {
    by_path: HashMap<String, Loaded>,
    /// Frames resolved by earlier runs, by build id (`cache.rs`); none unless asked for.
    cache: Option<SymbolCache>,
}

struct Loaded {
    /// The object, with its build id and identity as read from its descriptor.
    main: ObjectFile,
    /// The separate debug file (`/usr/lib/debug/.build-id/`), when installed.
    debug: Option<ObjectFile>,
}

impl std::fmt::Debug for Loaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaders")
            .field("paths", &self.by_path.keys())
            .field("cache", &self.cache)
            .finish()
    }
}

impl Loaders {
    /// Loaders that take frames from, and add them to, the symbol cache in `dir` (a
    /// private directory the caller has checked: `cache.rs` §2); `None`: no cache.
    pub fn cached(dir: Option<std::path::PathBuf>) -> Loaders {
        Loaders { by_path: HashMap::new(), cache: dir.map(SymbolCache::new) }
    }

    /// Reads the symbols of the object at `path` unless they are loaded; an object that
    /// cannot be read is skipped (resolution reports it), and one whose build has frames
    /// in the cache is left until an offset the cache lacks needs it.
    pub fn load(&mut self, path: &str) {
        if let Some(cache) = &self.cache {
            if super::elf::build_id(Path::new(path)).is_some_and(|id| cache.knows(&id)) {
                return;
            }
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.by_path.entry(Self::key(path)) {
            if let Ok(l) = Self::read(path) {
                e.insert(l);
            }
        }
    }

    /// Files are known by their canonical path: the loader's name for an object
    /// (`/lib/x86_64-linux-gnu/libc.so.6`) and the kernel's (`/usr/lib/…`) differ where
    /// `/lib` is a link.
    fn key(path: &str) -> String {
        std::fs::canonicalize(path)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.to_owned())
    }

    fn read(path: &str) -> Result<Loaded, String> {
        // Each file is opened once, and what identifies it is read from that descriptor
        // (`object_file.rs`): a path that names a FIFO never blocks, and a path swapped
        // after a check cannot make the symbols of another file pass for this one's.
        let main = ObjectFile::open(Path::new(path))?;
        let debug = debug_object(Path::new(path), &main);
        Ok(Loaded { main, debug })
    }

    /// The readers of `module`'s file, loaded now unless loaded earlier from the same file
    /// (same build id, or same size and time for an object without one). The error says
    /// why the file cannot be used: unreadable, or not the object that ran.
    fn for_module(&mut self, module: &Module) -> Result<&Loaded, String> {
        let key = Self::key(&module.path);
        if self.by_path.get(&key).is_none_or(|l| same_object(module, &l.main).is_err()) {
            let l = Self::read(&module.path)?;
            self.by_path.insert(key.clone(), l);
        }
        let loaded = &self.by_path[&key];
        same_object(module, &loaded.main)?;
        Ok(loaded)
    }
}

/// Whether `object` is the file `module` ran from: a module recorded with a build id only
/// from a file with the same build id; one without, only from a file of the size and time
/// the run saw. A file that is not the object that ran (rebuilt or upgraded since) would
/// give wrong symbols, so none are taken from it: the error says so.
fn same_object(module: &Module, object: &ObjectFile) -> Result<(), String> {
    if !module.build_id.is_empty() && object.build_id.as_deref() != Some(&module.build_id[..]) {
        return Err(format!(
            "{} has changed since the run (its build id differs): its frames are shown as \
             module+offset",
            module.path
        ));
    }
    if module.build_id.is_empty()
        && module.file_size != 0
        && object.identity != (module.file_size, module.file_mtime_ns)
    {
        return Err(format!(
            "{} has changed since the run (it has no build id, and its size or time \
             differs): its frames are shown as module+offset",
            module.path
        ));
    }
    Ok(())
}

/// The separate debug file of `main` (read from `path`): the first of
/// [`debug_candidates`] that reads as an object file other than `main` itself, with
/// `main`'s build id when both have one. Each candidate is opened once under the policy
/// and judged by what that descriptor holds.
fn debug_object(path: &Path, main: &ObjectFile) -> Option<ObjectFile> {
    debug_candidates(path).into_iter().filter(|p| p.exists()).find_map(|p| {
        let d = ObjectFile::open(&p).ok()?;
        let fits = d.file_id != main.file_id
            && (main.build_id.is_none() || d.build_id.is_none() || d.build_id == main.build_id);
        fits.then_some(d)
    })
}
