//! Launchers looked through (`record/command/launcher/through.rs`): `record -- python3
//! app.py` through pyenv's shim, `/usr/bin/env NAME`, and a script whose `#!` line names
//! `env`, each record the program the launcher would have run, with what the launcher would
//! have set in its environment, and say so. A pyenv of the test's own making (a shim of
//! pyenv's text and a `pyenv` that answers `which`) runs everywhere; the machine's pyenv
//! and its Pythons where they are installed.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, read, scratch};

/// A pyenv of our own under `dir/root`: `shims/NAME` for each of `programs` (pyenv's shim
/// text), `libexec/pyenv` answering `which NAME` with `versions/9.9/bin/NAME` (and, should
/// `record` not look through the shim, `exec NAME` by running it with a mark on stderr).
fn fake_pyenv(dir: &Path, programs: &[(&str, &Path)]) -> PathBuf {
    let root = dir.join("root");
    let (shims, libexec, bin) =
        (root.join("shims"), root.join("libexec"), root.join("versions/9.9/bin"));
    for d in [&shims, &libexec, &bin] {
        std::fs::create_dir_all(d).unwrap();
    }
    let r = root.display();
    let exe = |p: &Path, body: String| {
        std::fs::write(p, body).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    for (name, target) in programs {
        let shim = format!(
            "#!/usr/bin/env bash\nset -e\n[ -n \"$PYENV_DEBUG\" ] && set -x\n\n\
             program=\"${{0##*/}}\"\n\nexport PYENV_ROOT=\"{r}\"\n\
             exec \"{r}/libexec/pyenv\" exec \"$program\" \"$@\"\n"
        );
        exe(&shims.join(name), shim);
        let _ = std::fs::remove_file(bin.join(name));
        symlink(target, bin.join(name)).unwrap();
    }
    exe(
        &libexec.join("pyenv"),
        format!(
            "#!/bin/sh\ncase \"$1\" in\n\
             which) echo \"{r}/versions/9.9/bin/$2\" ;;\n\
             exec) shift; echo 'ran by the shim' >&2; n=\"$1\"; shift; \
             exec \"{r}/versions/9.9/bin/$n\" \"$@\" ;;\n\
             *) exit 1 ;;\nesac\n"
        ),
    );
    shims
}

/// `record --interval 1 -o OUT -- ARGS…` in `dir` with `PATH` starting at `first`.
fn record_with_path(dir: &Path, first: &Path, out: &str, args: &[&str]) -> Output {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![first.to_owned()];
    dirs.extend(std::env::split_paths(&path));
    Command::new(MEMPROF)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(dirs).unwrap())
        .env_remove("PYENV_VERSION")
        .args(["record", "--interval", "1", "-o", out, "--"])
        .args(args)
        .output()
        .expect("memprof runs")
}

/// A script that prints what `pyenv exec` sets (`PYENV_VERSION`, the first `PATH` entry).
fn env_printer(dir: &Path) -> PathBuf {
    let p = dir.join("print_env.sh");
    std::fs::write(&p, "#!/bin/sh\necho \"version=$PYENV_VERSION path=${PATH%%:*}\"\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn a_pyenv_shim_is_looked_through_to_the_versions_program() {
    let dir = scratch("launchers-pyenv");
    let once = fixture("once");
    let printer = env_printer(&dir);
    let shims = fake_pyenv(&dir, &[("fakepy", &once), ("fakeenv", &printer)]);
    let bin = dir.join("root/versions/9.9/bin");

    let out = record_with_path(&dir, &shims, "p.mprof", &["fakepy"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    let note = format!(
        "memprof: note: recording {}/fakepy (looked through pyenv's shim {}/fakepy)",
        bin.display(),
        shims.display()
    );
    assert!(err.contains(&note), "{err}");
    assert!(!err.contains("ran by the shim"), "{err}");
    let prof = read(&dir.join("p.mprof"));
    assert!(prof.complete, "{:?}", prof.warnings);
    let stacks = memprof::report::collapsed(&prof, memprof::report::View::Alloc);
    assert!(stacks.iter().any(|l| l.contains("once_site")), "{stacks:?}");

    // What `pyenv exec` sets, set.
    let out = record_with_path(&dir, &shims, "e.mprof", &["fakeenv"]);
    assert_ok(&out, 0);
    let want = format!("version=9.9 path={}\n", bin.display());
    assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
}

#[test]
fn env_and_a_hash_bang_env_line_are_looked_through() {
    let dir = scratch("launchers-env");
    let once = fixture("once");
    let shims = fake_pyenv(&dir, &[("fakepy", &once)]);
    let env = Path::new("/usr/bin/env");
    if !env.is_file() {
        return crate::common::skipped("env looked through", "no /usr/bin/env");
    }
    let out = record_with_path(&dir, &shims, "env.mprof", &["/usr/bin/env", "fakepy"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(err.contains("(looked through /usr/bin/env, then pyenv's shim "), "{err}");
    let prof = read(&dir.join("env.mprof"));
    let stacks = memprof::report::collapsed(&prof, memprof::report::View::Alloc);
    assert!(stacks.iter().any(|l| l.contains("once_site")), "{stacks:?}");

    // `./app` whose first line is `#!/usr/bin/env fakepy`: the kernel would run `env fakepy
    // ./app ARG`, and so does `record`, looked through.
    let script = dir.join("app");
    std::fs::write(&script, "#!/usr/bin/env fakepy\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = record_with_path(&dir, &shims, "s.mprof", &["./app", "ARG"]);
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(
        err.contains("(looked through the #! line of ./app, then /usr/bin/env, then "),
        "{err}"
    );
    let prof = read(&dir.join("s.mprof"));
    let cmd = prof.header.cmdline.join(" ");
    assert!(cmd.ends_with("fakepy ./app ARG"), "{cmd}");

    // The same script found in `PATH` by its name: the interpreter gets its path, as the
    // kernel passes it.
    let in_path = shims.join("app");
    std::fs::copy(&script, &in_path).unwrap();
    let out = record_with_path(&dir, &shims, "n.mprof", &["app", "ARG"]);
    assert_ok(&out, 0);
    let cmd = read(&dir.join("n.mprof")).header.cmdline.join(" ");
    let want = format!("fakepy {} ARG", in_path.display());
    assert!(cmd.ends_with(&want), "{cmd}");

    // `env` with an option or an assignment is its own business: run as it is.
    let out = record_with_path(&dir, &shims, "o.mprof", &["/usr/bin/env", "-u", "X", "true"]);
    assert_ok(&out, 0);
    assert!(!text(&out.stderr).contains("looked through"), "{}", text(&out.stderr));
}

/// The machine's pyenv, where it is: `python3` through its shim is the version's
/// interpreter for each of 3.11, 3.12 and 3.13 installed (`PYENV_VERSION`), with
/// `PYENV_VERSION` and `PATH` as `pyenv exec` sets them; a virtualenv's `bin/python` runs
/// as itself (Python finds the virtualenv by its path); `python3 -m pip` stays with the shim.
#[test]
fn pythons_through_the_machines_pyenv_shim() {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        return crate::common::skipped("pyenv's python3", "no HOME");
    };
    let root = std::env::var_os("PYENV_ROOT").map_or(home.join(".pyenv"), PathBuf::from);
    let shims = root.join("shims");
    if !shims.join("python3").is_file() {
        return crate::common::skipped("pyenv's python3", "no pyenv shims");
    }
    let dir = scratch("launchers-real-pyenv");
    let code = "import os, sys; print(sys.version_info[:2], os.environ.get('PYENV_VERSION'), \
                os.environ['PATH'].split(':')[0]); x = [str(i) * 10 for i in range(20000)]";
    let mut ran = 0;
    let mut last = None;
    for v in std::fs::read_dir(root.join("versions")).unwrap().flatten() {
        let name = v.file_name().to_string_lossy().into_owned();
        let minor = ["3.11.", "3.12.", "3.13."].iter().position(|p| name.starts_with(p));
        let Some(minor) = minor else { continue };
        let out = Command::new(MEMPROF)
            .current_dir(&dir)
            .env("PYENV_VERSION", &name)
            .env("PATH", format!("{}:/usr/bin:/bin", shims.display()))
            .args(["record", "-o", &format!("{name}.mprof"), "--", "python3", "-c", code])
            .output()
            .expect("memprof runs");
        assert_ok(&out, 0);
        let bin = v.path().join("bin");
        let want = format!("(3, {}) {name} {}\n", 11 + minor, bin.display());
        assert_eq!(text(&out.stdout), want, "{}", text(&out.stderr));
        let prof = read(&dir.join(format!("{name}.mprof")));
        assert!(
            prof.header.executable.starts_with(&*bin.to_string_lossy()),
            "{}",
            prof.header.executable
        );
        ran += 1;
        last = Some((name, v.path()));
    }
    let Some((name, prefix)) = last else {
        return crate::common::skipped("pyenv's python3", "no CPython 3.11 to 3.13 in pyenv");
    };
    assert!(ran > 0);
    // A virtualenv's interpreter: a link to the version's, run by its own path.
    let venv = dir.join("venv");
    let _ = std::fs::remove_dir_all(&venv);
    let made = Command::new(prefix.join("bin/python3"))
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .expect("python runs");
    assert!(made.status.success(), "{}", text(&made.stderr));
    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["record", "-o", "venv.mprof", "--"])
        .arg(venv.join("bin/python"))
        .args(["-c", "import sys; print(sys.prefix)"])
        .output()
        .expect("memprof runs");
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout).trim(), venv.to_string_lossy(), "{}", text(&out.stderr));
    // pip is left to the shim: pyenv's exec hook wraps it.
    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .env("PYENV_VERSION", &name)
        .env("PATH", format!("{}:/usr/bin:/bin", shims.display()))
        .args(["record", "-o", "pip.mprof", "--", "python3", "-m", "pip", "--version"])
        .output()
        .expect("memprof runs");
    assert!(!text(&out.stderr).contains("looked through"), "{}", text(&out.stderr));
}
