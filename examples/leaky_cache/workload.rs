//! A request loop with a cache that never forgets.
//!
//! Every request parses a 16 KiB buffer and renders an 8 KiB page, both dropped at the end
//! of the request: these sites allocate most of the bytes. Every fourth request remembers
//! a 2 KiB excerpt in a cache that is never evicted: that site allocates little but holds
//! nearly all the live heap at the end. The alloc and live views of a profile therefore
//! point at different functions, which is the point of having both.

use std::collections::HashMap;
use std::hint::black_box;

/// Requests in a default run.
pub const REQUESTS: u64 = 100_000;

/// Bytes of a parsed request buffer (short-lived).
pub const REQUEST_BYTES: usize = 16 * 1024;
/// Bytes of a rendered page (short-lived).
pub const PAGE_BYTES: usize = 8 * 1024;
/// Bytes of a remembered cache entry (kept for ever).
pub const ENTRY_BYTES: usize = 2 * 1024;

/// Reads a request into a fresh buffer.
#[inline(never)]
pub fn parse_request(i: u64) -> Vec<u8> {
    let mut buf = vec![0u8; REQUEST_BYTES];
    buf[..8].copy_from_slice(&i.to_le_bytes());
    black_box(buf)
}

/// Renders the response page for a request.
#[inline(never)]
pub fn render_page(request: &[u8]) -> Vec<u8> {
    let mut page = Vec::with_capacity(PAGE_BYTES);
    page.extend(request.iter().take(PAGE_BYTES).map(|b| b.wrapping_add(1)));
    black_box(page)
}

/// The cache that leaks: entries are added and never evicted.
#[derive(Default)]
pub struct Cache {
    entries: HashMap<u64, Box<[u8]>>,
}

impl Cache {
    /// Keeps an excerpt of `page` under `key`.
    #[inline(never)]
    pub fn remember(&mut self, key: u64, page: &[u8]) {
        let excerpt: Box<[u8]> = page[..ENTRY_BYTES.min(page.len())].into();
        self.entries.insert(key, excerpt);
    }

    /// Entries held.
    pub fn entries(&self) -> usize {
        self.entries.len()
    }
}

/// Serves `requests` requests, returning the cache (so its entries stay live).
pub fn run(requests: u64) -> Cache {
    let mut cache = Cache::default();
    for i in 0..requests {
        let request = parse_request(i);
        let page = render_page(&request);
        if i % 4 == 0 {
            cache.remember(i, &page);
        }
        if i % 256 == 0 {
            memprof::poll();
        }
    }
    cache
}
