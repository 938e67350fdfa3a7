//! `memprof::serve::Handler` plugged into an axum router: a service that already runs axum
//! serves its heap profile on its own port, Go style, with one route.
//!
//! ```sh
//! cargo run --release --example axum_pprof -- 127.0.0.1:6060
//! go tool pprof http://127.0.0.1:6060/debug/pprof/heap
//! ```
//!
//! Arguments: `ADDR` (default `127.0.0.1:6060`; port 0 picks a free one) and an optional
//! `--interval SIZE` (bytes; 1 is the exact mode). It keeps 100 blocks of 10 000 bytes
//! (`keep_site`), prints `serving http://ADDR/debug/pprof/`, and serves until its standard
//! input ends or says `quit`.

#[global_allocator]
static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use memprof::serve::Handler;
use std::sync::Arc;

#[inline(never)]
fn keep_site() -> Vec<u8> {
    std::hint::black_box(vec![1u8; 10_000])
}

/// Every `/debug/pprof/…` request: the handler answers from the path and query. Taking a
/// profile (and a `?seconds=N` delta) blocks, so it runs on tokio's blocking pool.
async fn pprof(State(handler): State<Arc<Handler>>, uri: Uri) -> Response {
    // The router is not nested: the URI is the request's own.
    let target = uri.path_and_query().map_or_else(|| uri.path().to_owned(), |p| p.to_string());
    let answer = tokio::task::spawn_blocking(move || handler.respond(&target)).await;
    let Ok(r) = answer else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the profile could not be taken\n")
            .into_response();
    };
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, r.body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(r.content_type));
    if let Some(name) = r.filename {
        let value = format!("attachment; filename=\"{name}\"");
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(header::CONTENT_DISPOSITION, v);
        }
    }
    response
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args.first().filter(|a| !a.starts_with("--")).cloned();
    let addr = addr.unwrap_or_else(|| "127.0.0.1:6060".to_owned());
    let mut config = memprof::Config::default();
    if let Some(i) = args.iter().position(|a| a == "--interval") {
        let size = args.get(i + 1).ok_or("--interval needs a size")?;
        config.interval = memprof::config::parse_size(size)?;
    }
    let session = memprof::start(config, memprof::Recorder::new())?;
    let kept: Vec<Vec<u8>> = (0..100).map(|_| keep_site()).collect();

    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        println!("serving http://{}/debug/pprof/", listener.local_addr()?);
        let app = Router::new()
            .route("/debug/pprof/", get(pprof))
            .route("/debug/pprof/{*profile}", get(pprof))
            .with_state(Arc::new(Handler::in_process()));
        // Until standard input ends or says `quit`.
        let quit = async {
            let _ = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line.trim() == "quit" {
                        break;
                    }
                    line.clear();
                }
            })
            .await;
        };
        axum::serve(listener, app).with_graceful_shutdown(quit).await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    drop(kept);
    session.stop()?;
    Ok(())
}
