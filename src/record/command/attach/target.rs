//! What `memprof attach` learns of the process before and while it borrows it: whether it
//! can be attached at all (and why not, in words a user can act on), its mappings, and the
//! addresses of functions in the objects it maps.

use crate::error::Error;
use object::{Object, ObjectSegment, ObjectSymbol};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One line of `/proc/PID/maps` that names a file.
#[derive(Clone, Debug)]
pub(super) struct Mapping {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) exec: bool,
    pub(super) offset: u64,
    pub(super) inode: u64,
    pub(super) path: String,
}

/// The file-backed mappings of process `pid`.
pub(super) fn mappings(pid: u32) -> std::io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut f = line.splitn(6, ' ');
            let (range, perms, offset, _dev, inode) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let path = f.next()?.trim_start();
            if !path.starts_with('/') {
                return None;
            }
            let (lo, hi) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(lo, 16).ok()?,
                end: u64::from_str_radix(hi, 16).ok()?,
                exec: perms.as_bytes().get(2) == Some(&b'x'),
                offset: u64::from_str_radix(offset, 16).ok()?,
                inode: inode.parse().ok()?,
                path: path.to_owned(),
            })
        })
        .collect())
}

/// An object mapped in the process: its file, its bytes and its load bias.
pub(super) struct Loaded {
    pub(super) path: String,
    pub(super) bias: u64,
    data: Vec<u8>,
}

impl Loaded {
    /// The first object whose file name satisfies `is`, read once (through the file
    /// policy: a regular file, opened without blocking, the inode the process maps; a path
    /// the process replaced since is refused), with its bias (the start of its mapping at
    /// offset 0, less its first segment's page-aligned address).
    pub(super) fn find(maps: &[Mapping], is: impl Fn(&Mapping) -> bool) -> Option<Loaded> {
        use std::io::Read;
        let m = maps.iter().find(|m| m.offset == 0 && is(m))?;
        let mut f = crate::sys::files::open_input_regular(Path::new(&m.path)).ok()?;
        if f.metadata().ok()?.ino() != m.inode {
            return None;
        }
        let mut data = Vec::new();
        f.read_to_end(&mut data).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let first = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
        Some(Loaded { path: m.path.clone(), bias: m.start.wrapping_sub(first), data })
    }

    /// The address in the process of `bytes` in the object's executable code (the first
    /// place they occur).
    /// `maps`: the process's mappings, of which the address must be in an executable one.
    pub(super) fn find_code(&self, bytes: &[u8], maps: &[Mapping]) -> Option<u64> {
        let data = &self.data;
        let file = object::File::parse(&**data).ok()?;
        file.segments().find_map(|seg| {
            let (offset, size) = seg.file_range();
            let code = data.get(offset as usize..(offset + size) as usize)?;
            let at = code.windows(bytes.len()).position(|w| w == bytes)?;
            let addr = self.bias.wrapping_add(seg.address()).wrapping_add(at as u64);
            maps.iter().any(|m| m.exec && (m.start..m.end).contains(&addr)).then_some(addr)
        })
    }

    /// The address in the process of the first of `names` the object exports.
    pub(super) fn symbol(&self, names: &[&str]) -> Option<u64> {
        let file = object::File::parse(&*self.data).ok()?;
        for name in names {
            let found = file.dynamic_symbols().find(|s| {
                s.is_definition() && s.name().is_ok_and(|n| n == *name) && s.address() != 0
            });
            if let Some(s) = found {
                return Some(self.bias.wrapping_add(s.address()));
            }
        }
        None
    }
}

/// Whether `m` maps the C library (glibc's `libc.so.6`).
pub(super) fn is_libc(m: &Mapping) -> bool {
    file_name(&m.path).starts_with("libc.so.6") || file_name(&m.path).starts_with("libc-2.")
}

/// Whether `m` maps the dynamic loader.
pub(super) fn is_loader(m: &Mapping) -> bool {
    let n = file_name(&m.path);
    n.starts_with("ld-linux") || n.starts_with("ld-musl") || n.starts_with("ld.so")
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The fields of `/proc/PID/status` named `key`.
fn status_field(pid: u32, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_owned()))
}

/// The process's name (`comm`).
pub(super) fn name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default()
}

/// The process's effective uid.
pub(super) fn euid(pid: u32) -> Option<u32> {
    status_field(pid, "Uid:")?.split_whitespace().nth(1)?.parse().ok()
}

/// The reasons that make attaching to `pid` impossible, checked before anything is done to
/// it: each one says what to do.
pub(super) fn check(pid: u32) -> Result<(), Error> {
    let refuse = |why: String| Err(Error::Other(why));
    if pid == 0 || i32::try_from(pid).is_err() {
        return refuse(format!("{pid} is not a process id"));
    }
    // SAFETY: getpid has no preconditions.
    if pid == unsafe { libc::getpid() } as u32 {
        return refuse("memprof cannot attach to itself".into());
    }
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let meta = match std::fs::metadata(&dir) {
        Ok(m) => m,
        Err(_) => return refuse(format!("no process {pid} (it does not exist, or it has ended)")),
    };
    let state = status_field(pid, "State:").unwrap_or_default();
    if state.starts_with('Z') || state.starts_with('X') {
        return refuse(format!("process {pid} has ended (it is a zombie)"));
    }
    if state.starts_with('T') && !state.contains("tracing") {
        return refuse(format!(
            "process {pid} is stopped (SIGSTOP or job control); continue it first (kill -CONT \
             {pid})"
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let owner = euid(pid).unwrap_or(meta.uid());
    if owner != me {
        let how = if me == 0 {
            format!("run memprof attach as that user (sudo -u '#{owner}' memprof attach {pid})")
        } else {
            "run memprof attach as that user".to_owned()
        };
        return refuse(format!(
            "process {pid} belongs to user {owner}, not to you (user {me}): its heap would be \
             written by a library and to files of another user; {how}"
        ));
    }
    if let Some(tracer) = status_field(pid, "TracerPid:").and_then(|t| t.parse::<u32>().ok()) {
        if tracer != 0 {
            return refuse(format!(
                "process {pid} is already traced by process {tracer} ({}): a process has one \
                 tracer at a time; detach the debugger or tracer first",
                name(tracer)
            ));
        }
    }
    let mine = std::fs::metadata("/proc/self/ns/mnt").map(|m| m.ino()).ok();
    let theirs = std::fs::metadata(dir.join("ns/mnt")).map(|m| m.ino()).ok();
    if mine.is_some() && theirs.is_some() && mine != theirs {
        return refuse(format!(
            "process {pid} runs in another mount namespace (a container): the preload library \
             and the shared ring would not be the same files there; run memprof attach inside \
             the container"
        ));
    }
    let exe = std::fs::read_link(dir.join("exe")).unwrap_or_default();
    let maps = match mappings(pid) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return refuse(format!(
                "the kernel does not let memprof read the memory map of process {pid} (it is \
                 not dumpable: a setuid program, one that called prctl(PR_SET_DUMPABLE, 0), or \
                 one of another user namespace); it cannot be attached to"
            ))
        }
        Err(e) => return Err(Error::io(format!("cannot read the maps of {pid}"), e)),
    };
    if !maps.iter().any(is_loader) {
        return refuse(format!(
            "{} (process {pid}) is statically linked: there is no dynamic loader in it to load \
             the preload library; profile it from its start with memprof record if it can be \
             rebuilt dynamically",
            exe.display()
        ));
    }
    if !maps.iter().any(is_libc) {
        return refuse(format!(
            "{} (process {pid}) does not use the GNU C library (glibc), which memprof attach \
             needs to load its library",
            exe.display()
        ));
    }
    Ok(())
}

/// Why `PTRACE_SEIZE` of `pid` failed, as the user can act on it.
pub(super) fn seize_refusal(pid: u32, e: nix::Error) -> Error {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let why = match (e, scope) {
        (nix::Error::EPERM, Some(1)) => format!(
            "the kernel refuses to let memprof trace process {pid}: \
             /proc/sys/kernel/yama/ptrace_scope is 1 (only a parent may trace its children); run \
             memprof attach with CAP_SYS_PTRACE (sudo), or set it to 0: sudo sysctl \
             kernel.yama.ptrace_scope=0"
        ),
        (nix::Error::EPERM, Some(2)) => format!(
            "the kernel refuses to let memprof trace process {pid}: \
             /proc/sys/kernel/yama/ptrace_scope is 2 (only root may trace); run memprof attach \
             as root"
        ),
        (nix::Error::EPERM, Some(3)) => format!(
            "the kernel refuses to let memprof trace process {pid}: \
             /proc/sys/kernel/yama/ptrace_scope is 3 (tracing is disabled until reboot)"
        ),
        (nix::Error::EPERM, _) => format!(
            "the kernel refuses to let memprof trace process {pid} (another user's, a setuid \
             program, or one that called prctl(PR_SET_DUMPABLE, 0)); run memprof attach as its \
             user, or with CAP_SYS_PTRACE"
        ),
        (nix::Error::ESRCH, _) => format!("process {pid} has ended"),
        (e, _) => format!("cannot trace process {pid}: {}", e.desc()),
    };
    Error::Other(why)
}

/// The threads of `pid`.
pub(super) fn threads(pid: u32) -> Vec<i32> {
    let mut t: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    t.sort_unstable();
    t
}

/// Whether `path` is mapped in `pid` as the file with inode `inode`.
pub(super) fn maps_file(pid: u32, path: &Path, inode: u64) -> bool {
    mappings(pid)
        .map(|maps| maps.iter().any(|m| m.inode == inode && Path::new(&m.path) == path))
        .unwrap_or(false)
}

/// Whether the attacher `owner` names still runs: its pid is a process with its start time.
pub(super) fn alive(owner: &crate::record::attach_abi::Owner) -> bool {
    let stat = format!("/proc/{}/stat", owner.pid);
    crate::sys::procfs::stat_field(&stat, crate::sys::procfs::START_TIME)
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|t| t == owner.started)
}
