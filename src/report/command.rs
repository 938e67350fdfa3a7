//! The `report` and `diff` commands as the terminal sees them: their arguments (clap, the
//! `cli` feature; the output flags are the exporters' of `super::registry::EXPORTERS`), the
//! files a path names, the time window, the tables on stdout and the outputs written
//! (`super::write`). Messages go to stderr, escaped for the terminal.

use super::export::{ExportOptions, Exporter};
use super::registry::EXPORTERS;
use super::text::{printable, printable_os};
use super::top::TopOptions;
use super::write::{write_diff_outputs, write_outputs, Outputs};
use super::{GroupBy, View};
use crate::error::Error;
use crate::profile::load::{load_with_folded, LoadOptions, Message, Process};
use crate::profile::replay::{parse_duration, parse_moment, Window};
use crate::profile::site::SiteSkip;
use crate::profile::symbolize::Loaders;
use crate::profile::Profile;
use crate::record::command::bundled::Bundled;
use clap::{value_parser, Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use std::path::PathBuf;

/// `memprof report`: what to read and what to write (the command's arguments).
#[derive(Args, Debug)]
pub struct ReportRequest {
    /// The profiles to read (.mprof); several files are reported together, and so is a
    /// process tree recorded with --follow-forks, named by its root file (app.mprof) or its
    /// directory (app.mprof.d/).
    #[arg(required = true, value_name = "FILE|DIR")]
    files: Vec<PathBuf>,
    /// What to count, and what the top table and the JSON's sites are ordered by: alloc
    /// (every sampled allocation), live (blocks still allocated at the end), peak (blocks
    /// live when the heap peaked; one process at a time), short-lived (blocks freed within
    /// --short-lived) or gc (estimated GC mark time by allocation site, for profiles of a
    /// managed heap; the table stays ordered by allocated bytes).
    #[arg(long, default_value = "alloc")]
    view: View,
    /// Print a machine-readable summary (JSON, schema memprof-report/1: the live heap and
    /// its peak, resident memory and what explains its gap, how the program ended, the
    /// top sites) on stdout instead of the tables.
    #[arg(long)]
    json: bool,
    /// Number of sites in the top table.
    #[arg(long, default_value_t = 20)]
    top: usize,
    #[command(flatten)]
    pub(crate) sites: SiteArgs,
    /// `--flamegraph`, `--pprof`, …: one flag per format of the registry.
    #[command(flatten)]
    outputs: ReportOutputs,
    /// Report the heap at one moment: live = the blocks live then, alloc = what was
    /// allocated before it (a time since the start, 1.5s, 250ms, 40us, 1200ns, or a share of
    /// the run, 40%). Every table and output follows.
    #[arg(long, value_name = "TIME", conflicts_with_all = ["from", "to"])]
    at: Option<String>,
    /// Report only what was allocated from this time on (see --at for the forms); live =
    /// what of it was still live at --to (or at the end).
    #[arg(long, value_name = "TIME")]
    from: Option<String>,
    /// Report only what was allocated before this time (see --from).
    #[arg(long, value_name = "TIME")]
    to: Option<String>,
    /// A freed block is short-lived when it lived less than this (e.g. 100us, 10ms, 1s):
    /// the short-lived view and the top table's short-lived section [default: 1ms]
    #[arg(long, value_name = "DURATION")]
    short_lived: Option<String>,
    /// span: group by tracing span path first (profiles of programs with memprof's
    /// `SpanLayer`): the spans become root frames of the flamegraph and folded stacks, and
    /// the top table's sites read `span › site` (pprof samples always carry a `span` label).
    #[arg(long, value_name = "span|stack", default_value = "stack")]
    group_by: GroupBy,
}

/// How sites are named and shown: `record`'s summary, `report` and `diff`.
#[derive(Args, Debug)]
pub struct SiteArgs {
    /// Frames whose function name matches REGEX (Rust regex syntax, unanchored) are
    /// allocation plumbing, like the program's own malloc wrappers: the site is their
    /// caller, in every report (pprof leaves them out too). Repeatable; the environment
    /// variable MEMPROF_SITE_SKIP adds one more expression.
    #[arg(long = "site-skip", value_name = "REGEX")]
    site_skip: Vec<String>,
    /// After the top table, print each shown site's largest stack, N frames from the site
    /// outwards (the site first).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) backtrace: usize,
}

/// The environment variable that adds one `--site-skip` expression.
const ENV_SITE_SKIP: &str = "MEMPROF_SITE_SKIP";

impl SiteArgs {
    pub(crate) fn skip(&self) -> Result<SiteSkip, Error> {
        site_skip(&self.site_skip)
    }
}

/// The expressions of `--site-skip` and `MEMPROF_SITE_SKIP`, compiled (an expression that
/// does not compile is an error that names it and where it came from).
fn site_skip(patterns: &[String]) -> Result<SiteSkip, Error> {
    let mut skip = SiteSkip::default();
    for p in patterns {
        skip.add(p, "--site-skip")?;
    }
    match std::env::var(ENV_SITE_SKIP) {
        Ok(p) if !p.is_empty() => skip.add(&p, ENV_SITE_SKIP)?,
        Ok(_) | Err(std::env::VarError::NotPresent) => {}
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Error::Config(format!("{ENV_SITE_SKIP} is not valid UTF-8")));
        }
    }
    Ok(skip)
}

/// Reads one or more profiles ([`crate::profile::load::load`]), printing their warnings and notes on
/// stderr; `recorded`: just recorded (their symbols are resolved and written into them).
pub fn read_profiles(files: &[PathBuf], recorded: bool) -> Result<(Profile, Vec<String>), Error> {
    let options = LoadOptions { recorded, timeline: false };
    read_profiles_folded(
        files,
        options,
        &mut Loaders::cached(Bundled::symbol_cache_dir()),
        Vec::new(),
    )
    .map(|(p, l, _)| (p, l))
}

/// [`read_profiles`] with `options`, the profiles of some files already folded (`memprof
/// record`'s collector's: [`crate::profile::load::load_with_folded`]).
pub(crate) fn read_profiles_folded(
    files: &[PathBuf],
    options: LoadOptions,
    loaders: &mut Loaders,
    folded: Vec<(PathBuf, Profile)>,
) -> Result<(Profile, Vec<String>, Vec<Process>), Error> {
    let loaded = load_with_folded(files, options, loaders, folded)?;
    for m in &loaded.messages {
        match m {
            // They name files, modules and programs of the recording.
            Message::Warning(w) => eprintln!("memprof: warning: {}", printable(w)),
            Message::Note(n) => eprintln!("memprof: note: {}", printable(n)),
        }
    }
    Ok((loaded.profile, loaded.labels, loaded.processes))
}

/// `memprof report FILE…`: the top table (and a tree's process table) on stdout, the
/// outputs asked for written.
pub fn report(args: &ReportRequest) -> Result<(), Error> {
    let skip = args.sites.skip()?;
    let alone = if args.view == View::Peak {
        Some("--view peak reports")
    } else if args.at.is_some() || args.from.is_some() || args.to.is_some() {
        Some("--at, --from and --to report")
    } else if args.short_lived.is_some() {
        Some("--short-lived reports")
    } else {
        None
    };
    let files = report_files(&args.files, alone)?;
    let outputs = &args.outputs.0;
    // Before anything is read or written: a recording is never replaced by its report.
    outputs.check_not_inputs(&files)?;
    let options = LoadOptions { recorded: false, timeline: outputs.whole_recording() };
    let (mut profile, _, processes) = read_profiles_folded(
        &files,
        options,
        &mut Loaders::cached(Bundled::symbol_cache_dir()),
        Vec::new(),
    )?;
    profile.site_skip = skip;
    check_view(&profile, args.view)?;
    let window = report_window(args, &profile)?;
    let threshold = args.short_lived.as_deref().map(parse_duration).transpose()?;
    if window.is_some() || threshold.is_some() {
        // A second pass over the recording (one file: `report_files`), with the window
        // and the threshold.
        if let Some(ns) = threshold {
            profile.lifetimes.short_lived_ns = ns;
        }
        profile.restrict(&files[0], window.unwrap_or(Window::ALL))?;
    }
    // An output written to the standard output (`--collapsed -`) keeps it to itself: the
    // tables go to the standard error then.
    let to_stdout = outputs.to_stdout();
    let say = |text: &str| {
        if to_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    };
    let top = TopOptions {
        limit: args.top,
        group_by: args.group_by,
        backtrace: args.sites.backtrace,
        view: args.view,
        ..Default::default()
    };
    if args.json {
        if to_stdout {
            return Err(Error::Config(
                "--json prints on the standard output, which another output was given (-)".into(),
            ));
        }
        let v = super::json::summary(&profile, &processes, args.group_by, &top);
        println!("{v:#}");
    } else {
        if processes.len() > 1 {
            say(&format!("{}\n", super::tree::process_table(&processes, &Default::default())));
        }
        say(&super::top::top_table(&profile, &top));
    }
    if let Some(note) = super::unwinding::shallow_stacks_note(&profile) {
        eprintln!("memprof: note: {note}");
    }
    let options = ExportOptions {
        view: args.view,
        group_by: args.group_by,
        processes: &processes,
        ..Default::default()
    };
    write_outputs(&profile, &options, outputs, true)
}

/// Why `view` has nothing to count in `profile`, if so: `--view gc` of a recording without
/// garbage-collection cycles (only a managed heap, `memprof::gc`, records them) would print
/// an empty flamegraph and no reason.
pub(crate) fn view_unavailable(profile: &Profile, view: View) -> Option<&'static str> {
    (view == View::Gc && profile.gc_cycles.is_empty()).then_some(
        "--view gc: this recording has no garbage-collection cycles (only programs that use \
         memprof::gc's managed heap record them); try --view alloc, live or peak",
    )
}

/// [`view_unavailable`] as an error, before any output is written.
fn check_view(profile: &Profile, view: View) -> Result<(), Error> {
    match view_unavailable(profile, view) {
        Some(why) => Err(Error::Config(why.into())),
        None => Ok(()),
    }
}

/// The files `memprof report` reads for `paths`: one path may name a process tree (its
/// directory, or its root file with the directory beside it), which stands for all its
/// files. `alone`: the option that reports one process at a time, if one was given; then
/// a root file stands for itself (with a note), and a directory or several files are
/// refused with an error that names a file to pass.
fn report_files(paths: &[PathBuf], alone: Option<&str>) -> Result<Vec<PathBuf>, Error> {
    let one_of = |files: &[PathBuf], first: &str| -> String {
        let mut shown: Vec<String> =
            files.iter().take(2).map(|f| f.display().to_string()).collect();
        shown.dedup();
        format!(
            "{}{first}{}",
            shown[0],
            shown.get(1).map(|s| format!(" or {s}")).unwrap_or_default()
        )
    };
    if let [path] = paths {
        let named = crate::profile::tree::Named::of(path);
        if named.children.is_empty() {
            return Ok(vec![named.root]);
        }
        let Some(what) = alone else {
            return Ok(named.files());
        };
        if named.by_dir {
            return Err(Error::Config(format!(
                "{what} one process at a time (each has its own clock and peak): \
                 pass one file of the tree, e.g. {}",
                one_of(&named.files(), " (the program's)")
            )));
        }
        eprintln!(
            "memprof: note: {what} one process at a time: {} alone is reported, not \
             the {} other processes of its tree (pass one of their files for another, e.g. \
             {})",
            printable_os(&named.root),
            named.children.len(),
            printable_os(&named.children[0])
        );
        return Ok(vec![named.root]);
    }
    if let Some(what) = alone.filter(|_| paths.len() > 1) {
        return Err(Error::Config(format!(
            "{what} one process at a time (each has its own clock and peak): pass one \
             of the files, e.g. {}",
            one_of(paths, "")
        )));
    }
    Ok(paths.to_vec())
}

/// The range of the recording that `--at`, `--from` and `--to` ask for, if any.
fn report_window(args: &ReportRequest, profile: &Profile) -> Result<Option<Window>, Error> {
    let end = profile.end_ns;
    let moment = |s: &Option<String>| s.as_deref().map(|s| parse_moment(s, end)).transpose();
    if let Some(t) = moment(&args.at)? {
        return Ok(Some(Window::at(t)));
    }
    let (from, to) = (moment(&args.from)?, moment(&args.to)?);
    if from.is_none() && to.is_none() {
        return Ok(None);
    }
    let w = Window { from_ns: from.unwrap_or(0), to_ns: to.unwrap_or(u64::MAX) };
    if w.from_ns >= w.to_ns {
        return Err(Error::Config(format!(
            "--from {} is not before --to {}",
            args.from.as_deref().unwrap_or("0"),
            args.to.as_deref().unwrap_or("100%")
        )));
    }
    Ok(Some(w))
}

/// `memprof diff`: the two recordings and the outputs asked for (the command's arguments).
#[derive(Args, Debug)]
#[command(after_help = "Every number is in estimated bytes, so the two profiles may have been \
recorded at different intervals (or one in the exact mode). A change is flagged (*) when it \
is not sampling noise: two-sided tests, Holm-corrected over every (site, quantity) \
difference, family-wise false-positive rate 5 %. A 30 % change is detected reliably from \
about 1 000 expected samples of the site per profile; at 100 samples it is within the noise.")]
pub struct DiffRequest {
    /// The earlier profile (.mprof).
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The later profile (.mprof), compared with BASE.
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// Show every site, not only those with a significant change.
    #[arg(long)]
    all: bool,
    /// What the output files compare: alloc (every sampled allocation), live (blocks still
    /// allocated at the end) or peak (blocks allocated when each profile's live heap
    /// peaked).
    #[arg(long, default_value = "alloc", value_parser = ["alloc", "live", "peak"])]
    view: String,
    /// `--flamegraph`, `--pprof`, …: one flag per format of the registry that has a
    /// differential form.
    #[command(flatten)]
    outputs: DiffOutputs,
    /// Frames whose function name matches REGEX are allocation plumbing (as for `report`).
    #[arg(long = "site-skip", value_name = "REGEX")]
    site_skip: Vec<String>,
}

/// `memprof diff BASE NEW`: the per-site table on stdout, the differential outputs asked for.
pub fn diff(args: &DiffRequest) -> Result<(), Error> {
    let view: View = args.view.parse()?;
    let skip = site_skip(&args.site_skip)?;
    args.outputs.0.check_not_inputs(&[args.base.clone(), args.new.clone()])?;
    let mut loaders = Loaders::cached(Bundled::symbol_cache_dir());
    let mut read = |file: &PathBuf| -> Result<Profile, Error> {
        let one = std::slice::from_ref(file);
        let options = LoadOptions::default();
        let mut p = read_profiles_folded(one, options, &mut loaders, Vec::new())?.0;
        p.site_skip = skip.clone();
        Ok(p)
    };
    let (base, new) = (read(&args.base)?, read(&args.new)?);
    let options = super::diff::DiffOptions {
        all: args.all,
        base_name: Some(args.base.display().to_string()),
        new_name: Some(args.new.display().to_string()),
    };
    print!("{}", super::diff::diff_table(&base, &new, &options));
    write_diff_outputs(&base, &new, view, &args.outputs.0)
}

// ---------------------------------------------------------------------------------------------
// The output flags, from the registry (`report/export.rs` §1)

/// `report`'s output flags: `--NAME OUT` for each format of [`EXPORTERS`].
#[derive(Debug, Default)]
struct ReportOutputs(Outputs);

/// `diff`'s output flags: `--NAME OUT` for each format of [`EXPORTERS`] with a
/// differential form ([`Exporter::diff`]).
#[derive(Debug, Default)]
struct DiffOutputs(Outputs);

/// Whose flags: `report`'s or `diff`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flags {
    Report,
    Diff,
}

/// The help of `exporter`'s flag in `flags`, if the command has one.
fn flag_help(exporter: &dyn Exporter, flags: Flags) -> Option<&'static str> {
    match flags {
        Flags::Report => Some(exporter.help()),
        Flags::Diff => super::registry::diff_of(exporter).map(|d| d.help()),
    }
}

/// `cmd` with the output flags of `exporters` ([`EXPORTERS`]; the tests add one of theirs),
/// in their order.
fn output_flags(cmd: Command, exporters: &[&'static dyn Exporter], flags: Flags) -> Command {
    exporters.iter().fold(cmd, |cmd, e| {
        let Some(help) = flag_help(*e, flags) else {
            return cmd;
        };
        let mut arg = Arg::new(e.name())
            .long(e.name())
            .value_name(e.value_name())
            .help(help)
            .value_parser(value_parser!(PathBuf))
            .action(ArgAction::Set);
        if flags == Flags::Report && e.whole_recording() {
            // The export is of the whole recording; the window's flags choose a part of it.
            arg = arg.conflicts_with_all(["at", "from", "to"]);
        }
        cmd.arg(arg)
    })
}

/// The outputs that the flags of [`output_flags`] ask for, in the order of `exporters`.
fn outputs_of(m: &ArgMatches, exporters: &[&'static dyn Exporter], flags: Flags) -> Outputs {
    let mut outputs = Outputs::default();
    for &e in exporters.iter().filter(|e| flag_help(**e, flags).is_some()) {
        if let Some(path) = m.get_one::<PathBuf>(e.name()) {
            outputs.push(e, path.clone());
        }
    }
    outputs
}

impl FromArgMatches for ReportOutputs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(ReportOutputs(outputs_of(m, EXPORTERS, Flags::Report)))
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for ReportOutputs {
    fn augment_args(cmd: Command) -> Command {
        output_flags(cmd, EXPORTERS, Flags::Report)
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for DiffOutputs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(DiffOutputs(outputs_of(m, EXPORTERS, Flags::Diff)))
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for DiffOutputs {
    fn augment_args(cmd: Command) -> Command {
        output_flags(cmd, EXPORTERS, Flags::Diff)
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The long options of `cmd` that take a path: its output flags (the positional files
    /// are inputs).
    fn path_flags(cmd: &Command) -> Vec<&str> {
        let path = value_parser!(PathBuf).type_id();
        cmd.get_arguments()
            .filter(|a| a.get_value_parser().type_id() == path)
            .filter_map(|a| a.get_long())
            .collect()
    }

    /// `report` and `diff` take a path only for an exporter of the registry, in its order,
    /// with its value name and help: an output flag added beside the registry (a field
    /// `#[arg(long)] out: Option<PathBuf>`, the way formats were added before) fails here.
    #[test]
    fn every_output_flag_is_an_exporter() {
        let report = ReportRequest::augment_args(Command::new("report"));
        let diff = DiffRequest::augment_args(Command::new("diff"));
        for (cmd, flags) in [(&report, Flags::Report), (&diff, Flags::Diff)] {
            let expected: Vec<&str> = EXPORTERS
                .iter()
                .filter(|e| flag_help(**e, flags).is_some())
                .map(|e| e.name())
                .collect();
            assert_eq!(
                path_flags(cmd),
                expected,
                "`memprof {}`'s output flags are not the exporters of report::registry::EXPORTERS \
                 (a new format is an Exporter and a line there: report/export.rs §2)",
                cmd.get_name()
            );
            for e in EXPORTERS.iter().filter(|e| flag_help(**e, flags).is_some()) {
                let arg = cmd.get_arguments().find(|a| a.get_long() == Some(e.name())).unwrap();
                let value: Vec<String> =
                    arg.get_value_names().unwrap().iter().map(|v| v.to_string()).collect();
                assert_eq!(value, [e.value_name()]);
                assert_eq!(arg.get_help().map(|h| h.to_string()).as_deref(), flag_help(*e, flags));
            }
        }
        // Every format is one of `report`'s; the ones with a differential form, `diff`'s.
        assert!(
            EXPORTERS.iter().any(|e| crate::report::registry::diff_of(*e).is_none()),
            "the HTML page has none"
        );
    }

    #[test]
    fn a_whole_recording_export_refuses_a_window() {
        let report = ReportRequest::augment_args(Command::new("report"));
        for e in EXPORTERS.iter().filter(|e| e.whole_recording()) {
            for window in ["--at", "--from", "--to"] {
                let flag = format!("--{}", e.name());
                let args = ["report", "f.mprof", flag.as_str(), "o", window, "1s"];
                let err = report.clone().try_get_matches_from(args).unwrap_err();
                assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict, "{args:?}");
            }
        }
    }

    /// A format known only to this test: the view's name in capitals.
    #[derive(Debug)]
    struct Shout;

    impl Exporter for Shout {
        fn name(&self) -> &'static str {
            "shout"
        }
        fn value_name(&self) -> &'static str {
            "OUT.txt"
        }
        fn help(&self) -> &'static str {
            "Write the view's name in capitals"
        }
        fn what(&self, options: &ExportOptions<'_>) -> String {
            format!("{} shout", options.view.name())
        }
        fn write(
            &self,
            _: &Profile,
            options: &ExportOptions<'_>,
            w: &mut dyn Write,
        ) -> Result<(), Error> {
            writeln!(w, "{}", options.view.name().to_uppercase())
                .map_err(|e| Error::io("writing a shout", e))
        }
    }

    /// What a new format takes: its `Exporter` and its entry in the list. Registered beside
    /// the others, `Shout` gets its flag and help, is asked for, is refused over an input,
    /// is written where asked and says so; `diff` has no flag for it.
    #[test]
    fn a_format_is_one_exporter_and_one_entry() {
        let mut registry: Vec<&'static dyn Exporter> = EXPORTERS.to_vec();
        registry.push(&Shout);
        let window = ["at", "from", "to"].map(|w| Arg::new(w).long(w));
        let mut report =
            output_flags(Command::new("report").args(window), &registry, Flags::Report);
        let help = report.render_help().to_string();
        let line = help.lines().find(|l| l.contains("--shout <OUT.txt>"));
        assert!(line.is_some_and(|l| l.ends_with("Write the view's name in capitals")), "{help}");

        let dir = std::env::temp_dir().join(format!("memprof-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (svg, txt) = (dir.join("f.svg"), dir.join("s.txt"));
        let args =
            ["report", "--shout", txt.to_str().unwrap(), "--flamegraph", svg.to_str().unwrap()];
        let m = report.try_get_matches_from(args).unwrap();
        let outputs = outputs_of(&m, &registry, Flags::Report);
        let asked: Vec<&str> = outputs.iter().map(|(e, _)| e.name()).collect();
        assert_eq!(asked, ["flamegraph", "shout"], "the registry's order");
        assert!(!outputs.whole_recording() && !outputs.to_stdout());

        std::fs::write(&txt, "a recording\n").unwrap();
        let err = outputs.check_not_inputs(std::slice::from_ref(&txt)).unwrap_err();
        assert!(err.to_string().contains("refusing to write"), "{err}");
        std::fs::remove_file(&txt).unwrap();

        let options = ExportOptions { view: View::Live, ..Default::default() };
        write_outputs(&Profile::default(), &options, &outputs, false).unwrap();
        assert_eq!(std::fs::read_to_string(&txt).unwrap(), "LIVE\n");
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));

        let diff = output_flags(Command::new("diff"), &registry, Flags::Diff);
        assert!(!path_flags(&diff).contains(&"shout"), "Shout has no differential form");
        let only = Outputs::default().with(&Shout, &txt);
        let err = write_diff_outputs(&Profile::default(), &Profile::default(), View::Alloc, &only)
            .unwrap_err();
        assert!(err.to_string().contains("--shout has no differential form"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
