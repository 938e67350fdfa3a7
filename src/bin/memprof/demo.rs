//! `memprof demo`: profiles the bundled example workloads in this process and writes their
//! flamegraphs, profiles and HTML pages to `target/memprof-demo/` (not tracked: the
//! committed gallery, `flamegraphs/*.svg`, is regenerated with `--out flamegraphs`).

#[allow(dead_code)]
#[path = "../../../examples/gc_workload/workload.rs"]
mod gc_workload;
#[allow(dead_code)]
#[path = "../../../examples/leaky_cache/workload.rs"]
mod leaky_cache;
#[allow(dead_code)]
#[path = "../../../examples/worst_case/workload.rs"]
mod worst_case;

use clap::Args;
use memprof::profile::load::{load, LoadOptions};
use memprof::profile::Profile;
use memprof::record::Bundled;
use memprof::report::command::read_profiles;
use memprof::report::{self, FlameOptions, TopOptions, View};
use memprof::report::{write_file, write_html};
use memprof::{Config, Error, Recorder};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Directory for the flamegraphs, profiles and HTML pages (`--out flamegraphs`
    /// regenerates the committed gallery).
    #[arg(long, default_value = "target/memprof-demo")]
    pub out: PathBuf,
    /// Run the workloads with fewer iterations (seconds instead of tens of seconds).
    #[arg(long)]
    pub quick: bool,
}

pub fn run(args: &DemoArgs, preload: &Bundled) -> Result<(), Error> {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::io(format!("cannot create {}", args.out.display()), e))?;
    println!("memprof demo: writing to {} (--out DIR for another directory)\n", args.out.display());

    // 1. statmemprof's worst case (ocaml/ocaml#8731), with its own parameters: λ = 0.01, depth 10.
    let iterations = if args.quick { 200_000 } else { worst_case::ITERATIONS };
    println!(
        "== worst_case: {iterations} iterations, rate 0.01 per word (interval 800 B), depth 10"
    );
    let started = Instant::now();
    let session = memprof::start(worst_case::config(), Recorder::new())?;
    worst_case::run(iterations);
    let profile = session.stop()?.finish()?;
    println!("{} samples in {:.2} s", profile.counts.samples, started.elapsed().as_secs_f64());
    show(&profile, &args.out, "worst_case", &[View::Alloc])?;

    // 2. A leaky cache at the default interval: the alloc and live views disagree.
    let requests = if args.quick { 20_000 } else { leaky_cache::REQUESTS };
    println!("\n== leaky_cache: {requests} requests, default interval (512 KiB)");
    let mprof = args.out.join("leaky_cache.mprof");
    let session = memprof::start(Config::default(), Recorder::to_file(&mprof))?;
    let cache = leaky_cache::run(requests);
    let profile = session.stop()?.finish()?;
    println!(
        "{} entries cached, {} samples, profile {}",
        cache.entries(),
        profile.counts.samples,
        mprof.display()
    );
    drop(cache);
    show(&profile, &args.out, "leaky_cache", &[View::Alloc, View::Live])?;
    page(&profile, &mprof, &args.out, "leaky_cache")?;

    // 3. The managed heap: a steady live set with churn, collected incrementally; the
    //    profile holds the sampled blocks and every cycle's mark timing.
    let steps = if args.quick { 200_000 } else { gc_workload::STEPS };
    println!("\n== gc_workload: {steps} steps on memprof::gc, interval 16 KiB");
    let mprof = args.out.join("gc_workload.mprof");
    let session = memprof::start(gc_workload::config(), Recorder::to_file(&mprof))?;
    let report = gc_workload::run(gc_workload::RECORDS, steps);
    let profile = session.stop()?.finish()?;
    println!(
        "{} GC cycles, {} samples, {} GC cycles in the profile {}",
        report.cycles.len(),
        profile.counts.samples,
        profile.gc_cycles.len(),
        mprof.display()
    );
    show(&profile, &args.out, "gc_workload", &[View::Live, View::Gc])?;
    page(&profile, &mprof, &args.out, "gc_workload")?;

    // 4. The whole `memprof record` path: the leaky cache again, as an unmodified program
    //    (this executable, with no session of its own), through the preload library.
    println!("\n== memprof record -- memprof __workload leaky_cache {requests}");
    let mprof = args.out.join("record_leaky_cache.mprof");
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find this executable", e))?;
    let workload = vec!["__workload".into(), "leaky_cache".into(), requests.to_string().into()];
    let run = memprof::record::record_program(preload, &mprof, exe.into_os_string(), workload)?;
    if run.exit_code != 0 {
        return Err(Error::Other(format!("the recorded workload exited with {}", run.exit_code)));
    }
    // As `memprof record` does: the symbols are resolved now and written into the file.
    let (profile, _) = read_profiles(std::slice::from_ref(&run.output), true)?;
    println!(
        "{} samples through the preload library, profile {}",
        profile.counts.samples,
        mprof.display()
    );
    show(&profile, &args.out, "record_leaky_cache", &[View::Alloc, View::Live])?;
    Ok(())
}

fn show(profile: &Profile, out: &Path, name: &str, views: &[View]) -> Result<(), Error> {
    print!("{}", report::top_table(profile, &TopOptions { limit: 8, ..Default::default() }));
    for &view in views {
        let path = out.join(format!("{name}.{}.svg", view.name()));
        write_file(&path, |w| {
            report::flamegraph(profile, &FlameOptions { view, ..Default::default() }, w)
        })?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The interactive HTML report of the recording `mprof`, as `<name>.html` in `out`.
fn page(profile: &Profile, mprof: &Path, out: &Path, name: &str) -> Result<(), Error> {
    // Read back from its file with the timeline the page shows.
    let options = LoadOptions { timeline: true, ..Default::default() };
    let read = load(&[mprof.to_path_buf()], options)?.profile;
    debug_assert_eq!(read.counts.samples, profile.counts.samples);
    write_html(&read, &out.join(format!("{name}.html")))
}

/// `memprof __workload NAME SIZE`: a demo workload with no session of its own, for the
/// demo to record through the preload library.
pub fn workload(name: &str, size: u64) -> Result<(), Error> {
    match name {
        "leaky_cache" => {
            let cache = leaky_cache::run(size);
            println!("{} entries cached", cache.entries());
            // A server's cache lives until the process ends: the profile's live view shows
            // who holds it at exit.
            std::mem::forget(cache);
            Ok(())
        }
        other => Err(Error::Config(format!("unknown workload {other:?} (leaky_cache)"))),
    }
}
