//! Writing a report's outputs under the file policy ([`crate::sys::files`]): each export
//! (flamegraph, pprof, folded stacks, HTML page) created without following a symlink, never
//! over the recording it reports, and given its name only once complete.

use super::flamegraph::{flamegraph, FlameOptions};
use super::folded::write_collapsed_grouped;
use super::pprof::{write_pprof, PprofOptions};
use super::{GroupBy, View};
use crate::error::Error;
use crate::profile::load::Process;
use crate::profile::Profile;
use crate::sys::files::Output;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

/// Writes the requested exports of `profile`, saying where each went; `replace`: an
/// existing regular file of this user's is replaced ([`crate::sys::files`], §2).
pub fn write_outputs(
    profile: &Profile,
    view: View,
    group_by: GroupBy,
    outputs: Outputs<'_>,
    replace: bool,
) -> Result<(), Error> {
    if let Some(path) = outputs.flamegraph {
        write_file_with(path, replace, |w| {
            flamegraph(profile, &FlameOptions { view, group_by, ..Default::default() }, w)
        })?;
        eprintln!("memprof: wrote {} flamegraph {}", view.name(), path.display());
    }
    if let Some(path) = outputs.pprof {
        // The default sample type follows the view; the in-use sample types hold the live
        // set at the peak for the peak view.
        let options = PprofOptions { default_view: view, ..Default::default() };
        write_file_with(path, replace, |w| write_pprof(profile, &options, w))?;
        eprintln!("memprof: wrote pprof profile {}", path.display());
    }
    if let Some(path) = outputs.collapsed {
        write_file_with(path, replace, |w| write_collapsed_grouped(w, profile, view, group_by))?;
        eprintln!("memprof: wrote {} folded stacks {}", view.name(), path.display());
    }
    Ok(())
}

/// The export files a report writes, when asked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outputs<'a> {
    /// The flamegraph SVG.
    pub flamegraph: Option<&'a Path>,
    /// The gzip-compressed pprof profile.
    pub pprof: Option<&'a Path>,
    /// The folded stacks.
    pub collapsed: Option<&'a Path>,
    /// The HTML report.
    pub html: Option<&'a Path>,
}

impl Outputs<'_> {
    /// Refuses an output that is one of the `inputs` (device and inode: through a symlink
    /// or a hard link too), before anything is written.
    pub fn check_not_inputs(&self, inputs: &[PathBuf]) -> Result<(), Error> {
        let named = [self.flamegraph, self.pprof, self.collapsed, self.html];
        for out in named.into_iter().flatten() {
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
}

/// Writes the HTML report of `profile`, read or recorded with the timelines of
/// `processes` (one: its page; several: the tree's page), to `out`.
pub fn write_html_of(
    profile: &Profile,
    processes: &[Process],
    out: &Path,
    replace: bool,
) -> Result<(), Error> {
    match processes {
        [_] => html_timed(out, replace, |w| super::html::write_html(profile, w)),
        _ => html_timed(out, replace, |w| super::html::write_tree_html(profile, processes, w)),
    }
}

/// Writes the HTML report of `profile`, one recording read with its timeline
/// ([`crate::profile::load::LoadOptions::timeline`]), to `out`.
pub fn write_html(profile: &Profile, out: &Path) -> Result<(), Error> {
    html_timed(out, true, |w| super::html::write_html(profile, w))
}

/// Writes an HTML report to `out` with `f`, saying how large it is and how long it took.
fn html_timed(
    out: &Path,
    replace: bool,
    f: impl FnOnce(&mut BufWriter<Output>) -> Result<(), Error>,
) -> Result<(), Error> {
    let started = std::time::Instant::now();
    write_file_with(out, replace, f)?;
    eprintln!(
        "memprof: wrote HTML report {} ({} KiB in {:.2} s)",
        out.display(),
        std::fs::metadata(out).map_or(0, |m| m.len()) / 1024,
        started.elapsed().as_secs_f64()
    );
    Ok(())
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
