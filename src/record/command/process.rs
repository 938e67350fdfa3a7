//! A process as `record`'s collector sees it through `/proc`: whether it is gone (and how
//! it ended, as a zombie or through a pidfd), the modules it maps, and which process made a
//! ring (`collect` §7).

use crate::profile::Module;
use crate::record::ring::RingHeader;
use std::path::Path;

/// The preload library process `pid` was started with: the first entry of the
/// `LD_PRELOAD` its environment began with (`record` puts its library first; the agent's
/// later `setenv` does not change what `/proc/<pid>/environ` shows).
pub(super) fn preload_library(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let list = env.split(|&b| b == 0).find_map(|v| v.strip_prefix(b"LD_PRELOAD="))?;
    let first = list.split(|&b| b == b':' || b == b' ').find(|e| !e.is_empty())?;
    Some(String::from_utf8_lossy(first).into_owned())
}

/// `/proc/<pid>/stat`'s exit code (field 52, counted from the state as
/// [`crate::sys::procfs::stat_fields`] does): the wait status of a zombie.
const EXIT_CODE: usize = 52 - 3;

/// A pidfd of process `pid` started at `start` (`None` when it cannot be opened, or the pid
/// is another process's by now).
pub(super) fn open_pidfd(pid: u32, start: u64) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a descriptor just opened, owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
    // Opened after the ring was attached: the pid must still be the ring's process.
    (!process_gone(pid, start, &mut None)).then_some(fd)
}

/// The exit code (a wait status) of a process reaped by its parent, through a pidfd opened
/// while it ran: the kernel keeps it for the pidfd's holders (`PIDFD_GET_INFO` with
/// `PIDFD_INFO_EXIT`, Linux 6.15 and later; `None` on older kernels, or before the reaping).
pub(super) fn reaped_status(fd: &std::os::fd::OwnedFd) -> Option<i32> {
    use std::os::fd::AsRawFd;
    /// `struct pidfd_info` as of its first version (64 bytes).
    #[repr(C)]
    #[derive(Default)]
    struct PidfdInfo {
        mask: u64,
        cgroupid: u64,
        ids: [u32; 11],
        exit_code: i32,
    }
    const PIDFD_INFO_EXIT: u64 = 1 << 3;
    // _IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info).
    const PIDFD_GET_INFO: u64 =
        (3 << 30) | ((core::mem::size_of::<PidfdInfo>() as u64) << 16) | (0xFF << 8) | 11;
    let mut info = PidfdInfo { mask: PIDFD_INFO_EXIT, ..PidfdInfo::default() };
    // SAFETY: the request's size is `info`'s, a valid in-out pointer for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), PIDFD_GET_INFO as _, &mut info) };
    (r == 0 && info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code)
}

/// True when process `pid`, started at `start` (`/proc/<pid>/stat` field 22), has ended.
/// A zombie's exit code (a wait status) is put in `status`.
pub(super) fn process_gone(pid: u32, start: u64, status: &mut Option<i32>) -> bool {
    use crate::sys::procfs::{stat_field, stat_fields, START_TIME};
    let Some(fields) = stat_fields(&format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = fields.first().map_or("X", String::as_str);
    let started: u64 = fields.get(START_TIME).and_then(|s| s.parse().ok()).unwrap_or(0);
    if start != 0 && started != start {
        return true;
    }
    if state != "Z" && state != "X" {
        return false;
    }
    if state == "Z" {
        if let Some(code) = fields.get(EXIT_CODE).and_then(|s| s.parse().ok()) {
            *status = Some(code);
        }
    }
    // A zombie leader whose other threads run on (`main` ended with `pthread_exit`) is
    // not a process gone: any live thread keeps it.
    let live_thread =
        std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten().any(|t| {
            let stat = t.path().join("stat");
            let s = stat_field(&stat.to_string_lossy(), 0);
            s.is_some_and(|s| s != "Z" && s != "X")
        });
    !live_thread
}

/// The modules of a running process, from `/proc/<pid>/maps` and the object files it names
/// (§4): for each file mapped with offset 0, its load bias from its first `PT_LOAD`, its
/// extent from all of them, its build id or file identity.
pub(crate) fn modules_of(pid: u32) -> Vec<Module> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut out: Vec<Module> = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(_perms), Some(offset)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let Some(path) = f.nth(2) else { continue };
        if !path.starts_with('/') || !offset.trim_start_matches('0').is_empty() {
            continue;
        }
        let Some(start) = range.split('-').next().and_then(|a| u64::from_str_radix(a, 16).ok())
        else {
            continue;
        };
        if out.iter().any(|m| m.path == path && m.start <= start && start < m.end) {
            continue;
        }
        let Some(layout) = crate::profile::symbolize::file_layout(Path::new(path)) else {
            continue;
        };
        let (loads, build_id) = (layout.loads, layout.build_id.unwrap_or_default());
        let Some(first) = loads.iter().map(|l| l.0).min() else { continue };
        // The mapping at offset 0 is the first PT_LOAD's page.
        let base = start.wrapping_sub(first & !0xfff);
        let hi = loads.iter().map(|l| l.0 + l.1).max().unwrap_or(0);
        let (file_size, file_mtime_ns) = if build_id.is_empty() {
            crate::profile::symbolize::file_identity(Path::new(path))
        } else {
            (0, 0)
        };
        out.push(Module {
            path: path.to_owned(),
            base,
            start: base.wrapping_add(first),
            end: base.wrapping_add(hi),
            build_id,
            file_size,
            file_mtime_ns,
        });
    }
    out
}

/// The process that made a ring (`ring` §5), as this process's `/proc` names it: the
/// header's pid when the maker checked it is this view (`pid_checked`); else the process
/// started at the ring's start time whose innermost pid (`NSpid`) is the header's
/// `ns_pid`, and among several the one that maps the ring's file (`file`: its device and
/// inode). `None` when no such process is found: it has ended (or, among several, none
/// maps the ring: an image replaced by `exec`), and nothing will write to the ring again.
pub(super) fn ring_owner(h: &RingHeader, file: (u64, u64)) -> Option<u32> {
    let (pid, ns_pid, start) = (h.pid, h.ns_pid, h.proc_start);
    if h.pid_checked == 1 || start == 0 {
        // Checked; or a maker that could not read `/proc` (nothing better is known).
        return Some(pid);
    }
    let matches = |p: u32| started_at(p) == Some(start) && innermost_pid(p) == Some(ns_pid);
    // The header's pid first: usually the maker's, when its `/proc` was not the
    // collector's only for want of `MEMPROF_COLLECTOR`.
    if matches(pid) && maps_file(pid, file) == Some(true) {
        return Some(pid);
    }
    let found: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| matches(p))
        .collect();
    match found.as_slice() {
        [one] => Some(*one),
        many => {
            let mut mapping = many.iter().filter(|&&p| maps_file(p, file) == Some(true));
            match (mapping.next(), mapping.next()) {
                (Some(&p), None) => Some(p),
                _ => None,
            }
        }
    }
}

/// The parent of process `pid` (`/proc/<pid>/stat` field 4), as this process's `/proc`
/// names it.
pub(super) fn parent_of(pid: u32) -> Option<u32> {
    crate::sys::procfs::stat_field(&format!("/proc/{pid}/stat"), 1)?.parse().ok()
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22).
fn started_at(pid: u32) -> Option<u64> {
    let path = format!("/proc/{pid}/stat");
    crate::sys::procfs::stat_field(&path, crate::sys::procfs::START_TIME)?.parse().ok()
}

/// The pid of process `pid` in its own PID namespace: the last of `NSpid` in
/// `/proc/<pid>/status` (`pid` itself on a kernel without the line, before 4.1).
fn innermost_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    match status.lines().find_map(|l| l.strip_prefix("NSpid:")) {
        Some(ids) => ids.split_whitespace().last()?.parse().ok(),
        None => Some(pid),
    }
}

/// Whether process `pid` maps the file of device and inode `file` (`None`: its maps cannot
/// be read).
fn maps_file(pid: u32, (dev, ino): (u64, u64)) -> Option<bool> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let want = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    let ino = ino.to_string();
    Some(maps.lines().any(|l| {
        let mut f = l.split_ascii_whitespace().skip(3);
        f.next() == Some(want.as_str()) && f.next() == Some(ino.as_str())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The modules read from this process's maps agree with its loader's list.
    #[test]
    fn modules_from_maps_match_the_loader() {
        let mine = crate::profile::symbolize::current_modules();
        let read = modules_of(std::process::id());
        let exe = std::fs::read_link("/proc/self/exe").unwrap().display().to_string();
        let a = mine.iter().find(|m| m.path == exe).expect("the loader lists the executable");
        let b = read.iter().find(|m| m.path == exe).expect("maps list the executable");
        assert_eq!((a.base, a.start, a.end, &a.build_id), (b.base, b.start, b.end, &b.build_id));
        let libc = mine.iter().find(|m| m.path.contains("libc.so")).expect("libc is loaded");
        let from_maps = read.iter().find(|m| m.start == libc.start).expect("libc in the maps");
        assert_eq!((libc.base, libc.end), (from_maps.base, from_maps.end));
    }

    #[test]
    fn a_missing_process_is_gone() {
        let mut status = None;
        assert!(process_gone(u32::MAX - 1, 0, &mut status));
        let me = crate::sys::procfs::stat_field("/proc/self/stat", crate::sys::procfs::START_TIME)
            .unwrap()
            .parse()
            .unwrap();
        assert!(!process_gone(std::process::id(), me, &mut status));
        assert!(process_gone(std::process::id(), me + 1, &mut status), "a reused pid");
        assert_eq!(status, None);
    }
}
