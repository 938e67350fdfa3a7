//! What `memprof attach` and the preload library loaded into a running process tell each
//! other: the library's answer to each call the attacher makes in the process (a [`Plan`]
//! at a fixed layout, which the attacher reads from the process's memory), and the settings
//! the attacher passes (`KEY=VALUE` lines of the `MEMPROF_*` contract, `record/env.rs`).
//!
//! The library never writes the process's code or its GOT itself while the process runs:
//! it only plans. Each [`Write`] names bytes at an address, what they must hold now and
//! what they become; the attacher makes the writes through `/proc/PID/mem` while every
//! thread of the process is stopped, after checking that no thread stands inside a
//! [`Write`]'s guarded range (the instructions a patched entry point moved elsewhere).

/// [`Plan::magic`] of a plan this build laid out.
pub const MAGIC: u64 = 0x6d65_6d70_726f_6601;

/// The most bytes one [`Write`] changes.
pub const WRITE_MAX: usize = 16;

/// Room for the message of a refusal, NUL-terminated.
pub const MESSAGE_LEN: usize = 480;

/// One change of the process's memory (see the module documentation).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Write {
    /// Where.
    pub addr: u64,
    /// How many bytes (at most [`WRITE_MAX`]).
    pub len: u64,
    /// What they hold now; the write is skipped when they hold anything else.
    pub old: [u8; WRITE_MAX],
    /// What they become.
    pub new: [u8; WRITE_MAX],
    /// No thread may stand with its instruction pointer in `guard_lo..guard_hi` while the
    /// write is made (empty for a GOT slot).
    pub guard_lo: u64,
    /// See `guard_lo`.
    pub guard_hi: u64,
}

/// The library's answer to a call of the attacher.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// [`MAGIC`].
    pub magic: u64,
    /// 0: done; otherwise `message` says why not.
    pub status: u64,
    /// The offset of the thread's countdown block from its thread pointer (`fs:0`), which
    /// the attacher zeroes in every thread so that each draws a fresh gap in the new
    /// session (a countdown parked while no session ran would never run out).
    pub countdown_tpoff: i64,
    /// The writes: `count` of them at `writes`, in the library's memory.
    pub writes: u64,
    /// See `writes`.
    pub count: u64,
    /// Objects whose slots were rerouted, and functions patched (for the attacher's line).
    pub objects: u64,
    /// See `objects`.
    pub patched: u64,
    /// A refusal's reason, NUL-terminated; in a start's plan that is not refused, the
    /// allocator families whose entry points could not be patched, with the function and
    /// the reason (empty: none).
    pub message: [u8; MESSAGE_LEN],
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            magic: MAGIC,
            status: 0,
            countdown_tpoff: 0,
            writes: 0,
            count: 0,
            objects: 0,
            patched: 0,
            message: [0; MESSAGE_LEN],
        }
    }
}

impl Plan {
    /// A refusal saying `why` (cut to fit, at a character's boundary).
    pub fn refused(why: &str) -> Plan {
        let mut p = Plan { status: 1, ..Plan::default() };
        p.set_message(why);
        p
    }

    /// Sets the message to `text` (cut to fit, at a character's boundary).
    pub fn set_message(&mut self, text: &str) {
        let mut n = text.len().min(MESSAGE_LEN - 1);
        while !text.is_char_boundary(n) {
            n -= 1;
        }
        self.message = [0; MESSAGE_LEN];
        self.message[..n].copy_from_slice(&text.as_bytes()[..n]);
    }

    /// The refusal's reason.
    pub fn message(&self) -> String {
        let end = self.message.iter().position(|&b| b == 0).unwrap_or(MESSAGE_LEN);
        String::from_utf8_lossy(&self.message[..end]).into_owned()
    }

    /// The plan's bytes as the attacher reads them from the process.
    pub fn from_bytes(bytes: &[u8]) -> Option<Plan> {
        if bytes.len() < core::mem::size_of::<Plan>() {
            return None;
        }
        // SAFETY: `Plan` is plain old data (integers and byte arrays: every bit pattern is
        // a value), and `bytes` holds at least its size; read unaligned.
        let p = unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Plan>()) };
        (p.magic == MAGIC).then_some(p)
    }
}

impl Write {
    /// The writes at `bytes`, as the attacher reads them from the process.
    pub fn all_from_bytes(bytes: &[u8]) -> Vec<Write> {
        bytes
            .chunks_exact(core::mem::size_of::<Write>())
            .map(|c| {
                // SAFETY: `Write` is plain old data and `c` holds exactly its size; read
                // unaligned.
                unsafe { core::ptr::read_unaligned(c.as_ptr().cast::<Write>()) }
            })
            .filter(|w| w.len as usize <= WRITE_MAX)
            .collect()
    }
}

/// The settings as the attacher passes them: one `KEY=VALUE` line each.
pub fn encode_settings(vars: &[(&str, String)]) -> String {
    vars.iter().filter(|(_, v)| !v.contains('\n')).map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// The value of `key` in settings made by [`encode_settings`].
pub fn setting<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_refusals_fit() {
        let text =
            encode_settings(&[("A", "1".into()), ("AB", "x=y".into()), ("C", "a\nb".into())]);
        assert_eq!(setting(&text, "A"), Some("1"));
        assert_eq!(setting(&text, "AB"), Some("x=y"));
        assert_eq!(setting(&text, "C"), None);
        let long = "é".repeat(400);
        let p = Plan::refused(&long);
        assert_eq!(p.status, 1);
        assert!(p.message().len() < MESSAGE_LEN && !p.message().contains('\u{fffd}'));
        assert!(p.message().starts_with("éé"));
        // SAFETY: viewing a plain-data value's bytes.
        let bytes = unsafe {
            core::slice::from_raw_parts((&p as *const Plan).cast::<u8>(), size_of::<Plan>())
        };
        assert_eq!(Plan::from_bytes(bytes).map(|q| q.status), Some(1));
        assert!(Plan::from_bytes(&bytes[..8]).is_none());
    }
}
