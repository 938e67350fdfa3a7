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
//!
//! # 3. Waits that fail when their thread stops
//! A few blocking calls (`epoll_wait`, `sigtimedwait`, `io_getevents`, `semop`, reads with
//! a timeout: signal(7)) are not restarted by the kernel: stopping their thread, even
//! without a signal, makes them return `EINTR`. A thread found stopped in one with that
//! result and no signal to deliver is set back onto its `syscall` instruction with the
//! call's number, so it makes the call again when it resumes: the program never sees the
//! `EINTR`. A relative timeout then starts again (the wait may last longer than asked, by
//! what it had waited before the stop).

//!
//! # 4. The other threads during a call
//! They run, but each is traced: a signal that reaches one (the `SIGCHLD` of a child that
//! ended, in a program that forks) stops it for the tracer, which must let it go on with
//! its signal. It may hold a lock the call needs (a thread inside `fork`, when its child's
//! `SIGCHLD` comes, holds every arena of the C library's allocator), so the tracer, while it
//! waits for the call, lets each such stop go on at once ([`Thread::serve`]): a call never
//! waits on a thread that waits on the tracer.
//!
//! # 5. If the tracer dies during a call
//! A call returns into glibc's `__restore_rt` (`rt_sigreturn`) under a signal frame
//! written below the call's stack that holds the thread's own registers (a system call it
//! was stopped in set to restart), its signal mask and its vector state. The tracer stops
//! the thread at that `rt_sigreturn` (it runs the call stopping at each system call) and
//! takes it from there; a tracer killed meanwhile leaves nothing to take: the call
//! finishes, `rt_sigreturn` gives the thread its own state back, and the program runs on
//! as if it had never been stopped. The frame names an invalid alternate signal stack,
//! which `rt_sigreturn` ignores, so the thread's own stays.
//!

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

const PTRACE_GETSIGMASK: libc::c_uint = 0x420a;
const PTRACE_SETSIGMASK: libc::c_uint = 0x420b;
const PTRACE_LISTEN: libc::c_uint = 0x4208;
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
    /// The other threads, running, whose stops for a signal a call lets go on (§4).
    pub(super) serve: Vec<Pid>,
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
        ptrace::seize(tid, ptrace::Options::PTRACE_O_TRACESYSGOOD)?;
        Ok(Thread { tid, stopped: false, pending: None, serve: Vec::new() })
    }

    /// Stops the thread (a no-op when it is stopped).
    pub(super) fn stop(&mut self) -> Result<(), Failed> {
        if self.stopped {
            return Ok(());
        }
        ptrace::interrupt(self.tid)?;
        match self.wait(Some(Duration::from_secs(10)))? {
            WaitStatus::PtraceEvent(..) => self.wait_again()?,
            WaitStatus::Stopped(_, sig) => self.pending = Some(sig),
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Err(Failed::Gone),
            other => return Err(Failed::Other(format!("unexpected stop {other:?}"))),
        }
        self.stopped = true;
        Ok(())
    }

    /// A thread stopped in one of the waits that fail with `EINTR` when their thread stops
    /// ([`WAITS`]), with no signal to deliver: its call is made again when it resumes, as
    /// the kernel restarts the others (§3).
    fn wait_again(&self) -> Result<(), Failed> {
        let mut r = ptrace::getregs(self.tid)?;
        let eintr = (-(libc::EINTR as i64)) as u64;
        if (r.orig_rax as i64) < 0 || r.rax != eintr || !WAITS.contains(&r.orig_rax) {
            return Ok(());
        }
        if deliverable_signal(self.tid.as_raw()) {
            return Ok(());
        }
        // `syscall` is 0f 05, just before the thread's instruction pointer.
        let at = r.rip.wrapping_sub(2);
        let word = ptrace::read(self.tid, at as ptrace::AddressType)? as u64;
        if word & 0xffff != 0x050f {
            return Ok(());
        }
        r.rax = r.orig_rax;
        r.rip = at;
        ptrace::setregs(self.tid, r)?;
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

    /// The next status of the thread, waiting at most `limit` (the first 2 ms without
    /// sleeping: a stop is usually there at once, and a call a stop interrupted is set up
    /// again the sooner).
    fn wait(&self, limit: Option<Duration>) -> Result<WaitStatus, Failed> {
        let start = Instant::now();
        let deadline = limit.map(|l| start + l);
        loop {
            match waitpid(self.tid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG))? {
                WaitStatus::StillAlive => {}
                s => return Ok(s),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Failed::Other("the thread did not stop in time".into()));
            }
            if start.elapsed() < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
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

    /// Puts back a state [`Thread::save`] saved (or a call gave back).
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

    /// Writes `data` (if any) and, below it, what the call needs on the stack; returns the
    /// stack pointer the call starts with and the data's address.
    fn below_stack(mem: &File, top: u64, data: &[u8]) -> Result<(u64, u64), Failed> {
        let mut sp = top;
        let mut at = 0;
        if !data.is_empty() {
            sp = sp.wrapping_sub(data.len() as u64) & !15;
            at = sp;
            write(mem, sp, data)?;
        }
        Ok((sp, at))
    }

    /// Sets up the registers of a call of `func(args…)` starting at `sp` (which holds its
    /// return address) and runs the thread with every asynchronous signal blocked.
    fn start_call(
        &mut self,
        saved: &Saved,
        func: u64,
        args: &[u64],
        sp: u64,
        data_at: u64,
        how: Resume,
    ) -> Result<(), Failed> {
        let mut regs = saved.regs;
        let arg = |i: usize| match args.get(i) {
            Some(&DATA) => data_at,
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
        match how {
            Resume::Cont => ptrace::cont(self.tid, None)?,
            Resume::Syscall => ptrace::syscall(self.tid, None)?,
        }
        self.stopped = false;
        Ok(())
    }

    /// Lets each of the other running threads stopped for a signal go on with it, and each
    /// stopped by a `PTRACE_INTERRUPT` left over (one sent while it was stopped for a signal
    /// traps once it runs again) go on (§4). A thread in a group stop (`SIGSTOP`) stays in
    /// it (`PTRACE_LISTEN`).
    fn serve_others(&self) {
        for &t in &self.serve {
            match waitpid(t, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Stopped(_, sig)) => {
                    let _ = ptrace::cont(t, Some(sig));
                }
                Ok(WaitStatus::PtraceEvent(_, Signal::SIGTRAP, _)) => {
                    let _ = ptrace::cont(t, None);
                }
                Ok(WaitStatus::PtraceEvent(..)) => {
                    // SAFETY: PTRACE_LISTEN takes no address or data.
                    unsafe { libc::ptrace(PTRACE_LISTEN, t.as_raw(), 0usize, 0usize) };
                }
                _ => {}
            }
        }
    }

    /// The next status of a call under way, at most `limit`, serving the others meanwhile
    /// (as [`Thread::wait`] paces itself).
    fn wait_serving(&self, limit: Duration) -> Result<WaitStatus, Failed> {
        let start = Instant::now();
        loop {
            self.serve_others();
            match waitpid(self.tid, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG))? {
                WaitStatus::StillAlive => {}
                s => return Ok(s),
            }
            if start.elapsed() >= limit {
                return Err(Failed::Other("the thread did not stop in time".into()));
            }
            if start.elapsed() < Duration::from_millis(2) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Waits for the next stop of a call under way; a timeout takes the thread back.
    fn call_stop(&mut self, deadline: Instant, saved: &Saved) -> Result<WaitStatus, Failed> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.wait_serving(left) {
            Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => Err(Failed::Gone),
            Ok(s) => Ok(s),
            Err(Failed::Other(_)) => {
                // Never returned (a lock that will not be released): the thread is taken
                // back to where it was; what the call held stays held.
                let _ = ptrace::interrupt(self.tid);
                let _ = self.wait(Some(Duration::from_secs(2)));
                self.stopped = true;
                self.restore(saved)?;
                Err(Failed::Other(format!(
                    "the call did not return within {} s",
                    CALL_TIMEOUT.as_secs()
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// A fault or another signal stopped a call: the thread is put back as it was.
    fn call_failed(&mut self, saved: &Saved, sig: Signal) -> Failed {
        self.stopped = true;
        let rip = ptrace::getregs(self.tid).map(|r| r.rip).unwrap_or(0);
        if let Err(e) = self.restore(saved) {
            return e;
        }
        Failed::Other(format!("the call stopped with {sig} at {rip:#x}"))
    }

    /// Runs `func(args…)` in the process on this stopped thread, whose state `saved` holds,
    /// with `data` copied below its stack first (its address replaces any argument equal to
    /// [`DATA`]), returning into `landing`: glibc's `__restore_rt` (`mov rax, 15; syscall`,
    /// `rt_sigreturn`), under a signal frame that holds the thread's own state (§5). The
    /// call's result is not kept (the library publishes its answers in memory). `saved`
    /// becomes the state the thread was given back.
    pub(super) fn call(
        &mut self,
        mem: &File,
        saved: &mut Saved,
        func: u64,
        args: &[u64],
        data: &[u8],
        landing: u64,
    ) -> Result<(), Failed> {
        let back = Saved { regs: restarted(saved.regs), ..saved.clone() };
        // The vector state for the frame: the XSAVE area, then FP_XSTATE_MAGIC2.
        let mut xs_bytes = saved.xstate.clone();
        xs_bytes.extend_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
        let top = saved.regs.rsp.wrapping_sub(256);
        let xs = top.wrapping_sub(xs_bytes.len() as u64) & !63;
        write(mem, xs, &xs_bytes)?;
        let (below, data_at) = Self::below_stack(mem, xs, data)?;
        let frame_at = (below.wrapping_sub(FRAME_LEN as u64) & !15).wrapping_sub(8);
        write(mem, frame_at, &signal_frame(&back, landing, xs))?;
        self.start_call(saved, func, args, frame_at, data_at, Resume::Syscall)?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        let mut landed = false;
        loop {
            match self.call_stop(deadline, saved)? {
                WaitStatus::PtraceSyscall(_) => {
                    let r = ptrace::getregs(self.tid)?;
                    if landed {
                        // rt_sigreturn's exit: the thread holds its own state again; the
                        // vector state and mask are set again by ptrace all the same.
                        self.stopped = true;
                        self.restore(&back)?;
                        *saved = back;
                        return Ok(());
                    }
                    landed = r.orig_rax == 15 && r.rip == landing + LANDING.len() as u64;
                    ptrace::syscall(self.tid, None)?;
                }
                WaitStatus::Stopped(_, sig) => return Err(self.call_failed(saved, sig)),
                _ => ptrace::syscall(self.tid, None)?,
            }
        }
    }

    /// As [`Thread::call`], returning `rax`: the call returns to address 0 and faults,
    /// which stops it for the tracer; if the tracer is killed meanwhile the thread faults
    /// for good, so it is used only where the tracer needs the value (`dlerror` after a
    /// failed load).
    pub(super) fn call_value(
        &mut self,
        mem: &File,
        saved: &Saved,
        func: u64,
        args: &[u64],
    ) -> Result<u64, Failed> {
        let sp = (saved.regs.rsp.wrapping_sub(256) & !15).wrapping_sub(8);
        write(mem, sp, &0u64.to_le_bytes())?;
        self.start_call(saved, func, args, sp, 0, Resume::Cont)?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            match self.call_stop(deadline, saved)? {
                WaitStatus::Stopped(_, Signal::SIGSEGV) => {
                    let r = ptrace::getregs(self.tid)?;
                    if r.rip != 0 {
                        return Err(self.call_failed(saved, Signal::SIGSEGV));
                    }
                    self.stopped = true;
                    self.restore(saved)?;
                    return Ok(r.rax);
                }
                WaitStatus::Stopped(_, sig) => return Err(self.call_failed(saved, sig)),
                _ => ptrace::cont(self.tid, None)?,
            }
        }
    }
}

/// How a call runs: to its fault, or stopping at each system call.
#[derive(Clone, Copy)]
enum Resume {
    Cont,
    Syscall,
}

fn write(mem: &File, at: u64, bytes: &[u8]) -> Result<(), Failed> {
    mem.write_all_at(bytes, at)
        .map_err(|e| Failed::Other(format!("cannot write to the process: {e}")))
}

/// glibc's `__restore_rt`: `mov rax, 15; syscall`.
pub(super) const LANDING: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05];
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// `struct rt_sigframe`: the return address, `ucontext` (304 bytes), `siginfo` (128).
const FRAME_LEN: usize = 8 + 304 + 128;
const UC_FP_XSTATE: u64 = 1;
const UC_SIGCONTEXT_SS: u64 = 2;

/// The registers as the thread resumes them: a system call it was stopped in, with a
/// result that says to restart it, set back onto its `syscall` instruction with its own
/// number, as the kernel would do on resuming it (`rt_sigreturn` does not restart). A call
/// the kernel would resume through `restart_syscall` (`nanosleep`, `poll` and `futex` with
/// a timeout: `-ERESTART_RESTARTBLOCK`) is made again from its start instead, its arguments
/// still in their registers: `rt_sigreturn` voids the restart block, and `restart_syscall`
/// would then fail with `EINTR`. Its relative timeout starts again.
fn restarted(mut r: libc::user_regs_struct) -> libc::user_regs_struct {
    const ERESTARTSYS: i64 = -512;
    const ERESTARTNOINTR: i64 = -513;
    const ERESTARTNOHAND: i64 = -514;
    const ERESTART_RESTARTBLOCK: i64 = -516;
    if (r.orig_rax as i64) >= 0 {
        if let ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND | ERESTART_RESTARTBLOCK = r.rax as i64
        {
            r.rax = r.orig_rax;
            r.rip = r.rip.wrapping_sub(2);
        }
    }
    r.orig_rax = u64::MAX;
    r
}

/// The signal frame `rt_sigreturn` reads when the call returns into `landing` (§5): the
/// registers, the signal mask and the vector state at `xstate` are the thread's own; the
/// alternate signal stack named is invalid, so the thread's own stays as it is.
fn signal_frame(back: &Saved, landing: u64, xstate: u64) -> Vec<u8> {
    let r = &back.regs;
    let mut f = Vec::with_capacity(FRAME_LEN);
    let mut q = |v: u64| f.extend_from_slice(&v.to_le_bytes());
    q(landing);
    // ucontext: flags, link, then stack_t { ss_sp, ss_flags (an invalid mode), ss_size }.
    q(UC_FP_XSTATE | UC_SIGCONTEXT_SS);
    q(0);
    q(0);
    q(3);
    q(0);
    // sigcontext
    for v in [
        r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp, r.rbx, r.rdx,
        r.rax, r.rcx, r.rsp, r.rip, r.eflags,
    ] {
        q(v);
    }
    // cs, gs, fs, ss (16 bits each)
    q((r.cs & 0xffff) | (r.ss & 0xffff) << 48);
    // err, trapno, oldmask, cr2, fpstate, reserved[8]
    for v in [0, 0, 0, 0, xstate, 0, 0, 0, 0, 0, 0, 0, 0] {
        q(v);
    }
    // uc_sigmask
    q(back.mask);
    f.resize(FRAME_LEN, 0);
    f
}

/// The system calls that return `EINTR` when their thread is stopped by a tracer, even
/// without a signal handler (signal(7)), and that can be made again with nothing done
/// twice: waits (x86-64 numbers).
const WAITS: [u64; 12] = [
    0,   // read (a socket with a receive timeout)
    19,  // readv
    43,  // accept (with a timeout)
    45,  // recvfrom
    47,  // recvmsg
    65,  // semop
    128, // rt_sigtimedwait
    207, // io_getevents
    220, // semtimedop
    232, // epoll_wait
    281, // epoll_pwait
    441, // epoll_pwait2
];

/// Whether thread `tid` has a signal pending that it does not block.
fn deliverable_signal(tid: i32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    (field("SigPnd:") | field("ShdPnd:")) & !field("SigBlk:") != 0
}

/// An argument of [`Thread::call`] that stands for the address of its data.
pub(super) const DATA: u64 = u64::MAX - 0xdada;
