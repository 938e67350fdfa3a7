//! The ring's tests: the side log's records and its wrapping, the refusal of other versions.

use super::*;

/// The address-space figures of `docs/how-it-works.md` (the ring's part of what a profiled
/// program holds, for `RLIMIT_AS`): 3 MiB (a 1 MiB side log and 16,384 cells of 128
/// bytes), whatever the depth.
#[test]
fn ring_sizes_are_the_docs() {
    use crate::config::DEFAULT_DEPTH;
    let at = |depth| Ring::bytes(RING_CELLS, depth).unwrap();
    assert_eq!(DEFAULT_DEPTH, 128);
    assert_eq!(RING_CELLS, 16_384);
    assert_eq!(at(DEFAULT_DEPTH) >> 20, 3);
    assert_eq!(at(32), at(DEFAULT_DEPTH));
}

#[test]
fn side_records_round_trip() {
    let m = crate::profile::Module {
        path: "/lib/x.so".into(),
        base: 1,
        start: 2,
        end: 3,
        build_id: vec![9, 8],
        file_size: 4,
        file_mtime_ns: 5,
    };
    assert_eq!(decode_modules(&encode_modules(&[m.clone(), m.clone()])), Some(vec![m.clone(), m]));
    let args = vec!["a".to_owned(), "b c".to_owned()];
    assert_eq!(
        decode_process(&encode_process("/bin/x", &args, 42)),
        Some(("/bin/x".into(), args, 42))
    );
    assert_eq!(decode_modules(&[5, 0, 0, 0, 1]), None, "a cut record is refused");
}

/// A header of `version` in a mapping of a ring's size, its consumer at `at` naming
/// this process (as `MEMPROF_COLLECTOR` does) with a heartbeat a second old.
fn foreign_ring(version: u32, at: usize) -> (*mut u8, usize) {
    let len = HEADER_BYTES + LOG_BYTES + 4096;
    // SAFETY: an anonymous private mapping; failure is checked.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    let base = base as *mut u8;
    let (pid, start) = this_process();
    let beat = crate::engine::clock::monotonic_ns() - 1_000_000_000;
    // SAFETY: the writes lie inside the header of the fresh mapping, aligned.
    unsafe {
        (base as *mut u64).write(MAGIC);
        (base.add(8) as *mut u32).write(version);
        let c = &*(base.add(at) as *const Consumer);
        c.heartbeat_ns.store(beat, Ordering::Relaxed);
        c.attach(pid, start);
    }
    (base, len)
}

/// A ring of another version is refused and its process told: from version 8 on by the
/// verdict at its fixed place; a version-7 process (which knows no verdict) by a
/// collector that its next look finds gone (a start time no process has), where it had
/// found this, live, process. The mapping is left to the caller.
#[test]
fn a_ring_of_another_version_is_refused_and_told() {
    let newer = VERSION + 1;
    let (base, len) = foreign_ring(newer, CONSUMER_AT);
    // SAFETY: `base` maps `len` bytes, unmapped below.
    let got = unsafe { Ring::attach(base, len) }.err();
    assert_eq!(got, Some(NotAttached::Refused { version: newer }));
    // SAFETY: the consumer of a newer version's header, inside the mapping.
    let c = unsafe { &*(base.add(CONSUMER_AT) as *const Consumer) };
    assert_eq!(c.verdict.load(Ordering::Relaxed), crate::engine::consumer::REFUSED | VERSION);
    assert!(!c.alive());
    // SAFETY: the mapping made by `foreign_ring`, no longer used.
    unsafe { libc::munmap(base.cast(), len) };

    let (base, len) = foreign_ring(7, V7_CONSUMER_AT);
    // SAFETY: the consumer of a version-7 header, inside the mapping.
    let c = unsafe { &*(base.add(V7_CONSUMER_AT) as *const Consumer) };
    // Version 7 takes the named collector as attached (its look is ours with the
    // verdict, a padding word there, read as accepted).
    let accepted = crate::engine::consumer::ACCEPTED;
    c.verdict.store(accepted, Ordering::Relaxed);
    let looked_up_alive = c.alive();
    // SAFETY: `base` maps `len` bytes.
    let got = unsafe { Ring::attach(base, len) }.err();
    assert_eq!(got, Some(NotAttached::Refused { version: 7 }));
    assert_eq!(c.verdict.load(Ordering::Relaxed), accepted, "version 7 has no verdict");
    assert!(looked_up_alive && !c.alive(), "found gone by version 7's own look");
    // SAFETY: as above.
    unsafe { libc::munmap(base.cast(), len) };
}

/// The side log wraps: records written past its size, each read before the next ones
/// need its room, come back whole (a record straddling the end included); unread ones
/// are never overwritten (with no collector attached and its heartbeat stale, the writer
/// gives up; with one whose process lives, it waits until it has read).
#[test]
fn the_side_log_wraps_over_what_was_read() {
    let dir = std::env::temp_dir().join(format!("memprof-ring-wrap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ring, _queue) = Ring::create(dir.to_str().unwrap(), 64, MIN_DEPTH, None).unwrap();
    let payload = |i: usize| vec![(i % 251) as u8; 1000 + i % 7];
    let mut read = 0u64;
    for i in 0..3 * LOG_BYTES / 1000 {
        ring.header()
            .consumer
            .heartbeat_ns
            .store(crate::engine::clock::monotonic_ns(), Ordering::Relaxed);
        let end = ring.log_append(LOG_MODULES, &payload(i)).expect("room after reading");
        let (records, at) = ring.log_records(read, end);
        assert_eq!(records, vec![(LOG_MODULES, payload(i))], "record {i}");
        assert_eq!(at, end);
        read = at;
        ring.log_consumed(read);
    }
    assert!(read > 2 * LOG_BYTES as u64, "wrapped twice");
    // Unread: the log fills, then refuses once the collector looks gone.
    let stale =
        crate::engine::clock::monotonic_ns().saturating_sub(2 * crate::engine::consumer::STALE_NS);
    ring.header().consumer.heartbeat_ns.store(stale, Ordering::Relaxed);
    let big = vec![7u8; LOG_BYTES / 2];
    assert!(ring.log_append(LOG_MODULES, &big).is_some());
    assert!(ring.log_append(LOG_MODULES, &big).is_none(), "would overwrite unread bytes");
    let (records, _) = ring.log_records(read, u64::MAX);
    assert_eq!(records, vec![(LOG_MODULES, big.clone())]);
    // A collector that has attached (this process) and is slow: the writer sleeps,
    // heartbeat stale, until it reads, and then writes.
    let (pid, start) = this_process();
    ring.consumer().attach(pid, start);
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let (_, at) = ring.log_records(read, u64::MAX);
            ring.log_consumed(at);
        });
        assert!(ring.log_append(LOG_MODULES, &big).is_some(), "written once read");
    });
    assert!(t0.elapsed() >= std::time::Duration::from_millis(200));
    let _ = std::fs::remove_dir_all(&dir);
}
