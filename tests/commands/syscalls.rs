//! The sample path makes no system call. A program whose threads allocate from 2,048 call
//! sites (`fixtures/c/many_sites.c`: more return addresses than the DWARF unwinder's compiled
//! rules hold, so most walks go through framehop on the walk stack) runs under
//! `strace -f` inside `memprof record`, in the exact mode and at the default interval, built
//! without frame pointers (the default unwinder) and with them (`--unwinder fp`). Each
//! thread marks the start and the end of its loop with a write that fails (`write(-1, ...)`),
//! after a warm-up that takes the profiler's first-time costs (the thread's block, its
//! stack's bounds, its alternate stack looked up, the live table's shards' first tables);
//! between its marks it may make only what a wait for the collector makes: `futex` (the
//! queue full in the exact mode, or a table shard held by the other thread) and, during
//! such a wait, the collector looked up (`kill(PID, 0)`, its `/proc/PID/stat` read). The
//! count is 0 for any number of allocations, so it cannot grow with them. (Before, each
//! walk through framehop blocked and restored signals: two `rt_sigprocmask` calls, over
//! 1.5 per allocation on this program.)

use std::path::Path;
use std::process::Command;

use crate::common::{have_strace, syscalls_between_marks, text, MEMPROF};
use crate::programs::{cc, scratch};

/// Calls each thread makes in its loop, after a warm-up of `warm` passes over the sites.
const CALLS: &str = "100000";

/// `memprof record OPTS -- PROG 2 CALLS WARM` under `strace -f`; the program's output is
/// checked, the trace returned.
fn traced(dir: &Path, label: &str, opts: &[&str], prog: &Path, warm: &str) -> String {
    let file = dir.join(format!("{label}.strace"));
    let out = Command::new("strace")
        .current_dir(dir)
        .arg("-f")
        .arg("-o")
        .arg(&file)
        .arg(MEMPROF)
        .arg("record")
        .args(opts)
        .args(["--force", "-o", &format!("{label}.mprof"), "--"])
        .arg(prog)
        .args(["2", CALLS, warm])
        .output()
        .expect("strace runs");
    assert_eq!(out.status.code(), Some(0), "{label}: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("checksum "), "{label}: {}", text(&out.stdout));
    std::fs::read_to_string(&file).expect("the trace")
}

/// Both builds, both modes: no thread makes a system call in its loop but a wait's.
#[test]
fn the_sample_path_makes_no_system_call() {
    if !have_strace("the sample path's system calls") {
        return;
    }
    let dir = scratch("syscalls");
    let dwarf = dir.join("many_sites_dwarf");
    let fp = dir.join("many_sites_fp");
    let flags = ["-O2", "-g", "-fno-optimize-sibling-calls", "-pthread"];
    cc("many_sites.c", &dwarf, &[&flags[..], &["-fomit-frame-pointer"]].concat());
    cc("many_sites.c", &fp, &[&flags[..], &["-fno-omit-frame-pointer"]].concat());
    // The default interval's warm-up is long enough to sample at every address the loop's
    // blocks take (glibc gives a freed block back to the next call of its size), so that
    // every shard of the live table they fall in has its first table before the loop.
    let runs: [(&str, &[&str], &Path, &str); 4] = [
        ("dwarf-exact", &["--interval", "1"], &dwarf, "2"),
        ("dwarf-default", &[], &dwarf, "1300"),
        ("fp-exact", &["--interval", "1", "--unwinder", "fp"], &fp, "2"),
        ("fp-default", &["--unwinder", "fp"], &fp, "1300"),
    ];
    for (label, opts, prog, warm) in runs {
        let trace = traced(&dir, label, opts, prog, warm);
        let (left, marked, futexes) = syscalls_between_marks(&trace);
        eprintln!("{label}: {marked} threads marked, {futexes} futex calls in their loops");
        assert_eq!(marked, 2, "{label}: both threads' marks are in the trace");
        assert!(left.is_empty(), "{label}: system calls on the sample path: {left:?}");
    }
}

/// The parser: marks per thread, a call split in two counted once, and a wait's calls left
/// out.
#[test]
fn the_trace_is_read_per_thread() {
    let trace = "\
10 write(-1, \"begin\", 5) = -1 EBADF (Bad file descriptor)
11 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, -1, 0) = 0x7f00
10 futex(0x7f, FUTEX_WAIT, 7, {tv_sec=0, tv_nsec=100000000} <unfinished ...>
11 write(-1, \"begin\", 5) = -1 EBADF (Bad file descriptor)
10 <... futex resumed>) = 0
10 kill(77, 0 <unfinished ...>
10 <... kill resumed>) = 0
10 openat(AT_FDCWD, \"/proc/77/stat\", O_RDONLY|O_CLOEXEC <unfinished ...>
11 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, -1, 0) = 0x7f00
10 <... openat resumed>) = 5
10 read(5, \"77 (memprof) S\"..., 512) = 300
10 close(5) = 0
10 kill(77, 9) = 0
11 rt_sigprocmask(SIG_SETMASK, ~[RTMIN RT_1], [], 8) = 0
11 rt_sigprocmask(SIG_SETMASK, [], NULL, 8) = 0
10 read(3, \"x\", 1) = 1
10 write(-1, \"end\", 3) = -1 EBADF (Bad file descriptor)
10 mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, -1, 0) = 0x7f00
11 write(-1, \"end\", 3) = -1 EBADF (Bad file descriptor)
";
    let (left, marked, futexes) = syscalls_between_marks(trace);
    assert_eq!((marked, futexes), (2, 1));
    let expected: std::collections::BTreeMap<String, u64> =
        [("kill", 1), ("mmap", 1), ("read", 1), ("rt_sigprocmask", 2)]
            .into_iter()
            .map(|(n, c)| (n.to_owned(), c))
            .collect();
    assert_eq!(left, expected);
}
