//! Writing a report's outputs under the file policy ([`crate::sys::files`]): each export
//! ([`super::export`]) created without following a symlink, never over the recording it
//! reports, and given its name only once complete; each said once written.

use super::export::{ExportOptions, Exporter};
use super::{GroupBy, View};
use crate::error::Error;
use crate::profile::load::Process;
use crate::profile::site::Wrapper;
use crate::profile::Profile;
use crate::sys::files::Output;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

/// The export files a report writes: the formats asked for, each with its path, in the
/// order they are written.
#[derive(Clone, Default)]
pub struct Outputs {
    files: Vec<(&'static dyn Exporter, PathBuf)>,
}

impl std::fmt::Debug for Outputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter().map(|(e, p)| (e.name(), p))).finish()
    }
}

impl Outputs {
    /// These outputs and `exporter`'s, to `path`.
    pub fn with(mut self, exporter: &'static dyn Exporter, path: &Path) -> Self {
        self.push(exporter, path.to_path_buf());
        self
    }

    /// Adds `exporter`'s output, to `path`.
    pub fn push(&mut self, exporter: &'static dyn Exporter, path: PathBuf) {
        self.files.push((exporter, path));
    }

    /// The formats asked for and their paths.
    pub fn iter(&self) -> impl Iterator<Item = (&'static dyn Exporter, &Path)> + '_ {
        self.files.iter().map(|(e, p)| (*e, p.as_path()))
    }

    /// Refuses an output that is one of the `inputs` (device and inode: through a symlink
    /// or a hard link too), before anything is written.
    pub fn check_not_inputs(&self, inputs: &[PathBuf]) -> Result<(), Error> {
        for (_, out) in self.iter() {
            if let Some(input) = inputs.iter().find(|i| crate::sys::files::same_file(out, i)) {
                return Err(Error::Config(format!(
                    "refusing to write {} over the profile {} it reports (choose another output name)",
                    out.display(),
                    input.display()
                )));
            }
        }
        Ok(())
    }

    /// An output goes to the standard output (`--collapsed -`), which it then keeps to
    /// itself.
    pub fn to_stdout(&self) -> bool {
        self.iter().any(|(_, p)| crate::sys::files::stream_of(p) == Some(1))
    }

    /// An output shows the whole recording over time ([`Exporter::whole_recording`]): the
    /// recording is read with its timeline.
    pub fn whole_recording(&self) -> bool {
        self.iter().any(|(e, _)| e.whole_recording())
    }
}

/// Writes the requested exports of `profile`, saying where each went; `replace`: an
/// existing regular file of this user's is replaced ([`crate::sys::files`], §2).
pub fn write_outputs(
    profile: &Profile,
    options: &ExportOptions<'_>,
    outputs: &Outputs,
    replace: bool,
) -> Result<(), Error> {
    write_each(profile, options, outputs, replace, &mut |line| eprintln!("{line}"))
}

/// [`write_outputs`], each file's line handed to `say`.
fn write_each(
    profile: &Profile,
    options: &ExportOptions<'_>,
    outputs: &Outputs,
    replace: bool,
    say: &mut dyn FnMut(String),
) -> Result<(), Error> {
    for (exporter, path) in outputs.iter() {
        let started = Instant::now();
        write_file_with(path, replace, |w| exporter.write(profile, options, w))?;
        say(wrote(exporter, &exporter.what(options), path, started));
    }
    Ok(())
}

/// What `record` and `attach` print once the run is over: `summary` (the top table, made
/// by the caller, with the profile's wrappers it is handed), then the companions of the
/// profile `output`, from the same fold: `<output>.svg`, a flamegraph of `view`, and, when
/// `page`, `<output>.html`. The three are independent passes over the profile, made at
/// once on the machine's cores (the program is gone and left them free) and said in that
/// order; a companion that cannot be written is said as an error, and the rest go on.
/// The companions follow `-o`'s rule: new files, or with `replace` (`--force`) this user's
/// regular files replaced; a symlink, a FIFO or another user's file is left alone with an
/// error.
pub fn summary_and_companions(
    profile: &Profile,
    processes: &[Process],
    output: &Path,
    (view, page): (View, bool),
    replace: bool,
    summary: impl FnOnce(&OnceLock<Vec<Wrapper>>) -> String + Send,
) {
    let svg = PathBuf::from(format!("{}.svg", output.display()));
    let html = PathBuf::from(format!("{}.html", output.display()));
    // The table's hints and the page's are the same wrappers: made once, by whichever
    // pass comes to them first.
    let wrappers = OnceLock::new();
    let wrappers = &wrappers;
    let (text, svg_lines, html_lines) = std::thread::scope(|s| {
        let svg_job = s.spawn(|| {
            let options = ExportOptions { view, group_by: GroupBy::Stack, ..Default::default() };
            let out = Outputs::default().with(&super::FlamegraphExporter, &svg);
            said(|say| write_each(profile, &options, &out, replace, say))
        });
        // The page replays each file by its stack ids (a tree's files into the merged
        // profile's: report/html.rs §4).
        let html_job = page.then(|| {
            s.spawn(|| {
                let options =
                    ExportOptions { processes, wrappers: Some(wrappers), ..Default::default() };
                let out = Outputs::default().with(&super::html::HtmlExporter, &html);
                said(|say| write_each(profile, &options, &out, replace, say))
            })
        });
        let text = summary(wrappers);
        (text, svg_job.join(), html_job.map(|j| j.join()))
    });
    eprint!("{text}");
    for lines in std::iter::once(svg_lines).chain(html_lines) {
        match lines {
            Ok(lines) => lines.iter().for_each(|l| eprintln!("{l}")),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// The lines `f` says, and its error last.
fn said(f: impl FnOnce(&mut dyn FnMut(String)) -> Result<(), Error>) -> Vec<String> {
    let mut lines = Vec::new();
    if let Err(e) = f(&mut |line| lines.push(line)) {
        lines.push(format!("memprof: error: {e}"));
    }
    lines
}

/// Writes the differential form ([`diff_of`](super::registry::diff_of)) of each output, comparing `base` and
/// `new` under `view`, saying where each went; existing files of this user's are replaced.
pub fn write_diff_outputs(
    base: &Profile,
    new: &Profile,
    view: View,
    outputs: &Outputs,
) -> Result<(), Error> {
    for (exporter, path) in outputs.iter() {
        let Some(diff) = super::registry::diff_of(exporter) else {
            return Err(Error::Config(format!(
                "--{} has no differential form for memprof diff",
                exporter.name()
            )));
        };
        let started = Instant::now();
        write_file(path, |w| diff.write(base, new, view, w))?;
        eprintln!("{}", wrote(exporter, &diff.what(view), path, started));
    }
    Ok(())
}

/// `memprof: wrote {what} {path}`, with the file's size and the time taken for a
/// [timed](Exporter::timed) format.
fn wrote(exporter: &dyn Exporter, what: &str, path: &Path, started: Instant) -> String {
    if exporter.timed() {
        format!(
            "memprof: wrote {what} {} ({} KiB in {:.2} s)",
            path.display(),
            std::fs::metadata(path).map_or(0, |m| m.len()) / 1024,
            started.elapsed().as_secs_f64()
        )
    } else {
        format!("memprof: wrote {what} {}", path.display())
    }
}

/// Writes the HTML report of `profile`, one recording read with its timeline
/// ([`crate::profile::load::LoadOptions::timeline`]), to `out` (the demo's page, written
/// without a flag).
pub fn write_html(profile: &Profile, out: &Path) -> Result<(), Error> {
    let page = Outputs::default().with(&super::html::HtmlExporter, out);
    write_outputs(profile, &ExportOptions::default(), &page, true)
}

/// Creates `path` (replacing an existing regular file of this user's: [`crate::sys::files`])
/// and fills it with `f`; errors name the file.
pub fn write_file(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<Output>) -> Result<(), Error>,
) -> Result<(), Error> {
    write_file_with(path, true, f)
}

/// [`write_file`], replacing an existing file only when `replace`; the new content takes
/// the name only once complete.
pub fn write_file_with(
    path: &Path,
    replace: bool,
    f: impl FnOnce(&mut BufWriter<Output>) -> Result<(), Error>,
) -> Result<(), Error> {
    let out = crate::sys::files::create_output(path, replace)
        .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
    let mut w = BufWriter::new(out);
    // Dropped uncommitted, the output leaves nothing under the name (`sys::files::Output`).
    let gone = " (nothing is left under that name)";
    f(&mut w).map_err(|e| Error::Other(format!("cannot write {}: {e}{gone}", path.display())))?;
    let cannot =
        |e: std::io::Error| Error::Other(format!("cannot write {}: {e}{gone}", path.display()));
    w.into_inner().map_err(|e| cannot(e.into_error()))?.commit().map_err(cannot)
}
