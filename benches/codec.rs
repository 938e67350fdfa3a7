//! Which compressor for the `.mprof` blocks: zstd (levels 1 and 3) against lz4 (lz4_flex),
//! on the raw blocks of real recordings, measured side by side in one run.
//!
//! ```text
//! cargo bench --bench codec                 # records the worst case's C port itself
//! cargo bench --bench codec -- FILE.mprof   # the blocks of any version-2 recording
//! ```
//!
//! It records `fixtures/c/worst_case.c` (2 M iterations) in the exact mode and at an
//! interval of 800 B, depth 10, with the `memprof` beside this bench (build it first:
//! `cargo build --release`), decompresses every block of each file back to its raw records,
//! then compresses them again with each codec and prints, per codec: the compressed size
//! relative to zstd level 1, and the compression and decompression time relative to zstd
//! level 1 (the drain thread compresses, the reader decompresses).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

fn varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    for i in 0..10 {
        let x = b[*at];
        *at += 1;
        v |= u64::from(x & 0x7f) << (7 * i);
        if x & 0x80 == 0 {
            break;
        }
    }
    v
}

/// The raw (decompressed) blocks of a version-2 file: the outer records after the magic
/// are `tag len payload crc`, a block (tag 10) being `codec raw_len zstd-bytes`.
fn raw_blocks(file: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(file).unwrap();
    let mut at = 8;
    let mut out = Vec::new();
    while at < b.len() {
        let tag = b[at];
        at += 1;
        let len = varint(&b, &mut at) as usize;
        let payload = &b[at..at + len];
        at += len + 4;
        if tag == 10 {
            let mut p = 0;
            let _codec = varint(payload, &mut p);
            let raw = varint(payload, &mut p) as usize;
            out.push(zstd::bulk::decompress(&payload[p..], raw).unwrap());
        }
    }
    out
}

fn record(dir: &Path, args: &[&str], name: &str) -> PathBuf {
    let prog = dir.join("worst_case");
    if !prog.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/worst_case.c");
        let ok = Command::new("cc").args(["-O2", "-g", "-o"]).arg(&prog).arg(&src).status();
        assert!(ok.unwrap().success(), "cc failed");
    }
    let out = dir.join(name);
    let memprof = target_dir().join("memprof");
    assert!(memprof.exists(), "build memprof first: cargo build --release");
    let st = Command::new(memprof)
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .arg("2000000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "memprof record failed");
    out
}

struct Codec {
    name: &'static str,
    compress: fn(&[u8]) -> Vec<u8>,
    decompress: fn(&[u8], usize) -> Vec<u8>,
}

fn measure(label: &str, blocks: &[Vec<u8>]) {
    let codecs = [
        Codec {
            name: "zstd -1",
            compress: |b| zstd::bulk::compress(b, 1).unwrap(),
            decompress: |b, n| zstd::bulk::decompress(b, n).unwrap(),
        },
        Codec {
            name: "zstd -3",
            compress: |b| zstd::bulk::compress(b, 3).unwrap(),
            decompress: |b, n| zstd::bulk::decompress(b, n).unwrap(),
        },
        Codec {
            name: "lz4",
            compress: lz4_flex::block::compress,
            decompress: |b, n| lz4_flex::block::decompress(b, n).unwrap(),
        },
    ];
    let raw: usize = blocks.iter().map(Vec::len).sum();
    println!("{label}: {} blocks, {raw} raw bytes", blocks.len());
    let mut base: Option<(f64, f64, f64)> = None;
    for c in &codecs {
        // Three rounds, the fastest kept (the machine is shared).
        let (mut size, mut ct, mut dt) = (0usize, f64::MAX, f64::MAX);
        for _ in 0..3 {
            let t = Instant::now();
            let packed: Vec<Vec<u8>> = blocks.iter().map(|b| (c.compress)(b)).collect();
            ct = ct.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for (p, b) in packed.iter().zip(blocks) {
                assert_eq!((c.decompress)(p, b.len()).len(), b.len());
            }
            dt = dt.min(t.elapsed().as_secs_f64());
            size = packed.iter().map(Vec::len).sum();
        }
        let (bs, bc, bd) = *base.get_or_insert((size as f64, ct, dt));
        println!(
            "  {:8} {:>10} bytes ({:5.2}× zstd -1)   compress {:5.2}× zstd -1 ({:.0} MB/s)   \
             decompress {:5.2}×",
            c.name,
            size,
            size as f64 / bs,
            ct / bc,
            raw as f64 / ct / 1e6,
            dt / bd
        );
    }
}

fn main() {
    let files: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if !files.is_empty() {
        for f in files {
            measure(&f, &raw_blocks(Path::new(&f)));
        }
        return;
    }
    let dir = std::env::temp_dir().join(format!("memprof-codec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exact = record(&dir, &["--interval", "1"], "exact.mprof");
    measure("worst case, 2 M iterations, exact", &raw_blocks(&exact));
    let dense = record(&dir, &["--interval", "800", "--depth", "10"], "dense.mprof");
    measure("worst case, 2 M iterations, 800 B depth 10", &raw_blocks(&dense));
    let _ = std::fs::remove_dir_all(&dir);
}
