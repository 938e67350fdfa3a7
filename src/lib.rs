//! memprof: a statmemprof-style sampling heap profiler.
//!
//! It answers "who allocated this memory, and who still holds it?" cheaply enough to
//! leave on in production.
//!
//! # How a sample flows
//! ```text
//! allocation (GlobalAlloc / malloc via the preload library / gc::Heap::alloc)
//!   └─ sampler: thread-local countdown of bytes to the next sample point (subtract, branch)
//!        └─ slow path: k = number of sample points inside this allocation
//!             ├─ callstack: return addresses, one pass, 32-entry buffer doubling up to depth
//!             ├─ live table: address → sample      ── free/realloc of a sampled block
//!             └─ queue: waits for a safe point     ── its dealloc event, queued too
//! safe point (poll, Session::stop, the drain thread)
//!   └─ Tracker callbacks / the built-in Recorder → Profile
//!        └─ .mprof stream → reports: top table · flamegraph · pprof · folded
//! ```
//!
//! # Glossary
//! The nouns the code and its documentation use, each in one sense:
//! - **sample point**: a byte chosen by the sampler; every allocated byte is one with
//!   probability 1/R, independently.
//! - **interval** (R): the mean number of bytes between sample points (`--interval`;
//!   [`config::DEFAULT_INTERVAL`]); R = 1 is the **exact mode**, every allocation recorded.
//! - **sample**: an allocation holding at least one sample point; its **k** is how many it
//!   holds, and it stands for k × R bytes in every estimate.
//! - **countdown**: the per-thread count of bytes left to the next sample point: the whole
//!   fast path is its subtraction and a branch.
//! - **stack**: the return addresses captured for a sample, innermost first; a **frame** is
//!   one of them, named through the **symbols** of its **module** (a loaded executable or
//!   shared object, with its address range and build id).
//! - **site**: the frame a report charges a sample to: the innermost one that is not
//!   allocation **plumbing** (allocator wrappers, the standard library's growth paths,
//!   `--site-skip`).
//! - **live table**: the program's table of its sampled blocks by address, which tells a
//!   free of a sampled block from all the others.
//! - **event**: a sample, a free of a sampled block, a GC cycle or a process fact, as the
//!   engine hands it on; the **queue** carries events inside a process, the **ring** (a
//!   shared file mapping) from a program under `memprof record` to the **collector**, the
//!   thread of `memprof` that drains every ring.
//! - **session**: sampling from [`start`] to [`Session::stop`]; its events reach a
//!   [`Tracker`] at **safe points** (a poll, the stop, the drain thread), never inside the
//!   allocator; the **recorder** ([`Recorder`]) is the tracker that writes them to a file.
//! - **agent**: the preload library's session inside a profiled program.
//! - **profile** ([`profile::Profile`]): a recording folded into aggregates; the `.mprof`
//!   **file** is its stream of events (the **format**).
//! - **live heap**: the sampled blocks not freed, as an estimate of the bytes held; its
//!   **peak** is its largest value over the run (exact, or the cross-fitted estimate).
//! - **view**: what a report totals (alloc, live, peak, short-lived, gc); a **window** is a
//!   moment or range of the recording a report is restricted to.
//! - **exporter**: one output format of the reports (flamegraph, pprof, folded, HTML).
//! - **image**: what one `exec` ran in a process; a **process tree** is a program with the
//!   processes it started, each with its own file (`--follow-forks`).
//! - **resident**: the process's resident memory as the kernel reads it; a **split** is
//!   that memory by kind of mapping (`/proc/PID/smaps`), and the **gap** is what it holds
//!   beyond the live heap (allocator free memory, heaps outside malloc, code).
//! - **lost** events: ones that never reached the tracker (a full queue without
//!   backpressure, a signal handler's allocation inside the profiler); **untracked**
//!   blocks: sampled blocks whose free cannot be followed.
//! - **label**: the span path a sample was taken under (`tracing`, a feature); a **GC cycle** is a
//!   mark and sweep of the managed heap ([`gc`]), timed.
//!
//! # Map of the code
//! The folders of `src/` are layers; each uses only the ones above it in this table (the
//! engine never reaches the session, the recorder or the profile). Imports run downward:
//! no circle between files (a folder's face reaching into its own folder does not count),
//! and nothing under `sys/` imports a file outside it; `tests/commands/imports.rs` fails on
//! a new circle or arrow up, and says how it reads the imports. Every source file has
//! a row (`preload/` is the other crate of the workspace).
//!
//! | Path | What it holds |
//! |---|---|
//! | `lib.rs` | this map, the public face of the crate, the `__private` paths the preload library takes |
//! | `error.rs` | [`Error`] and [`LaunchError`] |
//! | `sys/` | process primitives, nothing about sampling |
//! | `sys/rawmem.rs` | the profiler's own memory: `mmap` on the sample path, glibc's `__libc_calloc` at start |
//! | `sys/tls.rs` | per-thread blocks of the sample path, initial-exec where possible |
//! | `sys/padded.rs` | a value alone on its cache lines |
//! | `sys/errno.rs` | errno saved and restored around the hooks |
//! | `sys/futex.rs` | futex waits and wakes (the shared kind: a word may be in another process's mapping), a lock whose waiters sleep, and that lock with its data (the session's: a raw `clone` child takes it as free) |
//! | `sys/hash.rs` | the one-multiply hasher of the profiler's own integer keys, the seeded one (ahash) of keys a program or a profile chooses (return addresses, frame names), and the hash of a block's address its tables share |
//! | `sys/loader.rs` | the loader's list of loaded objects and its load/unload counters |
//! | `sys/files.rs` | [`files`]: the one policy for every file opened or written: outputs never through a symlink, never onto an input; inputs regular files opened without blocking; our own files read only as regular files of ours, never through a symlink; preloaded code only from files nobody else can change, up to `/` (checked by descriptor in `sys/trusted.rs`, then copied: the loader never opens the path checked) |
//! | `sys/trusted.rs` | a file checked by its descriptor: the path walked one component at a time from `/`, every directory and the file yours or root's, none writable by group or others unless sticky, nothing renamed during the walk; what the preload library's copy is made from |
//! | `sys/private_dir.rs` | a directory of ours: `mkdir` 0700, or this user's real directory |
//! | `sys/got.rs` | the GOT slots through which each loaded object calls functions of given names (`memprof attach` reroutes them) |
//! | `sys/elf_lookup.rs` | the next definition of a symbol (`RTLD_NEXT`), a definer before the caller, the caller's own export, all without allocating |
//! | `sys/mod.rs` | the folder's face: which primitives the layers above use |
//! | `sys/alloc_count.rs` | the unit tests' counting global allocator (live bytes per test scope) |
//! | `sys/own_file.rs` | a file the profiler opened in the profiled process, proven to be that file before each read and write |
//! | `sys/smaps.rs` | a process's memory files read at a pace bounded by their cost (the pace's constants, which `profile` re-exports): resident size (`statm`), and resident memory by kind of mapping (`smaps`: the allocator's, outside malloc, stacks, files, memprof's own) |
//! | `sys/monotonic.rs` | the monotonic clock in nanoseconds, for every layer (`engine::clock` re-exports it) |
//! | `sys/on_stack.rs` | a call on another stack (x86-64) whose frame unwinders and debuggers walk back through: the switch in assembly with its call frame information |
//! | `sys/malloc_maps.rs` | which anonymous mappings glibc's malloc made (an arena's heap, a large block), told by their first words read with `process_vm_readv` |
//! | `sys/procfs.rs` | fields of `/proc/<pid>/stat`, and the decimals of paths built without allocating |
//! | `sys/signals.rs` | signal masks and thread counts for the threads the profiler keeps in a program |
//! | `sys/seccomp.rs` | whether a seccomp filter may refuse the profiler's system calls (the preload library's `prctl` and `syscall` say when one is installed; a refused futex says so too), and the spin that replaces a sleep then |
//! | `config.rs` | [`Config`], [`Unwinder`] and the parsers of their textual forms |
//! | `engine/` | everything that runs inside the allocator: no lock, no profiled allocation |
//! | `engine/alloc.rs` | the allocation hooks and [`Sampled`], the sampling `GlobalAlloc` |
//! | `engine/sampler/mod.rs` | Poisson sampling over allocated bytes: the countdown, `k`, the draws, a reallocation as a free and a new allocation; the hook an open `measure` scope sets for the slow path |
//! | `engine/sampler/rate.rs` | the Bernoulli process over bytes: a rate, its gaps, the points in an allocation |
//! | `engine/sampler/cross_fit.rs` | the cross-fitted peak's bookkeeping (each half's largest live points, the other half's then), for profiles and sampled scopes |
//! | `engine/sampler/per_thread.rs` | a thread's sampler state (number, ids, generator), in its block |
//! | `engine/busy.rs` | the reentrancy guard: a thread's busy flag and `Busy` |
//! | `engine/thread.rs` | a thread's sample-path state, mapped at its first sample |
//! | `engine/sample_path.rs` | a sampled allocation or death: capture, live entry, event |
//! | `engine/push.rs` | the session's queue and the pushes into it: backpressure (a sleep until the consumer drains, a spin under a seccomp filter, for as long as the consumer is there), deaths |
//! | `engine/python.rs` | CPython's frames (3.11 to 3.13) read from the allocating thread's state on a sampled allocation, by offsets of our own per version, and spliced as tagged words inside the `_PyEval_EvalFrameDefault` activations that ran them |
//! | `engine/consumer.rs` | the queue's consumer in another process (the collector) as the producers see it: its heartbeat, its verdict on the ring, its process looked up (or, under a seccomp filter, not) |
//! | `engine/lost.rs` | the lost-sample counters: samples skipped for reentrancy, untracked blocks |
//! | `engine/label.rs` | the thread's label word (tracing span path id) a sample copies |
//! | `engine/measure.rs` | exact counting of one thread's allocations inside a scope ([`testing::measure`]): its countdown held at 0, its blocks' filter counters raised, its own tables in mapped pages; sampled scopes ([`testing::measure_sampled`]): a Bernoulli process of the scope's own, the countdown armed with the nearer next point |
//! | `engine/live.rs` | the live table of sampled blocks (address → sample, and what its free must name: stack key, size, points, time) and its filter; the hook an open `measure` scope sets for its frees; the exact mode under a collector, which keeps no table and names frees by address |
//! | `engine/entry.rs` | a sampled block's entry: what the live table keeps and a death's event carries |
//! | `engine/live/filter.rs` | the table's counting filter, which every free asks first (its mask a word beside its counters, for `free` in assembly), and the exact mode's naming of frees by address (the mask 0: every free to the slow path) |
//! | `engine/live/fork.rs` | the table around `fork` (every shard taken, released) and its reset in a raw `clone` child |
//! | `engine/live/packed.rs` | a live-table slot: a block's address and its entry packed into 32 bytes, and back |
//! | `engine/live/tests.rs` | the table's tests |
//! | `engine/forked.rs` | the wiped mark: a child made by a raw `clone` (no fork handler ran) found on the sample and free paths, and its handler run first |
//! | `engine/known.rs` | the stacks a thread sent whole to a collector in another process (a table of keys per thread and session): its later allocations from the same place name their stack by key, so the queue carries the frames once |
//! | `engine/queue/mod.rs` | the bounded queue of events waiting for a safe point, and the futex word full-queue waiters sleep on |
//! | `engine/queue/cells.rs` | the queue's 128-byte cells: an event takes one, and one more for each 15 frames past its first 4; the frames written and read across them, the cells handed back in order |
//! | `engine/queue/tests.rs` | the queue's tests, and the events other modules' tests build |
//! | `engine/queue/event.rs` | the queue's wire event, a typed enum (an allocation, a death, a free named by address, a side record), each kind with its own named fields, and its 80 bytes in a slot, each kind writing and reading its own fields only (a free is the first line of its cell); an allocation names its stack there or by the key of one sent before |
//! | `engine/queue/lost_frees.rs` | the queue's table of the frees it refused or deferred, replayed by the consumer |
//! | `engine/queue/doorbell.rs` | the consumer's sleep on a word of the queue's block, and the producers' wake once enough events wait (one system call per sleep; a poll mark under a seccomp filter) |
//! | `engine/clock.rs` | the sample path's clock (TSC or `CLOCK_MONOTONIC`), and its readings to session time (a fixed function of the reading for the collector) |
//! | `engine/callstack/` | call-stack capture: choice of unwinder, capture at an entry point |
//! | `engine/callstack/frames.rs` | the capture buffer (32 inline entries, then doubling) |
//! | `engine/callstack/per_thread.rs` | the unwinder's per-thread state: the stack's top (queried once), remembered walks |
//! | `engine/callstack/fp.rs` | the frame-pointer walk, inside the thread's stack bounds |
//! | `engine/callstack/fp_proof.rs` | which loaded objects keep frame pointers, from their `.eh_frame` |
//! | `engine/callstack/cfi/` | the cached DWARF unwinder (framehop over in-memory tables) |
//! | `engine/callstack/cfi/mod.rs` | its design notes and face: preparation, fork, the fallback count |
//! | `engine/callstack/cfi/table.rs` | the published table of unwind information: built, refreshed after a miss, withdrawn around `dlclose` |
//! | `engine/callstack/cfi/slots.rs` | the pool of caches a walk takes without waiting |
//! | `engine/callstack/cfi/rules.rs` | compiled rules: derived from framehop once per address, applied by the walk's loop |
//! | `engine/callstack/cfi/walk.rs` | the walk: a replay, the compiled rules, framehop for the rest |
//! | `engine/callstack/cfi/frame.rs` | the frame being unwound, the bounded stack reads, frames into the capture |
//! | `engine/callstack/cfi/check.rs` | the `MEMPROF_UNWIND_CHECK` oracle: each walk again by framehop alone |
//! | `engine/callstack/memo.rs` | repeated stacks replayed by checking the words they read |
//! | `engine/callstack/trail.rs` | the last walk's steps of the compiled rules' loop, per thread (callstack §5): a walk that reaches a frame of them with the same stack pointer and address goes on as that walk did once the words its steps read are checked, and is the trail from then on |
//! | `engine/callstack/dwarf.rs` | libgcc's walk, the fallback |
//! | `engine/callstack/mod.rs` | capture at an entry point: the unwinder's choice, replay of repeated stacks, fallbacks |
//! | `engine/mod.rs` | the folder's rules: no `std::sync` lock, no profiled allocation, no panic |
//! | `profile/` | the [`profile::Profile`] model, `.mprof` format, symbols, merge, loading |
//! | `profile/mod.rs` | [`profile::Profile`]: the aggregates every report reads, and their invariants |
//! | `profile/tables.rs` | the interned tables: modules, stacks, symbols |
//! | `profile/header.rs` | what a recording says of its run: [`profile::Header`], losses, an early stop |
//! | `profile/events.rs` | the events a profile folds in: samples, frees, moves, GC cycles |
//! | `profile/allocator.rs` | which allocator a recorded program used (by a module's path, a sampled frame's name, or `record`'s note for an executable that defines `malloc`), and its mappings told with it |
//! | `profile/aggregate.rs` | per (stack, size) totals, counts, the indexes by allocation time and since the peak, the halves of a sampled profile's points (the cross-fitted peak) and their split |
//! | `profile/lifetime.rs` | how long sampled blocks lived: short-lived totals, the lifetime histogram |
//! | `profile/pairs.rs` | the per-(stack, size) aggregates of a folding recorder (`memprof record`'s collector) in vectors indexed by pair id, settled into the maps when the profile is handed out |
//! | `profile/series.rs` | the heap over time in bounded buckets, and its peak |
//! | `profile/timeline.rs` | the heap over time by stack, folded in on a grid that widens as the run goes: what the HTML page reads |
//! | `profile/fold.rs` | events folded into the aggregates: live sets, lifetimes, GC attribution, the peak (exact, or cross-fitted), and the peak's coverage tested on simulated programs |
//! | `profile/frame.rs` | frames as reports name them: inline chains, the profiler's frames trimmed, `module+0xoffset` |
//! | `profile/site/mod.rs` | allocation sites: which frames are plumbing (by module, source file, name, `--site-skip`), the site of a stack |
//! | `profile/site/names.rs` | plumbing by name: the standard libraries, C++'s allocation functions, glibc's internals, the wrapper families of common programs and libraries (gcc's and gnulib's `xmalloc`, glib's `g_malloc`, OpenSSL's `CRYPTO_*alloc`, SQLite's, CPython's `PyMem_*`/`PyObject_Malloc`, redis's and valkey's `zmalloc`), each with why; pprof's `drop_frames` |
//! | `profile/site/wrappers.rs` | sites that look like allocation wrappers no list knows (many callers, none holding most of the bytes), and the `--site-skip` that names their callers, escaped for the regex and quoted for a shell |
//! | `profile/symbolize/` | [`profile::symbolize`]: modules and addresses to inline chains, in process and offline |
//! | `profile/symbolize/mod.rs` | the folder's face and its design notes |
//! | `profile/symbolize/process.rs` | this process's modules and in-process lookup |
//! | `profile/symbolize/python.rs` | a Python frame's word named (function, file, line) by reading its code object in the running process (`process_vm_readv`) and its location table |
//! | `profile/symbolize/elf.rs` | what an ELF file says of itself (build id, segments, debug link, symbol tables), through `object` |
//! | `profile/symbolize/names.rs` | [`profile::symbolize::demangle`], every path's one naming of a symbol: only a mangled name (Rust's legacy and v0, Itanium C++'s) demangled, others kept verbatim; legacy hashes, unreadable C++ names |
//! | `profile/symbolize/offline.rs` | addresses resolved from the recorded modules' files; `Loaders` |
//! | `profile/symbolize/debug_file.rs` | where an object's separate debug file is looked for |
//! | `profile/symbolize/stripped.rs` | the notes on objects whose frames stayed unnamed (stripped, no debug file) |
//! | `profile/symbolize/packages.rs` | the Debian package of each stripped object, found in dpkg's lists of files (its other name on a merged `/usr` too) and kept beside the symbol cache until dpkg's database changes |
//! | `profile/symbolize/cache.rs` | the frames resolved for each offset of a build, kept on disk by build id (private, bounded, atomic writes, hostile reads): the next run reads no DWARF for them |
//! | `profile/object_file.rs` | an object file's symbols and DWARF (its debug file, `.dwp` and `.dwo` files too), each file opened once under the file policy and read from that descriptor; the sections a lookup reads, straight into shared buffers |
//! | `profile/dwarf_units.rs` | an object's DWARF looked up a compilation unit at a time: the units covering an address (from `.debug_aranges`, else their root entries), a context over one unit's bytes, the whole object's for a unit that refers to others |
//! | `profile/tree.rs` | the files of a process tree: `app.mprof` and `app.mprof.d/` |
//! | `profile/format/mod.rs` | the `.mprof` stream's spec (versions 1 to 4) and the folder's face |
//! | `profile/format/spec.rs` | the format's limits, record tags, [`profile::format::Event`] and the coding helpers reader and writer share |
//! | `profile/format/write.rs` | the writer: [`profile::format::Writer`], appended symbols |
//! | `profile/format/read.rs` | the reader of untrusted input: [`profile::format::Reader`], [`profile::Profile::read_from`] |
//! | `profile/format/read/payload.rs` | the reader's cursor over one record's payload (every read bounds-checked) and the header record decoded first |
//! | `profile/format/read/record.rs` | outer records read from untrusted bytes: lengths, checksums, cuts |
//! | `profile/format/read/tables.rs` | the records that build the profile's tables (modules, stacks, labels, symbols) and the facts beside the events (a resident split, a GC cycle), each decoded from its payload and checked |
//! | `profile/format/read/v1.rs` | version-1 events, which name their blocks by sample id |
//! | `profile/format/tests/mod.rs` | the format's round trips and old versions |
//! | `profile/format/tests/damaged.rs` | damaged, truncated and refused streams |
//! | `profile/format/tests/lifetimes.rs` | lifetimes as each mode stores them |
//! | `profile/load.rs` | reading one or more `.mprof` files as `record` and `report` do (following a tree, resolving symbols) |
//! | `profile/merge.rs` | a process tree's profiles merged into one |
//! | `profile/replay.rs` | a recording replayed: windows in time (`--at`, `--from`, `--to`), the heap at a moment, the time parsers |
//! | `profile/replay_fuzz.rs` | the time parsers fuzzed (proptest, a unit test: the parsers are private) |
//! | `session/` | safe points: where events become callbacks |
//! | `session/mod.rs` | [`start`], [`poll`], [`Session`], [`record_gc_cycle`] |
//! | `session/tracker.rs` | the [`Tracker`] trait, its events and [`Poll`] |
//! | `session/driver.rs` | events to callbacks, each behind `catch_unwind`, with tokens |
//! | `session/fork.rs` | the `pthread_atfork` handlers of a session, and its reset in a raw `clone` child |
//! | `session/state.rs` | the session's process-wide state: its epoch, control block and driver behind their locks, the drain every safe point shares |
//! | `session/recorder/` | [`Recorder`]: the built-in tracker, in memory or streaming |
//! | `session/recorder/mod.rs` | [`Recorder`]: the built-in tracker, in memory or streaming: interning, the file, modules, symbols, the session's events |
//! | `session/recorder/collected.rs` | what `record`'s collector hands a recorder from another process: resident readings, how it ended, allocations, frees that name their blocks |
//! | `session/recorder/python.rs` | the Python frames of a new stack named as it is first seen, written with the other symbols |
//! | `session/recorder/tests.rs` | the recorder's tests |
//! | `session/generations.rs` | module generations of a recorded process: a library mapped where an unloaded one was gets addresses of its own |
//! | `session/live.rs` | [`live_profile`]: the running session's profile, without stopping it |
//! | `session/label.rs` | label ids and texts: interned by the span layer, read lock-free |
//! | `report/` | top table (with file:line and backtraces), folded stacks, flamegraph, pprof, diff, HTML |
//! | `report/tree.rs` | a tree's table of processes (with each one's resident maximum and how it ended) |
//! | `report/json.rs` | `memprof report --json`: the summary for tools (schema `memprof-report/1`, documented there) |
//! | `report/text.rs` | [`report::text::printable`]: every name a terminal shows, escaped |
//! | `report/unwinding.rs` | the note on stacks that end after one frame |
//! | `report/mod.rs` | the folder's face: the formats' public paths |
//! | `report/view.rs` | what every format shares: [`report::View`], grouping, per-stack totals, GC mark estimates, the sampling summary, units |
//! | `report/top.rs` | the top-sites table (± intervals, peak, sites ordered by `--view`, hints on wrappers, short-lived section, backtraces) |
//! | `report/resident.rs` | the header lines on the process's memory: resident size, the readings of its mappings that explain the gap to the live heap (with a hint by allocator, named by modules, frames or `record`'s note), how it ended |
//! | `report/export.rs` | the export interface: `report::export::Exporter`, one a format, with `report::export::ExportOptions` and the diff form (how to add a format) |
//! | `report/registry.rs` | `report::registry::EXPORTERS`, the one list of formats that the output flags, the outputs and their messages follow |
//! | `report/folded.rs` | folded stacks (`root;…;leaf bytes`) |
//! | `report/flamegraph.rs` | SVG flamegraphs through inferno |
//! | `report/flame_lines.rs` | the lines inferno draws a flamegraph from, each subtree too narrow to draw folded into one (the same picture from far fewer bytes) |
//! | `report/pprof.rs` | gzip-compressed pprof protobuf (`go tool pprof`, Pyroscope, Parca) |
//! | `report/confidence.rs` | sampling statistics: ± 95 % intervals and the diff's noise test |
//! | `binomial.rs` | what the reports and the tests' sampled scopes share: an estimate's error, the exact binomial tail |
//! | `report/diff/` | `memprof diff`: per-site changes between two recordings, in four formats |
//! | `report/diff/mod.rs` | the statistics of the comparison (its documentation) and the folder's face |
//! | `report/diff/compare.rs` | per-site comparison: the changes, their standard errors and Holm-corrected flags |
//! | `report/diff/table.rs` | the comparison as a terminal table |
//! | `report/diff/stacks.rs` | differential folded stacks and their flamegraph |
//! | `report/diff/pprof.rs` | a pprof profile of the difference (`-diff_base` style) |
//! | `report/diff/tests.rs` | the flags' false-positive rate and power on simulated programs |
//! | `report/html.rs` | the self-contained HTML page (timeline, flamegraph of any range, sites) |
//! | `report/html/page.html` | the page's skeleton, filled with the data and the two files below |
//! | `report/html/page.css` | the page's styles |
//! | `report/html/page.js` | the page's script: the timeline, ranges, the flamegraph and the sites table |
//! | `report/write.rs` | a report's outputs written under the file policy: `report::write::Outputs` (what was asked for, none over an input), each export and its differential form written and said; what `record` and `attach` print after the run: the summary, the flamegraph and the HTML page made at once on the machine's cores, said in that order |
//! | `report/command.rs` | `memprof report` and `memprof diff` as the terminal sees them (feature `cli`): arguments (the output flags made from the registry), files, window, tables |
//! | `serve/` | `serve` feature: `/debug/pprof/` endpoints and their handler |
//! | `serve/server.rs` | the built-in HTTP server: one `poll` thread for every connection (deadlines, a cap), a pool of workers |
//! | `serve/parse.rs` | the request head, parsed from bytes alone (fuzzed by `tests/fuzz/http.rs`) |
//! | `serve/handler.rs` | the `/debug/pprof/` handler: endpoints, deltas, the answers' encoding |
//! | `serve/mod.rs` | the folder's design notes and face |
//! | `gc/` | a managed heap (OCaml-style) whose blocks and cycles are profiled |
//! | `gc/mod.rs` | the managed heap's face: [`gc::Heap`], collection cycles and their timing |
//! | `gc/heap.rs` | blocks, headers, values, chunks and large blocks: the heap's memory layout |
//! | `gc/alloc.rs` | size-classed free lists with the last-known-free-index heuristic |
//! | `gc/mark.rs` | incremental marking: the prefetching marker (with its reached bits) and a plain depth-first one |
//! | `gc/sweep.rs` | sweep: dead blocks back to the free lists, each death reported first |
//! | `gc/compare.rs` | structural comparison and hashing of values |
//! | `gc/profiler.rs` | where the managed heap reports its blocks and cycles |
//! | `gc/cycles.rs` | per-cycle timing records and heap totals |
//! | `testing.rs` | [`testing::measure`], [`testing::Allocated`] (figures, then the sites by name), [`assert_no_alloc!`]: allocation assertions in ordinary `cargo test`s |
//! | `testing/budget.rs` | [`testing::Budgets`], [`assert_budget!`]: a test's figures against ceilings in `tests/alloc-budgets.toml` (feature `budgets`), written by `MEMPROF_BUDGETS=accept`; read-modify-write under a `flock`, replaced atomically |
//! | `testing/sampled.rs` | [`testing::measure_sampled`]: estimates with 95 % intervals, and assertions that fail at a stated false-failure rate (an exact binomial test) |
//! | `tracing.rs` | `tracing::SpanLayer` (feature `tracing`): samples labelled by span path |
//! | `record/` | `memprof record`, split by the process each part runs in; the binary's entry points [`record::run`] and [`record::preload_path`] |
//! | `record/mod.rs` | the folder's face: which part runs where, what the binary calls |
//! | `record/env.rs` | the `MEMPROF_*` contract between the two processes |
//! | `record/ring/mod.rs` | the shared ring between a profiled process and `record`: header (with the collector's pid, start time, heartbeat and verdict), side log (module lists, `dlclose` records), queue; the producer side runs in the program, the consumer side in `memprof`; a ring of another version refused, and its process told |
//! | `record/ring/records.rs` | the side log's records: the process's facts and module lists as bytes |
//! | `record/ring/bell.rs` | the ring directory's bell: a shared word each process rings once its ring is ready, so the sleeping collector attaches at once (§7) |
//! | `record/ring/tests.rs` | the ring's tests |
//! | `record/unfollowed.rs` | the programs a process started unfollowed: written in the program, read by `record` |
//! | `record/program/` | runs inside the profiled program, called by the preload library |
//! | `record/program/mod.rs` | the folder's face |
//! | `record/program/agent.rs` | the agent: start, exec, `dlclose`, exit, and a session started and stopped by `memprof attach` |
//! | `record/program/agent/attached.rs` | the agent's session for `memprof attach`: `start_attached` and `stop_attached`, which never wait without end on a lock (a thread stopped inside `fork` holds them: the call answers busy and the attacher tries again), and the owner a second attach is refused by |
//! | `record/program/agent/fork.rs` | the agent in a child: the `pthread_atfork` handlers, and the handler of a raw `clone` child |
//! | `record/program/agent/fatal.rs` | a fatal signal in a program that does not handle it: the profile brought up to date first |
//! | `record/attach_abi.rs` | what `memprof attach` and the library it loads tell each other: plans of writes at a fixed layout, the settings as text |
//! | `record/command/` | runs in `memprof` (feature `cli`) |
//! | `record/command/mod.rs` | the folder's face: `preload-path`, a program recorded without a summary (the demo's) |
//! | `record/command/bundled.rs` | [`record::Bundled`]: the preload library carried in the executable, cached on disk |
//! | `record/command/launcher/` | runs a program under the preload library and waits for it |
//! | `record/command/launcher/mod.rs` | the launcher's stages: the preload library found, the program's command and environment (the contract with the library), the program started and waited for beside the collector, its descendants waited for |
//! | `record/command/launcher/program.rs` | the program found as `execvp` finds it and checked: executable, not setuid, not static |
//! | `record/command/launcher/through.rs` | launchers looked through (rustup's proxies, pyenv's shims, `env NAME`, a `#!` line naming one): the program they would run, with what they would set in its environment |
//! | `record/command/launcher/output.rs` | the output file and the tree's directory created before the program runs, or in the child between `fork` and `exec` for a `%p` name, without allocating; `--force`'s atomic replacement |
//! | `record/command/launcher/ring_dir.rs` | the private directory of a run's shared rings, and the stale ones of killed runs removed |
//! | `record/command/collect/` | `record`'s collector: drains every ring, follows module lists and `dlclose` records, writes the profiles and folds them once, for every report and `--serve`; keeps no map of live blocks (a free names its block); reads each process's resident memory every 10 ms while it changes and folds its mappings by kind (a last look at exit read itself); records how each process ended; its thread at nice −20 where it may |
//! | `record/command/collect/mod.rs` | the collector's loop (§1): what it is told, what it leaves, its thread at nice −20 where it may, the rings it holds; the folder's notes numbered across its files |
//! | `record/command/collect/rings.rs` | the rings found in the ring directory, mapped and attached, each with the process that made it as this `/proc` names it, across PID namespaces (§7) |
//! | `record/command/collect/files.rs` | a ring's profile opened once its session runs (the program's, or a child's `<pid>[.<n>].mprof` created exclusively), its recorder started (§2) |
//! | `record/command/collect/deliver.rs` | a ring's events to its recorder: the queue drained, side events, module lists and modules missing from them (§4), frees named by their blocks, kept aside and replayed (§5) |
//! | `record/command/collect/blocks.rs` | the exact mode's live blocks by address (the program keeps none: `engine::live` §6), 24 bytes each: a free paired with the block allocated no later than it, a reuse of the address ending the block; the one index of live blocks, handed to the fold where it reads one (a GC cycle, the end) |
//! | `record/command/collect/resident.rs` | each process's resident size every 10 ms while it changes (less often while it stays) and its mappings by kind (a last look at exit read itself) (§6) |
//! | `record/command/collect/end.rs` | a ring whose process is gone, finished: its last events, how the process ended, its losses and what stderr is told (§3) |
//! | `record/command/collect/publish.rs` | the root process's profile as folded so far, copied between two drains when `--serve` asks |
//! | `record/command/collect/sleep.rs` | the collector's sleep between passes (§8): on its rings' words, the bell and its own (`futex_waitv`), until there is work or its own schedule is due; polling on old kernels |
//! | `record/command/collect/stacks.rs` | the stacks a process's threads sent whole, by key (`engine::known`): an allocation that names one is folded as the stack it was interned as, or with the frames kept |
//! | `record/command/oom.rs` | whether the kernel's OOM killer ended the program: its memory cgroups' and the system's OOM-kill counts, before and after |
//! | `record/command/request.rs` | [`record::RecordRequest`]: `record`'s arguments |
//! | `record/command/run.rs` | [`record::run`]: the program run, the collector and the symbol reader beside it, then the summary and the companions from the collector's fold, and every diagnosis |
//! | `record/command/split_reader.rs` | a thread per recorded process that reads its `smaps` when due or at a new heap peak, off the loop that drains the queues |
//! | `record/command/notes.rs` | `record`'s notes: programs run unprofiled, CPython's allocator |
//! | `record/command/runtimes.rs` | runtimes whose heap is not malloc's (Go, V8, a JVM, GCC's compilers), and the note for each; pymalloc under `attach` |
//! | `record/command/attach/` | `memprof attach PID`: a running process profiled through the same library, ring and collector, and left as it was |
//! | `record/command/attach/mod.rs` | [`record::attach`]: the checks, the output, the collector, the wait, the detach and the summary; what a SIGKILL leaves behind |
//! | `record/command/attach/request.rs` | [`record::AttachRequest`]: `attach`'s arguments |
//! | `record/command/attach/target.rs` | the process as seen from outside: refusals that say what to do, its mappings, function addresses in its objects |
//! | `record/command/attach/tracee.rs` | a seized thread: stops, its whole user state saved and restored, a function of the process called on it |
//! | `record/command/attach/inject.rs` | `dlopen` on a borrowed thread, the library's plans, the writes made with every thread stopped |
//! | `record/command/process.rs` | a process as the collector sees it through `/proc`: gone or not (a zombie's status, a pidfd's), its modules from its maps, which process made a ring (across PID namespaces) |
//! | `record/command/interposable.rs` | the program's executable read once for the allocator the preload library must reach (static, stripped with jemalloc or mimalloc linked in, defining `malloc`), and `record`'s notes: when it cannot reach it, and which allocator an executable defining `malloc` links (for the reports' naming of its memory) |
//! | `bin/memprof/` | the `memprof` command: argument parsing and dispatch, the demo |
//! | `bin/memprof/main.rs` | the `memprof` command: parse, dispatch, exit code |
//! | `bin/memprof/demo.rs` | `memprof demo`: the bundled workloads profiled, their flamegraphs and pages written (`target/memprof-demo/`) |
//! | `preload/` | `libmemprof_preload.so`: the exported `malloc` family and hooks only |
//! | `preload/src/patch/mod.rs` | entry-point patching (x86-64): which allocators, one layer per path, the order of the writes, the log |
//! | `preload/src/patch/code.rs` | the moved instructions, the refusals, trampolines and jumps, from bytes alone (iced-x86) |
//! | `preload/src/patch/hooks.rs` | the hooks of jemalloc's `_rjem_*`, mimalloc's `mi_*` and Rust's shim, each with its slot |
//! | `preload/src/patch/near.rs` | executable pages within a `jmp rel32` of a patched object |
//! | `preload/src/patch/symtab.rs` | the executable's `.symtab` functions at their run-time addresses |
//! | `preload/src/patch/write.rs` | the 5-byte write, W^X |
//!
//! # Quick use
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);
//!
//! let session = memprof::start(memprof::Config::default(), memprof::Recorder::new()).unwrap();
//! let v: Vec<u8> = vec![0; 1 << 20];
//! drop(v);
//! let profile = session.stop().unwrap().into_profile();
//! println!("{} samples", profile.counts.samples);
//! ```
//!
//! # What is not API
//! The engine (the sampler, the live table, the queue, the call-stack capture) and the
//! handlers that keep it consistent across `fork` and `dlclose` are private: calling them
//! at the wrong moment would break the invariants their `unsafe` code relies on. What the
//! preload library needs is in `memprof::__private`, which is not API. None of these
//! compile (a unit test, `private_paths_exist`, checks that the paths are right):
//! ```compile_fail,E0603
//! memprof::engine::live::unlock_all();
//! ```
//! ```compile_fail,E0603
//! memprof::engine::live::lock_all();
//! ```
//! ```compile_fail,E0603
//! memprof::engine::callstack::fork_child();
//! ```
//! ```compile_fail,E0603
//! memprof::engine::callstack::after_dlclose();
//! ```
//! ```compile_fail,E0603
//! memprof::session::fork_prepare();
//! ```
//! ```compile_fail,E0603
//! memprof::session::fork_parent();
//! ```
//! ```compile_fail,E0603
//! memprof::session::fork_child();
//! ```
//! ```compile_fail,E0425
//! memprof::__private::fork_child();
//! ```
//!
//! `memprof record`'s plumbing is the binary's through [`record::run`] and
//! [`record::preload_path`] only: the launcher, the bundled library's installer, the
//! readers that follow a growing profile, the symbol loaders and the time parsers are
//! private to the crate.
//! ```compile_fail,E0603
//! let _ = memprof::record::command::launcher::find_preload(None);
//! ```
//! ```compile_fail,E0624
//! let _ = memprof::record::Bundled::cache_dirs();
//! ```
//! ```compile_fail,E0603
//! let _ = memprof::profile::load::follow;
//! ```
//! ```compile_fail,E0603
//! let _ = memprof::profile::load::follow_shared;
//! ```
//! ```compile_fail,E0603
//! let _ = memprof::profile::symbolize::Loaders::default();
//! ```
//! ```compile_fail,E0603
//! let _ = memprof::profile::replay::parse_moment("1s", 0);
//! ```
//! ```compile_fail,E0603
//! let _ = memprof::profile::replay::parse_duration("1s");
//! ```
#![deny(missing_docs)]
// `memprof record`'s side in `memprof` (`record::command`: the launcher, the collector that
// reads the rings, the report and diff commands) is built with the `cli` feature only. The
// helpers it uses from the folders below (the rings' consumer side, the recorder's process
// facts, the time parsers) are crate-private, so without that feature they have no user:
// the preload library's build and a `report`-only build leave them unused.
#![cfg_attr(not(feature = "cli"), allow(dead_code))]
#![deny(missing_debug_implementations)]

mod binomial;
pub mod config;
mod engine;
mod error;
pub mod gc;
pub mod profile;
pub mod record;
#[cfg(feature = "report")]
pub mod report;
#[cfg(feature = "serve")]
pub mod serve;
mod session;
mod sys;
pub mod testing;
#[cfg(feature = "tracing")]
pub mod tracing;

pub use config::{Config, Unwinder};
pub use engine::alloc::Sampled;
pub use engine::clock::monotonic_ns;
pub use error::{Error, LaunchError};
pub use session::recorder::{Held, Recorder};
pub use session::{
    live_profile, poll, record_gc_cycle, start, Allocation, Callstack, Deallocation, Poll, Session,
    SessionCounters, SessionInfo, Tracker,
};
pub use sys::files;

/// Not API: what the preload library (`memprof-preload`), the tests and the benchmarks
/// need from the engine. Nothing here follows semantic versioning, and it may change or
/// disappear in any release. Every function here is safe to call at any time; the
/// handlers that are not (fork, `dlclose`) stay private to the crate, and the preload
/// library reaches them through [`around_dlclose`](__private::around_dlclose) and the
/// agent's own `pthread_atfork` registration.
#[doc(hidden)]
pub mod __private {
    pub use crate::engine::alloc::{
        before_realloc, before_realloc_in, before_realloc_slow_in, before_realloc_unsampled,
        on_alloc, on_alloc_at, on_alloc_in, on_alloc_slow_at, on_dealloc, on_dealloc_counted,
        on_realloc, on_realloc_at, ReallocPlan,
    };
    pub use crate::engine::busy::Busy;
    pub use crate::engine::callstack::dwarf_fallbacks;
    pub use crate::engine::forked::after_child as after_clone_child;
    pub use crate::engine::live::{
        Entry, Filter, FILTER, FILTER_COUNTERS_AT, FILTER_MASK, FILTER_SHIFT,
    };
    pub use crate::engine::push::seccomp_installing;
    pub use crate::engine::sampler::{sample, sample_in, skip_in, Countdown, EPOCH};
    pub use crate::engine::thread::alt_stack_changed;
    /// The attach ABI, shared with the preload library: `record::attach_abi`.
    pub mod attach_abi {
        pub use crate::record::attach_abi::*;
    }
    /// The HTTP request-head parser of `serve`, for its fuzz target.
    #[cfg(feature = "serve")]
    pub mod http_parse {
        pub use crate::serve::parse::*;
    }
    pub use crate::record::program::agent::{
        around_dlclose, before_exec, before_quick_exit, forking_word, in_fork, init,
        start_attached, stop_attached, Refusal,
    };
    pub use crate::record::unfollowed::note as note_unfollowed;
    pub use crate::sys::elf_lookup::{
        first_definitions, next_definitions, own_definitions, prior_definitions, Prior,
    };
    pub use crate::sys::errno::{errno, set_errno};
    pub use crate::sys::got;
    pub use crate::sys::seccomp::install_failed as seccomp_failed;
}

#[cfg(test)]
mod tests {
    /// The paths the crate documentation's `compile_fail` examples name exist (so those
    /// examples fail because the items are private, not because the paths are wrong).
    #[test]
    fn private_paths_exist() {
        let handlers: [fn(); 7] = [
            crate::engine::live::unlock_all,
            crate::engine::live::lock_all,
            crate::engine::callstack::fork_child,
            crate::engine::callstack::after_dlclose,
            crate::session::fork_prepare,
            crate::session::fork_parent,
            crate::session::fork_child,
        ];
        assert!(handlers.iter().all(|f| *f as usize != 0));
    }
}
