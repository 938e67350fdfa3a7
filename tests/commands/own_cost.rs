//! What `memprof record` costs beside the program: nothing to speak of while the program
//! does nothing (its collector sleeps until there is work, `record/command/collect` §8),
//! little memory for a program that allocates once, few wake-ups for a trickle of samples,
//! and, when the program allocates in
//! bursts after pauses, a collector woken by the queue at once: the exact mode's waits
//! for room end as promptly as they did when it never slept.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, scratch, totals};

/// The CPU time (user + system) of a command and every process it waited for, from
/// `wait4`; memprof's own peak resident size (bytes) and its collector's passes, each a
/// wake-up; with its stderr.
struct Cost {
    cpu: Duration,
    passes: u64,
    peak_rss: u64,
    status: i32,
    stderr: String,
}

// The child is reaped by `wait4` (for its rusage), which `Child` cannot do.
#[allow(clippy::zombie_processes)]
fn cost_of(dir: &Path, args: &[&str]) -> Cost {
    let child = Command::new(MEMPROF)
        .current_dir(dir)
        .args(args)
        .env("MEMPROF_DEBUG_PEAK", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memprof runs");
    let pid = child.id() as libc::pid_t;
    let mut stderr = child.stderr.expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for the kernel to overwrite.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: waits for our own child, with valid out pointers; `child` is not waited for
    // again (it is dropped without `wait`).
    let got = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let stderr = reader.join().unwrap_or_default();
    // memprof's own peak, as it read it at its end (`MEMPROF_DEBUG_PEAK`): `ru_maxrss`
    // keeps the peak of this test process, which it was forked from, and this one runs
    // beside the whole suite.
    let peak_rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("memprof: own peak resident "))
        .and_then(|l| l.trim_end_matches(" bytes").parse().ok())
        .unwrap_or_else(|| panic!("no own peak said:\n{stderr}"));
    // The collector's passes, not the command's voluntary context switches: those count
    // every read that waits for the disk (`dpkg-query` reading its database, the symbols'
    // files) on a machine whose page cache is cold, as a fresh CI machine's is.
    let passes = stderr
        .lines()
        .find_map(|l| l.strip_prefix("memprof: collector passes "))
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no passes said:\n{stderr}"));
    Cost { cpu: tv(ru.ru_utime) + tv(ru.ru_stime), passes, peak_rss, status, stderr }
}

/// `record -- sleep 1`: the whole command (start, the collector, the report that there is
/// nothing to report) costs a small fraction of the second it waits.
///
/// The bounds, for a loaded 2-core CI machine: memprof used to poll its ring every 2 ms
/// (some 450 passes and 0.12–0.45 CPU-s for this command, the symbols of every object the
/// program mapped read while it ran); it now wakes a few times a second (some 25 passes,
/// about 0.015 CPU-s, 10 MB resident). A loaded machine delays wakes, it does not add
/// them: 150 passes catches polling at any pace under 7 ms; 0.1 CPU-s leaves six times
/// that cost for a slow, busy machine and still catches the symbols read ahead for a
/// program that allocated nothing; 40 MB catches them too (a C library's debug
/// information). The sample that lands in `sleep` now and then (a stripped program, whose
/// package is then looked up) is inside those bounds.
#[test]
fn a_program_that_does_nothing_costs_next_to_nothing() {
    let dir = scratch("own-cost-sleep");
    let c = cost_of(&dir, &["record", "-o", "s.mprof", "--", "sleep", "1"]);
    assert_eq!(c.status, 0, "{}", c.stderr);
    assert!(c.passes < 150, "{} collector passes: polling?\n{}", c.passes, c.stderr);
    assert!(c.cpu < Duration::from_millis(100), "{:?} of CPU\n{}", c.cpu, c.stderr);
    assert!(c.peak_rss < 40 << 20, "{} bytes resident\n{}", c.peak_rss, c.stderr);
}

/// A program sampled at the default interval, allocating flat out (`worst_case`, about a
/// second): its samples come as a trickle, a few thousand a second, which the collector
/// takes when the producers find a sixteenth of the queue waiting or its own schedule is
/// due (`record/command/collect` §8), not every two milliseconds. Polled so, the collector
/// was woken 350 times for the second's 7,000 events, each wake tens of microseconds of
/// its CPU; now some 110 times a second. A loaded machine lengthens sleeps and slows the
/// program, which makes fewer wakes a second, not more: 300 a second catches polling at
/// any pace under 3 ms.
#[test]
fn a_trickle_of_samples_is_not_polled() {
    let dir = scratch("own-cost-trickle");
    let program = fixture("worst_case");
    let t0 = Instant::now();
    let c = cost_of(&dir, &["record", "-o", "w.mprof", "--", program.to_str().unwrap()]);
    let took = t0.elapsed().as_secs_f64();
    assert_eq!(c.status, 0, "{}", c.stderr);
    assert!(c.stderr.contains("leaf"), "the site is named:\n{}", c.stderr);
    let per_second = c.passes as f64 / took;
    assert!(per_second < 300.0, "{} passes in {took:.2} s: polled?\n{}", c.passes, c.stderr);
}

/// A program that allocates once, recorded in the exact mode: memprof names its frames
/// (the C library's among them) without reading every unit of every object's debug
/// information. With libc's debug file installed that took 45 MB resident; a unit at a
/// time, under 20 MB (without it, less). 30 MB leaves room for a larger C library.
#[test]
fn one_allocation_costs_little_memory() {
    let dir = scratch("own-cost-once");
    let once = fixture("once");
    let once = once.to_str().unwrap();
    let c = cost_of(&dir, &["record", "--interval", "1", "-o", "o.mprof", "--", once]);
    assert_eq!(c.status, 0, "{}", c.stderr);
    assert!(c.stderr.contains("once_site"), "the site is named:\n{}", c.stderr);
    assert!(c.peak_rss < 30 << 20, "{} bytes resident\n{}", c.peak_rss, c.stderr);
}

/// Bursts of allocations in the exact mode after pauses that let the collector sleep: each
/// burst is more events than the queue holds, so the program waits for room in a queue
/// whose consumer was asleep. Everything is recorded, and the waits end as the collector,
/// woken by the queue (the preload library counts its wakes), drains it: the run takes
/// about its pauses and its work (2 s here,
/// 1 s of it pauses). A collector left asleep until its own schedule woke it (a tenth of a
/// second) adds more than half a second to each burst (a dozen queues full): 14 s here
/// with the producers' wakes taken out. 8 s leaves a loaded 2-core machine four times the
/// work's time.
#[test]
fn bursts_after_pauses_are_recorded_whole_and_promptly() {
    let dir = scratch("own-cost-bursts");
    let t0 = Instant::now();
    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .env("MEMPROF_TEST_WAITS", "1")
        .args(["record", "--interval", "1", "-o", "b.mprof", "--"])
        .arg(fixture("bursts"))
        .args(["20", "100000", "50"])
        .output()
        .expect("memprof runs");
    let took = t0.elapsed();
    assert_ok(&out, 0);
    assert!(text(&out.stdout).contains("bursts 20 pairs 100000"));
    let err = text(&out.stderr);
    let slept: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("memprof: waits for room: "))
        .and_then(|l| l.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("the waits are told:\n{err}"));
    assert!(slept > 0, "the program waited for room:\n{err}");
    // Most bursts find the collector asleep on the queue, and the burst's producer wakes it.
    let woken: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("memprof: collector woken: "))
        .and_then(|l| l.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("the wakes are told:\n{err}"));
    assert!(woken >= 5, "the producers woke the collector {woken} times in 20 bursts:\n{err}");
    let p = read(&dir.join("b.mprof"));
    assert_eq!(p.lost.events, 0);
    assert_eq!(totals(&p, "burst_site"), (128_000_000.0, 2_000_000.0, 0.0, 0.0));
    assert!(took < Duration::from_secs(8), "{took:?}: the collector slept through the waits");
}

/// The preload library's writable segments hold only what is not zero at start: its large
/// tables (the live table's filter, two mebibytes) are in `.bss`, which takes no room in
/// the file. A filter with one word not zero went to `.data` whole, and `record` read,
/// compared and mapped its two mebibytes of zeros at every run.
#[test]
fn the_preload_library_carries_no_tables_of_zeros() {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let out = Command::new(MEMPROF).arg("preload-path").output().expect("memprof runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = text(&out.stdout).trim().to_owned();
    let bytes = std::fs::read(&path).expect("the library reads");
    let elf = ElfFile64::<object::Endianness>::parse(&*bytes).expect("an ELF file");
    let e = elf.endian();
    let written: u64 = elf
        .elf_program_headers()
        .iter()
        .filter(|h| {
            h.p_type(e) == object::elf::PT_LOAD && h.p_flags(e).0 & object::elf::PF_W.0 != 0
        })
        .map(|h| h.p_filesz(e))
        .sum();
    assert!(written < 256 << 10, "{path}: {written} bytes of writable segments in the file");
    assert!(bytes.len() < 4 << 20, "{path}: {} bytes", bytes.len());
}
