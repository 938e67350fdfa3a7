//! Every file memprof opens or writes follows `memprof::files`' one policy: a preload
//! library others could change is refused, record's companions are never written through
//! a symlink or into a FIFO, a report never replaces its input, a hand-set preload never
//! blocks on or writes into a file not its own, and a module path that became a FIFO does
//! not hang a report.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{assert_one_line_error, skipped, text, MEMPROF};
use crate::programs::{fixture, scratch, strip_symbols};

fn lib() -> PathBuf {
    Path::new(MEMPROF).parent().unwrap().join("libmemprof_preload.so")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", p.display());
}

fn chown_nobody(p: &Path) {
    let o = Command::new("chown").arg("nobody").arg(p).output().unwrap();
    assert!(o.status.success(), "chown: {}", text(&o.stderr));
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `cmd` with a deadline: a command that hangs fails the test instead of hanging it.
fn within(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // A program just copied may still be open for writing in a child another test forked
    // before its `exec` closed the copy's descriptor: `exec` then fails with ETXTBSY
    // until that child has run on. Tried again for a while.
    let mut tries = 0;
    let mut child = loop {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            spawned => break spawned.expect("the command runs"),
        }
    };
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after 60 s (hung?); stderr: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn memprof_in(dir: &Path, exe: &Path) -> Command {
    let mut c = Command::new(exe);
    c.current_dir(dir);
    c
}

/// A `libmemprof_preload.so` beside a copy of `memprof`, or named by `MEMPROF_PRELOAD`, that
/// another user owns, that others can write, or whose directory others can write, is
/// refused before the program runs; a private copy works.
#[test]
fn a_preload_library_others_could_change_is_refused() {
    if !is_root() {
        skipped("preload ownership checks", "they chown files to nobody: run as root");
        return;
    }
    let dir = scratch("files-preload");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    chmod(&bin, 0o755);
    let exe = bin.join("memprof");
    let so = bin.join("libmemprof_preload.so");
    std::fs::copy(MEMPROF, &exe).unwrap();
    std::fs::copy(lib(), &so).unwrap();
    chmod(&so, 0o755);
    let marker = dir.join("ran");
    let run = |exe: &Path, out: &str, env: Option<&Path>| {
        let mut c = memprof_in(&dir, exe);
        c.args(["record", "-o", out, "--", "/bin/touch"]).arg(&marker);
        if let Some(p) = env {
            c.env("MEMPROF_PRELOAD", p);
        } else {
            c.env_remove("MEMPROF_PRELOAD");
        }
        within(&mut c)
    };
    let out = run(&exe, "ok.mprof", None);
    assert_eq!(out.status.code(), Some(0), "a private copy works: {}", text(&out.stderr));
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();

    let refused = |out: &Output, why: &str| {
        assert_one_line_error(out, None, "libmemprof_preload.so");
        assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
        assert!(!marker.exists(), "the program must not run");
    };
    chmod(&so, 0o666);
    refused(&run(&exe, "w.mprof", None), "writable by group or others");
    chmod(&so, 0o755);
    chown_nobody(&so);
    refused(&run(&exe, "u.mprof", None), "belongs to uid");
    std::os::unix::fs::chown(&so, Some(0), None).unwrap();
    // Group-writable counts (issue 44): a member of the group could swap the library.
    chmod(&bin, 0o775);
    refused(&run(&exe, "d.mprof", None), "writable by group");
    // Sticky: nobody but root can rename root's library out of it.
    chmod(&bin, 0o1777);
    let out = run(&exe, "s.mprof", None);
    assert_eq!(out.status.code(), Some(0), "sticky, root's file: {}", text(&out.stderr));
    std::fs::remove_file(&marker).unwrap();
    chmod(&bin, 0o755);

    // The same rule for MEMPROF_PRELOAD, from the tested executable.
    let named = dir.join("named");
    std::fs::create_dir_all(&named).unwrap();
    chmod(&named, 0o755);
    let other = named.join("libmemprof_preload.so");
    std::fs::copy(lib(), &other).unwrap();
    chmod(&other, 0o666);
    refused(&run(Path::new(MEMPROF), "e.mprof", Some(&other)), "writable by group or others");
    chmod(&other, 0o755);
    chown_nobody(&other);
    refused(&run(Path::new(MEMPROF), "f.mprof", Some(&other)), "belongs to uid");
}

/// `record -o out.mprof` leaves `out.mprof.svg` and `out.mprof.html` alone when they are
/// symlinks or FIFOs, with or without `--force`; `--force` replaces a regular file of ours.
#[test]
fn record_companions_are_never_written_through_a_symlink() {
    let dir = scratch("files-companions");
    let prog = fixture("sites");
    for force in [false, true] {
        let stem = if force { "f" } else { "n" };
        let (svg, html) =
            (dir.join(format!("{stem}.mprof.svg")), dir.join(format!("{stem}.mprof.html")));
        let victim = dir.join(format!("{stem}-victim"));
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, &svg).unwrap();
        mkfifo(&html);
        let mut opts = vec!["--interval", "1", "-o"];
        let out_name = format!("{stem}.mprof");
        opts.push(&out_name);
        if force {
            opts.push("--force");
        }
        let out = within(
            memprof_in(&dir, Path::new(MEMPROF)).arg("record").args(&opts).arg("--").arg(&prog),
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "force {force}: {err}");
        assert!(std::fs::symlink_metadata(&svg).unwrap().file_type().is_symlink());
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&html).unwrap().file_type().is_fifo());
        assert!(
            err.contains(&format!("{stem}.mprof.svg")) && err.contains("symbolic link"),
            "{err}"
        );
        assert!(err.contains(&format!("{stem}.mprof.html")) && err.contains("FIFO"), "{err}");
    }
    // --force: this user's regular files are replaced (new files, the old names).
    let (svg, html) = (dir.join("r.mprof.svg"), dir.join("r.mprof.html"));
    std::fs::write(&svg, b"old").unwrap();
    std::fs::write(&html, b"old").unwrap();
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .args(["record", "--force", "--interval", "1", "-o", "r.mprof", "--"])
            .arg(&prog),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    assert!(std::fs::read_to_string(&html).unwrap().contains("<html"));
    // Without --force, an existing companion is left alone with an error naming it.
    std::fs::remove_file(dir.join("r.mprof")).unwrap();
    std::fs::write(&svg, b"old").unwrap();
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .args(["record", "--interval", "1", "-o", "r.mprof", "--"])
            .arg(&prog),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&svg).unwrap(), b"old");
    assert!(text(&out.stderr).contains("r.mprof.svg"), "{}", text(&out.stderr));
    // `-o` itself: --force replaces only a regular file of ours, never a FIFO.
    mkfifo(&dir.join("p.mprof"));
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .args(["record", "--force", "-o", "p.mprof", "--"])
            .arg(&prog),
    );
    assert_one_line_error(&out, None, "left alone");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(dir.join("p.mprof")).unwrap().file_type().is_fifo());
}

/// `report x.mprof --html x.mprof` (and each export, and through a symlink, a hard link or
/// onto another input) is refused with the recording untouched.
#[test]
fn a_report_never_writes_over_its_input() {
    let dir = scratch("files-inputs");
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .args(["record", "--interval", "1", "-o", "x.mprof", "--"])
            .arg(fixture("sites")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let x = dir.join("x.mprof");
    let y = dir.join("y.mprof");
    std::fs::copy(&x, &y).unwrap();
    std::os::unix::fs::symlink(&x, dir.join("sym")).unwrap();
    std::fs::hard_link(&x, dir.join("hard")).unwrap();
    let (xb, yb) = (std::fs::read(&x).unwrap(), std::fs::read(&y).unwrap());
    for flag in ["--html", "--pprof", "--collapsed", "--flamegraph"] {
        for target in ["x.mprof", "sym", "hard", "y.mprof"] {
            let out = within(
                memprof_in(&dir, Path::new(MEMPROF))
                    .args(["report", "x.mprof", "y.mprof", flag, target]),
            );
            assert_one_line_error(&out, None, "refusing to write");
            assert!(std::fs::read(&x).unwrap() == xb, "{flag} {target}");
            assert!(std::fs::read(&y).unwrap() == yb, "{flag} {target}");
        }
    }
    assert!(std::fs::symlink_metadata(dir.join("sym")).unwrap().file_type().is_symlink());
}

/// A hand-set preload (`LD_PRELOAD`, `MEMPROF_OUTPUT`, no `record`) whose output is a FIFO
/// or another user's empty file: the program runs as it does plain, one line says the
/// profile was refused, and the other user's file receives nothing.
#[test]
fn a_hand_set_preload_never_blocks_or_writes_into_others_files() {
    let dir = scratch("files-hand");
    let prog = fixture("sites");
    let fifo = dir.join("out.fifo");
    mkfifo(&fifo);
    let run = |output: &Path| {
        within(
            Command::new(&prog)
                .current_dir(&dir)
                .env("LD_PRELOAD", lib())
                .env("MEMPROF_INTERVAL", "1")
                .env("MEMPROF_OUTPUT", output),
        )
    };
    let refused = |out: &Output, why: &str| {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("memprof:")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(why), "{err}");
    };
    refused(&run(&fifo), "FIFO");
    if !is_root() {
        skipped("another user's profile file", "it is chowned to nobody: run as root");
        return;
    }
    let theirs = dir.join("theirs.mprof");
    std::fs::write(&theirs, b"").unwrap();
    chown_nobody(&theirs);
    refused(&run(&theirs), "belongs to uid");
    assert_eq!(std::fs::metadata(&theirs).unwrap().len(), 0, "nothing written into theirs");
    assert_ne!(std::fs::metadata(&theirs).unwrap().uid(), 0);
}

/// A profile whose program's path is now a FIFO is reported (its symbols read from nothing,
/// with no hang), and `report FIFO` is a one-line error.
#[test]
fn a_report_never_blocks_on_a_fifo() {
    let dir = scratch("files-fifo");
    let prog = dir.join("prog");
    std::fs::copy(fixture("sites"), &prog).unwrap();
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .args(["record", "--interval", "1", "-o", "r.mprof", "--"])
            .arg(&prog),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    strip_symbols(&dir.join("r.mprof"));
    std::fs::remove_file(&prog).unwrap();
    mkfifo(&prog);
    let out = within(memprof_in(&dir, Path::new(MEMPROF)).args(["report", "r.mprof"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    mkfifo(&dir.join("f.mprof"));
    let out = within(memprof_in(&dir, Path::new(MEMPROF)).args(["report", "f.mprof"]));
    assert_one_line_error(&out, None, "FIFO");
}

/// `-` and `/dev/stdout` write an output to the standard output, which then carries it
/// alone (the tables go to the standard error): `report FILE --collapsed - | flamegraph.pl`.
#[test]
fn an_output_to_the_standard_output_has_it_alone() {
    let dir = scratch("files-stdout");
    let prog = fixture("sites");
    let out = crate::programs::record(&dir, &["--interval", "1", "-o", "s.mprof"], &prog, &[]);
    crate::programs::assert_ok(&out, 0);
    for name in ["-", "/dev/stdout"] {
        let o = Command::new(MEMPROF)
            .current_dir(&dir)
            .args(["report", "s.mprof", "--collapsed", name])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let folded = text(&o.stdout);
        assert!(!folded.is_empty(), "{name}");
        for line in folded.lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{name}: {line:?}"));
            assert!(stack.contains(';') && n.parse::<u64>().is_ok(), "{name}: {line:?}");
        }
        assert!(text(&o.stderr).contains("leak_site"), "the table on stderr: {name}");
    }
}

/// The split DWARF of a program (`-gsplit-dwarf`: its `.dwo` files, and a `prog.dwp`
/// beside it) is read, and only from regular files: the `.dwo` gives the frames their
/// lines; a `.dwp` and a `.dwo` that are FIFOs do not hang `report`, whose frames are
/// still named from the symbol table.
#[test]
fn split_dwarf_that_is_a_fifo_does_not_hang_a_report() {
    let dir = scratch("files-dwp");
    let prog = dir.join("prog");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/c/sites.c");
    let mut args: Vec<std::ffi::OsString> =
        ["-O2", "-g", "-gsplit-dwarf", "-fno-optimize-sibling-calls", "-o"]
            .map(Into::into)
            .to_vec();
    args.extend([prog.clone().into(), src.into()]);
    crate::programs::must_compile("cc", &args, Some(&dir));
    let dwos: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "dwo"))
        .collect();
    assert!(!dwos.is_empty(), "cc -gsplit-dwarf wrote no .dwo in {}", dir.display());
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .args(["record", "--interval", "1", "-o", "r.mprof", "--"])
            .arg(&prog),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    strip_symbols(&dir.join("r.mprof"));
    // Read from the .dwo files, the frames have their source lines.
    let out = within(memprof_in(&dir, Path::new(MEMPROF)).args(["report", "r.mprof"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        all.lines().any(|l| l.contains("leak_site") && l.contains("sites.c:")),
        "the .dwo's lines: {all}"
    );
    for dwo in &dwos {
        std::fs::remove_file(dwo).unwrap();
        mkfifo(dwo);
    }
    mkfifo(&dir.join("prog.dwp"));
    let out = within(memprof_in(&dir, Path::new(MEMPROF)).args(["report", "r.mprof"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(all.contains("leak_site"), "frames named from the symbol table: {all}");
}

/// A preload library is checked in every directory up to `/`: one whose parent others can
/// write (not sticky) is refused before the program runs, since the parent's writers could
/// rename its directory away and put another library at the same path.
#[test]
fn a_preload_library_under_a_directory_others_can_write_is_refused() {
    let dir = scratch("files-preload-parent");
    let open = dir.join("open");
    let inner = open.join("lib");
    std::fs::create_dir_all(&inner).unwrap();
    chmod(&open, 0o777);
    chmod(&inner, 0o755);
    let so = inner.join("libmemprof_preload.so");
    std::fs::copy(lib(), &so).unwrap();
    chmod(&so, 0o755);
    let marker = dir.join("ran");
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .env("MEMPROF_PRELOAD", &so)
            .args(["record", "-o", "p.mprof", "--", "/bin/touch"])
            .arg(&marker),
    );
    assert_one_line_error(&out, None, "libmemprof_preload.so");
    let err = text(&out.stderr);
    assert!(err.contains("writable by others") && err.contains("not sticky"), "{err}");
    assert!(err.contains(&format!("{} is writable", open.display())), "names it: {err}");
    assert!(!marker.exists(), "the program must not run");
    // The same tree with the parent closed (or sticky) is accepted.
    for mode in [0o755, 0o1777] {
        chmod(&open, mode);
        let out = within(
            memprof_in(&dir, Path::new(MEMPROF))
                .env("MEMPROF_PRELOAD", &so)
                .args(["record", "-o", &format!("{mode:o}.mprof"), "--", "/bin/touch"])
                .arg(&marker),
        );
        assert_eq!(out.status.code(), Some(0), "mode {mode:o}: {}", text(&out.stderr));
        assert!(marker.exists());
        std::fs::remove_file(&marker).unwrap();
    }
}

/// `record --force -o out` replaces `out` atomically (a new file renamed over it): the name
/// never stops naming a file, so someone racing to put a symlink there (here a thread
/// trying without pause while `record` runs again and again) never gets one in. An unlink
/// then a create left that moment open; each run here then failed or wrote elsewhere.
#[test]
fn record_force_replaces_the_output_atomically() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = scratch("files-force-race");
    let out = dir.join("o.mprof");
    std::fs::write(&out, b"old").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let planted = Arc::new(AtomicUsize::new(0));
    let racer = {
        let (stop, planted, out) = (stop.clone(), planted.clone(), out.clone());
        let victim = dir.join("victim");
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if std::os::unix::fs::symlink(&victim, &out).is_ok() {
                    planted.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let mut failures = Vec::new();
    for i in 0..40 {
        let o = within(memprof_in(&dir, Path::new(MEMPROF)).args([
            "record",
            "--force",
            "-o",
            "o.mprof",
            "--",
            "/bin/true",
        ]));
        let meta = std::fs::symlink_metadata(&out);
        if o.status.code() != Some(0) || !meta.as_ref().is_ok_and(|m| m.file_type().is_file()) {
            failures.push(format!("run {i}: {:?} {}", o.status.code(), text(&o.stderr)));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(planted.load(Ordering::Relaxed), 0, "a symlink got in");
    assert!(!dir.join("victim").exists(), "nothing written through a symlink");
    // The file is a fresh profile of ours, and no temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["o.mprof"], "{names:?}");
    assert_ne!(std::fs::read(&out).unwrap(), b"old");
}

/// `record` onto a full file system (a 64 KiB tmpfs, 48 KiB of it taken): the error names
/// the file and what it keeps, the last line calls the profile INCOMPLETE rather than
/// counting samples it does not hold, no empty companion is left behind, and `report`
/// reads what was kept as a cut profile whose sampling line says so.
#[test]
fn a_full_disk_is_said_and_what_was_written_kept() {
    if !is_root() {
        skipped("full disk", "mounting a tmpfs needs root");
        return;
    }
    let dir = scratch("full-disk");
    let full = dir.join("full");
    std::fs::create_dir_all(&full).unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&full)
        .output()
        .unwrap();
    if !mount.status.success() {
        skipped("full disk", &format!("mount: {}", text(&mount.stderr).trim()));
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(full.clone());
    std::fs::write(full.join("fill"), vec![0u8; 48 * 1024]).unwrap();
    let out = Command::new(MEMPROF)
        .current_dir(&dir)
        .args(["record", "--interval", "1", "-o", "full/b.mprof", "--"])
        .arg(fixture("calibrate"))
        .arg("tiny")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the program's status: {err}");
    assert!(err.contains("could not be written whole") && err.contains("No space left"), "{err}");
    assert!(
        err.contains("full/b.mprof keeps the ") && err.contains(" bytes written before"),
        "{err}"
    );
    let last = err.lines().last().unwrap();
    assert!(last.contains("INCOMPLETE") && !last.contains("samples"), "{err}");
    assert!(err.contains("samples: 2000001 ("), "the table of all that was seen: {err}");
    for companion in ["b.mprof.svg", "b.mprof.html"] {
        assert!(!full.join(companion).exists(), "{companion} left behind: {err}");
        assert!(err.contains(&format!("cannot write full/{companion}")), "{err}");
    }
    let kept = std::fs::metadata(full.join("b.mprof")).unwrap().len();
    assert!(kept > 0, "what was written before the disk filled stays");
    let rep = Command::new(MEMPROF).arg("report").arg(full.join("b.mprof")).output().unwrap();
    let (report, rerr) = (text(&rep.stdout), text(&rep.stderr));
    assert_eq!(rep.status.code(), Some(0), "{rerr}");
    assert!(rerr.contains(&format!("cut at byte {kept}")), "{rerr}");
    assert!(rerr.contains("disk filled up"), "{rerr}");
    let sampling = report.lines().find(|l| l.starts_with("sampling: ")).unwrap();
    assert!(sampling.contains("the recording was cut at"), "{report}");
}

/// Issue 44: the library beside a copy of `memprof` is exchanged with a foreign one
/// (`renameat2(RENAME_EXCHANGE)`, in a loop on another thread) while `record` runs a
/// program again and again. The foreign one is refused whenever the check sees it
/// (writable by others; another user's too when run as root), and the check sees the file
/// the loader gets: its bytes are copied from the checked descriptor, so a swap after the
/// check changes nothing. The foreign constructor, which leaves a marker file, never runs.
/// (When the loader was handed the checked path, a swap after the check loaded it.)
#[test]
fn a_library_swapped_after_its_check_is_never_loaded() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = scratch("files-loader-race");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    chmod(&bin, 0o755);
    let exe = bin.join("memprof");
    std::fs::copy(MEMPROF, &exe).unwrap();
    let so = bin.join("libmemprof_preload.so");
    std::fs::copy(lib(), &so).unwrap();
    chmod(&so, 0o755);
    let foreign = bin.join("foreign.so");
    std::fs::copy(fixture("libforeign_ctor"), &foreign).unwrap();
    chmod(&foreign, 0o666);
    if is_root() {
        chown_nobody(&foreign);
    }
    let marker = dir.join("foreign-ran");
    let cache = dir.join("cache");
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let racer = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let a = CString::new(so.as_os_str().as_bytes()).unwrap();
        let b = CString::new(foreign.as_os_str().as_bytes()).unwrap();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: both paths are NUL-terminated; RENAME_EXCHANGE swaps the two
                // entries atomically.
                let r = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(r, 0, "renameat2: {}", std::io::Error::last_os_error());
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut ran, mut refused) = (0, 0);
    for i in 0..30 {
        let out = within(
            memprof_in(&dir, &exe)
                .env("FOREIGN_MARKER", &marker)
                .env("XDG_CACHE_HOME", &cache)
                .env_remove("MEMPROF_PRELOAD")
                .args(["record", "-o", &format!("r{i}.mprof"), "--", "/bin/true"]),
        );
        if out.status.code() == Some(0) {
            ran += 1;
        } else {
            assert_one_line_error(&out, None, "libmemprof_preload.so");
            let err = text(&out.stderr);
            assert!(
                err.contains("writable by group or others") || err.contains("belongs to uid"),
                "{err}"
            );
            refused += 1;
        }
        assert!(!marker.exists(), "run {i}: the foreign library's constructor ran");
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    eprintln!("{ran} runs recorded, {refused} refused, {} swaps", swaps.load(Ordering::Relaxed));
    assert!(ran > 0, "no run got the real library in 30");
    assert!(swaps.load(Ordering::Relaxed) > 30, "the racer hardly ran");
}

/// `preload-path` refuses a cache under a directory others can write (`XDG_CACHE_HOME` in
/// a world-writable, non-sticky directory; another user's `HOME` kept by `sudo -E` is the
/// same case) and says why, naming the directory.
#[test]
fn preload_path_says_why_it_refuses_a_cache_others_could_swap() {
    let dir = scratch("files-preload-path-open");
    let open = dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    chmod(&open, 0o777);
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .env("XDG_CACHE_HOME", open.join("cache"))
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("MEMPROF_PRELOAD")
            .arg("preload-path"),
    );
    assert_one_line_error(&out, None, "no cache directory could take");
    let err = text(&out.stderr);
    assert!(err.contains(&format!("{} is writable by others", open.display())), "{err}");
    assert!(err.contains("not sticky"), "{err}");
    assert!(!open.join("cache/memprof").read_dir().is_ok_and(|mut d| d.next().is_some()));
    chmod(&open, 0o755);
    let out = within(
        memprof_in(&dir, Path::new(MEMPROF))
            .env("XDG_CACHE_HOME", open.join("cache"))
            .env_remove("MEMPROF_PRELOAD")
            .arg("preload-path"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with(&open.join("cache/memprof").display().to_string()));
}
