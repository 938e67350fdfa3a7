//! The threads of a process `memprof attach` borrows: seized with ptrace, stopped and
//! resumed, their whole user state saved and put back, and a function of the process run
//! on one of them.
//!
//! # 1. Stops
//! Every thread is seized (`PTRACE_SEIZE`: nothing stops, no signal is sent) and stopped
//! only when needed with `PTRACE_INTERRUPT`. A stop that reports a signal instead
//! (a signal-delivery stop) keeps the signal, which the thread gets when it is resumed or
//! detached: nothing sent to the process is lost.
//!
//! # 2. A call in the process
//! The thread's registers, signal mask and extended state (x87, SSE, AVX: `NT_X86_XSTATE`)
//! are saved; the call runs on its own stack 256 bytes below the thread's (past the
//! 128-byte red zone), with the arguments in registers, every asynchronous signal blocked
//! (they stay pending and arrive once the thread's own mask is back) and a return address
//! of 0: the return faults, the fault stops the thread for the tracer, which takes `rax` and
//! puts everything back. `orig_rax` is -1 during the call, so a system call the thread was
//! stopped in is not restarted into the call; restored with the thread's registers, it
//! makes the kernel restart that system call as if nothing had happened when the thread
//! resumes (the fault's signal is discarded): `EINTR` never reaches the program.

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const PTRACE_GETSIGMASK: libc::c_uint = 0x420a;
const PTRACE_SETSIGMASK: libc::c_uint = 0x420b;
const NT_X86_XSTATE: libc::c_int = 0x202;
/// Room for the largest XSAVE area (AMX tiles included).
const XSTATE_MAX: usize = 16 * 1024;
/// How long a call in the process may take.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// A thread's user state, as saved before it is borrowed.
#[derive(Clone)]
pub(super) struct Saved {
    pub(super) regs: libc::user_regs_struct,
    mask: u64,
    xstate: Vec<u8>,
}

/// A seized thread.
pub(super) struct Thread {
    pub(super) tid: Pid,
    /// Stopped by the tracer (and not resumed since).
    pub(super) stopped: bool,
    /// A signal its stop reported, to deliver when it runs again.
    pending: Option<Signal>,
}

/// What went wrong with a thread: gone (the process or thread exited), or another error.
#[derive(Debug)]
pub(super) enum Failed {
    Gone,
    Other(String),
}

impl From<nix::Error> for Failed {
    fn from(e: nix::Error) -> Self {
        if e == nix::Error::ESRCH {
            Failed::Gone
        } else {
            Failed::Other(e.desc().to_owned())
        }
    }
}

impl Thread {
    /// Seizes `tid` (it keeps running).
    pub(super) fn seize(tid: Pid) -> Result<Thread, nix::Error> {
        ptrace::seize(tid, ptrace::Options::empty())?;
        Ok(Thread { tid, stopped: false, pending: None })
    }

    /// Stops the thread (a no-op when it is stopped).
    pub(super) fn stop(&mut self) -> Result<(), Failed> {
        if self.stopped {
            return Ok(());
        }
        ptrace::interrupt(self.tid)?;
        match self.wait(Some(Duration::from_secs(10)))? {
            WaitStatus::PtraceEvent(..) => {}
            WaitStatus::Stopped(_, sig) => self.pending = Some(sig),
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Err(Failed::Gone),
            other => return Err(Failed::Other(format!("unexpected stop {other:?}"))),
        }
        self.stopped = true;
        Ok(())
    }

    /// Lets the stopped thread run on (with the signal its stop reported, if any).
    pub(super) fn resume(&mut self) -> Result<(), Failed> {
        if !self.stopped {
            return Ok(());
        }
        ptrace::cont(self.tid, self.pending.take())?;
        self.stopped = false;
        Ok(())
    }

    /// Ends the tracing of the thread: a stopped one runs on with its pending signal; a
    /// running one is stopped first (the kernel detaches only stopped tracees).
    pub(super) fn detach(mut self) -> Result<(), Failed> {
        if !self.stopped {
            self.stop()?;
        }
        ptrace::detach(self.tid, self.pending.take())?;
        Ok(())
    }

    /// Whether the thread's stop reported a signal (it is not at a clean interrupt).
    pub(super) fn has_pending_signal(&self) -> bool {
        self.pending.is_some()
    }

    /// The next status of the thread, waiting at most `limit`.
    fn wait(&self, limit: Option<Duration>) -> Result<WaitStatus, Failed> {
        let deadline = limit.map(|l| Instant::now() + l);
        loop {
            match waitpid(self.tid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG))? {
                WaitStatus::StillAlive => {}
                s => return Ok(s),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Failed::Other("the thread did not stop in time".into()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The stopped thread's registers.
    pub(super) fn regs(&self) -> Result<libc::user_regs_struct, Failed> {
        Ok(ptrace::getregs(self.tid)?)
    }

    /// Saves the stopped thread's user state (see the module documentation).
    pub(super) fn save(&self) -> Result<Saved, Failed> {
        let regs = self.regs()?;
        let mut mask = 0u64;
        // SAFETY: PTRACE_GETSIGMASK writes 8 bytes (the size passed as `addr`) to `mask`.
        let r = unsafe {
            libc::ptrace(PTRACE_GETSIGMASK, self.tid.as_raw(), 8usize, &mut mask as *mut u64)
        };
        if r != 0 {
            return Err(nix::Error::last().into());
        }
        let mut xstate = vec![0u8; XSTATE_MAX];
        let mut iov = libc::iovec { iov_base: xstate.as_mut_ptr().cast(), iov_len: xstate.len() };
        // SAFETY: the kernel writes at most `iov_len` bytes to the buffer and sets
        // `iov_len` to what it wrote.
        let r = unsafe {
            libc::ptrace(
                libc::PTRACE_GETREGSET,
                self.tid.as_raw(),
                NT_X86_XSTATE as usize,
                &mut iov as *mut libc::iovec,
            )
        };
        if r != 0 {
            return Err(nix::Error::last().into());
        }
        xstate.truncate(iov.iov_len);
        Ok(Saved { regs, mask, xstate })
    }

    /// Puts back a state [`Thread::save`] saved.
    pub(super) fn restore(&self, saved: &Saved) -> Result<(), Failed> {
        let mut xstate = saved.xstate.clone();
        let mut iov = libc::iovec { iov_base: xstate.as_mut_ptr().cast(), iov_len: xstate.len() };
        // SAFETY: the kernel reads `iov_len` bytes from the buffer, which it wrote itself.
        let r = unsafe {
            libc::ptrace(
                libc::PTRACE_SETREGSET,
                self.tid.as_raw(),
                NT_X86_XSTATE as usize,
                &mut iov as *mut libc::iovec,
            )
        };
        if r != 0 {
            return Err(nix::Error::last().into());
        }
        self.set_mask(saved.mask)?;
        ptrace::setregs(self.tid, saved.regs)?;
        Ok(())
    }

    fn set_mask(&self, mask: u64) -> Result<(), Failed> {
        // SAFETY: PTRACE_SETSIGMASK reads 8 bytes (the size passed as `addr`) from `mask`.
        let r = unsafe {
            libc::ptrace(PTRACE_SETSIGMASK, self.tid.as_raw(), 8usize, &mask as *const u64)
        };
        if r != 0 {
            return Err(nix::Error::last().into());
        }
        Ok(())
    }

    /// Runs `func(args…)` in the process on this stopped thread, whose state `saved` holds,
    /// with `data` copied below its stack first (its address replaces any argument equal
    /// to [`DATA`]), and returns `rax`. The thread's state is put back whatever happens,
    /// unless the process is gone.
    pub(super) fn call(
        &mut self,
        mem: &File,
        saved: &Saved,
        func: u64,
        args: &[u64],
        data: &[u8],
    ) -> Result<u64, Failed> {
        let result = self.call_inner(mem, saved, func, args, data);
        if !matches!(result, Err(Failed::Gone)) {
            self.restore(saved)?;
        }
        result
    }

    fn call_inner(
        &mut self,
        mem: &File,
        saved: &Saved,
        func: u64,
        args: &[u64],
        data: &[u8],
    ) -> Result<u64, Failed> {
        let mut regs = saved.regs;
        let mut sp = saved.regs.rsp.wrapping_sub(256);
        let mut data_addr = 0;
        if !data.is_empty() {
            sp = sp.wrapping_sub(data.len() as u64) & !15;
            data_addr = sp;
            mem.write_all_at(data, sp)
                .map_err(|e| Failed::Other(format!("cannot write to the process: {e}")))?;
        }
        sp = (sp & !15).wrapping_sub(8);
        mem.write_all_at(&0u64.to_le_bytes(), sp)
            .map_err(|e| Failed::Other(format!("cannot write to the process: {e}")))?;
        let arg = |i: usize| match args.get(i) {
            Some(&DATA) => data_addr,
            Some(&v) => v,
            None => 0,
        };
        regs.rsp = sp;
        regs.rip = func;
        regs.rdi = arg(0);
        regs.rsi = arg(1);
        regs.rdx = arg(2);
        regs.rcx = arg(3);
        regs.r8 = arg(4);
        regs.r9 = arg(5);
        regs.rax = 0;
        regs.orig_rax = u64::MAX;
        ptrace::setregs(self.tid, regs)?;
        // Every signal blocked but those a fault raises (blocking them would make the
        // kernel reset their handlers).
        let synchronous = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP];
        let mask = synchronous.iter().fold(!0u64, |m, &s| m & !(1u64 << (s - 1)));
        self.set_mask(mask)?;
        ptrace::cont(self.tid, None)?;
        self.stopped = false;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let status = match self.wait(Some(left)) {
                Ok(s) => s,
                Err(Failed::Other(_)) => {
                    // Never returned (a lock that will not be released): the thread is
                    // taken back to where it was; what the call held stays held.
                    let _ = ptrace::interrupt(self.tid);
                    let _ = self.wait(Some(Duration::from_secs(2)));
                    self.stopped = true;
                    return Err(Failed::Other(format!(
                        "the call did not return within {} s",
                        CALL_TIMEOUT.as_secs()
                    )));
                }
                Err(e) => return Err(e),
            };
            match status {
                WaitStatus::Stopped(_, Signal::SIGSEGV) => {
                    self.stopped = true;
                    let r = ptrace::getregs(self.tid)?;
                    if r.rip == 0 {
                        return Ok(r.rax);
                    }
                    return Err(Failed::Other(format!(
                        "the call faulted at {:#x} (SIGSEGV)",
                        r.rip
                    )));
                }
                WaitStatus::Stopped(_, sig) => {
                    self.stopped = true;
                    let r = ptrace::getregs(self.tid)?;
                    return Err(Failed::Other(format!(
                        "the call stopped with {sig} at {:#x}",
                        r.rip
                    )));
                }
                // A group stop (SIGSTOP sent to the process meanwhile): the call goes on.
                WaitStatus::PtraceEvent(..) => ptrace::cont(self.tid, None)?,
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Err(Failed::Gone),
                _ => ptrace::cont(self.tid, None)?,
            }
        }
    }
}

/// An argument of [`Thread::call`] that stands for the address of its data.
pub(super) const DATA: u64 = u64::MAX - 0xdada;
