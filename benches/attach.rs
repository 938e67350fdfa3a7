//! `memprof attach` on a running program: what attaching costs it, and that detaching gives
//! its speed back, measured on one process in one run and printed as ratios.
//!
//! ```text
//! cargo bench --bench attach                 # 4 s per phase
//! cargo bench --bench attach -- --quick      # 1.5 s per phase
//! cargo bench --bench attach -- --seconds 10
//! ```
//!
//! The program is `fixtures/c/service.c --flat-out` (built with `cc -O2 -g`, as the tests
//! build the C fixtures): one thread doing malloc/free pairs of 16 to 136 bytes (76 on
//! average: at `--interval 800` about one allocation in ten is sampled) flat out, printing
//! its rate every 250 ms. The phases, in this order, on the same process:
//!
//! 1. before: never attached;
//! 2. attached at the default interval (512 KiB);
//! 3. detached again;
//! 4. attached with `--interval 800` (statmemprof's λ = 0.01);
//! 5. after: detached for good.
//!
//! Each phase's figure is the median of its 250 ms rates (the first one after each attach
//! or detach is left out: it straddles the change). The ratios are to the before-attach
//! rate; a detached phase should come back to about 1.0, since the hooks left in the
//! process after detach only forward. This machine's speed can drift by tens of per cent
//! over seconds (a shared host): compare the detached phases with each other to see it.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const MEMPROF: &str = env!("CARGO_BIN_EXE_memprof");

/// The flat-out program, killed when dropped (it never exits by itself).
struct Program {
    child: Child,
    pid: i32,
    rates: Receiver<f64>,
}

impl Program {
    fn start(prog: &Path) -> Program {
        let mut child = Command::new(prog)
            .arg("--flat-out")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the service runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().expect("ready line").unwrap();
        let pid = ready.strip_prefix("ready ").expect("ready PID").trim().parse().unwrap();
        let (tx, rates) = channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(r) = line.strip_prefix("rate ").and_then(|r| r.trim().parse().ok()) {
                    if tx.send(r).is_err() {
                        break;
                    }
                }
            }
        });
        Program { child, pid, rates }
    }

    /// Forgets the rates so far, and the next one (it may straddle a change).
    fn settle(&self) {
        while self.rates.try_recv().is_ok() {}
        let _ = self.rates.recv_timeout(Duration::from_secs(5));
    }

    /// What /proc says of the program: its state (R, S, T stopped, t stopped by a tracer,
    /// Z), its tracer, what it waits in; or that it is gone.
    fn state(&self) -> String {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return "gone".to_owned();
        };
        let state = stat.rsplit_once(") ").map_or("?", |(_, rest)| &rest[..1]).to_owned();
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let tracer = status.lines().find(|l| l.starts_with("TracerPid:")).unwrap_or("");
        let wchan =
            std::fs::read_to_string(format!("/proc/{}/wchan", self.pid)).unwrap_or_default();
        format!("in state {state}, {tracer}, waiting in {wchan:?}")
    }

    /// The rates of the next `seconds`.
    fn measure(&self, seconds: f64) -> Vec<f64> {
        self.settle();
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        let mut v = Vec::new();
        while Instant::now() < end {
            match self.rates.recv_timeout(Duration::from_secs(5)) {
                Ok(r) => v.push(r),
                Err(e) => {
                    panic!("the program printed no rate for 5 s ({e:?}); it is {}", self.state())
                }
            }
        }
        v
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// `memprof attach OPTS PID` while the rates of `seconds` are taken; then SIGINT. Returns
/// the rates and the times to attach and to detach.
fn attached(p: &Program, opts: &[&str], out: &Path, seconds: f64) -> (Vec<f64>, f64, f64) {
    let t = Instant::now();
    let mut child = Command::new(MEMPROF)
        .arg("attach")
        .args(opts)
        .arg("--force")
        .arg("-o")
        .arg(out)
        .arg(p.pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memprof runs");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let needle = format!("attached to {}", p.pid);
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            panic!(
                "memprof attach {opts:?} ended before attaching:\n{said}{}",
                child.wait().unwrap()
            );
        }
        said.push_str(&line);
        if line.contains(&needle) {
            break;
        }
    }
    let attach_s = t.elapsed().as_secs_f64();
    // The rest of stderr (the top table), read so that memprof never blocks on it.
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let rates = p.measure(seconds);
    let t = Instant::now();
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let detach_s = t.elapsed().as_secs_f64();
    let rest = rest.join().unwrap();
    assert!(status.success(), "memprof attach {opts:?}: {status}\n{said}{rest}");
    (rates, attach_s, detach_s)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut seconds = if args.iter().any(|a| a == "--quick") { 1.5 } else { 4.0 };
    if let Some(s) = args.iter().position(|a| a == "--seconds").and_then(|i| args.get(i + 1)) {
        seconds = s.parse().expect("--seconds S");
    }
    let dir = common::target_dir().join(format!("bench-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("service");
    common::cc("service.c", &prog, &["-O2", "-g", "-pthread", "-fno-optimize-sibling-calls"]);
    let out = dir.join("attach.mprof");

    let p = Program::start(&prog);
    let _ = p.measure(1.0); // warm-up
    let before = p.measure(seconds);
    let (default, attach_default, detach_default) = attached(&p, &[], &out, seconds);
    let between = p.measure(seconds);
    let (i800, attach_800, detach_800) = attached(&p, &["--interval", "800"], &out, seconds);
    let after = p.measure(seconds);
    drop(p);

    let base = median(&before);
    println!("malloc/free pairs per second, median of 250 ms rates, {seconds} s per phase");
    println!("{:<28} {:>14} {:>8} {:>8}", "phase", "pairs/s", "ratio", "rates");
    let row = |name: &str, v: &[f64]| {
        println!("{name:<28} {:>14.0} {:>8.3} {:>8}", median(v), median(v) / base, v.len());
    };
    row("before attach", &before);
    row("attached, default interval", &default);
    row("detached", &between);
    row("attached, --interval 800", &i800);
    row("after detach", &after);
    println!(
        "ratios to before: default {:.3} | interval 800 {:.3} | detached {:.3} | after {:.3}",
        median(&default) / base,
        median(&i800) / base,
        median(&between) / base,
        median(&after) / base
    );
    println!(
        "attach took {attach_default:.2} s, detach {detach_default:.2} s (default interval); \
         attach {attach_800:.2} s, detach {detach_800:.2} s (--interval 800)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
