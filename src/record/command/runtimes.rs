//! Runtimes whose heap is not malloc's, recognised in a recorded process so that a note
//! says what memprof does and does not see there, instead of a profile that looks whole.
//!
//! memprof sees what goes through the malloc family. A runtime that maps its own heap and
//! carves its objects out of it never calls malloc for them:
//! - **Go**: the Go runtime's heap (every Go object), static or cgo; only C code's
//!   allocations (cgo, C libraries) reach malloc. Recognised by the build-information
//!   section every Go binary carries (`interposable::Executable::go`). A static Go program is
//!   refused before it runs, with the same words and no "link it dynamically": linking
//!   would not help.
//! - **V8** (Node.js, Deno): JavaScript objects live in V8's heap; malloc serves buffers,
//!   native modules and V8's own bookkeeping. Recognised by the executable's name or a
//!   `libnode`/`libv8` library.
//! - **the JVM**: Java objects live in the Java heap; recognised by `libjvm.so`.
//! - **GCC's compiler proper** (`cc1`, `cc1plus`, …): its garbage-collected heap (ggc) is
//!   mapped by GCC itself; recognised by the executable's name.
//!
//! The resident split names such a heap as memory outside malloc (`sys::malloc_maps`);
//! these notes say whose it is and where to look instead. CPython's allocator has its own
//! notes (`notes::cpython`, and [`pymalloc_attached`] for `attach`).

use crate::report::text::printable;

pub(crate) use crate::error::GO_HEAP;

/// A runtime with a heap of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runtime {
    Go,
    V8,
    Jvm,
    Gcc,
}

/// The base name of a path.
fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// GCC's compilers proper, whose heap is ggc's.
const GCC_PROPER: [&str; 9] =
    ["cc1", "cc1plus", "cc1obj", "cc1objplus", "f951", "lto1", "gnat1", "d21", "go1"];

impl Runtime {
    /// The runtime of a process whose executable is `exe`, which mapped `modules` (paths);
    /// `go`: its executable is a Go program.
    pub(crate) fn of<'a>(
        exe: &str,
        mut modules: impl Iterator<Item = &'a str>,
        go: bool,
    ) -> Option<Runtime> {
        let name = base(exe);
        if go {
            return Some(Runtime::Go);
        }
        if GCC_PROPER.contains(&name) {
            return Some(Runtime::Gcc);
        }
        if matches!(name, "node" | "nodejs" | "deno") {
            return Some(Runtime::V8);
        }
        modules.find_map(|m| {
            let m = base(m);
            if m.starts_with("libjvm.so") {
                Some(Runtime::Jvm)
            } else if m.starts_with("libnode.so") || m.starts_with("libv8.so") {
                Some(Runtime::V8)
            } else {
                None
            }
        })
    }

    /// The note for a process of this runtime, whose executable is `exe`.
    pub(crate) fn note(self, exe: &str) -> String {
        let who = printable(base(exe));
        match self {
            Runtime::Go => format!(
                "{who} is a Go program: {GO_HEAP}; memprof sees the C allocations (cgo, C \
                 libraries)"
            ),
            Runtime::V8 => format!(
                "{who} runs V8: JavaScript objects live in V8's own heap, outside malloc, so \
                 memprof sees only what goes through malloc (buffers, native modules, V8's \
                 bookkeeping); node --heap-prof or a heap snapshot shows V8's heap"
            ),
            Runtime::Jvm => format!(
                "{who} runs a Java virtual machine: Java objects live in the Java heap, outside \
                 malloc, so memprof sees only native allocations; a heap dump (jcmd \
                 GC.heap_dump) or JFR shows the Java heap"
            ),
            Runtime::Gcc => format!(
                "{who} is GCC's compiler proper: its garbage-collected heap (ggc) is mapped by \
                 GCC itself, outside malloc, so memprof sees only what goes through malloc; \
                 -fmem-report shows GCC's heap"
            ),
        }
    }
}

/// The note for CPython profiled by `memprof attach`: pymalloc is chosen when the
/// interpreter starts, so an attach cannot switch it off as `record` does.
pub(crate) fn pymalloc_attached() -> String {
    "CPython was attached to while running: its own allocator, pymalloc (chosen when the \
     interpreter starts), keeps serving objects of 512 bytes or less from arenas it takes \
     from malloc, so those objects are seen as their arenas, not one by one; larger objects \
     are seen; `memprof record` runs CPython with PYTHONMALLOC=malloc, which shows them all"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_by_their_marks() {
        let none = || std::iter::empty::<&str>();
        assert_eq!(Runtime::of("/usr/bin/app", none(), true), Some(Runtime::Go));
        assert_eq!(
            Runtime::of("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", none(), false),
            Some(Runtime::Gcc)
        );
        assert_eq!(Runtime::of("/usr/bin/node", none(), false), Some(Runtime::V8));
        let jvm = ["/usr/lib/jvm/java-17/lib/server/libjvm.so"];
        assert_eq!(Runtime::of("/usr/bin/java", jvm.into_iter(), false), Some(Runtime::Jvm));
        let node = ["/usr/lib/x86_64-linux-gnu/libnode.so.108"];
        assert_eq!(Runtime::of("/opt/app/electron", node.into_iter(), false), Some(Runtime::V8));
        let libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6"];
        assert_eq!(Runtime::of("/usr/bin/cc1x", libc.into_iter(), false), None);
        assert_eq!(Runtime::of("/usr/bin/nodemon", none(), false), None);
    }

    /// A note names the program by its base name, escaped, and says where to look.
    #[test]
    fn notes_say_where_to_look() {
        let go = Runtime::Go.note("/srv/svc\u{1b}[2J");
        assert!(go.starts_with("svc\\u{1b}[2J is a Go program: "), "{go}");
        assert!(go.contains("go tool pprof") && !go.contains("dynamically"));
        assert!(Runtime::V8.note("/usr/bin/node").contains("outside malloc"));
        assert!(Runtime::Gcc.note("cc1plus").contains("-fmem-report"));
    }
}
