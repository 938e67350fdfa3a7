//! Fields of `/proc/<pid>/stat` files.
#![forbid(unsafe_code)]

/// Field `n` of a `stat` file (`/proc/<pid>/stat`, `/proc/self/task/<tid>/stat`), counted
/// from the one after the command name (0: state, 1: ppid, 17: num_threads), which is in
/// parentheses and may hold anything. `None` when the file cannot be read or is short.
pub(crate) fn stat_field(path: &str, n: usize) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(n).map(str::to_owned)
}
