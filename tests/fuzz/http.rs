//! The HTTP server's request-head parser (`memprof::serve::parse`), fuzzed the way
//! `tests/fuzz/reader.rs` fuzzes the `.mprof` reader: property-based (proptest, stable
//! Rust, inside `cargo test`, shrinking a failing case to a minimal input). Inputs are
//! well-formed heads generated from their parts (methods, origin- and absolute-form
//! targets, headers, CRLF and bare-LF line ends, empty lines before the request line, a
//! body after), the same mutated (bit flips, overwritten, inserted and deleted bytes,
//! truncation, a slice duplicated), and arbitrary bytes. The properties:
//!
//! - the parser never panics, and what it returns holds: a complete head's length lies
//!   within the input and the size limit, its method is a token, its target a path of
//!   visible ASCII;
//! - a generated head parses to its own method, target and length, and every prefix of it
//!   is "partial" (no verdict before the empty line);
//! - the verdict never changes as bytes arrive: a prefix that gives a head or a refusal
//!   gives the same on the whole input (the server parses what it has so far, again and
//!   again);
//! - the server itself, on a loopback port, answers each input with a status line or
//!   closes the connection, and keeps serving.
//!
//! Cases per run: `PROPTEST_CASES` (512 by default, about a second; the server property
//! runs an eighth of them, each a connection).

use crate::mutation::{apply, mutation_of, Mutation};
use memprof::__private::http_parse::{parse_head, Parsed, MAX_HEAD};
use proptest::prelude::*;
use std::io::{Read, Write};
use std::time::Duration;

use crate::common::proptest_cases as cases;

/// A generated head: its bytes and the method, target (as parsed) and length expected.
#[derive(Clone, Debug)]
struct Head {
    bytes: Vec<u8>,
    method: String,
    target: String,
    len: usize,
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
}

fn line_end() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("\r\n"), Just("\n")]
}

fn head() -> impl Strategy<Value = Head> {
    let method = prop_oneof![Just("GET".to_owned()), Just("HEAD".to_owned()), token()];
    // A path and query of visible ASCII; sometimes as an absolute URL.
    let path = "/[!-~]{0,40}";
    let target = (path, prop_oneof![Just(None), "[a-z0-9.:]{1,20}".prop_map(Some)], any::<bool>());
    let header = (token(), "[ -~\t]{0,30}", line_end());
    (
        method,
        target,
        prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0")],
        proptest::collection::vec(line_end(), 0..3),
        line_end(),
        proptest::collection::vec(header, 0..6),
        line_end(),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(
            |(method, (path, host, https), version, before, end, headers, last, body)| {
                let mut bytes = Vec::new();
                for e in before {
                    bytes.extend_from_slice(e.as_bytes());
                }
                let sent = match &host {
                    Some(h) => format!("{}://{h}{path}", if https { "https" } else { "http" }),
                    None => path.clone(),
                };
                bytes.extend_from_slice(format!("{method} {sent} {version}{end}").as_bytes());
                for (name, value, e) in headers {
                    bytes.extend_from_slice(format!("{name}:{value}{e}").as_bytes());
                }
                bytes.extend_from_slice(last.as_bytes());
                let len = bytes.len();
                bytes.extend_from_slice(&body);
                Head { bytes, method, target: path, len }
            },
        )
}

fn mutation() -> impl Strategy<Value = Mutation> {
    // Bytes that matter to the parser, as often as any other.
    mutation_of(
        prop_oneof![any::<u8>(), prop::sample::select(b"\r\n :/?\t\x00\x7f H".to_vec())].boxed(),
    )
}

/// The parser's verdict on `buf` holds what it promises (see the file's documentation).
fn check_verdict(buf: &[u8]) {
    match parse_head(buf) {
        Parsed::Partial => assert!(buf.len() <= MAX_HEAD, "partial past the limit"),
        Parsed::Complete(h) => {
            assert!(h.len <= buf.len() && h.len <= MAX_HEAD, "{h:?}");
            assert!(buf[..h.len].ends_with(b"\n"), "{h:?}");
            assert!(!h.method.is_empty(), "{h:?}");
            assert!(h.method.bytes().all(|b| b.is_ascii_graphic()), "{h:?}");
            assert!(h.target.starts_with('/'), "{h:?}");
            assert!(h.target.bytes().all(|b| b.is_ascii_graphic()), "{h:?}");
            assert!(matches!(h.version, "HTTP/1.0" | "HTTP/1.1"), "{h:?}");
        }
        Parsed::Refused(r) => {
            assert!(matches!(r.status, 400 | 431 | 505), "{r:?}");
            assert!(!r.message.is_empty() && !r.message.contains('\n'), "{r:?}");
        }
    }
}

/// Feeding `buf` in pieces, cut at `cuts`, gives no verdict that the whole then
/// contradicts.
fn check_stable(buf: &[u8], cuts: &[usize]) {
    let whole = parse_head(buf);
    for &c in cuts {
        let part = &buf[..c % (buf.len() + 1)];
        match (parse_head(part), whole) {
            (Parsed::Partial, _) => {}
            (Parsed::Complete(a), Parsed::Complete(b)) => assert_eq!(a, b),
            (Parsed::Refused(a), Parsed::Refused(b)) => assert_eq!(a.status, b.status),
            (a, b) => panic!("{} bytes: {a:?}; all {} bytes: {b:?}", part.len(), buf.len()),
        }
    }
}

/// One server for the whole run, on a constant empty profile.
fn server_addr() -> std::net::SocketAddr {
    static SERVER: std::sync::OnceLock<memprof::serve::Running> = std::sync::OnceLock::new();
    SERVER
        .get_or_init(|| {
            let handler = memprof::serve::Handler::new(|| Ok(memprof::profile::Profile::default()));
            memprof::serve::Server::bind("127.0.0.1:0").unwrap().spawn(handler).unwrap()
        })
        .local_addr()
}

/// Sends `bytes` to the server and ends the sending side: the answer's status, if any.
fn exchange(bytes: &[u8]) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(server_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may answer (and stop reading) before all is sent: a failed write is fine.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    if answer.is_empty() {
        return None;
    }
    let line = String::from_utf8_lossy(&answer);
    let status =
        line.strip_prefix("HTTP/1.1 ").and_then(|r| r.get(..3)).and_then(|s| s.parse().ok());
    assert!(status.is_some(), "not an HTTP answer: {line:?}");
    status
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn generated_heads_parse_to_their_parts(h in head()) {
        match parse_head(&h.bytes) {
            Parsed::Complete(got) => {
                prop_assert_eq!(got.method, h.method.as_str());
                prop_assert_eq!(got.target, if h.target.is_empty() { "/" } else { h.target.as_str() });
                prop_assert_eq!(got.len, h.len);
            }
            other => prop_assert!(false, "{:?}: {:?}", String::from_utf8_lossy(&h.bytes), other),
        }
        for n in 0..h.len {
            prop_assert_eq!(parse_head(&h.bytes[..n]), Parsed::Partial, "{} bytes", n);
        }
    }

    #[test]
    fn mutated_heads_keep_the_parsers_promises(
        h in head(),
        ms in proptest::collection::vec(mutation(), 1..6),
        cuts in proptest::collection::vec(any::<usize>(), 1..8),
    ) {
        let mut b = h.bytes;
        for m in &ms {
            apply(&mut b, m);
        }
        check_verdict(&b);
        check_stable(&b, &cuts);
    }

    #[test]
    fn arbitrary_bytes_keep_the_parsers_promises(
        b in proptest::collection::vec(any::<u8>(), 0..300),
        cuts in proptest::collection::vec(any::<usize>(), 1..8),
    ) {
        check_verdict(&b);
        check_stable(&b, &cuts);
    }

    #[test]
    fn long_heads_are_refused_at_the_limit(h in head(), filler in 1usize..64) {
        // A header that keeps the head open past the limit.
        let mut b = h.bytes[..h.len].to_vec();
        let end = if b.ends_with(b"\r\n") { 2 } else { 1 };
        b.truncate(b.len() - end);
        b.extend_from_slice(b"X-Fill: ");
        b.resize(MAX_HEAD + filler, b'a');
        check_verdict(&b);
        prop_assert!(matches!(parse_head(&b), Parsed::Refused(r) if r.status == 431));
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: (cases() / 8).max(16),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_server_answers_any_head_or_closes(
        h in head(),
        ms in proptest::collection::vec(mutation(), 0..4),
    ) {
        let mut b = h.bytes;
        for m in &ms {
            apply(&mut b, m);
        }
        let status = exchange(&b);
        // Something sent is always answered: the head, complete, refused or cut short.
        prop_assert!(status.is_some() || b.is_empty(), "no answer to {:?}", String::from_utf8_lossy(&b));
        // And the server still serves.
        prop_assert_eq!(exchange(b"GET /debug/pprof/ HTTP/1.1\r\n\r\n"), Some(200));
    }
}
