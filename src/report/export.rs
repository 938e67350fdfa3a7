//! The export interface: every file a report can write (a flamegraph, a pprof profile,
//! folded stacks, the HTML page) is one [`Exporter`], and `report/registry.rs`'s
//! [`EXPORTERS`](super::registry::EXPORTERS)(super::registry::EXPORTERS) is the one list of them. The interface is kept
//! apart from the list so that imports run one way: a format's file uses the interface, the
//! list uses the formats.
//!
//! # 1. What the registry drives
//! Everything that used to name each format by hand reads [`EXPORTERS`](super::registry::EXPORTERS) instead:
//! - `memprof report`'s output flags, `--NAME OUT` ([`Exporter::name`], its value name and
//!   its help), and `memprof diff`'s for the formats that have a differential form
//!   ([`diff_of`](super::registry::diff_of)), in the registry's order (`report/command.rs`);
//! - the outputs asked for ([`Outputs`](super::write::Outputs)): the check that none of them
//!   is an input, whether one of them is the standard output (the tables then go to the
//!   standard error), whether the recording is read with its timeline;
//! - the writing, under the file policy, and the line said for each file written
//!   (`memprof: wrote {what} {path}`: [`write_outputs`](super::write::write_outputs)).
//!
//! # 2. Adding a format
//! One file in `report/` that holds the format and a unit struct implementing [`Exporter`]
//! (with [`ExportOptions`] for what the command chose), and one line in [`EXPORTERS`](super::registry::EXPORTERS). A
//! differential form for `memprof diff` is a [`DiffExporter`] that [`diff_of`](super::registry::diff_of)
//! returns. Nothing else names the format: the tests in `report/command.rs` fail when an
//! output flag is added beside the registry, and run a format known only to a test through
//! the flags, the input check and the writing.
//!
//! The top table and `--json` are not exporters: they are what `report` prints, on the
//! standard output, not files named by a flag. `/debug/pprof/` (`serve/`) is Go's protocol,
//! which stamps the pprof profile it serves (`serve/handler.rs`), not a file.

use super::{GroupBy, View};
use crate::error::Error;
use crate::profile::load::Process;
use crate::profile::Profile;
use std::io::Write;

/// What the command chose, for every export of one profile.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions<'a> {
    /// Which samples to count (`--view`).
    pub view: View,
    /// Stacks alone, or under their span paths (`--group-by`).
    pub group_by: GroupBy,
    /// The processes the profile was read from, in its order: several for a process tree
    /// (the profile is their merge), none when the profile is one recording not read from
    /// files (a session's).
    pub processes: &'a [Process],
    /// The profile's allocation wrappers ([`Profile::wrappers`]), when another pass made at
    /// the same time shows them too (`record`'s top table beside its page): whichever
    /// needs them first makes them there, once. `None`: this export makes its own.
    pub wrappers: Option<&'a std::sync::OnceLock<Vec<crate::profile::site::Wrapper>>>,
}

/// One output format of `memprof report` (and of `memprof diff`, through [`diff_of`](super::registry::diff_of)).
pub trait Exporter: Sync {
    /// The flag that asks for it, without its `--`; unique in [`EXPORTERS`](super::registry::EXPORTERS).
    fn name(&self) -> &'static str;
    /// The flag's value as help shows it (`OUT.svg`).
    fn value_name(&self) -> &'static str;
    /// The flag's help in `memprof report --help`.
    fn help(&self) -> &'static str;
    /// What the file is, as `memprof: wrote {what} {path}` says it.
    fn what(&self, options: &ExportOptions<'_>) -> String;
    /// Writes the export of `profile` into `w`.
    fn write(
        &self,
        profile: &Profile,
        options: &ExportOptions<'_>,
        w: &mut dyn Write,
    ) -> Result<(), Error>;
    /// The export shows the whole recording over time: the profile is read with its
    /// timeline ([`crate::profile::load::LoadOptions::timeline`]), and `--at`, `--from`
    /// and `--to` conflict with its flag.
    fn whole_recording(&self) -> bool {
        false
    }
    /// Its writing can take seconds: the line said adds the file's size and the time taken.
    fn timed(&self) -> bool {
        false
    }
}

/// The differential form of an [`Exporter`]: what changed from BASE to NEW.
pub trait DiffExporter: Sync {
    /// The flag's help in `memprof diff --help`.
    fn help(&self) -> &'static str;
    /// What the file is, as `memprof: wrote {what} {path}` says it.
    fn what(&self, view: View) -> String;
    /// Writes the comparison of `base` and `new` under `view` into `w`.
    fn write(
        &self,
        base: &Profile,
        new: &Profile,
        view: View,
        w: &mut dyn Write,
    ) -> Result<(), Error>;
}
