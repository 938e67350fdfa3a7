//! The request head, parsed from bytes alone: no socket, no clock, no allocation, so that
//! the property tests (`tests/fuzz/http.rs`) can drive it with any input.
//!
//! # 1. What is read
//! A head is the request line, header lines, and the empty line that ends them (RFC 9112
//! §2.1). Lines end with CRLF or with a bare LF (§2.2 lets a recipient accept LF alone,
//! and `printf 'GET / HTTP/1.1\n\n' | nc` sends that); empty lines before the request line
//! are skipped (§2.2 too). The headers are checked for form but not kept: the server
//! answers every request the same way whatever they say (`Connection: close`, no body
//! read), so only the request line's method and target matter.
//!
//! # 2. What is refused
//! Each line is judged as soon as it is complete, and the verdict never changes as more
//! bytes arrive: [`parse_head`] of a longer buffer that starts with the same bytes gives
//! the same head or the same refusal (the property the fuzz target checks). Refused with
//! 400: a request line that is not `METHOD SP TARGET SP VERSION` with single spaces; a
//! method that is not a token; a target that is not origin form (`/path?query`) or
//! absolute form (`http://host/path`, whose path is kept), or that holds anything but
//! visible ASCII; a bare CR, a NUL or another control character anywhere; a header line
//! without a `name:` or folded onto the line before (obsolete line folding, a smuggling
//! vector). Refused with 505: a version other than HTTP/1.0 and HTTP/1.1. Refused with
//! 431: a head not ended within [`MAX_HEAD`] bytes.

/// The longest request head read, its ending empty line included.
pub const MAX_HEAD: usize = 16 << 10;

/// A complete request head: its method and target, borrowed from the bytes read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// The method, a token (`GET`, `HEAD`, or any other, which the server refuses with 405).
    pub method: &'a str,
    /// The target in origin form, `/path` with an optional `?query` (an absolute-form
    /// target's path; `/` when it has none): visible ASCII only.
    pub target: &'a str,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: &'a str,
    /// The length of the head in bytes, its ending empty line included: what follows is
    /// the body, if any.
    pub len: usize,
}

/// Why a head is refused: the status to answer with and a one-line message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// 400, 431 or 505.
    pub status: u16,
    /// What was wrong, for the answer's body.
    pub message: &'static str,
}

/// What the bytes received so far make of a request head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// No verdict yet: the head is not complete, and nothing in it is wrong so far.
    Partial,
    /// A complete, well-formed head.
    Complete(RequestHead<'a>),
    /// A head to answer with an error status (see the module documentation).
    Refused(Refusal),
}

const fn refuse(status: u16, message: &'static str) -> Parsed<'static> {
    Parsed::Refused(Refusal { status, message })
}

/// Parses the request head at the start of `buf`, the bytes received so far on a
/// connection (see the module documentation).
pub fn parse_head(buf: &[u8]) -> Parsed<'_> {
    // Only the first MAX_HEAD bytes can hold a head: the verdict on them is final.
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let mut start = 0;
    let mut request: Option<(&str, &str, &str)> = None;
    while let Some(nl) = window[start..].iter().position(|&b| b == b'\n') {
        let end = start + nl;
        let line = &window[start..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        start = end + 1;
        if line.contains(&b'\r') {
            return refuse(400, "a bare CR in the request head");
        }
        match request {
            // Empty lines before the request line are skipped.
            None if line.is_empty() => {}
            None => match request_line(line) {
                Ok(r) => request = Some(r),
                Err(refusal) => return Parsed::Refused(refusal),
            },
            Some((method, target, version)) if line.is_empty() => {
                return Parsed::Complete(RequestHead { method, target, version, len: start });
            }
            Some(_) => {
                if let Err(refusal) = header_line(line) {
                    return Parsed::Refused(refusal);
                }
            }
        }
    }
    // The line under way: a control character (other than the CR of its CRLF, which may
    // come last) is refused already, so that a stream of garbage is not read to the limit
    // (and before the length: the verdict on these bytes must not change with more).
    let rest = &window[start..];
    let body = rest.strip_suffix(b"\r").unwrap_or(rest);
    if body.iter().any(|&b| is_bad_control(b)) {
        return refuse(400, "a control character in the request head");
    }
    if buf.len() > MAX_HEAD {
        return refuse(431, "request head too long");
    }
    Parsed::Partial
}

/// A control character other than HT: never part of a head (CR and LF are line ends).
fn is_bad_control(b: u8) -> bool {
    (b < 0x20 && b != b'\t' && b != b'\n') || b == 0x7f
}

/// RFC 9110's `tchar`: the characters of a token (a method, a header's name).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `METHOD SP TARGET SP VERSION`: the method, the target (origin form) and the version.
fn request_line(line: &[u8]) -> Result<(&str, &str, &str), Refusal> {
    let bad = |message| Refusal { status: 400, message };
    if line.iter().any(|&b| is_bad_control(b)) {
        return Err(bad("a control character in the request line"));
    }
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("malformed request line: expected METHOD TARGET HTTP/1.1"));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(bad("malformed request line: the method is not a token"));
    }
    let version = match version {
        b"HTTP/1.1" => "HTTP/1.1",
        b"HTTP/1.0" => "HTTP/1.0",
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            return Err(Refusal { status: 505, message: "only HTTP/1.0 and HTTP/1.1 are served" })
        }
        _ => return Err(bad("malformed request line: the version is not HTTP/1.x")),
    };
    if target.is_empty() || !target.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(bad("malformed request line: the target is not visible ASCII"));
    }
    let target = origin_form(target)
        .ok_or(bad("the request target must be a path (/debug/pprof/heap) or an http:// URL"))?;
    // Tokens and visible ASCII: valid UTF-8.
    let (Ok(method), Ok(target)) = (std::str::from_utf8(method), std::str::from_utf8(target))
    else {
        return Err(bad("malformed request line"));
    };
    Ok((method, target, version))
}

/// The origin-form target of `target`: itself when it is a path, the path of an absolute
/// `http://` or `https://` URL (`/` when it has none); `None` for anything else (`*`, an
/// authority alone, a relative path).
fn origin_form(target: &[u8]) -> Option<&[u8]> {
    if target.first() == Some(&b'/') {
        return Some(target);
    }
    let lower = |n: usize| target.get(..n).map(|p| p.to_ascii_lowercase());
    let scheme = if lower(7).as_deref() == Some(b"http://") {
        7
    } else if lower(8).as_deref() == Some(b"https://") {
        8
    } else {
        return None;
    };
    let rest = &target[scheme..];
    // The authority ends at the path, or at a query when the path is empty.
    match rest.iter().position(|&b| b == b'/' || b == b'?') {
        Some(i) if i > 0 && rest[i] == b'/' => Some(&rest[i..]),
        None if !rest.is_empty() => Some(b"/"),
        _ => None,
    }
}

/// A header line, `name: value`: checked for form, not kept.
fn header_line(line: &[u8]) -> Result<(), Refusal> {
    let bad = |message| Err(Refusal { status: 400, message });
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return bad("a folded header line (obsolete line folding is not accepted)");
    }
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return bad("a header line without a colon");
    };
    if colon == 0 || !line[..colon].iter().all(|&b| is_tchar(b)) {
        return bad("a header name that is not a token");
    }
    if line[colon + 1..].iter().any(|&b| is_bad_control(b)) {
        return bad("a control character in a header value");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> RequestHead<'_> {
        match parse_head(buf) {
            Parsed::Complete(h) => h,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn status(buf: &[u8]) -> u16 {
        match parse_head(buf) {
            Parsed::Refused(r) => r.status,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    #[test]
    fn crlf_and_bare_lf_heads() {
        let h = complete(b"GET /debug/pprof/heap?seconds=2 HTTP/1.1\r\nHost: x\r\n\r\nBODY");
        assert_eq!(
            (h.method, h.target, h.version, h.len),
            ("GET", "/debug/pprof/heap?seconds=2", "HTTP/1.1", 53)
        );
        let h = complete(b"GET / HTTP/1.1\n\n");
        assert_eq!((h.target, h.len), ("/", 16));
        let h = complete(b"\r\n\nHEAD /x HTTP/1.0\nA: b\r\n\n");
        assert_eq!((h.method, h.target, h.version), ("HEAD", "/x", "HTTP/1.0"));
        assert_eq!(
            complete(b"GET http://h:1/debug/pprof/ HTTP/1.1\r\n\r\n").target,
            "/debug/pprof/"
        );
        assert_eq!(complete(b"GET HTTP://h HTTP/1.1\r\n\r\n").target, "/");
    }

    #[test]
    fn partial_until_the_empty_line() {
        let full = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        for n in 0..full.len() {
            assert_eq!(parse_head(&full[..n]), Parsed::Partial, "{n}");
        }
    }

    #[test]
    fn refusals() {
        assert_eq!(status(b"GET  / HTTP/1.1\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/2.0\r\n"), 505);
        assert_eq!(status(b"GET / HTTX/1.1\r\n"), 400);
        assert_eq!(status(b"GET * HTTP/1.1\r\n"), 400);
        assert_eq!(status(b"GET /\x7f HTTP/1.1\r\n"), 400);
        assert_eq!(status(b"G(T / HTTP/1.1\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\n folded\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nno colon\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nA: b\rc\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nA: \x00"), 400);
        assert_eq!(status(b"GET http:///x HTTP/1.1\r\n"), 400);
        let mut long = b"GET / HTTP/1.1\r\nA: ".to_vec();
        long.resize(MAX_HEAD, b'a');
        assert_eq!(parse_head(&long), Parsed::Partial);
        long.push(b'a');
        assert_eq!(status(&long), 431);
    }
}
