//! Heap by tracing span: a small tokio server whose live heap is broken down by endpoint.
//!
//! ```sh
//! cargo run --release --features tracing --example span_server
//! ```
//!
//! The server answers a plain HTTP-ish protocol on a loopback port; every connection runs in
//! a task instrumented with a `conn` span, and each request in a `handle{endpoint=…}` span.
//! The endpoints keep different amounts of memory in a cache that is never trimmed (the
//! kind of leak a per-endpoint heap profile finds): `/upload` keeps 64 KiB per request,
//! `/search` 8 KiB, `/health` nothing (it allocates 16 KiB and drops it). A client in the
//! same program sends a fixed number of requests to each, then the session stops and the
//! top table, grouped by span, shows each endpoint's allocated and still-live bytes. The
//! profile is also written to a file, reported with `memprof report FILE --group-by span`.

use std::collections::HashMap;
use std::sync::Mutex;

use memprof::report::{self, GroupBy, TopOptions};
use memprof::{Config, Recorder, Sampled};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

#[global_allocator]
static GLOBAL: Sampled<std::alloc::System> = Sampled::new(std::alloc::System);

/// What each endpoint keeps per request, in bytes (and what it allocates and drops).
const ENDPOINTS: [(&str, usize, usize); 3] =
    [("/upload", 64 << 10, 0), ("/search", 8 << 10, 0), ("/health", 0, 16 << 10)];
/// Requests the client sends to each endpoint.
const REQUESTS: usize = 50;

/// The cache that only grows: what each endpoint retains.
static CACHE: Mutex<Option<HashMap<String, Vec<Vec<u8>>>>> = Mutex::new(None);

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layer = memprof::tracing::SpanLayer::new().with_field("endpoint");
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
    let file = std::env::temp_dir().join(format!("span_server.{}.mprof", std::process::id()));
    let config = Config { interval: 4096.0, seed: Some(1), ..Config::default() };
    let session = memprof::start(config, Recorder::to_file(&file))?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { break };
            tokio::spawn(connection(socket).instrument(tracing::info_span!("conn")));
        }
    });

    // The client: REQUESTS requests to each endpoint, one connection each, bounded.
    for round in 0..REQUESTS {
        for (path, _, _) in ENDPOINTS {
            let mut s = TcpStream::connect(addr).await?;
            s.write_all(format!("GET {path} HTTP/1.0\r\nx-round: {round}\r\n\r\n").as_bytes())
                .await?;
            let mut reply = String::new();
            s.read_to_string(&mut reply).await?;
            assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
        }
    }
    server.abort();

    let profile = session.stop()?.finish()?;
    let options = TopOptions { limit: 8, group_by: GroupBy::Span, ..TopOptions::default() };
    print!("{}", report::top_table(&profile, &options));
    println!();
    println!("live bytes by span (estimated):");
    let mut by_span: HashMap<&str, f64> = HashMap::new();
    for (&(stack, _), t) in &profile.live {
        *by_span.entry(GroupBy::span(&profile, stack)).or_default() += profile.estimated_bytes(t.k);
    }
    let mut rows: Vec<_> = by_span.into_iter().filter(|&(_, bytes)| bytes > 0.0).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    for (span, bytes) in rows {
        println!("  {:>12}  {span}", report::human_bytes(bytes));
    }
    println!();
    println!("profile written to {}; report it with", file.display());
    println!(
        "  memprof report {} --group-by span --view live --flamegraph live.svg",
        file.display()
    );
    Ok(())
}

/// One connection: reads the request line and headers, answers, closes.
async fn connection(socket: TcpStream) {
    let mut reader = BufReader::new(socket);
    let mut line = String::new();
    if reader.read_line(&mut line).await.is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    // The headers, up to the blank line.
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header).await {
            Ok(0) | Err(_) => break,
            Ok(_) if header == "\r\n" || header == "\n" => break,
            Ok(_) => {}
        }
    }
    let body =
        handle(&path).instrument(tracing::info_span!("handle", endpoint = path.as_str())).await;
    let mut socket = reader.into_inner();
    let reply = format!("HTTP/1.0 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
    let _ = socket.write_all(reply.as_bytes()).await;
    let _ = socket.shutdown().await;
}

/// The endpoint's work: what it keeps goes into the cache, under the request's span.
async fn handle(path: &str) -> String {
    let Some(&(_, keep, scratch)) = ENDPOINTS.iter().find(|(p, _, _)| *p == path) else {
        return "not found".into();
    };
    // Work across an await point, as a real handler would (the span is entered again when
    // the task resumes).
    tokio::task::yield_now().await;
    let temporary = vec![7u8; scratch];
    if keep > 0 {
        let mut cache = CACHE.lock().unwrap();
        cache
            .get_or_insert_with(HashMap::new)
            .entry(path.to_owned())
            .or_default()
            .push(vec![1u8; keep]);
    }
    format!("{path}: {} bytes of scratch\n", temporary.len())
}
