//! Fields of `/proc/<pid>/stat` files.
#![forbid(unsafe_code)]

/// Field `n` of a `stat` file (`/proc/<pid>/stat`, `/proc/self/task/<tid>/stat`), counted
/// from the one after the command name (0: state, 1: ppid, 17: num_threads), which is in
/// parentheses and may hold anything. `None` when the file cannot be read or is short.
pub(crate) fn stat_field(path: &str, n: usize) -> Option<String> {
    stat_fields(path)?.into_iter().nth(n)
}

/// Every field of a `stat` file after the command name, numbered as in [`stat_field`]: one
/// read for a caller that needs several.
pub(crate) fn stat_fields(path: &str) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(path).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// [`stat_field`] number of the process's start time (clock ticks since boot): with the
/// pid, what tells a process from a later one that reused its pid.
pub(crate) const START_TIME: usize = 19;

/// Writes `v` in decimal at the start of `buf` (room for 10 digits); returns the length. No
/// allocation: for paths built where allocating is not allowed (a forked child before
/// `exec`, the sample path's look at `/proc/<pid>/stat`).
pub(crate) fn write_decimal(buf: &mut [u8], mut v: u32) -> usize {
    let mut digits = [0u8; 10];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        buf[i] = digits[n - 1 - i];
    }
    n
}
