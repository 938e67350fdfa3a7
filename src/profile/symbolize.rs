//! Symbolization: the modules of this process, addresses to functions, and the names that
//! reports give to frames.
//!
//! # 1. In process
//! [`current_modules`] lists the loaded objects (`dl_iterate_phdr`), so that a profile can be
//! symbolized later from the binaries even if the process crashed. [`resolve_in_process`]
//! turns return addresses into inline chains with `backtrace` (addr2line over the binaries'
//! debug info). It runs on a cold path only: it allocates and takes backtrace's lock.
//!
//! # 2. Naming frames
//! Stacks hold return addresses, innermost first. A return address points after its call, so
//! lookups use `addr - 1`; the maps stay keyed by the original address. An address expands
//! to its inline chain (innermost first); an address without symbols is named
//! `module+0xoffset` (offset from the module's load bias) or `0xaddr`.
//!
//! Frames of the profiler itself (the allocator hooks, the capture, the preload library's
//! `malloc`) sit at the leaf end of every stack. [`Profile::frame_locations`] drops the
//! innermost frames up to and including the outermost such frame found within the first
//! [`TRIM_WINDOW`] expanded frames, so that reports start at the program's own call to the
//! allocator. [`Profile::site_name`] further skips allocation plumbing (the C and C++
//! runtimes, the Rust standard library, known wrappers: [`crate::profile::site`]) to name
//! the allocation *site*: the first frame of the program itself.
//!
//! # 3. Offline
//! [`resolve_offline`] reads the recorded modules' files (and their separate debug files).
//! Built with `debug = "line-tables-only"`, DWARF names functions without their module path
//! (`fill_table`, `{closure#0}`): the outermost frame of each inline chain then takes the
//! ELF symbol table's full name for its address (`sites::fill_table`) when that name ends
//! the same way. A stripped object whose exported functions are in its dynamic symbol table
//! (libstdc++'s `operator new`) still names them: addr2line's symbol map falls back to
//! `.dynsym` when there is no `.symtab`. [`unresolved_objects`] says, once per object, why
//! frames stayed unnamed and where a debug file was looked for.
//!
//! Every file is read through `object_file.rs`: opened once under the file policy (a
//! regular file, never blocking on a FIFO), and judged by what that descriptor holds: the
//! build id (or size and time) that must be the module's, and the debug file's build id
//! that must be the object's. A path swapped after a check cannot pass another file's
//! symbols off as the module's.

use std::collections::HashMap;
use std::path::Path;

#[cfg(feature = "report")]
use super::object_file::ObjectFile;

pub use super::site::is_std_plumbing;
use super::{Module, Profile, StackId, Symbol};

/// How many expanded frames, from the innermost, are searched for profiler machinery.
pub const TRIM_WINDOW: usize = 24;

/// Name given to a stack that has no frames left to show.
pub const UNKNOWN_STACK: &str = "[unknown stack]";

/// Root frame added by [`Profile::frame_names`] above stacks cut at the configured depth.
pub const TRUNCATED: &str = "[truncated]";

/// The loaded objects of this process: the main executable first, then shared libraries in
/// the loader's order. Objects without loadable segments (and unnamed objects other than the
/// main executable, such as the vDSO on some systems) are left out.
pub fn current_modules() -> Vec<Module> {
    struct Raw {
        name: Vec<u8>,
        base: u64,
        start: u64,
        end: u64,
        build_id: Vec<u8>,
    }

    let mut raw: Vec<Raw> = Vec::new();
    // The callback does not panic short of an allocation failure, which aborts.
    crate::sys::loader::for_each_object(|object| {
        let name = object.name().to_bytes().to_vec();
        let phdrs = object.phdrs();
        let base = object.bias() as u64;
        let (mut start, mut end) = (u64::MAX, 0u64);
        for ph in phdrs.iter().filter(|ph| ph.p_type == libc::PT_LOAD) {
            let s = base.wrapping_add(ph.p_vaddr);
            start = start.min(s);
            end = end.max(s.wrapping_add(ph.p_memsz));
        }
        // The build id, from the notes of the mapped image (no file is read). A note
        // segment is read only where a loadable segment maps it.
        let loaded = |lo: u64, hi: u64| {
            phdrs.iter().any(|ph| {
                ph.p_type == libc::PT_LOAD && ph.p_vaddr <= lo && hi <= ph.p_vaddr + ph.p_filesz
            })
        };
        let build_id = phdrs
            .iter()
            .filter(|ph| ph.p_type == libc::PT_NOTE && ph.p_memsz <= 1 << 16)
            .filter(|ph| loaded(ph.p_vaddr, ph.p_vaddr + ph.p_memsz))
            .find_map(|ph| {
                let at = base.wrapping_add(ph.p_vaddr) as *const u8;
                // SAFETY: the note segment lies inside a loaded segment of an object that
                // stays mapped during the walk (the loader holds its lock).
                let notes = unsafe { std::slice::from_raw_parts(at, ph.p_memsz as usize) };
                note_build_id(notes)
            })
            .unwrap_or_default();
        if start < end {
            raw.push(Raw { name, base, start, end, build_id });
        }
    });
    let exe = std::fs::read_link("/proc/self/exe").ok();
    let mut modules = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let path = if r.name.is_empty() {
            match (&exe, i) {
                (Some(exe), 0) => exe.to_string_lossy().into_owned(),
                _ => continue,
            }
        } else {
            String::from_utf8_lossy(&r.name).into_owned()
        };
        // Without a build id, the file's size and time stand for its identity.
        let (file_size, file_mtime_ns) =
            if r.build_id.is_empty() { file_identity(Path::new(&path)) } else { (0, 0) };
        modules.push(Module {
            path,
            base: r.base,
            start: r.start,
            end: r.end,
            build_id: r.build_id,
            file_size,
            file_mtime_ns,
        });
    }
    modules
}

/// A file's size and modification time in ns since the epoch ((0, 0) when it cannot be
/// read): what stands for an object's identity when it has no build id.
pub fn file_identity(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => {
            let ns =
                (m.mtime() as u64).wrapping_mul(1_000_000_000).wrapping_add(m.mtime_nsec() as u64);
            (m.size(), ns)
        }
        Err(_) => (0, 0),
    }
}

/// Drops a trailing legacy-mangling hash (`::h0123456789abcdef`) from a demangled name.
pub fn strip_hash(name: &str) -> &str {
    if let Some(pos) = name.rfind("::h") {
        let hash = &name[pos + 3..];
        if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return &name[..pos];
        }
    }
    name
}

/// Resolves return addresses of this process to their inline chains (innermost first),
/// keyed by the address as given. Addresses without any named symbol are left out.
pub fn resolve_in_process(addrs: impl IntoIterator<Item = u64>) -> HashMap<u64, Vec<Symbol>> {
    let mut out = HashMap::new();
    for addr in addrs {
        if out.contains_key(&addr) {
            continue;
        }
        let mut chain = Vec::new();
        let lookup = addr.saturating_sub(1) as usize as *mut std::ffi::c_void;
        backtrace::resolve(lookup, |sym| {
            let Some(name) = sym.name() else { return };
            // `{:#}` asks the demangler to leave the hash out; strip_hash catches the rest.
            let function = strip_hash(&format!("{name:#}")).to_owned();
            let file = sym.filename().map(|f| f.to_string_lossy().into_owned());
            chain.push(Symbol { function, file, line: sym.lineno() });
        });
        if !chain.is_empty() {
            out.insert(addr, chain);
        }
    }
    out
}

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
#[cfg(feature = "report")]
pub fn resolve_offline(profile: &mut Profile) -> Vec<String> {
    resolve_offline_with(profile, &mut Loaders::default())
}

/// [`resolve_offline`] with symbol readers loaded earlier (by [`Loaders::load`], for example
/// while the program still ran), which are used where they were read from the same file as
/// the module's; others are loaded now and kept in `loaders` for the next profile.
#[cfg(feature = "report")]
pub(crate) fn resolve_offline_with(profile: &mut Profile, loaders: &mut Loaders) -> Vec<String> {
    let by_module = unnamed_by_module(profile);
    let mut notes = Vec::new();
    for (i, addrs) in by_module {
        let module = &profile.modules[i];
        let loaded = match loaders.for_module(module) {
            Ok(l) => l,
            Err(e) => {
                notes.push(e);
                continue;
            }
        };
        // The separate debug file has the same addresses as the module.
        let loaders: Vec<&ObjectFile> = loaded.debug.iter().chain([&loaded.main]).collect();
        let base = module.base;
        for addr in addrs {
            let probe = addr.saturating_sub(1).wrapping_sub(base);
            let mut chain = Vec::new();
            for loader in &loaders {
                if !chain.is_empty() {
                    break;
                }
                let Ok(mut frames) = loader.find_frames(probe) else {
                    continue;
                };
                while let Ok(Some(frame)) = frames.next() {
                    let Some(function) = frame.function.as_ref().and_then(|f| f.demangle().ok())
                    else {
                        continue;
                    };
                    let (file, line) = match &frame.location {
                        Some(l) => (l.file.map(str::to_owned), l.line),
                        None => (None, None),
                    };
                    let function = unmangled(strip_hash(&function));
                    chain.push(Symbol { function, file, line });
                }
                // Line-tables-only DWARF names the function without its path: the symbol
                // table has the full name of the outermost frame's function.
                if let Some(outer) = chain.last_mut() {
                    if let Some(full) = loader.find_symbol(probe).map(full_name) {
                        if qualifies(&outer.function, &full) {
                            outer.function = full;
                        }
                    }
                }
            }
            if chain.is_empty() {
                if let Some(name) = loaders.iter().find_map(|l| l.find_symbol(probe)) {
                    chain.push(Symbol { function: full_name(name), file: None, line: None });
                }
            }
            if !chain.is_empty() {
                profile.symbols.insert(addr, chain);
            }
        }
    }
    notes
}

/// A symbol table's name, demangled, without a legacy Rust hash.
#[cfg(feature = "report")]
fn full_name(name: &str) -> String {
    let name = addr2line::demangle_auto(name.into(), None);
    unmangled(strip_hash(&name))
}

/// `name`, or, for a C++ name the demangler could not read (it gives some template names
/// with expressions back mangled: `std::make_shared`'s `enable_if<!is_array<T>::value>`),
/// the qualified name its mangling starts with: `_ZSt11make_sharedI…` is
/// `std::make_shared<…>`. That is enough to read it and to know whose code it is.
pub fn unmangled(name: &str) -> String {
    cpp_prefix(name).unwrap_or_else(|| name.to_owned())
}

/// The qualified name at the start of an Itanium-mangled name (`_Z`, then `N…` nested
/// or a single name, each component `St` or `<length><identifier>`), with `<…>` for
/// template arguments and `::…` for what could not be read after them.
fn cpp_prefix(name: &str) -> Option<String> {
    let rest = name.strip_prefix("_Z")?.as_bytes();
    let nested = rest.first() == Some(&b'N');
    let mut i = usize::from(nested);
    while nested && matches!(rest.get(i), Some(b'K' | b'V' | b'r')) {
        i += 1;
    }
    let mut parts: Vec<String> = Vec::new();
    let mut tail = "";
    loop {
        match rest.get(i) {
            Some(b'S') if rest.get(i + 1) == Some(&b't') => {
                parts.push("std".into());
                i += 2;
                continue;
            }
            Some(b'0'..=b'9') => {
                let digits = rest[i..].iter().take_while(|b| b.is_ascii_digit()).count();
                let len: usize = std::str::from_utf8(&rest[i..i + digits]).ok()?.parse().ok()?;
                let start = i + digits;
                let ident = rest.get(start..start.checked_add(len)?)?;
                parts.push(String::from_utf8_lossy(ident).into_owned());
                i = start + len;
            }
            Some(b'I') => {
                tail = if nested { "<…>::…" } else { "<…>" };
                break;
            }
            Some(b'E') | None => break,
            Some(_) => {
                tail = "::…";
                break;
            }
        }
        if !nested {
            if rest.get(i) == Some(&b'I') {
                tail = "<…>";
            }
            break;
        }
    }
    // A name whose first component could not be read is left as it is.
    if parts.is_empty() || parts.iter().all(|p| p == "std") {
        return None;
    }
    Some(format!("{}{tail}", parts.join("::")))
}

/// True when `full` (a symbol table's name) is the full path of the DWARF name `short`, a
/// name without its module path (`fill_table` of `sites::fill_table`, `{closure#0}` of
/// `sites::main::{{closure}}`). Names that have a path or parameters already (C++'s, full
/// Rust names) and names that match exactly (C's) are kept.
#[cfg(feature = "report")]
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
#[cfg(feature = "report")]
fn unnamed_by_module(profile: &Profile) -> std::collections::BTreeMap<usize, Vec<u64>> {
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
#[cfg(feature = "report")]
#[derive(Default)]
pub(crate) struct Loaders {
    by_path: HashMap<String, Loaded>,
}

#[cfg(feature = "report")]
struct Loaded {
    /// The object, with its build id and identity as read from its descriptor.
    main: ObjectFile,
    /// The separate debug file (`/usr/lib/debug/.build-id/`), when installed.
    debug: Option<ObjectFile>,
}

#[cfg(feature = "report")]
impl std::fmt::Debug for Loaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaders").field("paths", &self.by_path.keys()).finish()
    }
}

#[cfg(feature = "report")]
impl Loaders {
    /// Reads the symbols of the object at `path` unless they are loaded; an object that
    /// cannot be read is skipped (resolution reports it).
    pub fn load(&mut self, path: &str) {
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
#[cfg(feature = "report")]
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
#[cfg(feature = "report")]
fn debug_object(path: &Path, main: &ObjectFile) -> Option<ObjectFile> {
    debug_candidates(path).into_iter().filter(|p| p.exists()).find_map(|p| {
        let d = ObjectFile::open(&p).ok()?;
        let fits = d.file_id != main.file_id
            && (main.build_id.is_none() || d.build_id.is_none() || d.build_id == main.build_id);
        fits.then_some(d)
    })
}

/// The separate debug file of the ELF object at `path`, when one is installed: the first
/// of [`debug_candidates`] that exists (a debug-link candidate only with the object's build
/// id, when both have one).
#[cfg(feature = "report")]
fn debug_file(path: &Path) -> Option<std::path::PathBuf> {
    let own = build_id(path);
    let canonical = std::fs::canonicalize(path).ok();
    debug_candidates(path).into_iter().find(|p| {
        p.is_file()
            && std::fs::canonicalize(p).ok() != canonical
            && (own.is_none() || build_id(p).is_none() || build_id(p) == own)
    })
}

/// Where a separate debug file of the object at `path` is looked for, as gdb does: by GNU
/// build id (`/usr/lib/debug/.build-id/xx/yyyy.debug`), then by the object's
/// `.gnu_debuglink` name next to it, in its `.debug/` and under `/usr/lib/debug/` + its
/// directory.
#[cfg(feature = "report")]
pub fn debug_candidates(path: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = build_id(path) {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        if hex.len() >= 3 {
            out.push(
                Path::new("/usr/lib/debug/.build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..])),
            );
        }
    }
    if let Some(link) = debug_link(path) {
        let dir = path.parent().unwrap_or(Path::new("/"));
        out.push(dir.join(&link));
        out.push(dir.join(".debug").join(&link));
        out.push(
            Path::new("/usr/lib/debug").join(dir.strip_prefix("/").unwrap_or(dir)).join(&link),
        );
    }
    out
}

/// The file name in the `.gnu_debuglink` section of the object at `path`: a plain name (a
/// name with a path separator or `..` is not taken: the section is the file's to say).
#[cfg(feature = "report")]
fn debug_link(path: &Path) -> Option<String> {
    use object::Object as _;
    let file = crate::sys::files::open_input_regular(path).ok()?;
    let cache = object::ReadCache::new(file);
    let object = object::File::parse(&cache).ok()?;
    let (name, _crc) = object.gnu_debuglink().ok()??;
    let name = std::str::from_utf8(name).ok()?;
    (!name.is_empty() && !name.contains('/') && name != ".." && name != ".")
        .then(|| name.to_owned())
}

/// What an object file holds to name its functions.
#[cfg(feature = "report")]
struct Naming {
    symtab: bool,
    dynsym: bool,
    debug_info: bool,
}

#[cfg(feature = "report")]
fn naming(path: &Path) -> Option<Naming> {
    use object::{
        Object as _, ObjectSection as _, ObjectSymbol as _, ObjectSymbolTable as _, SymbolKind,
    };
    let file = crate::sys::files::open_input_regular(path).ok()?;
    let cache = object::ReadCache::new(file);
    let object = object::File::parse(&cache).ok()?;
    let nonempty = |name: &str| object.section_by_name(name).is_some_and(|s| s.size() > 0);
    Some(Naming {
        symtab: object.symbol_table().is_some_and(|t| t.symbols().next().is_some()),
        // An executable's dynamic symbols are mostly what it imports: only definitions name
        // its own functions.
        dynsym: object.dynamic_symbol_table().is_some_and(|t| {
            t.symbols().any(|s| s.is_definition() && s.kind() == SymbolKind::Text)
        }),
        debug_info: nonempty(".debug_info") || nonempty(".zdebug_info"),
    })
}

/// One note for each object whose frames stayed unnamed because it is stripped and no
/// separate debug file was found: what it lacks, where a debug file was looked for, and
/// (where `dpkg-query` knows the file) the Debian package that would have one. Objects
/// that changed since the run or cannot be read are left to [`resolve_offline`]'s notes;
/// objects with symbols or debug info whose tables miss a few addresses are not named.
#[cfg(feature = "report")]
pub fn unresolved_objects(profile: &Profile) -> Vec<String> {
    let by_module = unnamed_by_module(profile);
    let mut notes = Vec::new();
    let mut stripped: Vec<(&str, Option<String>)> = Vec::new();
    let mut packages = HashMap::new();
    for (i, addrs) in by_module {
        let frames = addrs.len();
        let module = &profile.modules[i];
        let path = Path::new(&module.path);
        if !module.build_id.is_empty() && build_id(path).as_deref() != Some(&module.build_id[..]) {
            continue;
        }
        let Some(n) = naming(path) else { continue };
        if n.symtab || n.debug_info || debug_file(path).is_some() {
            continue;
        }
        let what = if n.dynsym {
            "has no symbols but its exported ones (stripped)"
        } else {
            "has no symbols (stripped)"
        };
        let s = if frames == 1 { "" } else { "s" };
        let looked = debug_candidates(path);
        let looked = if looked.is_empty() {
            "it has no build id or debug link to find a debug file by".to_owned()
        } else {
            let list: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            format!("no debug file at {}", list.join(" nor "))
        };
        let hint = debian_package_cached(&mut packages, path)
            .map(|p| format!(" (Debian: apt install {p}-dbgsym, from the debug archive)"))
            .unwrap_or_default();
        notes.push(format!(
            "{} {what}: {frames} frame{s} shown as offsets; {looked}{hint}",
            module.path
        ));
        stripped.push((module.path.as_str(), debian_package_cached(&mut packages, path)));
    }
    // A process tree (a compiler driver and its passes) can name many: then one line.
    if notes.len() > MAX_STRIPPED_NOTES {
        let names: Vec<&str> =
            stripped.iter().map(|(p, _)| p.rsplit('/').next().unwrap_or(p)).collect();
        let mut wanted: Vec<&str> = stripped.iter().filter_map(|(_, p)| p.as_deref()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let hint = if wanted.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = wanted.iter().map(|p| format!("{p}-dbgsym")).collect();
            format!(" (Debian: apt install {}, from the debug archive)", list.join(" "))
        };
        return vec![format!(
            "{} objects have no symbols (stripped), their frames shown as offsets: {}; no \
             debug files for them under /usr/lib/debug{hint}",
            names.len(),
            names.join(", ")
        )];
    }
    notes
}

/// Above this many stripped objects, [`unresolved_objects`] says it in one line.
#[cfg(feature = "report")]
const MAX_STRIPPED_NOTES: usize = 3;

/// [`debian_package`], asked once per path.
#[cfg(feature = "report")]
fn debian_package_cached(
    cache: &mut HashMap<std::path::PathBuf, Option<String>>,
    path: &Path,
) -> Option<String> {
    cache.entry(path.to_owned()).or_insert_with(|| debian_package(path)).clone()
}

/// The Debian package that installed `path`, when `dpkg-query` knows it.
#[cfg(feature = "report")]
fn debian_package(path: &Path) -> Option<String> {
    let query = |p: &Path| -> Option<String> {
        let out = std::process::Command::new("dpkg-query")
            .arg("-S")
            .arg(p)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        let line = text.lines().next()?;
        let (package, _) = line.split_once(": ")?;
        // `libc6:amd64` → `libc6`; a diversion or a list of packages is not a name.
        let package = package.split(':').next()?.trim();
        (out.status.success()
            && !package.is_empty()
            && package.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)))
        .then(|| package.to_owned())
    };
    query(path).or_else(|| query(&std::fs::canonicalize(path).ok()?))
}

/// The GNU build id of the 64-bit little-endian ELF object at `path` (its `NT_GNU_BUILD_ID`
/// note, found through the program headers; only the headers and the notes are read).
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    file_layout(path)?.build_id
}

/// What a module record needs of an object file mapped in another process (`memprof
/// record`'s collector): see [`file_layout`].
pub(crate) struct FileLayout {
    /// The `PT_LOAD` segments: (virtual address, size in memory).
    pub(crate) loads: Vec<(u64, u64)>,
    /// The GNU build id, when the notes hold one.
    pub(crate) build_id: Option<Vec<u8>>,
}

/// The layout of a 64-bit little-endian ELF file, read from its program headers and notes.
pub(crate) fn file_layout(path: &Path) -> Option<FileLayout> {
    use std::os::unix::fs::FileExt;
    let file = crate::sys::files::open_input_regular(path).ok()?;
    let read = |off: u64, len: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    };
    let u16_at = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let ehdr = read(0, 64)?;
    // ELF magic, 64-bit, little-endian.
    if ehdr[..4] != *b"\x7fELF" || ehdr[4] != 2 || ehdr[5] != 1 {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(&ehdr, 32)?, u16_at(&ehdr, 54)?, u16_at(&ehdr, 56)?);
    if phentsize < 56 || phnum == 0 {
        return None;
    }
    let phdrs = read(phoff, usize::from(phentsize) * usize::from(phnum))?;
    let (mut loads, mut build_id) = (Vec::new(), None);
    for i in 0..usize::from(phnum) {
        let ph = &phdrs[i * usize::from(phentsize)..];
        const PT_LOAD: u32 = 1;
        const PT_NOTE: u32 = 4;
        match u32_at(ph, 0)? {
            // p_vaddr, p_memsz.
            PT_LOAD => loads.push((u64_at(ph, 16)?, u64_at(ph, 40)?)),
            // p_offset, p_filesz.
            PT_NOTE if build_id.is_none() => {
                let (off, size) = (u64_at(ph, 8)?, u64_at(ph, 32)?);
                if size <= 1 << 16 {
                    build_id = read(off, size as usize).and_then(|notes| note_build_id(&notes));
                }
            }
            _ => {}
        }
    }
    Some(FileLayout { loads, build_id })
}

/// The descriptor of the `NT_GNU_BUILD_ID` note among `notes` (a note segment's bytes).
fn note_build_id(notes: &[u8]) -> Option<Vec<u8>> {
    let u32_at = |o: usize| Some(u32::from_le_bytes(notes.get(o..o + 4)?.try_into().ok()?));
    let mut at = 0usize;
    // Each note: namesz, descsz, type, then the name and the descriptor, 4-aligned.
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) =
            (u32_at(at)? as usize, u32_at(at + 4)? as usize, u32_at(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(namesz.div_ceil(4) * 4)?;
        const NT_GNU_BUILD_ID: u32 = 3;
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz) == Some(b"GNU\0") {
            return notes.get(desc_at..desc_at.checked_add(descsz)?).map(<[u8]>::to_vec);
        }
        at = desc_at.checked_add(descsz.div_ceil(4) * 4)?;
    }
    None
}

/// True for frames of the profiler itself, which are trimmed from the leaf end of stacks.
pub fn is_profiler_frame(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        // The sample path (src/engine/) and the safe points (src/session/).
        "memprof::engine::",
        "<memprof::engine::",
        "memprof::session::",
        // The same code under its module paths before the layout of src/engine/, for
        // profiles recorded by earlier versions.
        "memprof::alloc::",
        "<memprof::alloc::",
        "memprof::callstack::",
        "memprof::sampler::",
        "memprof::tracker::",
        "memprof::postponed::",
        "memprof_preload::",
        "memprof_preload_",
        "backtrace::",
        "__rustc::",
        "__rust_alloc",
        "__rust_realloc",
        "__rust_alloc_zeroed",
        "__rust_dealloc",
        "__rg_",
        "__rdl_",
        "std::alloc::__default_lib_allocator",
    ];
    const EXPORTS: &[&str] = &[
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || EXPORTS.contains(&name)
}

/// [`FrameLocation`], borrowed from the profile.
#[derive(Clone, Debug)]
pub(crate) struct FrameRef<'a> {
    pub(crate) function: std::borrow::Cow<'a, str>,
    pub(crate) file: Option<&'a str>,
    pub(crate) line: Option<u32>,
    pub(crate) addr: u64,
    pub(crate) inlined: bool,
    /// False for an address without symbols (named `module+0xoffset`).
    pub(crate) resolved: bool,
}

/// One source-level frame of a stack, as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FrameLocation {
    /// Function name (demangled), or `module+0xoffset` / `0xaddr` when unresolved.
    pub function: String,
    /// Source file, when known.
    pub file: Option<String>,
    /// Line, when known.
    pub line: Option<u32>,
    /// The return address this frame belongs to.
    pub addr: u64,
    /// True when this frame is inlined into the next (outer) frame at the same address.
    pub inlined: bool,
}

impl Profile {
    /// The module whose segments contain `addr`.
    pub fn module_of(&self, addr: u64) -> Option<&Module> {
        self.modules.iter().find(|m| m.start <= addr && addr < m.end)
    }

    /// Name of an address without symbols: `basename+0xoffset` inside a module, else `0xaddr`.
    pub fn unresolved_name(&self, addr: u64) -> String {
        match self.module_of(addr.saturating_sub(1)) {
            Some(m) => {
                let base = m.path.rsplit('/').next().unwrap_or(&m.path);
                format!("{base}+{:#x}", addr.wrapping_sub(m.base))
            }
            None => format!("{addr:#x}"),
        }
    }

    /// The frames of a stack, innermost first, inline chains expanded, profiler frames
    /// trimmed from the leaf end (see the [module documentation](self)). Empty for an unknown
    /// stack id or when nothing is left.
    pub fn frame_locations(&self, stack: StackId) -> Vec<FrameLocation> {
        self.frame_refs(stack)
            .into_iter()
            .map(|f| FrameLocation {
                function: f.function.into_owned(),
                file: f.file.map(str::to_owned),
                line: f.line,
                addr: f.addr,
                inlined: f.inlined,
            })
            .collect()
    }

    /// [`Profile::frame_locations`], borrowing what the profile holds.
    pub(crate) fn frame_refs(&self, stack: StackId) -> Vec<FrameRef<'_>> {
        use std::borrow::Cow;
        let Some(stack) = self.stacks.get(stack as usize) else { return Vec::new() };
        let mut out = Vec::with_capacity(stack.frames.len());
        for &addr in &stack.frames {
            match self.symbols.get(&addr) {
                Some(chain) if !chain.is_empty() => {
                    let last = chain.len() - 1;
                    out.extend(chain.iter().enumerate().map(|(i, s)| FrameRef {
                        function: Cow::Borrowed(s.function.as_str()),
                        file: s.file.as_deref(),
                        line: s.line,
                        addr,
                        inlined: i < last,
                        resolved: true,
                    }));
                }
                _ => out.push(FrameRef {
                    function: Cow::Owned(self.unresolved_name(addr)),
                    file: None,
                    line: None,
                    addr,
                    inlined: false,
                    resolved: false,
                }),
            }
        }
        let cut = out
            .iter()
            .take(TRIM_WINDOW)
            .rposition(|f| is_profiler_frame(&f.function))
            .map_or(0, |i| i + 1);
        out.drain(..cut);
        out
    }

    /// Function names of a stack, outermost (root) first, leaf last, after trimming. A stack
    /// cut at the configured depth gets a [`TRUNCATED`] root; a stack with nothing left is
    /// named [`UNKNOWN_STACK`].
    pub fn frame_names(&self, stack: StackId) -> Vec<String> {
        self.frame_names_ref(stack).into_iter().map(std::borrow::Cow::into_owned).collect()
    }

    /// [`Profile::frame_names`], borrowing the names the profile holds (a flamegraph of a
    /// program with tens of thousands of deep stacks would otherwise copy every name).
    pub fn frame_names_ref(&self, stack: StackId) -> Vec<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        let Some(s) = self.stacks.get(stack as usize) else {
            return vec![Cow::Borrowed(UNKNOWN_STACK)];
        };
        let inner = self.inner_names(stack);
        let mut names = Vec::with_capacity(inner.len() + 2);
        if s.truncated {
            names.push(Cow::Borrowed(TRUNCATED));
        }
        if inner.is_empty() {
            names.push(Cow::Borrowed(UNKNOWN_STACK));
        }
        names.extend(inner.into_iter().rev());
        names
    }

    /// The function names of a stack, innermost first, after trimming (borrowed where the
    /// profile holds them): [`Profile::frame_locations`]' functions.
    fn inner_names(&self, stack: StackId) -> Vec<std::borrow::Cow<'_, str>> {
        self.frame_refs(stack).into_iter().map(|f| f.function).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiler_frames_by_module_path() {
        for name in [
            "memprof::engine::alloc::on_alloc",
            "<memprof::engine::alloc::Sampled<A> as core::alloc::global::GlobalAlloc>::alloc",
            "memprof::engine::hot::record_alloc",
            "memprof::engine::callstack::capture",
            "memprof::session::poll",
            "memprof::tracker::hot::record_alloc",
            "memprof_preload::fast::malloc_slow",
            "malloc",
        ] {
            assert!(is_profiler_frame(name), "{name}");
        }
        for name in ["memprof::gc::Heap::alloc", "memprof::report::top_table", "app::main"] {
            assert!(!is_profiler_frame(name), "{name}");
        }
    }

    use crate::profile::Stack;

    fn sym(f: &str) -> Symbol {
        Symbol { function: f.into(), file: Some("src/x.rs".into()), line: Some(7) }
    }

    fn profile() -> Profile {
        let mut p = Profile::default();
        p.modules.push(Module {
            path: "/usr/lib/libfoo.so".into(),
            base: 0x7000,
            start: 0x8000,
            end: 0x9000,
            ..Default::default()
        });
        let table: &[(u64, &[&str])] = &[
            (0x10, &["malloc"]),
            (
                0x20,
                &[
                    "memprof::alloc::hook",
                    "<memprof::alloc::Sampled<A> as core::alloc::global::GlobalAlloc>::alloc",
                ],
            ),
            (0x30, &["__rust_alloc"]),
            (0x40, &["alloc::raw_vec::finish_grow", "alloc::raw_vec::RawVec<T>::grow"]),
            (0x50, &["<alloc::vec::Vec<T> as core::clone::Clone>::clone"]),
            (0x60, &["app::load", "app::main"]),
            (0x70, &["std::rt::lang_start"]),
            (0x80, &["main"]),
        ];
        for (addr, names) in table {
            p.symbols.insert(*addr, names.iter().map(|n| sym(n)).collect());
        }
        p.stacks.push(Stack {
            frames: vec![0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80],
            truncated: false,
            label: 0,
        });
        p.stacks.push(Stack { frames: vec![0x8123, 0x60, 0xdead], truncated: true, label: 0 });
        p.stacks.push(Stack { frames: vec![0x10, 0x40], truncated: false, label: 0 });
        p.stacks.push(Stack { frames: vec![0x10, 0x20], truncated: false, label: 0 });
        p.stacks.push(Stack { frames: vec![], truncated: false, label: 0 });
        p
    }

    #[test]
    fn names_are_trimmed_and_outermost_first() {
        let p = profile();
        assert_eq!(
            p.frame_names(0),
            [
                "main",
                "std::rt::lang_start",
                "app::main",
                "app::load",
                "<alloc::vec::Vec<T> as core::clone::Clone>::clone",
                "alloc::raw_vec::RawVec<T>::grow",
                "alloc::raw_vec::finish_grow",
            ]
        );
        assert_eq!(p.site_name(0), "app::load");
    }

    #[test]
    fn unresolved_and_truncated() {
        let p = profile();
        assert_eq!(
            p.frame_names(1),
            ["[truncated]", "0xdead", "app::main", "app::load", "libfoo.so+0x1123"]
        );
        // An unresolved leaf is not plumbing: it is the site.
        assert_eq!(p.site_name(1), "libfoo.so+0x1123");
    }

    #[test]
    fn all_plumbing_or_nothing_left() {
        let p = profile();
        assert_eq!(p.site_name(2), "alloc::raw_vec::finish_grow");
        assert_eq!(p.frame_names(3), [UNKNOWN_STACK]);
        assert_eq!(p.site_name(3), UNKNOWN_STACK);
        assert_eq!(p.frame_names(4), [UNKNOWN_STACK]);
        assert_eq!(p.frame_names(99), [UNKNOWN_STACK]);
        assert_eq!(p.site_name(99), UNKNOWN_STACK);
    }

    #[test]
    fn trimming_only_looks_at_the_leaf_window() {
        let mut p = profile();
        // A profiler-looking frame deep in the stack (e.g. a user function named malloc far
        // from the leaf) is kept.
        let mut frames = vec![0x60; TRIM_WINDOW];
        frames.push(0x10);
        p.stacks.push(Stack { frames, truncated: false, label: 0 });
        let names = p.frame_names(5);
        assert_eq!(names.first().map(String::as_str), Some("malloc"));
        assert_eq!(names.len(), 2 * TRIM_WINDOW + 1);
    }

    #[test]
    fn locations_mark_inlining() {
        let p = profile();
        let locs = p.frame_locations(0);
        let inl: Vec<(u64, bool)> = locs.iter().map(|f| (f.addr, f.inlined)).collect();
        assert_eq!(
            inl,
            [
                (0x40, true),
                (0x40, false),
                (0x50, false),
                (0x60, true),
                (0x60, false),
                (0x70, false),
                (0x80, false)
            ]
        );
        assert_eq!(locs[0].line, Some(7));
    }

    #[test]
    fn names_the_demangler_gives_back_are_read_from_their_prefix() {
        let make_shared = "_ZSt11make_sharedINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEJicEESt10shared_ptrINSt9enable_ifIXntsrSt8is_arrayIT_E5valueES9_E4typeEEDpOT0_";
        assert_eq!(unmangled(make_shared), "std::make_shared<…>");
        assert_eq!(unmangled("_ZNSt6vectorIiSaIiEE9push_backERKi"), "std::vector<…>::…");
        assert_eq!(unmangled("_ZN3app5Cache6insertEv"), "app::Cache::insert");
        assert_eq!(unmangled("_Z4fillv"), "fill");
        for kept in ["fill(int)", "_Z", "_Zx", "_ZSt", "_Z99short", "main"] {
            assert_eq!(unmangled(kept), kept);
        }
    }

    #[test]
    fn hashes_are_stripped() {
        assert_eq!(strip_hash("foo::bar::h0123456789abcdef"), "foo::bar");
        assert_eq!(strip_hash("foo::bar::hello"), "foo::bar::hello");
        assert_eq!(strip_hash("foo"), "foo");
    }

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn resolves_a_real_function() {
        assert_eq!(a_function_to_find(), 42);
        // A "return address" a few bytes into the function: addr - 1 still lies inside it.
        let addr = a_function_to_find as fn() -> u64 as usize as u64 + 4;
        let map = resolve_in_process([addr]);
        let chain = map.get(&addr).expect("the test binary has symbols");
        assert!(chain.iter().any(|s| s.function.contains("a_function_to_find")), "{chain:?}");
        assert!(chain.iter().all(|s| !s.function.contains("::h")), "{chain:?}");
    }

    #[test]
    fn modules_contain_this_code() {
        let modules = current_modules();
        assert!(!modules.is_empty());
        let here = resolves_a_real_function as fn() as usize as u64;
        let m = modules
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("a module holds this code");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(m.path, exe.to_string_lossy());
        let p = Profile { modules: modules.clone(), ..Profile::default() };
        let base = exe.file_name().unwrap().to_string_lossy().into_owned();
        assert!(p.unresolved_name(here).starts_with(&format!("{base}+0x")));
    }
}
