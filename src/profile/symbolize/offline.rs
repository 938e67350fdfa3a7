//! Addresses resolved from the recorded modules' files: each module's file (and its
//! separate debug file) read once by [`Loaders`], and only when it is the object that ran.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use super::cache::SymbolCache;
use super::debug_file::{by_build_id, debug_candidates};
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
/// the module's; others are loaded now and kept in `loaders` for the next profile. The
/// modules are read by up to [`reading_threads`] threads at once.
pub(crate) fn resolve_offline_with(profile: &mut Profile, loaders: &mut Loaders) -> Vec<String> {
    resolve_offline_threads(profile, loaders, reading_threads())
}

/// The most threads that read modules at once. Each reads one object at a time, and an
/// object being read holds its sections twice over for a moment (compressed and not): this
/// bounds what reading adds on top of the objects kept.
const MOST_THREADS: usize = 4;

/// The stack of a reading thread: the main thread's, since DWARF's inline trees are walked
/// by recursion as deep as a file nests them.
const READING_STACK: usize = 8 << 20;

/// How many threads read the modules: `MEMPROF_DEBUG_SYMBOL_THREADS` when it is a
/// positive number (1: one at a time, in the calling thread), else the cores this process
/// may run on; at most [`MOST_THREADS`].
fn reading_threads() -> usize {
    let asked = std::env::var("MEMPROF_DEBUG_SYMBOL_THREADS").ok().and_then(|v| v.parse().ok());
    let n = match asked {
        Some(n) if n > 0 => n,
        _ => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
    };
    n.min(MOST_THREADS)
}

/// [`resolve_offline_with`] over `threads` threads (1: in the calling thread alone). The
/// profile comes out the same whatever the number: each file is read by one thread, and
/// what the threads found is put in the profile, the notes and the cache in the modules'
/// order, as one thread would have.
fn resolve_offline_threads(
    profile: &mut Profile,
    loaders: &mut Loaders,
    threads: usize,
) -> Vec<String> {
    let mut by_module = unnamed_by_module(profile);
    // Out of `loaders` while they are borrowed; put back at the end.
    let mut cache = loaders.cache.take();
    if let Some(c) = cache.as_mut() {
        from_cache(profile, c, &mut by_module);
    }
    let jobs = loaders.jobs(profile, by_module);
    let mut found: Vec<(usize, Found)> = Vec::new();
    for done in run_jobs(jobs, threads) {
        if let Some(l) = done.loaded {
            loaders.by_path.insert(done.key, l);
        }
        found.extend(done.found);
    }
    found.sort_unstable_by_key(|(i, _)| *i);
    let mut notes = Vec::new();
    for (i, chains) in found {
        let chains = match chains {
            Ok(chains) => chains,
            Err(note) => {
                notes.push(note);
                continue;
            }
        };
        let base = profile.modules[i].base;
        let build_id = &profile.modules[i].build_id;
        let mut entry = cache.as_mut().and_then(|c| c.module(build_id));
        for &(addr, ref chain) in &chains {
            if let Some(e) = entry.as_deref_mut() {
                e.insert(probe(addr, base), chain);
            }
        }
        if let Some(c) = cache.as_mut() {
            c.misses += chains.len() as u64;
        }
        for (addr, chain) in chains {
            if !chain.is_empty() {
                profile.symbols.insert(addr, chain);
            }
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

/// Names from `cache` the addresses of `by_module` that an earlier run of the same build
/// resolved (no file is read for them), and leaves the others.
fn from_cache(profile: &mut Profile, cache: &mut SymbolCache, by_module: &mut ByModule) {
    for (&i, addrs) in by_module.iter_mut() {
        let base = profile.modules[i].base;
        let Some(entry) = cache.module(&profile.modules[i].build_id) else { continue };
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
        cache.hits += (before - addrs.len()) as u64;
    }
}

/// What one module's addresses resolved to (each with its chain, empty when nothing
/// names it), or the note that says why its file could not be used.
type Found = Result<Vec<(u64, Vec<Symbol>)>, String>;

/// One file's work: the modules mapped from it with their addresses, and its readers when
/// loaded earlier. One thread does all of it, so that each file is read once.
struct Job<'p> {
    key: String,
    loaded: Option<Loaded>,
    modules: Vec<(usize, &'p Module, Vec<u64>)>,
    /// What the work is thought to cost, to start the largest first.
    weight: u64,
}

/// A job done: the file's readers, to keep, and what its modules' addresses resolved to.
struct Done {
    key: String,
    loaded: Option<Loaded>,
    found: Vec<(usize, Found)>,
}

impl Job<'_> {
    fn run(self) -> Done {
        let mut loaded = self.loaded;
        let mut found = Vec::with_capacity(self.modules.len());
        for (i, module, addrs) in self.modules {
            let l = match usable(&mut loaded, module) {
                Ok(l) => l,
                Err(e) => {
                    found.push((i, Err(e)));
                    continue;
                }
            };
            // The separate debug file has the same addresses as the module.
            let objects: Vec<&ObjectFile> = l.debug.iter().chain([&l.main]).collect();
            let chains = addrs
                .into_iter()
                .map(|addr| (addr, resolve_one(&objects, probe(addr, module.base))))
                .collect();
            found.push((i, Ok(chains)));
        }
        Done { key: self.key, loaded, found }
    }
}

/// The readers of `module`'s file: `loaded` unless it was read from another file than the
/// module's (another build id, or size and time for an object without one), else read now
/// into `loaded`. The error says why the file cannot be used: unreadable, or not the
/// object that ran.
fn usable<'l>(loaded: &'l mut Option<Loaded>, module: &Module) -> Result<&'l Loaded, String> {
    if loaded.as_ref().is_none_or(|l| same_object(module, &l.main).is_err()) {
        *loaded = Some(Loaders::read(&module.path)?);
    }
    let Some(l) = loaded.as_ref() else {
        return Err(format!("cannot read symbols of {}", module.path));
    };
    same_object(module, &l.main)?;
    Ok(l)
}

/// Runs `jobs` on `threads` threads (the calling one among them), the costliest first; a
/// thread that cannot be started leaves its share to the others.
fn run_jobs(mut jobs: Vec<Job<'_>>, threads: usize) -> Vec<Done> {
    jobs.sort_by_key(|j| std::cmp::Reverse(j.weight));
    let threads = threads.clamp(1, MOST_THREADS).min(jobs.len());
    let queue = Mutex::new(jobs.into_iter());
    let done = Mutex::new(Vec::new());
    let work = || loop {
        let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
        let Some(job) = next else { break };
        let d = job.run();
        done.lock().unwrap_or_else(PoisonError::into_inner).push(d);
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            let spawned = std::thread::Builder::new()
                .name("memprof-symbols".into())
                .stack_size(READING_STACK)
                .spawn_scoped(s, work);
            if spawned.is_err() {
                break;
            }
        }
        work();
    });
    done.into_inner().unwrap_or_else(PoisonError::into_inner)
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

/// Addresses by the index of the module that holds them.
pub(super) type ByModule = BTreeMap<usize, Vec<u64>>;

/// The return addresses of the profile's stacks that have no symbols yet, each once, by
/// the index of the module that holds them (addresses outside every module are left out).
pub(super) fn unnamed_by_module(profile: &Profile) -> ByModule {
    let mut by_module = ByModule::new();
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

    /// The symbol cache's directory, when frames are cached.
    pub(crate) fn cache_dir(&self) -> Option<&Path> {
        self.cache.as_ref().map(SymbolCache::dir)
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

    /// The work of resolving `by_module`: one job per file (modules mapped from the same
    /// file share its readers), each with the readers loaded earlier, taken out of `self`
    /// until the job is done.
    fn jobs<'p>(&mut self, profile: &'p Profile, by_module: ByModule) -> Vec<Job<'p>> {
        let mut jobs: Vec<Job<'p>> = Vec::new();
        for (i, addrs) in by_module {
            if addrs.is_empty() {
                continue;
            }
            let module = &profile.modules[i];
            let key = Self::key(&module.path);
            let at = match jobs.iter().position(|j| j.key == key) {
                Some(at) => at,
                None => {
                    let loaded = self.by_path.remove(&key);
                    let size = if loaded.is_some() { 0 } else { read_weight(module) };
                    jobs.push(Job { key, loaded, modules: Vec::new(), weight: size });
                    jobs.len() - 1
                }
            };
            jobs[at].weight += addrs.len() as u64 * LOOKUP_WEIGHT;
            jobs[at].modules.push((i, module, addrs));
        }
        jobs
    }
}

/// What one address's lookup is thought to cost, in bytes of file read (to order jobs).
const LOOKUP_WEIGHT: u64 = 64 << 10;

/// What reading `module`'s symbols is thought to cost, to order jobs: about the size of its
/// file and of its debug file by build id, where one is installed (both only `stat`ed;
/// what is read is judged when it is opened, `object_file.rs`).
fn read_weight(module: &Module) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let debug = by_build_id(&module.build_id).map_or(0, |p| size(&p));
    size(Path::new(&module.path)) + debug
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::symbolize::current_modules;
    use crate::profile::Stack;

    /// A profile of this test program's modules whose stacks pass through up to `most`
    /// functions of each (one return address past each function's middle), plus a module
    /// whose file is another build's and one whose file is gone, which give notes.
    fn profile_of_this_process(most: usize) -> Profile {
        let mut modules = current_modules();
        let mut frames = Vec::new();
        for m in &modules {
            let Ok(object) = ObjectFile::open(Path::new(&m.path)) else { continue };
            let all = object.function_addresses();
            let step = (all.len() / most).max(1);
            frames.extend(all.into_iter().step_by(step).map(|a| m.base + a + 1));
        }
        let top = modules.iter().map(|m| m.end).max().unwrap_or(0) + (1 << 20);
        let exe = modules[0].path.clone();
        for (n, path, id) in
            [(0, exe, vec![7u8; 20]), (1, "/nonexistent/libgone.so".into(), vec![])]
        {
            let start = top + n * (1 << 20);
            modules.push(Module {
                path,
                base: start,
                start,
                end: start + 4096,
                build_id: id,
                ..Module::default()
            });
            frames.push(start + 16);
        }
        let stacks = frames
            .chunks(16)
            .map(|f| Stack { frames: f.to_vec(), truncated: false, label: 0 })
            .collect();
        Profile { modules, stacks, ..Profile::default() }
    }

    fn private_dir(name: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let d = crate::sys::test_dir("offline", name);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    /// The files of `dir`, by name, with their bytes.
    fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
            })
            .collect()
    }

    /// Read by several threads, a profile gets the same symbols and notes, and the cache
    /// the same files, as read by one.
    #[test]
    fn threads_resolve_as_one_does() {
        let bare = profile_of_this_process(300);
        let (one_dir, many_dir) = (private_dir("one"), private_dir("many"));
        let mut one = bare.clone();
        let notes_one =
            resolve_offline_threads(&mut one, &mut Loaders::cached(Some(one_dir.clone())), 1);
        let mut many = bare.clone();
        let notes_many =
            resolve_offline_threads(&mut many, &mut Loaders::cached(Some(many_dir.clone())), 3);
        assert!(one.symbols.len() > 300, "{} addresses named", one.symbols.len());
        assert_eq!(one.symbols, many.symbols);
        assert_eq!(notes_one.len(), 2, "{notes_one:?}");
        assert_eq!(notes_one, notes_many);
        assert_eq!(files(&one_dir), files(&many_dir));
        // Loaded once, the readers answer again (no file read) the same way.
        let mut loaders = Loaders::default();
        let mut first = bare.clone();
        resolve_offline_threads(&mut first, &mut loaders, 3);
        let mut again = bare.clone();
        resolve_offline_threads(&mut again, &mut loaders, 2);
        assert_eq!(again.symbols, one.symbols);
        let _ = std::fs::remove_dir_all(&one_dir);
        let _ = std::fs::remove_dir_all(&many_dir);
    }
}
