//! Launchers looked through: programs whose only job is to `exec` the program the user
//! means, found as each would find it, so that `record` runs that program itself. A
//! launcher left in place is what the profile would show: the preload library follows the
//! `exec`, but the process it was started in has replaced itself, and without
//! `--follow-forks` the profile is the launcher's handful of samples with a note.
//!
//! - **rustup's proxies** (`rustc`, `cargo`, `rustdoc` … are links to `rustup`): the
//!   toolchain's program, from `rustup which NAME` run in this directory (so a
//!   `rust-toolchain` file is obeyed). A `+toolchain` first argument, the proxy's own
//!   syntax, is left to it.
//! - **pyenv's shims** (`$PYENV_ROOT/shims/python3`, a bash script ending in `exec
//!   "$PYENV_ROOT/libexec/pyenv" exec "$program" "$@"`): the version's program, from
//!   `pyenv which NAME` run in this directory (so `.python-version` and `PYENV_VERSION` are
//!   obeyed), with what `pyenv exec` sets: `PYENV_VERSION`, and the version's `bin`
//!   directory first on `PATH` (not for the system's Python). `pyenv exec`'s hooks are not
//!   run; the one pyenv installs only wraps `pip`, so `pip` and `-m pip` stay with the shim.
//! - **`env NAME ARGS…`** (coreutils' `env`, no option, no assignment): `NAME` found in
//!   `PATH`, then looked through in turn.
//! - **a script whose `#!` line is `env NAME` or a launcher** (`#!/usr/bin/env python3`,
//!   `#!/root/.pyenv/shims/python3`): the interpreter looked through, run with the script's
//!   path and arguments as the kernel would have passed them.
//!
//! A virtualenv's `bin/python` is a link to the interpreter itself, not a launcher: it is
//! run by its own path (which is how Python finds the virtualenv), as any program is.

use super::program::{check_executable, resolve_in_path, resolve_program};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A launcher chain longer than this is left alone (a loop of scripts naming each other).
const MAX_STEPS: usize = 6;

/// The program a command's launchers would run, with its arguments and what they set in
/// its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LookedThrough {
    /// The program (an absolute path, or a name found in `PATH` when only `env` was
    /// looked through).
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    /// Variables the launchers would have set.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// What was looked through, in order, for the note `record` prints.
    pub(crate) launchers: Vec<String>,
}

/// `program args…` with its launchers looked through; `None` when `program` is not one.
pub(crate) fn look_through(program: &OsStr, args: &[OsString]) -> Option<LookedThrough> {
    let mut now = LookedThrough {
        program: program.into(),
        args: args.to_vec(),
        env: vec![],
        launchers: vec![],
    };
    for _ in 0..MAX_STEPS {
        let path_var = now.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
        let Some(next) = step(&now.program, &now.args, path_var.as_deref()) else {
            break;
        };
        now.program = next.program;
        now.args = next.args;
        for (k, v) in next.env {
            now.env.retain(|(old, _)| *old != k);
            now.env.push((k, v));
        }
        now.launchers.extend(next.launchers);
    }
    (!now.launchers.is_empty()).then_some(now)
}

/// One launcher looked through, or `None`.
fn step(program: &OsStr, args: &[OsString], path_var: Option<&OsStr>) -> Option<LookedThrough> {
    let named = resolve_in(program, path_var)?;
    if let Some(real) = through_rustup(&named, args) {
        let name = Path::new(program).display();
        let launchers = vec![format!("rustup's proxy {name}")];
        return Some(LookedThrough {
            program: real.into(),
            args: args.to_vec(),
            env: vec![],
            launchers,
        });
    }
    let head = head_of(&named)?;
    if let Some(shim) = PyenvShim::of(&head) {
        return shim.through(&named, args, path_var);
    }
    if is_env(&named, &head) {
        let first = args.first()?;
        let b = first.as_bytes();
        if b.is_empty() || b[0] == b'-' || b.contains(&b'=') {
            return None;
        }
        let launchers = vec![format!("{}", named.display())];
        return Some(LookedThrough {
            program: first.clone(),
            args: args[1..].to_vec(),
            env: vec![],
            launchers,
        });
    }
    // A script: the kernel would run `interp [arg] script args…`.
    let (interp, arg) = shebang(&head)?;
    let mut interp_args: Vec<OsString> = arg.into_iter().collect();
    // The kernel passes the path it executed: a name found in `PATH` goes as that path.
    let script = if program.as_bytes().contains(&b'/') { program } else { named.as_os_str() };
    interp_args.push(script.into());
    interp_args.extend(args.iter().cloned());
    let inner = step(&interp, &interp_args, path_var)?;
    let mut launchers = vec![format!("the #! line of {}", Path::new(program).display())];
    launchers.extend(inner.launchers);
    Some(LookedThrough { launchers, ..inner })
}

/// `program` found as `execvp` finds it, in `path_var` when a launcher set `PATH`.
fn resolve_in(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    match path_var {
        Some(path) if !program.as_bytes().contains(&b'/') => {
            resolve_in_path(program, path, "").ok()
        }
        _ => resolve_program(program).ok(),
    }
}

/// An executable regular file (`execvp`'s test, `check_executable`).
fn is_executable(p: &Path) -> bool {
    check_executable(p, "").is_ok()
}

/// The first 4 KiB of a file (a `#!` line and a shim's text fit), read without blocking
/// on a FIFO.
fn head_of(path: &Path) -> Option<Vec<u8>> {
    let f = crate::sys::files::open_input_regular(path).ok()?;
    let mut head = Vec::with_capacity(4096);
    f.take(4096).read_to_end(&mut head).ok()?;
    Some(head)
}

/// coreutils' `env`: an ELF program named `env` (a script of that name is not it).
fn is_env(path: &Path, head: &[u8]) -> bool {
    let env = Some(OsStr::new("env"));
    head.starts_with(b"\x7fELF")
        && (path.file_name() == env || fs::canonicalize(path).is_ok_and(|p| p.file_name() == env))
}

/// The interpreter of a `#!` line and its one optional argument (the kernel passes the
/// rest of the line as one word).
fn shebang(head: &[u8]) -> Option<(OsString, Option<OsString>)> {
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n')?];
    let line = line.trim_ascii();
    let (interp, arg) = match line.iter().position(|b| b.is_ascii_whitespace()) {
        Some(i) => (&line[..i], Some(line[i..].trim_ascii())),
        None => (line, None),
    };
    if interp.is_empty() {
        return None;
    }
    let arg = arg.filter(|a| !a.is_empty()).map(|a| OsStr::from_bytes(a).to_owned());
    Some((OsStr::from_bytes(interp).to_owned(), arg))
}

/// The toolchain's program behind rustup's proxy `named`, found by `rustup which`.
pub(crate) fn through_rustup(named: &Path, args: &[OsString]) -> Option<PathBuf> {
    let name = named.file_name()?;
    let proxy = fs::canonicalize(named).ok()?;
    if proxy.file_name()? != "rustup" || name == "rustup" {
        return None;
    }
    if args.first().is_some_and(|a| a.as_bytes().starts_with(b"+")) {
        return None;
    }
    let out = Command::new(&proxy)
        .arg("which")
        .arg(name)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let target = one_path(&out)?;
    (target.file_name() == Some(name) && is_executable(&target)).then_some(target)
}

/// The one absolute path a successful helper printed.
fn one_path(out: &std::process::Output) -> Option<PathBuf> {
    let line = out.stdout.strip_suffix(b"\n").unwrap_or(&out.stdout);
    let target = PathBuf::from(OsStr::from_bytes(line));
    (out.status.success() && target.is_absolute() && !line.contains(&b'\n')).then_some(target)
}

/// A pyenv shim, read from its text: the `pyenv` it executes and the root it exports.
#[derive(Debug, PartialEq, Eq)]
struct PyenvShim {
    pyenv: PathBuf,
    root: PathBuf,
}

impl PyenvShim {
    /// The shim whose text is `head`, or `None` (any other script).
    fn of(head: &[u8]) -> Option<PyenvShim> {
        if !head.starts_with(b"#!") {
            return None;
        }
        let mut root = None;
        let mut pyenv = None;
        for line in head.split(|&b| b == b'\n').map(<[u8]>::trim_ascii) {
            if let Some(r) = line.strip_prefix(b"export PYENV_ROOT=") {
                root = Some(unquote(r)?);
            } else if let Some(rest) = line.strip_prefix(b"exec \"") {
                let end = rest.iter().position(|&b| b == b'"')?;
                let (path, tail) = (&rest[..end], rest[end + 1..].trim_ascii());
                if path.ends_with(b"/libexec/pyenv") && tail.starts_with(b"exec \"$program\"") {
                    pyenv = Some(PathBuf::from(OsStr::from_bytes(path)));
                }
            }
        }
        let (pyenv, root) = (pyenv?, PathBuf::from(OsStr::from_bytes(&root?)));
        (pyenv.is_absolute() && root.is_absolute()).then_some(PyenvShim { pyenv, root })
    }

    /// The version's program `named` stands for, asked of `pyenv which`, with what `pyenv
    /// exec` would set. `None` for `pip` (pyenv's exec hook wraps it) or when pyenv does
    /// not answer with an executable file.
    fn through(
        &self,
        named: &Path,
        args: &[OsString],
        path_var: Option<&OsStr>,
    ) -> Option<LookedThrough> {
        let name = named.file_name()?;
        let n = name.as_bytes();
        let pip_module = args.windows(2).any(|w| w[0] == "-m" && w[1] == "pip");
        if n.starts_with(b"pip") || n.starts_with(b"easy_install") || pip_module {
            return None;
        }
        let mut which = Command::new(&self.pyenv);
        which.arg("which").arg(name).stdin(Stdio::null()).stderr(Stdio::null());
        // pyenv's own commands are found in its libexec, whatever `PATH` holds.
        which.env("PYENV_ROOT", &self.root);
        let target = one_path(&which.output().ok()?)?;
        if !is_executable(&target) {
            return None;
        }
        let bin = target.parent()?;
        // `$PYENV_ROOT/versions/NAME/bin/…`: the version's name; anything else is the
        // system's Python, which `pyenv exec` calls `system`.
        let version = bin
            .strip_prefix(self.root.join("versions"))
            .ok()
            .and_then(|rest| rest.components().next())
            .map_or_else(|| OsString::from("system"), |c| c.as_os_str().to_owned());
        let mut env = vec![
            (OsString::from("PYENV_ROOT"), self.root.clone().into_os_string()),
            (OsString::from("PYENV_VERSION"), version),
        ];
        if bin.starts_with(&self.root) {
            let path = path_var.map(OsStr::to_owned).or_else(|| std::env::var_os("PATH"));
            let mut dirs = vec![bin.to_owned()];
            dirs.extend(path.iter().flat_map(std::env::split_paths));
            env.push((OsString::from("PATH"), std::env::join_paths(dirs).ok()?));
        }
        let launchers = vec![format!("pyenv's shim {}", named.display())];
        Some(LookedThrough { program: target.into(), args: args.to_vec(), env, launchers })
    }
}

/// A shell word in double quotes, or bare (no expansion in either).
fn unquote(w: &[u8]) -> Option<Vec<u8>> {
    let w = w.trim_ascii();
    let inner = match w.strip_prefix(b"\"") {
        Some(rest) => rest.strip_suffix(b"\"")?,
        None => w,
    };
    (!inner.iter().any(|&b| b == b'$' || b == b'`' || b == b'"')).then(|| inner.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIM: &str = "#!/usr/bin/env bash\nset -e\n[ -n \"$PYENV_DEBUG\" ] && set -x\n\n\
        program=\"${0##*/}\"\n\nexport PYENV_ROOT=\"/root/.pyenv\"\nSHIM_PATH=${0%/*}\n\
        exec \"/root/.pyenv/libexec/pyenv\" exec \"$program\" \"$@\"\n";

    #[test]
    fn a_pyenv_shim_is_read_from_its_text() {
        let shim = PyenvShim::of(SHIM.as_bytes()).expect("a shim");
        assert_eq!(shim.pyenv, Path::new("/root/.pyenv/libexec/pyenv"));
        assert_eq!(shim.root, Path::new("/root/.pyenv"));
        assert_eq!(PyenvShim::of(b"#!/bin/sh\nexec python3 \"$@\"\n"), None);
        // A root the shell would expand is not guessed at.
        let odd = SHIM.replace("\"/root/.pyenv\"\n", "\"$HOME/.pyenv\"\n");
        assert_eq!(PyenvShim::of(odd.as_bytes()), None);
    }

    #[test]
    fn shebang_lines() {
        let s = |t: &str| shebang(t.as_bytes());
        assert_eq!(
            s("#!/usr/bin/env python3\nprint()\n"),
            Some(("/usr/bin/env".into(), Some("python3".into())))
        );
        assert_eq!(s("#! /bin/sh\n"), Some(("/bin/sh".into(), None)));
        assert_eq!(
            s("#!/usr/bin/env -S python3 -u\n"),
            Some(("/usr/bin/env".into(), Some("-S python3 -u".into())))
        );
        assert_eq!(s("#!\n"), None);
        assert_eq!(s("print()\n"), None);
        assert_eq!(s("#!/bin/sh"), None, "no end of line in the first 4 KiB");
    }

    #[test]
    fn env_with_a_name_is_looked_through_and_with_options_is_not() {
        let Some(env) = resolve_program(OsStr::new("env")).ok() else { return };
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let t = step(env.as_os_str(), &args(&["true", "x"]), None).expect("looked through");
        assert_eq!(t.program, "true");
        assert_eq!(t.args, args(&["x"]));
        assert!(step(env.as_os_str(), &args(&["-i", "true"]), None).is_none());
        assert!(step(env.as_os_str(), &args(&["A=1", "true"]), None).is_none());
        assert!(step(env.as_os_str(), &[], None).is_none());
    }
}
