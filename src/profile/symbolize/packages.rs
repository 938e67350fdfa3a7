//! The Debian package that installed each stripped object, found in dpkg's lists of the
//! files each package installed, and kept beside the symbol cache (`cache.rs`).
//!
//! # 1. Why read the lists, and why keep the answers
//! `dpkg-query -S` answers the question, but reads dpkg's whole database to do it,
//! however few paths it is asked about: the status file parsed and every package's list
//! of files read, 40 to 80 ms of CPU, more than a short program's whole run, at every
//! `record` or `report` that meets a stripped object (most programs and libraries a
//! Debian system installs are). The lists alone answer it: `info/<package>.list` (or
//! `<package>:<arch>.list`) under dpkg's directory holds one path a line, every file the
//! package installed, which is what `dpkg-query -S` searches. They are searched here for
//! the paths asked (a few milliseconds), each list read once through one buffer, and only
//! until every file asked about is found under one of its names ([`lists`]).
//! A path a diversion moved is named as `dpkg-query` names it besides its `diversion`
//! lines: by the package whose list holds it.
//!
//! The answer changes only when a package is installed or removed, which rewrites
//! `/var/lib/dpkg/status`; reading the lists is still hundreds of files, each a wait for
//! the disk when the page cache is cold. So the answers are kept (§2) and only paths not
//! asked before are searched for.
//!
//! # 2. The file
//! `packages.v1` in the symbol cache's directory. Its first line names the database the
//! answers were given under: `dpkg <size> <modification time in ns> <inode>` of
//! `/var/lib/dpkg/status`; a database with another identity makes the whole file a miss.
//! Then one line per path asked: the path, a tab, the package (nothing when dpkg knows
//! none under any of the file's names asked). A path holding a tab or a newline is asked
//! every time, never kept. Written under a temporary name and renamed into place; read as
//! the symbol cache's files are (a regular file of this user's that nobody else can write,
//! at most [`MOST`] bytes), and every
//! package name in it checked as the lists' names are. A file past [`MOST`] starts over
//! with the new answers.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::cache::{read_ours, write_file};

/// The file's name in the symbol cache's directory.
const FILE: &str = "packages.v1";
/// The largest file read or written.
const MOST: usize = 1 << 20;
/// dpkg's database, whose identity the answers hold under.
const STATUS: &str = "/var/lib/dpkg/status";
/// dpkg's directory of each installed package's list of files (§1).
const INFO: &str = "/var/lib/dpkg/info";
/// The most read of one list: the largest packages' lists (a kernel's modules) are a few
/// mebibytes; a list past this is searched in its first part only.
const LIST_MOST: u64 = 64 << 20;

/// The Debian packages that installed `paths`, by the path asked; paths no package owns
/// are left out. Answers come from the file in `dir` (§2) when it holds them under the
/// present database, from dpkg's lists of files for the others (§1), which are then kept
/// there.
pub(super) fn debian_packages(paths: &[PathBuf], dir: Option<&Path>) -> HashMap<PathBuf, String> {
    answers(paths, dir, database(), |asked| lists(Path::new(INFO), asked))
}

/// [`debian_packages`] under the database `status` (`None`: no dpkg, nothing kept), asking
/// `ask` what the file does not answer.
fn answers(
    paths: &[PathBuf],
    dir: Option<&Path>,
    status: Option<String>,
    ask: impl FnOnce(&[PathBuf]) -> Option<HashMap<PathBuf, String>>,
) -> HashMap<PathBuf, String> {
    let file = dir.map(|d| d.join(FILE));
    let mut kept = match (&file, &status) {
        (Some(f), Some(s)) => read_ours(f, MOST as u64).map(|b| decode(&b, s)).unwrap_or_default(),
        _ => HashMap::new(),
    };
    let missing: Vec<PathBuf> = paths.iter().filter(|p| !kept.contains_key(*p)).cloned().collect();
    if missing.is_empty() {
        return known(&kept, paths);
    }
    // No dpkg here, or it failed: nothing learnt, nothing kept.
    if let Some(answered) = ask(&missing) {
        let new: HashMap<PathBuf, String> = missing
            .into_iter()
            .map(|p| {
                let package = answered.get(&p).cloned().unwrap_or_default();
                (p, package)
            })
            .collect();
        if let (Some(d), Some(f), Some(s)) = (dir, &file, &status) {
            let mut bytes = encode(kept.iter().chain(&new), s);
            if bytes.len() > MOST {
                bytes = encode(new.iter(), s);
            }
            if bytes.len() <= MOST {
                // Best effort: an answer not kept is asked again next time.
                let _ = write_file(d, f, &bytes);
            }
        }
        kept.extend(new);
    }
    known(&kept, paths)
}

/// The answers for `paths` that name a package.
fn known(kept: &HashMap<PathBuf, String>, paths: &[PathBuf]) -> HashMap<PathBuf, String> {
    paths
        .iter()
        .filter_map(|p| kept.get(p).filter(|k| !k.is_empty()).map(|k| (p.clone(), k.clone())))
        .collect()
}

/// The identity of dpkg's database (§2), or `None` where there is none.
fn database() -> Option<String> {
    let m = std::fs::metadata(STATUS).ok()?;
    let ns = m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec());
    Some(format!("dpkg {} {ns} {}", m.size(), m.ino()))
}

/// True for a package name as dpkg gives one (letters, digits, `+-.`), not a list.
fn plain(package: &str) -> bool {
    !package.is_empty() && package.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
}

/// The answers a file holds under the database `status` (§2); empty for another database.
fn decode(bytes: &[u8], status: &str) -> HashMap<PathBuf, String> {
    let mut lines = bytes.split(|&b| b == b'\n');
    if lines.next() != Some(status.as_bytes()) {
        return HashMap::new();
    }
    let mut out = HashMap::new();
    for line in lines {
        let Some(tab) = line.iter().position(|&b| b == b'\t') else { continue };
        let (path, package) = (&line[..tab], &line[tab + 1..]);
        let Ok(package) = std::str::from_utf8(package) else { continue };
        if path.is_empty() || !(package.is_empty() || plain(package)) {
            continue;
        }
        out.insert(PathBuf::from(OsStr::from_bytes(path)), package.to_owned());
    }
    out
}

/// The file's bytes for `answers` under the database `status` (§2), paths in order; a
/// path holding a tab or a newline is left out.
fn encode<'a>(answers: impl Iterator<Item = (&'a PathBuf, &'a String)>, status: &str) -> Vec<u8> {
    let mut entries: Vec<(&[u8], &String)> = answers
        .map(|(p, k)| (p.as_os_str().as_bytes(), k))
        .filter(|(p, k)| {
            !p.is_empty()
                && !p.iter().any(|&b| b == b'\t' || b == b'\n')
                && (k.is_empty() || plain(k))
        })
        .collect();
    entries.sort();
    entries.dedup_by(|a, b| a.0 == b.0);
    let mut out = Vec::new();
    out.extend_from_slice(status.as_bytes());
    out.push(b'\n');
    for (path, package) in entries {
        out.extend_from_slice(path);
        out.push(b'\t');
        out.extend_from_slice(package.as_bytes());
        out.push(b'\n');
    }
    out
}

/// The package of each of `paths` that a list of files in `info` holds (§1); `None` when
/// there is no such directory (no dpkg). Lists are read in the order of their names, so
/// the answer for a path two lists hold does not change from run to run, and only until
/// every file asked about is found under one of its names, which all get its package. A
/// list that is not a regular file, or that cannot be read, is passed over.
fn lists(info: &Path, paths: &[PathBuf]) -> Option<HashMap<PathBuf, String>> {
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(info)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|n| n.as_bytes().ends_with(b".list"))
        .collect();
    names.sort();
    // Each path a line of its own: searched for with the newlines around it.
    let finders: Vec<(&PathBuf, memchr::memmem::Finder<'static>)> = paths
        .iter()
        .filter(|p| !p.as_os_str().as_bytes().contains(&b'\n'))
        .map(|p| {
            let mut line = vec![b'\n'];
            line.extend_from_slice(p.as_os_str().as_bytes());
            line.push(b'\n');
            (p, memchr::memmem::Finder::new(&line).into_owned())
        })
        .collect();
    // The file each path names: once a list holds one of a file's names (`/bin/sleep`), all
    // its names asked (`/usr/bin/sleep`) have that package, and are not searched for to the
    // end of the lists. A path that names no file is its own.
    let files: Vec<Option<(u64, u64)>> = finders
        .iter()
        .map(|(p, _)| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino())))
        .collect();
    let mut out = HashMap::new();
    let mut buf = Vec::new();
    for name in names {
        if out.len() == finders.len() {
            break;
        }
        // `libc6:amd64.list` → `libc6`; a name dpkg would not give is passed over.
        let stem = &name.as_bytes()[..name.len() - ".list".len()];
        let package = stem.split(|&b| b == b':').next().unwrap_or_default();
        let Some(package) = std::str::from_utf8(package).ok().filter(|p| plain(p)) else {
            continue;
        };
        let Ok(f) = crate::sys::files::open_input_regular(&info.join(&name)) else { continue };
        // A newline first: the list's first path is found as the others are.
        buf.clear();
        buf.push(b'\n');
        if std::io::Read::read_to_end(&mut std::io::Read::take(f, LIST_MOST), &mut buf).is_err() {
            continue;
        }
        if buf.last() != Some(&b'\n') {
            buf.push(b'\n');
        }
        for (i, (path, finder)) in finders.iter().enumerate() {
            if out.contains_key(*path) || finder.find(&buf).is_none() {
                continue;
            }
            out.insert((*path).clone(), package.to_owned());
            // The file's other names asked.
            let Some(file) = files[i] else { continue };
            for ((other, _), f) in finders.iter().zip(&files) {
                if *f == Some(file) && !out.contains_key(*other) {
                    out.insert((*other).clone(), package.to_owned());
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::os::unix::fs::PermissionsExt as _;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    /// dpkg as a table: counts its calls, and answers for the paths it knows.
    fn dpkg<'a>(
        calls: &'a Cell<u32>,
        asked: &'a std::cell::RefCell<Vec<PathBuf>>,
    ) -> impl FnOnce(&[PathBuf]) -> Option<HashMap<PathBuf, String>> + 'a {
        move |ps: &[PathBuf]| {
            calls.set(calls.get() + 1);
            asked.borrow_mut().extend(ps.iter().cloned());
            let table = [("/usr/bin/a", "pkg-a"), ("/usr/lib/b.so", "libb1")];
            Some(
                table
                    .iter()
                    .filter(|(p, _)| ps.iter().any(|q| q == Path::new(p)))
                    .map(|(p, k)| (PathBuf::from(p), (*k).to_owned()))
                    .collect(),
            )
        }
    }

    /// The second question about the same paths is answered from the file, also that a
    /// path has no package; a new path alone is asked; another database asks again.
    #[test]
    fn answers_are_kept_until_the_database_changes() {
        let dir = crate::sys::test_dir("packages", "kept");
        let (calls, asked) = (Cell::new(0), std::cell::RefCell::new(Vec::new()));
        let status = || Some("dpkg 10 20 30".to_owned());
        let want: HashMap<PathBuf, String> =
            [(PathBuf::from("/usr/bin/a"), "pkg-a".to_owned())].into_iter().collect();
        let ps = paths(&["/usr/bin/a", "/opt/none"]);
        assert_eq!(answers(&ps, Some(&dir), status(), dpkg(&calls, &asked)), want);
        assert_eq!(answers(&ps, Some(&dir), status(), dpkg(&calls, &asked)), want);
        assert_eq!(calls.get(), 1, "the second time from the file");
        let more = paths(&["/usr/bin/a", "/opt/none", "/usr/lib/b.so"]);
        let got = answers(&more, Some(&dir), status(), dpkg(&calls, &asked));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(calls.get(), 2);
        assert_eq!(asked.borrow().last(), Some(&PathBuf::from("/usr/lib/b.so")));
        assert_eq!(asked.borrow().len(), 3, "only the new path asked: {:?}", asked.borrow());
        let _ = answers(&ps, Some(&dir), Some("dpkg 11 20 30".to_owned()), dpkg(&calls, &asked));
        assert_eq!(calls.get(), 3, "another database");
        // No dpkg: asked, nothing kept, and the file stays.
        let before = std::fs::read(dir.join(FILE)).unwrap();
        let none = answers(&paths(&["/x"]), Some(&dir), status(), |_: &[PathBuf]| None);
        assert!(none.is_empty());
        assert_eq!(std::fs::read(dir.join(FILE)).unwrap(), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What the file says is checked: lines that are not `path\tpackage`, package names
    /// dpkg would not give, a file others can write, one past the bound: misses, never
    /// wrong names. A path holding a tab or a newline is never kept.
    #[test]
    fn a_hostile_file_gives_no_names() {
        let dir = crate::sys::test_dir("packages", "hostile");
        let file = dir.join(FILE);
        let status = "dpkg 1 2 3";
        let body = format!(
            "{status}\n/usr/bin/a\tpkg-a\n/x\tbad name\n/y\ta;rm -rf\nno tab\n\tempty\n/z\tpkg-z\n"
        );
        std::fs::write(&file, &body).unwrap();
        let got = decode(&std::fs::read(&file).unwrap(), status);
        let mut names: Vec<(&Path, &str)> =
            got.iter().map(|(p, k)| (p.as_path(), k.as_str())).collect();
        names.sort();
        assert_eq!(names, [(Path::new("/usr/bin/a"), "pkg-a"), (Path::new("/z"), "pkg-z")]);
        assert!(decode(body.as_bytes(), "dpkg 1 2 4").is_empty());
        let calls = Cell::new(0);
        let ask = |_: &[PathBuf]| {
            calls.set(calls.get() + 1);
            Some(HashMap::new())
        };
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let got = answers(&paths(&["/z"]), Some(&dir), Some(status.to_owned()), ask);
        assert!(got.is_empty() && calls.get() == 1, "a file others can write is not read");
        std::fs::remove_file(&file).unwrap();
        let big = format!("{status}\n/z\tpkg-z\n{}", "#".repeat(MOST));
        std::fs::write(&file, big).unwrap();
        assert_eq!(read_ours(&file, MOST as u64), None, "past the bound");
        let odd: HashMap<PathBuf, String> = [
            (PathBuf::from("/a\tb"), "p".to_owned()),
            (PathBuf::from("/a\nb"), "p".to_owned()),
            (PathBuf::from("/ok"), "p".to_owned()),
        ]
        .into_iter()
        .collect();
        assert_eq!(encode(odd.iter(), status), format!("{status}\n/ok\tp\n").into_bytes());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// dpkg's lists are searched as `dpkg-query -S` would: a path is found on any line of
    /// a list (the first and a last without its newline too), never as part of a longer
    /// path; the package is the list's name without its architecture; lists are taken in
    /// the order of their names; a name dpkg would not give, a list that is a FIFO (never
    /// waited on) or a directory, and a path holding a newline are passed over. No
    /// directory: no dpkg.
    #[test]
    fn the_lists_name_the_packages_of_paths() {
        let info = crate::sys::test_dir("packages", "lists");
        std::fs::write(info.join("libc6:amd64.list"), "/.\n/lib\n/lib/libc.so.6\n").unwrap();
        std::fs::write(info.join("coreutils.list"), "/bin\n/bin/sleep\n/usr/bin/sort").unwrap();
        std::fs::write(info.join("a-first.list"), "/.\n/usr/bin/sort\n").unwrap();
        std::fs::write(info.join("bad name.list"), "/opt/x\n").unwrap();
        std::fs::write(info.join("other.md5sums"), "/opt/y\n").unwrap();
        std::fs::create_dir(info.join("dir.list")).unwrap();
        let fifo = std::ffi::CString::new(info.join("fifo.list").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let asked =
            paths(&["/lib/libc.so.6", "/bin/sleep", "/usr/bin/sort", "/lib/libc.so", "/opt/x"]);
        let mut got: Vec<(PathBuf, String)> = lists(&info, &asked).unwrap().into_iter().collect();
        got.sort();
        let want = [
            ("/bin/sleep", "coreutils"),
            ("/lib/libc.so.6", "libc6"),
            ("/usr/bin/sort", "a-first"),
        ];
        let want: Vec<(PathBuf, String)> =
            want.iter().map(|(p, k)| (PathBuf::from(p), (*k).to_owned())).collect();
        assert_eq!(got, want);
        assert!(lists(&info, &paths(&["/bin\n/bin/sleep"])).unwrap().is_empty());
        assert_eq!(lists(&info.join("none"), &asked), None);
        std::fs::remove_dir_all(&info).unwrap();
    }

    /// Two names of one file (a merged `/usr`'s): once a list holds one, both have its
    /// package, which a later list holding the other (`b`) does not change; names of two
    /// files are each searched for.
    #[test]
    fn a_file_found_under_one_name_gives_all_its_names_the_package() {
        let dir = crate::sys::test_dir("packages", "names");
        let info = dir.join("info");
        std::fs::create_dir(&info).unwrap();
        let (file, link, other) = (dir.join("file"), dir.join("link"), dir.join("other"));
        std::fs::write(&file, "").unwrap();
        std::fs::write(&other, "").unwrap();
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let line = |p: &Path| format!("{}\n", p.display());
        std::fs::write(info.join("a.list"), line(&link)).unwrap();
        std::fs::write(info.join("b.list"), line(&file) + &line(&other)).unwrap();
        let asked = vec![file.clone(), link.clone(), other.clone()];
        let mut got: Vec<(PathBuf, String)> = lists(&info, &asked).unwrap().into_iter().collect();
        got.sort();
        let want = vec![(file, "a".to_owned()), (link, "a".to_owned()), (other, "b".to_owned())];
        assert_eq!(got, want, "the file's names by `a`, the first list holding one");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
