//! The events a profile folds in: samples, frees, moves of sampled blocks, GC cycles.

use super::tables::StackId;
use crate::sys::smaps::Kinds;

/// A sampled allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Unique id of this sample within the run; frees and moves refer to it.
    pub id: u64,
    /// The allocating call stack.
    pub stack: StackId,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// Small thread number (1 = first thread that allocated after start).
    pub thread: u32,
    /// Address of the block.
    pub addr: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// Number of sample points inside the allocation (k ≥ 1).
    pub k: u64,
}

/// The sampled block `id` was freed. A free names the block it ends by its sample id *and*
/// by what the aggregates need (its stack, size, sample points and allocation time), so
/// that a reader folds it in without remembering every live block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Free {
    /// The sample whose block was freed (0 in version-2 streams, which name a block by the
    /// fields below).
    pub id: u64,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// The block's allocating stack.
    pub stack: StackId,
    /// The block's requested size (its sample's `size`).
    pub size: u64,
    /// The block's sample points.
    pub k: u64,
    /// When the block was allocated (its sample's `time_ns`).
    pub alloc_ns: u64,
    /// How long the block lived, when known more finely than `time_ns − alloc_ns`: a version-4
    /// stream's exact mode quantises times to ≈ 1.05 ms but says how long a block that lived less
    /// than that lived, to ≈ 131 µs ([`format`](mod@crate::profile::format) §2c). `None`: the
    /// difference of the two times is the lifetime.
    pub life_ns: Option<u64>,
}

impl Free {
    /// The free, at `time_ns`, of the block of sample `s`.
    pub fn of(s: &Sample, time_ns: u64) -> Free {
        Free {
            id: s.id,
            time_ns,
            stack: s.stack,
            size: s.size,
            k: s.k,
            alloc_ns: s.time_ns,
            life_ns: None,
        }
    }

    /// How long the block lived: [`Free::life_ns`] when set, else from its allocation to
    /// its free (0 when a damaged stream puts the free first).
    pub fn lifetime_ns(&self) -> u64 {
        self.life_ns.unwrap_or(self.time_ns.saturating_sub(self.alloc_ns))
    }
}

/// The sampled block `id` was reallocated in place or moved, keeping its sample (named as
/// a [`Free`] names it). Only older recordings hold moves: a reallocation now ends its old
/// block, whose sample dies there (a [`Free`]), and its new size is sampled as a new
/// allocation (`engine::sampler` §5). Read, folded and written again for those files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Move {
    /// The sample whose block moved (0 in version-2 streams).
    pub id: u64,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// New address of the block (0 in version-2 streams).
    pub new_addr: u64,
    /// New size of the block in bytes.
    pub new_size: u64,
    /// The block's allocating stack.
    pub stack: StackId,
    /// The block's size when it was sampled.
    pub size: u64,
    /// The block's sample points.
    pub k: u64,
    /// When the block was allocated.
    pub alloc_ns: u64,
}

impl Move {
    /// The move, at `time_ns`, of the block of sample `s` to a size of `new_size` bytes.
    pub fn of(s: &Sample, time_ns: u64, new_size: u64) -> Move {
        Move {
            id: s.id,
            time_ns,
            new_addr: 0,
            new_size,
            stack: s.stack,
            size: s.size,
            k: s.k,
            alloc_ns: s.time_ns,
        }
    }
}

/// The recorded process's resident memory at a moment: what `memprof record`'s collector
/// read from `/proc/PID/statm` (the resident pages), from outside the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resident {
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// Resident bytes.
    pub bytes: u64,
}

/// Where the recorded process's resident memory was at a moment, by kind of mapping: what
/// `memprof record`'s collector read from `/proc/PID/smaps`, beside the live heap it had
/// folded by then. Explains the gap between the resident size and the live heap
/// ([`Profile::splits`](crate::profile::Profile::splits)).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ResidentSplit {
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// Resident bytes in all (the sum of every mapping's `Rss`).
    pub resident: u64,
    /// Resident bytes of the allocator's mappings: the `[heap]` (`brk`) and the private
    /// anonymous mappings that are not stacks, less memprof's own ([`Self::own`]) and what
    /// is [`Self::outside`]. The live heap is in here; the rest is what the allocator holds
    /// free (and its bookkeeping).
    pub allocator: u64,
    /// Resident bytes of private anonymous mappings that glibc's malloc did not make (told
    /// by their first words, `sys::malloc_maps`): a runtime's or a collector's own heap
    /// (Go's, V8's, GCC's), the program's own `mmap`. Counted with [`Self::allocator`] when
    /// they cannot be told apart: a process whose memory could not be read, a file of an
    /// older memprof (0 here), and, when reported, a program whose allocator is not glibc's
    /// (its mappings have none of glibc's shapes).
    pub outside: u64,
    /// Resident bytes of stacks: `[stack]` and thread stacks (a private anonymous mapping
    /// right above a guard page).
    pub stacks: u64,
    /// Resident bytes of mapped files: code, read-only data, files the program mapped.
    pub files: u64,
    /// Resident bytes memprof keeps in the process: its event ring and the memory its
    /// library maps for the live table and buffers.
    pub own: u64,
    /// The rest: shared memory, the vDSO and other special mappings.
    pub other: u64,
    /// The estimated live heap at that moment (Σ k × interval over the live blocks then).
    pub live_bytes: f64,
}

// The conversion lives here, with the type it makes, so that the reader of the memory files
// (`sys::smaps`, the bottom layer) knows nothing of profiles.
impl Kinds {
    /// The split at `time_ns` beside a live heap of `live_bytes`; `own_mapped` bytes that
    /// memprof's library mapped for itself (anonymous, so among the allocator's by the
    /// mappings alone) are moved to memprof's own.
    pub(crate) fn split(&self, time_ns: u64, own_mapped: u64, live_bytes: f64) -> ResidentSplit {
        // memprof's library maps its memory itself: outside malloc's mappings when they were
        // told apart, else among them.
        let from_outside = own_mapped.min(self.outside);
        let mapped = (own_mapped - from_outside).min(self.allocator);
        ResidentSplit {
            time_ns,
            resident: self.resident,
            allocator: self.allocator - mapped,
            outside: self.outside - from_outside,
            stacks: self.stacks,
            files: self.files,
            own: self.own + mapped + from_outside,
            other: self.other,
            live_bytes,
        }
    }
}

impl ResidentSplit {
    /// What the allocator held beyond the live heap: its mappings' resident bytes less the
    /// live heap (0 when the estimate is above them).
    pub fn allocator_free(&self) -> f64 {
        (self.allocator as f64 - self.live_bytes).max(0.0)
    }
}

/// How a recorded process ended, as `memprof record` learned it: from the program's own
/// exit handler or `_exit`, from its wait status (the program `record` ran), from the
/// kernel's count of OOM kills, or from a zombie's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// How.
    pub how: EndedHow,
    /// The exit status ([`EndedHow::Exit`], [`EndedHow::QuickExit`]) or the signal number
    /// ([`EndedHow::Signal`], [`EndedHow::OomKill`]); 0 otherwise.
    pub status: i32,
    /// With [`EndedHow::OomKill`]: the memory limit that was reached, in bytes (0 when
    /// unknown or for other endings).
    pub limit_bytes: u64,
}

/// The ways a process ends that [`Ended`] tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndedHow {
    /// It called `exit` or returned from `main` (exit handlers ran).
    Exit,
    /// It called `_exit` or `quick_exit` (exit handlers did not run).
    QuickExit,
    /// A signal killed it.
    Signal,
    /// The kernel's OOM killer killed it (SIGKILL, and an OOM-kill count rose).
    OomKill,
    /// It replaced itself with another program (`exec`).
    Exec,
    /// `memprof attach` detached from it; it ran on.
    Detached,
}

impl EndedHow {
    /// The name in the file and in `memprof report --json`.
    pub fn name(self) -> &'static str {
        match self {
            EndedHow::Exit => "exit",
            EndedHow::QuickExit => "_exit",
            EndedHow::Signal => "signal",
            EndedHow::OomKill => "oom-kill",
            EndedHow::Exec => "exec",
            EndedHow::Detached => "detached",
        }
    }

    /// The code in the file's Ended record.
    pub(crate) fn code(self) -> u64 {
        match self {
            EndedHow::Exit => 1,
            EndedHow::QuickExit => 2,
            EndedHow::Signal => 3,
            EndedHow::OomKill => 4,
            EndedHow::Exec => 5,
            EndedHow::Detached => 6,
        }
    }

    /// The way of a code, `None` for a code of a newer writer.
    pub(crate) fn from_code(code: u64) -> Option<EndedHow> {
        Some(match code {
            1 => EndedHow::Exit,
            2 => EndedHow::QuickExit,
            3 => EndedHow::Signal,
            4 => EndedHow::OomKill,
            5 => EndedHow::Exec,
            6 => EndedHow::Detached,
            _ => return None,
        })
    }
}

impl Ended {
    /// From a wait status as `waitpid` reports it (`/proc/PID/stat`'s exit code is one).
    pub fn from_wait_status(status: i32) -> Option<Ended> {
        let (how, status) = if libc::WIFEXITED(status) {
            (EndedHow::Exit, libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            (EndedHow::Signal, libc::WTERMSIG(status))
        } else {
            return None;
        };
        Some(Ended { how, status, limit_bytes: 0 })
    }

    /// In words, for the top table: "exit status 3", "killed by signal 11 (SIGSEGV)", …
    pub fn describe(&self) -> String {
        match self.how {
            EndedHow::Exit => format!("exit status {}", self.status),
            EndedHow::QuickExit => {
                format!("_exit status {} (exit handlers did not run)", self.status)
            }
            EndedHow::Signal => {
                format!("killed by signal {}{}", self.status, signal_name(self.status))
            }
            EndedHow::OomKill if self.limit_bytes > 0 => format!(
                "killed by the kernel's OOM killer (SIGKILL) at a memory limit of {:.2} MiB",
                self.limit_bytes as f64 / (1u64 << 20) as f64
            ),
            EndedHow::OomKill => "killed by the kernel's OOM killer (SIGKILL)".into(),
            EndedHow::Exec => "replaced itself with another program (exec)".into(),
            EndedHow::Detached => "ran on after memprof attach detached".into(),
        }
    }
}

/// " (SIGSEGV)" for the signals a crash or a kill is usually made of, "" for others.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => " (SIGHUP)",
        libc::SIGINT => " (SIGINT)",
        libc::SIGQUIT => " (SIGQUIT)",
        libc::SIGILL => " (SIGILL)",
        libc::SIGTRAP => " (SIGTRAP)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGBUS => " (SIGBUS)",
        libc::SIGFPE => " (SIGFPE)",
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGPIPE => " (SIGPIPE)",
        libc::SIGALRM => " (SIGALRM)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGXCPU => " (SIGXCPU)",
        libc::SIGXFSZ => " (SIGXFSZ)",
        _ => "",
    }
}

/// One garbage-collection cycle of a managed heap ([`crate::gc`]), timed by the collector.
/// Times are nanoseconds since the start of the recording, on the samples' clock.
/// `repr(C)`: the preload library's copy of memprof receives it from the program's copy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct GcCycle {
    /// Cycle number within its heap (1-based).
    pub cycle: u64,
    /// When the cycle's first mark slice began.
    pub start_ns: u64,
    /// When its sweep finished.
    pub end_ns: u64,
    /// Time spent marking, summed over slices.
    pub mark_ns: u64,
    /// Number of mark slices.
    pub slices: u64,
    /// The longest mark slice.
    pub longest_slice_ns: u64,
    /// Words scanned by the marker.
    pub words_marked: u64,
    /// `mark_ns / words_marked`: the measured cost of marking one word in this cycle.
    pub ns_per_word: f64,
    /// Time spent sweeping.
    pub sweep_ns: u64,
    /// Heap size in words at the end of the cycle.
    pub heap_words: u64,
    /// Words found live (marked) by the cycle.
    pub live_words: u64,
}

impl GcCycle {
    /// The cycle as 11 words (the float as its bits), for a queue slot's frames.
    pub(crate) fn to_words(self) -> [u64; 11] {
        [
            self.cycle,
            self.start_ns,
            self.end_ns,
            self.mark_ns,
            self.slices,
            self.longest_slice_ns,
            self.words_marked,
            self.ns_per_word.to_bits(),
            self.sweep_ns,
            self.heap_words,
            self.live_words,
        ]
    }

    /// [`GcCycle::to_words`] back, when there are enough words.
    pub(crate) fn from_words(w: &[u64]) -> Option<GcCycle> {
        let w: &[u64; 11] = w.get(..11)?.try_into().ok()?;
        Some(GcCycle {
            cycle: w[0],
            start_ns: w[1],
            end_ns: w[2],
            mark_ns: w[3],
            slices: w[4],
            longest_slice_ns: w[5],
            words_marked: w[6],
            ns_per_word: f64::from_bits(w[7]),
            sweep_ns: w[8],
            heap_words: w[9],
            live_words: w[10],
        })
    }
}

/// The sample points a sample of `size` bytes usually has at `interval`: its size in the
/// exact mode, else 1. The format codes `k` as its difference from this, and a
/// [`Recorder`](crate::session::recorder::Recorder)'s token keeps it the same way.
pub(crate) fn expected_k(interval: f64, size: u64) -> u64 {
    if interval == 1.0 {
        size
    } else {
        1
    }
}
