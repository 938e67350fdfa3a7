//! The program to run, checked before it runs (§1): found as `execvp` finds it (its
//! launchers looked through by `through.rs`), an executable regular file, neither setuid nor setgid, and an ELF
//! program with a `PT_INTERP` header (a statically linked program never loads the preload
//! library).
#![deny(unsafe_op_in_unsafe_fn)]

use crate::error::{Error, LaunchError};
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Finds `program` the way `execvp` would: a name with a slash is a path, otherwise the
/// first executable regular file of that name in `PATH`.
pub fn resolve_program(program: &OsStr) -> Result<PathBuf, Error> {
    let shown = Path::new(program).display().to_string();
    if program.is_empty() {
        return Err(Error::Config("no program given (memprof record -- PROG [ARGS…])".into()));
    }
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        check_executable(&p, &shown)?;
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    resolve_in_path(program, &path, &shown)
}

/// `program` (a name without a slash) found in the directories of `path`, as `execvp`
/// finds it; `shown` names it in the error.
pub(super) fn resolve_in_path(
    program: &OsStr,
    path: &OsStr,
    shown: &str,
) -> Result<PathBuf, Error> {
    for dir in std::env::split_paths(path) {
        let candidate = dir.join(program);
        if candidate.is_file() && check_executable(&candidate, shown).is_ok() {
            return Ok(candidate);
        }
    }
    Err(LaunchError::NotInPath(shown.to_owned()).into())
}

pub(super) fn check_executable(p: &Path, shown: &str) -> Result<(), Error> {
    let meta = fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LaunchError::NotFound(shown.to_owned()).into(),
        _ => Error::io(format!("cannot run {shown}"), e),
    })?;
    if meta.is_dir() {
        return Err(LaunchError::Directory(shown.to_owned()).into());
    }
    if !meta.is_file() {
        return Err(LaunchError::NotRegularFile(shown.to_owned()).into());
    }
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| LaunchError::NulInPath(shown.to_owned()))?;
    // SAFETY: `c` is a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0
        || meta.permissions().mode() & 0o111 == 0
    {
        return Err(LaunchError::NotExecutable(shown.to_owned()).into());
    }
    Ok(())
}

/// How a program file would be started, as far as the preload library is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// An ELF program with an interpreter (the dynamic loader): `LD_PRELOAD` works.
    Dynamic,
    /// An ELF program without an interpreter: it never loads a shared library.
    Static,
    /// A script (`#!`): its interpreter is checked when it runs.
    Script,
    /// Not ELF and not a script: left to `exec` to accept or refuse.
    Unknown,
}

/// Reads the ELF program headers of `path` and says whether it has a `PT_INTERP`.
pub fn linkage(path: &Path) -> Result<Linkage, Error> {
    let mut f = crate::sys::files::open_input_regular(path)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let mut head = Vec::new();
    (&mut f)
        .take(64 * 1024)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    if head.starts_with(b"#!") {
        return Ok(Linkage::Script);
    }
    if head.len() < 52 || &head[..4] != b"\x7fELF" {
        return Ok(Linkage::Unknown);
    }
    let is64 = head[4] == 2;
    let le = head[5] == 1;
    let u16_at = |o: usize| -> Option<u64> {
        let b: [u8; 2] = head.get(o..o + 2)?.try_into().ok()?;
        Some(u64::from(if le { u16::from_le_bytes(b) } else { u16::from_be_bytes(b) }))
    };
    let u32_at = |o: usize| -> Option<u64> {
        let b: [u8; 4] = head.get(o..o + 4)?.try_into().ok()?;
        Some(u64::from(if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) }))
    };
    let u64_at = |o: usize| -> Option<u64> {
        let b: [u8; 8] = head.get(o..o + 8)?.try_into().ok()?;
        Some(if le { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) })
    };
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    } else {
        (u32_at(0x1c), u16_at(0x2a), u16_at(0x2c))
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, phentsize, phnum) else {
        return Ok(Linkage::Unknown);
    };
    const PT_INTERP: u64 = 3;
    for i in 0..phnum {
        let at = phoff.saturating_add(i.saturating_mul(phentsize));
        let Ok(at) = usize::try_from(at) else { break };
        match u32_at(at) {
            Some(PT_INTERP) => return Ok(Linkage::Dynamic),
            Some(_) => {}
            // Program headers beyond the first 64 KiB: do not guess.
            None => return Ok(Linkage::Unknown),
        }
    }
    Ok(Linkage::Static)
}

/// Checks that `path` can be profiled: not setuid/setgid, not statically linked.
pub fn check_profilable(path: &Path, shown: &str) -> Result<(), Error> {
    let meta = fs::metadata(path).map_err(|e| Error::io(format!("cannot run {shown}"), e))?;
    if meta.mode() & (libc::S_ISUID | libc::S_ISGID) != 0 {
        return Err(LaunchError::SetId(shown.to_owned()).into());
    }
    if linkage(path)? == Linkage::Static {
        let (rust, go) = super::super::interposable::rust_and_go(path);
        return Err(LaunchError::StaticallyLinked { program: shown.to_owned(), rust, go }.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linkage_of_known_files() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(linkage(&me).unwrap(), Linkage::Dynamic);
        let dir = std::env::temp_dir().join(format!("memprof-linkage-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(linkage(&script).unwrap(), Linkage::Script);
        let _ = fs::remove_dir_all(&dir);
    }
}
