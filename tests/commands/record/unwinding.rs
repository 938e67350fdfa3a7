//! The unwinders against libgcc's, and where every entry point's stack starts.

use super::*;

/// Each sample's stack (one entry per sample) as (module path, offset in the module) pairs:
/// comparable between runs that load the objects at different addresses. Sorted, so thread
/// order does not matter.
fn relative_stacks(p: &Profile) -> Vec<(Vec<(String, u64)>, bool)> {
    let mut v: Vec<_> = p
        .allocated
        .iter()
        .flat_map(|(&(stack, _), t)| {
            let stack = &p.stacks[stack as usize];
            let frames: Vec<(String, u64)> = stack
                .frames
                .iter()
                .map(|&a| match p.modules.iter().find(|m| m.start <= a && a < m.end) {
                    Some(m) => (m.path.clone(), a - m.base),
                    None => (String::from("?"), a),
                })
                .collect();
            std::iter::repeat_n((frames, stack.truncated), t.samples as usize)
        })
        .collect();
    v.sort();
    v
}

/// The cached DWARF unwinder (the default) records exactly the frames libgcc's unwinder
/// records, on programs built without frame pointers: a deep recursion (whole stacks, and
/// stacks cut at a depth), threads, and a library that is dlopened, allocates and is
/// dlclosed (its frames are not in the unwinder's tables until they are refreshed).
#[test]
fn dwarf_unwinder_agrees_with_libgcc() {
    let dir = scratch("unwinders");
    let worst = build_dir().join("worst_case_nofp");
    cc("worst_case.c", &worst, &["-O2", "-g", "-fomit-frame-pointer"]);
    let lib = fixture("libdlfix");
    let cases: [(&str, PathBuf, Vec<&str>, &[&str]); 5] = [
        ("worst_case", worst.clone(), vec!["300"], &["--interval", "1"]),
        ("worst_case_depth", worst, vec!["300"], &["--interval", "1", "--depth", "10"]),
        ("threads", fixture("threads"), vec![], &["--interval", "64K", "--seed", "1"]),
        ("dl", fixture("dl"), vec![lib.to_str().unwrap()], &["--interval", "1"]),
        ("sites", fixture("sites"), vec![], &["--interval", "1"]),
    ];
    for (name, prog, args, opts) in cases {
        let mut stacks = vec![];
        for unwinder in ["dwarf", "libgcc"] {
            let file = format!("{name}-{unwinder}.mprof");
            let mut all: Vec<&str> = opts.to_vec();
            all.extend(["--unwinder", unwinder, "-o", &file]);
            let out = record(&dir, &all, &prog, &args);
            assert_ok(&out, 0);
            let p = read(&dir.join(&file));
            assert!(p.complete && p.counts.samples > 0, "{name} {unwinder}");
            stacks.push(relative_stacks(&p));
        }
        if name == "threads" {
            // Sampling is random per thread: compare the distinct stacks.
            for s in &mut stacks {
                s.dedup();
            }
        }
        assert_eq!(stacks[0].len(), stacks[1].len(), "{name}: sample counts");
        for (a, b) in stacks[0].iter().zip(&stacks[1]) {
            assert_eq!(a, b, "{name}: dwarf vs libgcc");
        }
        assert!(stacks[0].iter().all(|(f, _)| f.len() >= 3), "{name}: stacks too short");
    }
}

/// The frame-pointer unwinder (with its remembered walks: the same two stacks over and
/// over) records what libgcc records, on a program built with frame pointers: the same
/// frames at depth 10, and at full depth a prefix of libgcc's stack (the walk ends where
/// glibc's start-up code keeps no frame pointer). Only the program's allocations count:
/// glibc's own (stdio's buffer) start in code without frame pointers.
#[test]
fn frame_pointer_unwinder_agrees_with_libgcc() {
    let dir = scratch("fp-unwinder");
    let prog = build_dir().join("worst_case_fp");
    cc("worst_case.c", &prog, &["-O2", "-g", "-fno-omit-frame-pointer"]);
    for depth in ["10", "64"] {
        let mut stacks = vec![];
        for unwinder in ["fp", "libgcc"] {
            let file = format!("fp-{depth}-{unwinder}.mprof");
            let opts = ["--interval", "1", "--depth", depth, "--unwinder", unwinder, "-o", &file];
            let out = record(&dir, &opts, &prog, &["300"]);
            assert_ok(&out, 0);
            let p = read(&dir.join(&file));
            assert!(p.complete && p.counts.samples >= 600, "{depth} {unwinder}");
            let mut own = relative_stacks(&p);
            own.retain(|(frames, _)| {
                frames.first().is_some_and(|f| f.0.ends_with("worst_case_fp"))
            });
            assert_eq!(own.len(), 600, "{depth} {unwinder}: the program's 600 allocations");
            stacks.push(own);
        }
        assert_eq!(stacks[0].len(), stacks[1].len(), "depth {depth}: sample counts");
        for ((fp, fp_cut), (gcc, gcc_cut)) in stacks[0].iter().zip(&stacks[1]) {
            if depth == "10" {
                assert_eq!((fp, fp_cut), (gcc, gcc_cut), "depth 10: fp vs libgcc");
            } else {
                // leaf, 21 recursion frames, main.
                assert!(fp.len() >= 23 && gcc.starts_with(fp), "fp {fp:x?}\nlibgcc {gcc:x?}");
            }
        }
    }
}

/// calloc, realloc, reallocarray, memalign, posix_memalign, aligned_alloc, valloc and
/// pvalloc hand the program's registers on as malloc does: each sample's stack starts at
/// the function that called them (its first frame is in the program, not in the preload
/// library), and `--depth 1` keeps exactly that frame.
#[test]
fn every_entry_point_starts_the_stack_at_the_program() {
    let dir = scratch("entries");
    let cases = [
        (100, "use_calloc"),
        (200, "use_realloc_null"),
        (300, "use_realloc_grow"),
        (400, "use_memalign"),
        (500, "use_posix_memalign"),
        (600, "use_aligned_alloc"),
        (700, "use_valloc"),
        (800, "use_pvalloc"),
        (900, "use_reallocarray"),
    ];
    for depth in ["1", "16"] {
        let file = format!("e{depth}.mprof");
        let out = record(
            &dir,
            &["--interval", "1", "--depth", depth, "-o", &file],
            &fixture("entries"),
            &[],
        );
        assert_ok(&out, 0);
        let p = read(&dir.join(&file));
        assert!(p.complete, "{:?}", p.warnings);
        for (size, function) in cases {
            let stacks: Vec<(u32, u64)> = p
                .allocated
                .iter()
                .filter(|((_, s), _)| *s == size)
                .map(|(&(stack, _), t)| (stack, t.samples))
                .collect();
            let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
            assert_eq!(samples, 50, "{function}: one sample per call");
            for (id, _) in stacks {
                let stack = &p.stacks[id as usize];
                let first = stack.frames[0];
                let module = p.modules.iter().find(|m| m.start <= first && first < m.end);
                assert!(
                    module.is_some_and(|m| m.path.ends_with("/entries")),
                    "{function}: the first frame is in {:?}",
                    module.map(|m| &m.path)
                );
                assert_eq!(p.site_name(id), function);
                if depth == "1" {
                    assert!(stack.frames.len() == 1 && stack.truncated, "{function}");
                }
            }
        }
    }
}
