//! A program that allocates and serves its own heap profile over HTTP, Go style.
//!
//! ```sh
//! cargo run --release --example serve_pprof --features serve -- 127.0.0.1:6060
//! go tool pprof http://127.0.0.1:6060/debug/pprof/heap          # what is held now
//! go tool pprof http://127.0.0.1:6060/debug/pprof/allocs        # everything allocated
//! go tool pprof 'http://127.0.0.1:6060/debug/pprof/allocs?seconds=5'   # the next 5 s
//! ```
//!
//! Arguments: `ADDR` (default `127.0.0.1:6060`; port 0 picks a free one) and an optional
//! `--interval SIZE` (bytes; 1 is the exact mode). It prints `serving http://ADDR/debug/pprof/`,
//! keeps 100 blocks of 10 000 bytes (`keep_site`), allocates and frees 1 000 blocks of
//! 1 000 bytes (`churn_site`), prints `ready`, then reads commands from standard input,
//! one a line, answering each with one line:
//! - `burst`: allocates and keeps 100 blocks of 20 000 bytes (`burst_site`): `burst done`;
//! - `totals`: its own profile, taken in process ([`memprof::live_profile`]), as pprof's
//!   four sums: `totals ALLOC_OBJECTS ALLOC_SPACE INUSE_OBJECTS INUSE_SPACE`;
//! - `quit` (or the end of the input): stops.
//!
//! Between commands it allocates nothing that is sampled (the line buffer and the block
//! tables are allocated up front), so the totals it prints are those of a profile fetched
//! just before.

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

use std::io::{BufRead, Write};

#[inline(never)]
fn keep_site() -> Vec<u8> {
    std::hint::black_box(vec![1u8; 10_000])
}

#[inline(never)]
fn churn_site() -> Vec<u8> {
    std::hint::black_box(vec![2u8; 1_000])
}

#[inline(never)]
fn burst_site() -> Vec<u8> {
    std::hint::black_box(vec![3u8; 20_000])
}

/// pprof's four sums of a profile, rounded per (stack, size) as the pprof export rounds.
fn totals(p: &memprof::profile::Profile) -> [i64; 4] {
    let mut sums = [0i64; 4];
    for (&(_, size), t) in &p.allocated {
        sums[0] += p.estimated_objects(t.k, size).round() as i64;
        sums[1] += p.estimated_bytes(t.k).round() as i64;
    }
    for (&(_, size), t) in &p.live {
        sums[2] += p.estimated_objects(t.k, size).round() as i64;
        sums[3] += p.estimated_bytes(t.k).round() as i64;
    }
    sums
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut addr = "127.0.0.1:6060".to_owned();
    let mut config = memprof::Config { drain_thread: true, ..Default::default() };
    while let Some(a) = args.next() {
        if a == "--interval" {
            let v = args.next().unwrap_or_default();
            match memprof::config::parse_size(&v) {
                Ok(i) => config.interval = i,
                Err(e) => {
                    eprintln!("serve_pprof: error: {e}");
                    std::process::exit(2);
                }
            }
        } else {
            addr = a;
        }
    }
    let session = match memprof::start(config, memprof::Recorder::new()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("serve_pprof: error: {e}");
            std::process::exit(1);
        }
    };
    let server = match memprof::serve::serve(&addr) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("serve_pprof: error: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "serving http://{}/debug/pprof/", server.local_addr());
    let _ = out.flush();

    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(100);
    let mut bursts: Vec<Vec<u8>> = Vec::with_capacity(100 * 64);
    for _ in 0..100 {
        kept.push(keep_site());
    }
    for _ in 0..1_000 {
        drop(churn_site());
    }
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = String::with_capacity(256);
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        match line.trim() {
            "burst" if bursts.len() + 100 <= bursts.capacity() => {
                for _ in 0..100 {
                    bursts.push(burst_site());
                }
                let _ = writeln!(out, "burst done");
            }
            "burst" => {
                let _ = writeln!(out, "burst refused: the table of kept blocks is full");
            }
            "totals" => match memprof::live_profile() {
                Ok(p) => {
                    let [a, b, c, d] = totals(&p);
                    let _ = writeln!(out, "totals {a} {b} {c} {d}");
                }
                Err(e) => {
                    let _ = writeln!(out, "error {e}");
                }
            },
            "quit" => break,
            other => {
                let _ = writeln!(out, "unknown command {other:?}");
            }
        }
        let _ = out.flush();
    }
    server.stop();
    let profile = session.stop().map(memprof::Recorder::into_profile);
    drop((kept, bursts));
    if let Ok(p) = profile {
        let _ = writeln!(out, "stopped: {} samples", p.counts.samples);
    }
}
