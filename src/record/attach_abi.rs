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
//!
//! One profiler a process: while a session of an attach runs, the library's
//! `MEMPROF_ATTACH_OWNER` (an [`Owner`]) names the attacher, its pid and start time (its
//! `MEMPROF_COLLECTOR`) and when it attached. A later attacher's start call answers
//! [`STATUS_OWNED`] with that owner, having done nothing; the attacher refuses while that
//! process lives, and takes over the session of one that died by calling again with it
//! named in [`TAKEOVER`]: the call checks, under its lock, that the owner is still the one
//! named, so two attachers racing for a dead one's session cannot both win.

/// [`Plan::magic`] of a plan this build laid out.
pub const MAGIC: u64 = 0x6d65_6d70_726f_6601;

/// The most bytes one [`Write`] changes.
pub const WRITE_MAX: usize = 16;

/// Room for the message of a refusal, NUL-terminated.
pub const MESSAGE_LEN: usize = 480;

/// [`Plan::status`]: done.
pub const STATUS_DONE: u64 = 0;
/// [`Plan::status`]: refused; the message says why.
pub const STATUS_REFUSED: u64 = 1;
/// [`Plan::status`]: nothing was done, because the borrowed thread (or another, for longer
/// than the call waits) held a lock the call needs: it was inside `fork` or inside the
/// library. The attacher lets the thread go and tries again at another moment.
pub const STATUS_BUSY: u64 = 2;
/// [`Plan::status`]: refused, because another attacher owns the process's session; the
/// message is that owner's [`Owner::encode`].
pub const STATUS_OWNED: u64 = 3;

/// The setting that names the owner whose session the attacher takes over ([`Owner::encode`]
/// of the dead attacher it read); absent: the attacher found no owner.
pub const TAKEOVER: &str = "MEMPROF_ATTACH_TAKEOVER";

/// [`Owner::kind`] of a session started by an attach.
pub const OWNER_ATTACHED: u64 = 1;

/// Who owns the process's attached session: the library's `MEMPROF_ATTACH_OWNER`, four
/// words the attacher reads through `/proc/PID/mem` (all zero: nobody).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// 0: none; [`OWNER_ATTACHED`].
    pub kind: u64,
    /// The attacher's pid, as its own PID namespace names it.
    pub pid: u64,
    /// Its start time (clock ticks after boot, `/proc/PID/stat` field 22).
    pub started: u64,
    /// When it attached (seconds since the Unix epoch).
    pub since: u64,
}

impl Owner {
    /// `pid:started:since`, as [`TAKEOVER`] and a [`STATUS_OWNED`] message carry it.
    pub fn encode(&self) -> String {
        format!("{}:{}:{}", self.pid, self.started, self.since)
    }

    /// The attached owner [`Owner::encode`] wrote (`None`: not one).
    pub fn decode(text: &str) -> Option<Owner> {
        let mut f = text.trim().split(':').map(|n| n.parse::<u64>().ok());
        let (pid, started, since) = (f.next()??, f.next()??, f.next()??);
        Some(Owner { kind: OWNER_ATTACHED, pid, started, since })
    }

    /// The owner in the words read from the process (`None`: nobody).
    pub fn from_words(w: [u64; 4]) -> Option<Owner> {
        let o = Owner { kind: w[0], pid: w[1], started: w[2], since: w[3] };
        (o.kind == OWNER_ATTACHED).then_some(o)
    }

    /// The attacher that passed `settings` (its `MEMPROF_COLLECTOR`), attached at `since`.
    pub fn of_settings(settings: &str, since: u64) -> Option<Owner> {
        let (pid, started) =
            setting(settings, crate::record::env::ENV_COLLECTOR)?.split_once(':')?;
        let (pid, started) = (pid.trim().parse().ok()?, started.trim().parse().ok()?);
        Some(Owner { kind: OWNER_ATTACHED, pid, started, since })
    }

    /// The words the library keeps.
    pub fn to_words(&self) -> [u64; 4] {
        [self.kind, self.pid, self.started, self.since]
    }

    /// Whether `other` names the same attacher (its pid and start time).
    pub fn same_attacher(&self, other: &Owner) -> bool {
        self.pid == other.pid && self.started == other.started
    }
}

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
        Plan::with_status(0)
    }
}

impl Plan {
    /// A refusal saying `why` (cut to fit, at a character's boundary).
    pub fn refused(why: &str) -> Plan {
        let mut p = Plan { status: STATUS_REFUSED, ..Plan::default() };
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

    /// The answer of a call that did nothing because a lock it needs was held
    /// ([`STATUS_BUSY`]); built without allocating.
    pub const fn busy() -> Plan {
        Plan::with_status(STATUS_BUSY)
    }

    /// An empty plan with `status` (the default's is 0); `const`, so built without
    /// allocating.
    const fn with_status(status: u64) -> Plan {
        Plan {
            magic: MAGIC,
            status,
            countdown_tpoff: 0,
            writes: 0,
            count: 0,
            objects: 0,
            patched: 0,
            message: [0; MESSAGE_LEN],
        }
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
    /// The write that puts back what `self` changed (an entry point's first bytes back: a
    /// thread at it then runs them, so no range is guarded).
    pub fn undo(&self) -> Write {
        Write { old: self.new, new: self.old, guard_lo: 0, guard_hi: 0, ..*self }
    }

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

    #[test]
    fn owners_round_trip() {
        let o = Owner { kind: OWNER_ATTACHED, pid: 41, started: 9_000_000, since: 1_700_000_000 };
        assert_eq!(Owner::decode(&o.encode()), Some(o));
        assert_eq!(Owner::from_words([1, 41, 9_000_000, 1_700_000_000]), Some(o));
        assert_eq!(Owner::from_words([0, 41, 9_000_000, 1]), None);
        assert_eq!(Owner::decode("41:x:1"), None);
        assert!(o.same_attacher(&Owner { since: 3, ..o }));
        assert_eq!(Plan::busy().status, STATUS_BUSY);
    }
}
