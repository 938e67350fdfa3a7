//! The fuzz targets, in one test binary: `reader` (the `.mprof` reader), `http` (the HTTP
//! server's request-head parser) and `args` (the size and rate arguments). Each is
//! property-based (proptest, stable Rust, inside `cargo test`, shrinking a failing case to
//! a minimal input); `PROPTEST_CASES` sets the cases per run. `.ci/run` runs each module
//! longer, and in a debug build too: `cargo test --test fuzz -- reader::`.

#[path = "../common/mod.rs"]
mod common;

mod args;
#[cfg(feature = "serve")]
mod http;
mod mutation;
mod reader;
