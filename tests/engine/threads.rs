//! Eight threads in the exact mode, freeing each other's blocks and reusing addresses at
//! once.
use super::*;
use std::collections::HashSet;
use std::sync::Arc;

const THREADS: usize = 8;
const PER_THREAD: usize = 3000;
const SITE: &str = "engine::threads::thread_site";

/// Blocks handed to another thread, which frees them.
type Pool = Mutex<Vec<Box<[u8]>>>;

#[inline(never)]
fn thread_site(size: usize, fill: u8) -> Box<[u8]> {
    vec![fill; size].into_boxed_slice()
}

#[derive(Default)]
struct Counts {
    allocs: usize,
    frees: usize,
    reused: usize,
}

fn worker(t: usize, pools: &[Pool]) -> (Counts, Vec<Box<[u8]>>) {
    let mut n = Counts::default();
    let mut held = Vec::with_capacity(PER_THREAD);
    for i in 0..PER_THREAD {
        let size = 16 + (i * 7 + t * 13) % 2000;
        let b = thread_site(size, (t + i) as u8);
        n.allocs += 1;
        match i % 4 {
            0 => {
                // Free, then allocate the same size at once: the address usually comes back.
                let addr = b.as_ptr();
                drop(b);
                n.frees += 1;
                let b = thread_site(size, 1);
                n.allocs += 1;
                n.reused += usize::from(b.as_ptr() == addr);
                held.push(b);
            }
            // For the next thread to free.
            1 => pools[(t + 1) % THREADS].lock().unwrap().push(b),
            2 => held.push(b),
            _ => {
                drop(b);
                n.frees += 1;
            }
        }
        if i % 8 == 0 {
            // Free a block another thread allocated.
            let other = pools[t].lock().unwrap().pop();
            if other.is_some() {
                drop(other);
                n.frees += 1;
            }
        }
        if i % 64 == 0 {
            memprof::poll();
        }
    }
    (n, held)
}

#[test]
fn eight_threads_exact() {
    let _g = serial();
    let pools: Arc<Vec<Pool>> =
        Arc::new((0..THREADS).map(|_| Mutex::new(Vec::with_capacity(PER_THREAD))).collect());
    let mut held: Vec<Box<[u8]>> = Vec::new();
    let mut total = Counts::default();
    let config = Config { queue_capacity: 1 << 16, depth: 32, seed: Some(3), ..Config::exact() };
    let seen = record_witnessed(config, || {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let pools = pools.clone();
                std::thread::spawn(move || worker(t, &pools))
            })
            .collect();
        for h in handles {
            let (n, h) = h.join().unwrap();
            total.allocs += n.allocs;
            total.frees += n.frees;
            total.reused += n.reused;
            held.extend(h);
        }
    });
    for p in pools.iter() {
        held.append(&mut p.lock().unwrap());
    }
    let profile = &seen.profile;
    assert_eq!(profile.lost, Default::default(), "nothing may be lost in this test");
    assert!(total.reused > 0, "the test never reused an address at once");

    let names = site_names(profile);
    let ours: Vec<_> = seen.samples.iter().filter(|s| names[s.stack as usize] == SITE).collect();
    assert_eq!(ours.len(), total.allocs, "one sample per allocation");
    let ids: HashSet<u64> = ours.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), ours.len(), "sample ids are unique");
    let freed: Vec<u64> = seen.frees.iter().copied().filter(|id| ids.contains(id)).collect();
    let unique: HashSet<u64> = freed.iter().copied().collect();
    assert_eq!(unique.len(), freed.len(), "no block is freed twice");
    assert_eq!(freed.len(), total.frees, "one free per freed block");

    // The live set is exactly what is still held: no free was reported for a live block.
    let live: HashSet<(u64, u64)> =
        ours.iter().filter(|s| !unique.contains(&s.id)).map(|s| (s.addr, s.size)).collect();
    let truth: HashSet<(u64, u64)> =
        held.iter().map(|b| (b.as_ptr() as u64, b.len() as u64)).collect();
    assert_eq!(truth.len(), held.len());
    assert_eq!(live, truth, "live samples = blocks still held");
    // And the profile's live totals of the site are those samples', pair by pair.
    let live_samples = ours.iter().copied().filter(|s| !unique.contains(&s.id));
    assert_eq!(
        live_of(profile, |stack| names[stack as usize] == SITE),
        pair_totals(live_samples),
        "the profile's live blocks = samples not freed"
    );
    let s = site(profile, SITE);
    let held_bytes: usize = held.iter().map(|b| b.len()).sum();
    assert_eq!(s.live_bytes, held_bytes as f64);
    assert_eq!(s.live_objects, held.len() as f64);
    // Every thread got its own number.
    let threads: HashSet<u32> = ours.iter().map(|s| s.thread).collect();
    assert_eq!(threads.len(), THREADS);
}
