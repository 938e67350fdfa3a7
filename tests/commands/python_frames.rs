//! Python frames (`engine::python`, `profile::symbolize::python`): `record -- python3
//! sites.py` at the default interval names the Python functions and lines that allocate
//! (`fixtures/python/sites.py`: a list and a dict built, strings joined, a generator, a
//! class's `__init__`, a thread, a coroutine), on every CPython 3.11 to 3.13 this machine
//! has (pyenv's, through its shim, and Debian's `python3.11`); the pprof names them to
//! `go tool pprof`; a version memprof does not know gets native stacks and a note.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, read, scratch};

/// The fixture, and its marked lines by site name (`# site: NAME`).
fn fixture() -> (PathBuf, BTreeMap<String, BTreeSet<u32>>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/python/sites.py");
    let mut marked: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for (i, line) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
        if let Some((_, name)) = line.split_once("# site: ") {
            marked.entry(name.trim().to_owned()).or_default().insert(i as u32 + 1);
        }
    }
    (path, marked)
}

/// An interpreter to try: what the messages call it, its environment, its path.
type Interpreter = (String, Vec<(&'static str, String)>, PathBuf);

/// The interpreters to try: pyenv's 3.11 to 3.13 (a `PYENV_VERSION` for its shim each) and
/// Debian's `/usr/bin/python3.11`.
fn interpreters() -> Vec<Interpreter> {
    let mut out = vec![];
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    if let Some(root) = root.filter(|r| r.join("shims/python3").is_file()) {
        let mut versions: Vec<String> = std::fs::read_dir(root.join("versions"))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        versions.sort();
        for minor in ["3.11.", "3.12.", "3.13."] {
            if let Some(v) = versions.iter().rev().find(|v| v.starts_with(minor)) {
                let env = vec![("PYENV_VERSION", v.clone())];
                out.push((format!("pyenv {v}"), env, root.join("shims/python3")));
            }
        }
    }
    if Path::new("/usr/bin/python3.11").is_file() {
        out.push(("Debian 3.11".into(), vec![], PathBuf::from("/usr/bin/python3.11")));
    }
    out
}

#[test]
fn python_sites_are_the_python_lines_on_every_version() {
    let (script, marked) = fixture();
    let all = interpreters();
    if all.is_empty() {
        return crate::common::skipped("Python frames", "no CPython 3.11 to 3.13 here");
    }
    let dir = scratch("python-frames");
    for (label, env, python) in all {
        let out_name = format!("{}.mprof", label.replace(' ', "-"));
        let out = Command::new(MEMPROF)
            .current_dir(&dir)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["record", "--force", "-o", &out_name, "--"])
            .arg(&python)
            .arg(&script)
            .output()
            .expect("memprof runs");
        assert_ok(&out, 0);
        assert_eq!(text(&out.stdout), "done\n", "{label}: {}", text(&out.stderr));
        let prof = read(&dir.join(&out_name));
        assert!(prof.complete, "{label}: {:?}", prof.warnings);
        // Bytes by site (name, file, line), from every sampled (stack, size) pair.
        let mut by_site: BTreeMap<(String, String, u32), f64> = BTreeMap::new();
        let mut total = 0.0;
        for (&(stack, _size), t) in &prof.allocated {
            let bytes = t.k as f64 * prof.header.interval;
            total += bytes;
            if let Some(s) = prof.site(stack) {
                let file = s.file.unwrap_or_default();
                *by_site.entry((s.name, file, s.line.unwrap_or(0))).or_default() += bytes;
            }
        }
        let on_marked = |name: &str| -> f64 {
            by_site
                .iter()
                .filter(|((site, file, line), _)| {
                    // 3.11 runs a comprehension as a function of its own.
                    let base = site.split(".<locals>.<").next().unwrap_or(site);
                    base == name && file.ends_with("/sites.py") && marked[name].contains(line)
                })
                .map(|(_, b)| b)
                .sum()
        };
        let mut named = 0.0;
        for name in marked.keys() {
            let bytes = on_marked(name);
            // Each marked function allocates well over 10 MiB: at the default 512 KiB
            // interval, fewer than 4 MiB estimated is a miss (the chance of it for a
            // true 10 MiB is below 1e-3).
            assert!(
                bytes > 4.0 * 1048576.0,
                "{label}: {name}: {bytes} B at its lines\n{by_site:#?}"
            );
            named += bytes;
        }
        // The marked lines hold most of what the program allocated (the rest: the
        // interpreter's start-up, imports, `main`'s own list).
        assert!(
            named > 0.6 * total,
            "{label}: {named} of {total} B on the marked lines\n{by_site:#?}"
        );

        // pprof: the functions with their files and lines, as go tool pprof reads them.
        let pb = dir.join(format!("{out_name}.pb.gz"));
        let rep = Command::new(MEMPROF)
            .args(["report"])
            .arg(dir.join(&out_name))
            .arg("--pprof")
            .arg(&pb)
            .output()
            .expect("memprof runs");
        assert!(rep.status.success(), "{}", text(&rep.stderr));
        if let Some(top) = crate::common::go_pprof(&["-top", "-lines"], pb.as_os_str(), "pprof") {
            for name in ["build_dict", "Point.__init__", "worker", "fetch"] {
                let line = marked[name].iter().next().unwrap();
                let want = format!("sites.py:{line}");
                assert!(
                    top.lines().any(|l| l.contains(name) && l.contains(&want)),
                    "{label}: {name} at {want} in\n{top}"
                );
            }
        }
    }
}

/// CPython 3.10 (pyenv's, where it is): memprof does not read its frames; the stacks are
/// the interpreter's C functions and one note says why.
#[test]
fn a_python_memprof_does_not_know_gets_native_stacks_and_a_note() {
    let Some(root) = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")) else {
        return crate::common::skipped("an unknown CPython", "no HOME");
    };
    let Some(v) = std::fs::read_dir(root.join("versions")).ok().and_then(|d| {
        d.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|v| v.starts_with("3.10."))
    }) else {
        return crate::common::skipped("an unknown CPython", "no pyenv 3.10");
    };
    let dir = scratch("python-frames-unknown");
    let (script, _) = fixture();
    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .env("PYENV_VERSION", &v)
        .args(["record", "-o", "u.mprof", "--"])
        .arg(root.join("shims/python3"))
        .arg(&script)
        .output()
        .expect("memprof runs");
    assert_ok(&out, 0);
    let err = text(&out.stderr);
    assert!(
        err.contains("CPython 3.10: its Python frames are not read (memprof reads 3.11 to 3.13)"),
        "{err}"
    );
    let prof = read(&dir.join("u.mprof"));
    let stacks = memprof::report::collapsed(&prof, memprof::report::View::Alloc);
    assert!(!stacks.iter().any(|l| l.contains("sites.py")), "{stacks:?}");
    assert!(stacks.iter().any(|l| l.contains("PyUnicode_New")), "native stacks");
}

/// `memprof attach` on a running Python service started without memprof (and with
/// pymalloc, as services run): the sites are its Python lines, and the service carries on
/// and ends cleanly after the detach.
#[test]
fn attach_to_a_running_python_service_names_its_lines() {
    let all = interpreters();
    if all.is_empty() {
        return crate::common::skipped("attach to Python", "no CPython 3.11 to 3.13 here");
    }
    for (label, env, python) in all {
        attach_once(&label, &env, &python);
    }
}

fn attach_once(label: &str, env: &[(&str, String)], python: &Path) {
    use std::io::BufRead;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/python/service.py");
    let line = std::fs::read_to_string(&script)
        .unwrap()
        .lines()
        .position(|l| l.contains("# site: handle"))
        .unwrap() as u32
        + 1;
    let dir = scratch("python-frames-attach");
    let mut service = Command::new(python)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("PYTHONMALLOC")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut lines = std::io::BufReader::new(service.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"), "{label}");
    let pid = service.id().to_string();
    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["attach", "--duration", "2s", "--force", "-o", "a.mprof", &pid])
        .output()
        .expect("memprof runs");
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(service.id() as i32, libc::SIGTERM) };
    let status = service.wait().unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_ok(&out, 0);
    assert!(status.success(), "{label}: the service ended {status:?} after the detach");
    assert_eq!(rest, ["bye"], "{label}");
    let prof = read(&dir.join("a.mprof"));
    let site = prof
        .allocated
        .iter()
        .max_by_key(|(_, t)| t.k)
        .and_then(|(&(stack, _), _)| prof.site(stack))
        .expect("a site");
    // 3.11 runs a comprehension as a function of its own (`handle.<locals>.<listcomp>`).
    let base = site.name.split(".<locals>.<").next().unwrap_or(&site.name);
    assert_eq!(base, "handle", "{label}: {site:?}\n{}", text(&out.stderr));
    assert!(site.file.as_deref().is_some_and(|f| f.ends_with("/service.py")), "{site:?}");
    assert_eq!(site.line, Some(line), "{label}: {site:?}");
}

/// `--python-frames`: off by default in the exact mode (a note says so and how to have
/// them), on when asked there; off when asked at the default interval.
#[test]
fn python_frames_follow_the_option() {
    let Some((label, env, python)) = interpreters().into_iter().next() else {
        return crate::common::skipped("--python-frames", "no CPython 3.11 to 3.13 here");
    };
    let (script, _) = fixture();
    let dir = scratch("python-frames-option");
    let runs: [(&[&str], bool, bool); 3] = [
        (&["--interval", "1"], false, true),
        (&["--interval", "1", "--python-frames", "on"], true, false),
        (&["--python-frames", "off"], false, false),
    ];
    for (i, (flags, frames, note)) in runs.into_iter().enumerate() {
        let out_name = format!("o{i}.mprof");
        let out = Command::new(MEMPROF)
            .current_dir(&dir)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("record")
            .args(flags)
            .args(["-o", &out_name, "--"])
            .arg(&python)
            .arg(&script)
            .output()
            .expect("memprof runs");
        assert_ok(&out, 0);
        let err = text(&out.stderr);
        let said = err.contains("Python frames are not read in the exact mode unless asked");
        assert_eq!(said, note, "{label} {flags:?}: {err}");
        let prof = read(&dir.join(&out_name));
        let stacks = memprof::report::collapsed(&prof, memprof::report::View::Alloc);
        let python = stacks.iter().any(|l| l.contains("(sites.py:"));
        assert_eq!(python, frames, "{label} {flags:?}");
    }
}

/// An interpreter's walks in the exact mode: most of them go on as the thread's last walk
/// did from where they meet it (`engine::callstack::trail`), and every one of them finds
/// the frames framehop finds unwinding the same stack alone (`MEMPROF_UNWIND_CHECK`).
#[test]
fn exact_mode_walks_of_an_interpreter_agree_with_framehop() {
    let Some((label, env, python)) = interpreters().into_iter().next() else {
        return crate::common::skipped("Python walks", "no CPython 3.11 to 3.13 here");
    };
    let dir = scratch("python-walks");
    let script = dir.join("round_trip.py");
    std::fs::write(
        &script,
        "import json\n\
         def records(n):\n    return [{'id': i, 'name': 'user%d' % i, 'tags': ['t', 'x']} for i in range(n)]\n\
         back = json.loads(json.dumps(records(20000)))\n\
         print(len(back))\n",
    )
    .unwrap();
    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("MEMPROF_UNWIND_CHECK", "1")
        .args(["record", "--force", "--interval", "1", "-o", "walks.mprof", "--"])
        .arg(&python)
        .arg(&script)
        .output()
        .expect("memprof runs");
    assert_ok(&out, 0);
    assert_eq!(text(&out.stdout), "20000\n", "{label}: {}", text(&out.stderr));
    let err = text(&out.stderr);
    let line = err.lines().find(|l| l.contains("unwind check:")).unwrap_or_else(|| {
        panic!("{label}: no unwind check said: {err}");
    });
    // "memprof: unwind check: N walks, 0 differed ..."
    let walks: u64 = line
        .split("unwind check: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(walks > 50_000, "{label}: {line}");
    let prof = read(&dir.join("walks.mprof"));
    // The exact mode reads no Python frames unless asked: the interpreter's own sites, the
    // round trip's strings among them.
    let named = prof
        .allocated
        .keys()
        .any(|&(stack, _)| prof.site(stack).is_some_and(|s| s.name == "PyUnicode_New"));
    assert!(named, "{label}: no allocation at PyUnicode_New");
}
