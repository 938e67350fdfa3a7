//! The HTML report (`memprof report FILE --html OUT.html`, and the page `memprof record`
//! writes beside its SVG) loaded in a real browser: Debian's headless Chromium, driven
//! over the Chrome DevTools Protocol on a pipe (`--remote-debugging-pipe`: NUL-terminated
//! JSON messages, commands on the browser's fd 3, responses on its fd 4). The page must
//! render its timeline and flamegraph; a click on the timeline must show exactly what
//! `memprof report --at <t>ns --view live` reports for the moment the page says it shows;
//! a drag, exactly what `--from/--to --view alloc` reports; its default view, exactly
//! `--view peak`. A screenshot lands in the test's directory (and in `docs/report.png`
//! with `MEMPROF_WRITE_SCREENSHOT=1`). Without Chromium the test says it skipped, or fails
//! when `CI` is set.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::common::{text, MEMPROF};
use crate::programs::{assert_ok, fixture, record, scratch};

const CHROMIUM: &str = "/usr/bin/chromium";

/// A parsed JSON value (what the protocol's responses need; numbers as f64).
#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn parse(s: &str) -> Result<Json, String> {
        serde_json::from_str::<serde_json::Value>(s).map(Json::from).map_err(|e| e.to_string())
    }

    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(kv) => kv.iter().find(|(k, _)| k == key).map_or(&Json::Null, |(_, v)| v),
            _ => &Json::Null,
        }
    }

    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    fn num(&self) -> f64 {
        match self {
            Json::Num(n) => *n,
            other => panic!("not a number: {other:?}"),
        }
    }
}

/// serde_json's value in the test's own shape (the assertions match on it).
impl From<serde_json::Value> for Json {
    fn from(v: serde_json::Value) -> Json {
        use serde_json::Value;
        match v {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(b),
            Value::Number(n) => Json::Num(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => Json::Str(s),
            Value::Array(a) => Json::Arr(a.into_iter().map(Json::from).collect()),
            Value::Object(o) => Json::Obj(o.into_iter().map(|(k, v)| (k, Json::from(v))).collect()),
        }
    }
}

/// A JSON string literal.
fn quote(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// Standard base64 (the screenshot's encoding).
fn base64(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).expect("the screenshot is base64")
}

/// Headless Chromium, one page attached, spoken to over the DevTools pipe.
struct Browser {
    child: Child,
    to: ChildStdin,
    from: Receiver<Vec<u8>>,
    next: u64,
    session: String,
}

impl Browser {
    /// [`Browser::start`], with the viewport every page test uses (1280 × 1000, scale 1).
    fn at_1280x1000(profile_dir: &Path) -> Browser {
        let mut b = Browser::start(profile_dir);
        b.call(
            "Emulation.setDeviceMetricsOverride",
            r#"{"width":1280,"height":1000,"deviceScaleFactor":1,"mobile":false}"#,
        );
        b
    }

    /// Starts Chromium with the protocol on a pipe: the shell gives it our stdin pipe as
    /// fd 3 (commands) and our stdout pipe as fd 4 (responses).
    fn start(profile_dir: &Path) -> Browser {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
            .arg(CHROMIUM)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--no-first-run",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile_dir.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        let to = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, from) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            loop {
                let mut msg = Vec::new();
                match r.read_until(0, &mut msg) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        msg.pop();
                        if tx.send(msg).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut b = Browser { child, to, from, next: 0, session: String::new() };
        let target = b.call("Target.createTarget", r#"{"url":"about:blank"}"#);
        let id = quote(target.get("targetId").str());
        let attached =
            b.call("Target.attachToTarget", &format!(r#"{{"targetId":{id},"flatten":true}}"#));
        b.session = attached.get("sessionId").str().to_owned();
        b
    }

    /// Sends a command (to the attached page once there is one) and waits for its result.
    fn call(&mut self, method: &str, params: &str) -> Json {
        self.next += 1;
        let id = self.next;
        let session = if self.session.is_empty() {
            String::new()
        } else {
            format!(r#","sessionId":{}"#, quote(&self.session))
        };
        let msg = format!(r#"{{"id":{id},"method":"{method}","params":{params}{session}}}"#);
        self.to.write_all(msg.as_bytes()).unwrap();
        self.to.write_all(b"\0").unwrap();
        self.to.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let raw = match self.from.recv_timeout(left) {
                Ok(raw) => raw,
                Err(RecvTimeoutError::Timeout) => panic!("no answer to {method} in 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium closed the pipe"),
            };
            let v = Json::parse(&String::from_utf8_lossy(&raw)).expect("the protocol speaks JSON");
            if v.get("id") != &Json::Num(id as f64) {
                continue; // an event
            }
            if v.get("error") != &Json::Null {
                panic!("{method}: {:?}", v.get("error"));
            }
            return v.get("result").clone();
        }
    }

    /// Evaluates `expr` in the page; its value (JSON-serializable) is returned.
    fn eval(&mut self, expr: &str) -> Json {
        let r = self.call(
            "Runtime.evaluate",
            &format!(r#"{{"expression":{},"returnByValue":true}}"#, quote(expr)),
        );
        if r.get("exceptionDetails") != &Json::Null {
            panic!("{expr}: {:?}", r.get("exceptionDetails"));
        }
        r.get("result").get("value").clone()
    }

    /// A JSON object the page builds (`expr` evaluates to JSON text).
    fn json(&mut self, expr: &str) -> Json {
        let s = self.eval(&format!("JSON.stringify({expr})"));
        Json::parse(s.str()).unwrap()
    }

    fn mouse(&mut self, kind: &str, x: f64, y: f64) {
        let button = if kind == "mouseMoved" { "none" } else { "left" };
        self.call(
            "Input.dispatchMouseEvent",
            &format!(r#"{{"type":"{kind}","x":{x},"y":{y},"button":"{button}","clickCount":1}}"#),
        );
    }

    fn click(&mut self, x: f64, y: f64) {
        self.mouse("mouseMoved", x, y);
        self.mouse("mousePressed", x, y);
        self.mouse("mouseReleased", x, y);
    }

    fn drag(&mut self, x0: f64, x1: f64, y: f64) {
        self.mouse("mouseMoved", x0, y);
        self.mouse("mousePressed", x0, y);
        for i in 1..=5 {
            self.mouse("mouseMoved", x0 + (x1 - x0) * f64::from(i) / 5.0, y);
        }
        self.mouse("mouseReleased", x1, y);
    }

    /// Navigates to `page` and waits until its script has rendered (body's data-ready).
    fn open(&mut self, page: &Path) {
        let url = format!("file://{}", page.display());
        self.call("Page.navigate", &format!(r#"{{"url":{}}}"#, quote(&url)));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = self
                .eval("document.readyState === 'complete' && document.body.dataset.ready === '1'");
            if ready == Json::Bool(true) {
                return;
            }
            assert!(Instant::now() < deadline, "{} did not render in 30 s", page.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn screenshot(&mut self, out: &Path) {
        let r = self.call("Page.captureScreenshot", r#"{"format":"png"}"#);
        let png = base64(r.get("data").str());
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(out, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sum of the values of folded lines (`stack value`).
fn folded_sum(path: &Path) -> u64 {
    let s = std::fs::read_to_string(path).unwrap();
    s.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum()
}

/// `memprof report FILE ARGS --collapsed OUT`: the sum of its lines.
fn report_sum(dir: &Path, file: &Path, args: &[&str], name: &str) -> u64 {
    let out = dir.join(name);
    let o = Command::new(MEMPROF)
        .arg("report")
        .arg(file)
        .args(args)
        .arg("--collapsed")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    folded_sum(&out)
}

/// True when Chromium is installed; otherwise says on the terminal that the `what` check
/// was skipped (and fails under CI, which installs it).
fn have_chromium(what: &str) -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but {CHROMIUM} is missing");
    crate::common::skipped(what, "install Debian's chromium: apt-get install chromium");
    false
}

#[test]
fn the_html_report_renders_and_agrees_with_the_reports() {
    if !have_chromium("the HTML report's browser test") {
        return;
    }
    let dir = scratch("browser");
    let out = record(&dir, &["--interval", "1", "-o", "t.mprof"], &fixture("timed"), &[]);
    assert_ok(&out, 0);
    let file = dir.join("t.mprof");
    // The middles of the pauses between phases (the phases run late under load).
    let [_, p2, p3, p4] = crate::time::pause_middles(&out, &file);
    assert!(text(&out.stderr).contains("wrote HTML report"), "{}", text(&out.stderr));
    assert!(std::fs::metadata(dir.join("t.mprof.html")).unwrap().len() > 10_000);
    let page: PathBuf = dir.join("report.html");
    let o = Command::new(MEMPROF).arg("report").arg(&file).arg("--html").arg(&page).output();
    let o = o.unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    for external in ["http://", "https://", "<link", "src=\""] {
        let hits: Vec<_> = html
            .match_indices(external)
            .filter(|(i, _)| !html[*i..].starts_with("http://www.w3.org/2000/svg"))
            .collect();
        assert!(hits.is_empty(), "the page refers to something outside it: {external}");
    }

    let mut b = Browser::at_1280x1000(&dir.join("chromium-profile"));
    b.open(&page);
    let load_ms = b.eval("window.memprof.loadMs").num();
    eprintln!("browser: the page rendered in {load_ms:.0} ms");

    // Rendered: a timeline and a flamegraph with frames, both of real size.
    let shape = b.json(
        "(() => { const r = (id) => { const b = document.getElementById(id).getBoundingClientRect(); \
         return [b.width, b.height]; }; const f = document.getElementById('flame'); \
         return { tl: r('timeline'), fl: r('flame'), frames: +f.dataset.frames, \
         rects: f.querySelectorAll('rect').length, paths: document.querySelectorAll('#timeline path').length, \
         view: f.dataset.view, total: +f.dataset.total, ns: +document.getElementById('moment').dataset.ns, \
         rows: document.querySelectorAll('#sites tbody tr').length, \
         rss: !document.getElementById('legend-rss').hidden, \
         memory: [...document.querySelectorAll('#memory li')].map((l) => l.textContent) }; })()",
    );
    for (k, min) in [("tl", 100.0), ("fl", 30.0)] {
        let Json::Arr(wh) = shape.get(k) else { panic!("{shape:?}") };
        assert!(wh[0].num() > 300.0 && wh[1].num() > min, "{k}: {shape:?}");
    }
    assert!(shape.get("frames").num() >= 3.0, "{shape:?}");
    assert_eq!(shape.get("rects").num(), shape.get("frames").num(), "{shape:?}");
    // `record` read the resident size: its line is drawn too, and named in the legend.
    assert!(shape.get("paths").num() >= 3.0, "the live heap, the rate, the RSS: {shape:?}");
    assert_eq!(shape.get("rss"), &Json::Bool(true), "{shape:?}");
    // And the header says it in words, as the top table does: the resident size, the gap
    // explained, how the program ended.
    let Json::Arr(memory) = shape.get("memory") else { panic!("{shape:?}") };
    let said: Vec<&str> = memory.iter().map(Json::str).collect();
    assert!(said.iter().any(|l| l.starts_with("resident: ")), "{said:?}");
    assert!(said.iter().any(|l| l.contains(" = live heap ")), "{said:?}");
    assert!(said.contains(&"ended: exit status 0"), "{said:?}");
    assert!(shape.get("rows").num() >= 2.0, "{shape:?}");

    // The default view is the live set at the peak: exactly --view peak.
    assert_eq!(shape.get("view").str(), "peak");
    let peak = report_sum(&dir, &file, &["--view", "peak"], "peak.folded");
    assert_eq!(shape.get("total").num() as u64, peak, "{shape:?}");
    assert!(peak >= 1_200_000, "keep_site + peak_site at least: {peak}");

    // A click in the second pause (the peak phase, nominally 0.3 s) shows the live set at
    // the bucket boundary the page snapped to: exactly `--at <that>ns --view live`.
    let y = b.eval("window.memprof.clientY()").num();
    let x = b.eval(&format!("window.memprof.clientX({p2})")).num();
    b.click(x, y);
    let live = b.json(
        "({ view: document.getElementById('flame').dataset.view, \
         total: +document.getElementById('flame').dataset.total, \
         ns: +document.getElementById('moment').dataset.ns, \
         text: document.getElementById('moment').textContent })",
    );
    assert_eq!(live.get("view").str(), "live", "{live:?}");
    let t = live.get("ns").num() as u64;
    let w = b.eval("window.memprof.bucketNs").num() as u64;
    assert_eq!(t % w, 0, "a bucket boundary: {live:?}");
    assert!(t.abs_diff(p2) < 50_000_000, "near the second pause's middle {p2}: {live:?}");
    let grouped: String = t.to_string();
    assert!(live.get("text").str().replace('\u{2009}', "").contains(&grouped), "{live:?}");
    let at = report_sum(&dir, &file, &["--at", &format!("{t}ns"), "--view", "live"], "at.folded");
    assert_eq!(live.get("total").num() as u64, at, "live at {t} ns: {live:?}");
    assert!(at >= 1_200_000, "keep_site + peak_site: {at}");

    // The search box sums what matches.
    let matched = b.json(
        "(() => { const s = document.getElementById('search'); s.value = 'peak_site'; \
         s.dispatchEvent(new Event('input')); const m = document.getElementById('match'); \
         return { bytes: +m.dataset.bytes, hits: document.querySelectorAll('#flame g.hit').length }; })()",
    );
    assert_eq!(matched.get("bytes").num(), 1_000_000.0, "{matched:?}");
    assert!(matched.get("hits").num() >= 1.0, "{matched:?}");

    // A click on a frame zooms into it.
    let frame = b.json(
        "(() => { const g = document.querySelector('#flame g.hit'); const r = g.getBoundingClientRect(); \
         return { x: r.left + r.width / 2, y: r.top + r.height / 2, n: g.dataset.n }; })()",
    );
    b.click(frame.get("x").num(), frame.get("y").num());
    let zoomed = b.json(
        "(() => { const g = document.querySelector('#flame g.hit:not(.anc)'); \
         return { n: g ? g.dataset.n : '', w: g ? g.getBoundingClientRect().width : 0, \
         full: document.getElementById('flame').getBoundingClientRect().width }; })()",
    );
    assert_eq!(zoomed.get("n").str(), frame.get("n").str(), "{zoomed:?}");
    assert!(zoomed.get("w").num() > zoomed.get("full").num() * 0.95, "zoomed: {zoomed:?}");
    b.screenshot(&dir.join("report-zoomed.png"));
    b.eval("(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); document.getElementById('reset').click(); return 1; })()");

    // A drag from the third pause to the fourth (nominally 0.5 s to 0.7 s) shows what
    // that range allocated: churn_site's 1 000 000 B.
    let (x0, x1) = (
        b.eval(&format!("window.memprof.clientX({p3})")).num(),
        b.eval(&format!("window.memprof.clientX({p4})")).num(),
    );
    b.drag(x0, x1, y);
    let range = b.json(
        "(() => { const f = document.getElementById('flame'); \
         return { view: f.dataset.view, total: +f.dataset.total, from: +f.dataset.from, to: +f.dataset.to }; })()",
    );
    assert_eq!(range.get("view").str(), "alloc", "{range:?}");
    let (from, to) = (range.get("from").num() as u64, range.get("to").num() as u64);
    let alloc = report_sum(
        &dir,
        &file,
        &["--from", &format!("{from}ns"), "--to", &format!("{to}ns"), "--view", "alloc"],
        "range.folded",
    );
    assert_eq!(range.get("total").num() as u64, alloc, "{range:?}");
    assert!(alloc >= 1_000_000, "churn_site's blocks: {alloc}");

    // Back to the moment in the peak phase for the picture, the pointer out of the way.
    b.click(x, y);
    b.mouse("mouseMoved", 2.0, 2.0);
    b.screenshot(&dir.join("report.png"));
    if std::env::var_os("MEMPROF_WRITE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(dir.join("report.png"), docs.join("report.png")).unwrap();
    }
    let mut png = Vec::new();
    std::fs::File::open(dir.join("report.png")).unwrap().read_to_end(&mut png).unwrap();
    assert!(png.len() > 20_000, "a screenshot with something in it: {} bytes", png.len());
}

/// The page of a process tree (`record --follow-forks` of `sh -c "sites 1; diffsites"`):
/// one page, a process selector with every process; all processes: the merged flamegraph,
/// whose whole-run allocations are exactly `report DIR`'s; one process: its timeline, and
/// exactly what `report ITS-FILE` says of it, at its peak and over the run.
#[test]
fn the_tree_page_shows_every_process_and_each_alone() {
    if !have_chromium("the tree page's browser test") {
        return;
    }
    let dir = scratch("browser-tree");
    let cmd = format!("'{}' 1; '{}'", fixture("sites").display(), fixture("diffsites").display());
    let out = record(
        &dir,
        &["--interval", "1", "--follow-forks", "-o", "t.mprof"],
        Path::new("/bin/sh"),
        &["-c", &cmd],
    );
    assert_ok(&out, 0);
    let page = dir.join("t.mprof.html");
    let tree = dir.join("t.mprof.d");
    let children = memprof::profile::tree::children(&dir.join("t.mprof"));
    assert_eq!(children.len(), 2, "{children:?}");

    let mut b = Browser::at_1280x1000(&dir.join("chromium-profile"));
    b.open(&page);
    let shape = b.json(
        "(() => { const s = document.getElementById('proc'); return { \
         shown: !document.getElementById('procs').hidden, options: s.options.length, \
         texts: [...s.options].map((o) => o.textContent), n: window.memprof.processes, \
         prog: document.getElementById('prog').textContent }; })()",
    );
    assert_eq!(shape.get("shown"), &Json::Bool(true), "{shape:?}");
    assert_eq!(shape.get("options").num(), 4.0, "all, and each of 3 processes: {shape:?}");
    assert_eq!(shape.get("n").num(), 3.0, "{shape:?}");
    let Json::Arr(texts) = shape.get("texts") else { panic!("{shape:?}") };
    assert!(texts.iter().any(|t| t.str().starts_with("diffsites [pid ")), "{shape:?}");
    assert!(shape.get("prog").str().ends_with("and 2 other processes"), "{shape:?}");

    let view = |b: &mut Browser, proc: &str, view: &str| -> Json {
        b.json(&format!(
            "(() => {{ const s = document.getElementById('proc'); s.value = '{proc}'; \
             s.dispatchEvent(new Event('change')); \
             document.querySelector('[data-view={view}]').click(); \
             const f = document.getElementById('flame'); \
             return {{ view: f.dataset.view, total: +f.dataset.total, frames: +f.dataset.frames, \
             paths: document.querySelectorAll('#timeline path').length, \
             rows: document.querySelectorAll('#sites tbody tr').length, \
             what: document.getElementById('what').textContent }}; }})()"
        ))
    };
    // All processes, the whole run's allocations: the merged tree's.
    let all = view(&mut b, "-1", "alloc");
    let merged = report_sum(&dir, &tree, &["--view", "alloc"], "tree.folded");
    assert_eq!(all.get("total").num() as u64, merged, "{all:?}");
    assert!(all.get("frames").num() >= 6.0 && all.get("paths").num() >= 2.0, "{all:?}");

    // diffsites alone: its file's numbers, at its own peak and over the run.
    let i = texts.iter().position(|t| t.str().starts_with("diffsites [pid ")).unwrap() - 1;
    let file = children
        .iter()
        .find(|c| {
            let name = c.file_name().unwrap().to_string_lossy();
            texts[i + 1].str().ends_with(&format!("t.mprof.d/{name}"))
        })
        .unwrap_or_else(|| panic!("{:?} names one of {children:?}", texts[i + 1]));
    let one = view(&mut b, &i.to_string(), "alloc");
    let alone = report_sum(&dir, file, &["--view", "alloc"], "one.folded");
    assert_eq!(one.get("total").num() as u64, alone, "{one:?}");
    assert!(alone < merged, "one process is part of the tree");
    let peak = view(&mut b, &i.to_string(), "peak");
    let at_peak = report_sum(&dir, file, &["--view", "peak"], "one-peak.folded");
    assert_eq!(peak.get("total").num() as u64, at_peak, "{peak:?}");
    assert!(peak.get("rows").num() >= 1.0 && peak.get("paths").num() >= 2.0, "{peak:?}");
    b.mouse("mouseMoved", 2.0, 2.0);
    b.screenshot(&dir.join("tree.png"));
}

/// A program whose path spells the template's placeholders and closes a script element
/// (`…/x{{DATA}}y</script>{{DATA}}{{JS}}`: its directory is `x{{DATA}}y<`): its page
/// renders as any other (the flamegraph and the sites), the name shown as text.
#[test]
fn a_program_named_like_the_template_renders_normally() {
    if !have_chromium("the HTML report's browser test") {
        return;
    }
    let dir = scratch("browser-placeholders");
    let named = dir.join("x{{DATA}}y<");
    std::fs::create_dir_all(&named).unwrap();
    let prog = named.join("script>{{DATA}}{{JS}}");
    std::fs::copy(fixture("sites"), &prog).unwrap();
    let out = record(&dir, &["--interval", "1", "-o", "t.mprof"], &prog, &[]);
    assert_ok(&out, 0);
    let page = dir.join("t.html");
    let o = Command::new(MEMPROF)
        .arg("report")
        .arg(dir.join("t.mprof"))
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let mut b = Browser::at_1280x1000(&dir.join("chromium-profile"));
    b.open(&page);
    let shape = b.json(
        "(() => { const f = document.getElementById('flame'); \
         return { frames: +f.dataset.frames, rects: f.querySelectorAll('rect').length, \
         rows: document.querySelectorAll('#sites tbody tr').length, title: document.title, \
         scripts: document.scripts.length, text: document.body.innerText, \
         sites: document.getElementById('sites').innerText }; })()",
    );
    assert!(shape.get("frames").num() >= 3.0, "{shape:?}");
    assert_eq!(shape.get("rects").num(), shape.get("frames").num(), "{shape:?}");
    assert!(shape.get("rows").num() >= 2.0, "{shape:?}");
    assert!(shape.get("sites").str().contains("leak_site"), "{shape:?}");
    assert_eq!(shape.get("scripts").num(), 2.0, "the data and the code, nothing else: {shape:?}");
    assert!(shape.get("title").str().contains("script>{{DATA}}{{JS}}"), "{shape:?}");
    assert!(shape.get("text").str().contains("x{{DATA}}y</script>{{DATA}}{{JS}}"), "{shape:?}");
}
