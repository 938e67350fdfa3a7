//! Helpers the benchmarks that run C fixtures share.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target directory of this build (`target/<profile>/`): the bench binary lives in its
/// `deps/`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Builds `fixtures/c/<source>` into `out` with the system compiler and `flags`.
pub fn cc(source: &str, out: &Path, flags: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c").join(source);
    let o = Command::new("cc").args(flags).arg("-o").arg(out).arg(&src).output().expect("cc runs");
    assert!(o.status.success(), "cc {source}: {}", String::from_utf8_lossy(&o.stderr));
}
