//! The one list of the formats a report can write ([`EXPORTERS`]), each behind the export
//! interface (`report/export.rs`, whose §2 says how to add one). Kept out of `export.rs`
//! so that imports run downward: this list uses the formats, and the formats use the
//! interface.

use super::export::{DiffExporter, Exporter};

/// The formats, in the order their flags are listed and their files written.
pub static EXPORTERS: &[&dyn Exporter] = &[
    &super::flamegraph::FlamegraphExporter,
    &super::pprof::PprofExporter,
    &super::folded::FoldedExporter,
    &super::html::HtmlExporter,
];

/// The formats with a differential form that `memprof diff` writes under the same flag,
/// by the name of their exporter. Paired here, not by the formats themselves: a diff form
/// uses its format's code (`diff/stacks.rs` draws with the flamegraph's), so a format that
/// named its diff form would make a circle of imports.
pub static DIFF_EXPORTERS: &[(&str, &dyn DiffExporter)] = &[
    ("flamegraph", &super::diff::DiffFlamegraphExporter),
    ("pprof", &super::diff::DiffPprofExporter),
    ("collapsed", &super::diff::DiffFoldedExporter),
];

/// The differential form of `exporter`, if `memprof diff` writes one.
pub fn diff_of(exporter: &dyn Exporter) -> Option<&'static dyn DiffExporter> {
    DIFF_EXPORTERS.iter().find(|(name, _)| *name == exporter.name()).map(|(_, d)| *d)
}

/// The exporter whose flag is `--name`.
#[cfg(test)]
fn exporter(name: &str) -> Option<&'static dyn Exporter> {
    EXPORTERS.iter().copied().find(|e| e.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_flags() {
        for (i, e) in EXPORTERS.iter().enumerate() {
            let name = e.name();
            assert!(
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "--{name} is not a flag name"
            );
            assert!(EXPORTERS[..i].iter().all(|o| o.name() != name), "two exporters named {name}");
            assert!(exporter(name).is_some_and(|f| std::ptr::addr_eq(f, *e)));
        }
        for (name, _) in DIFF_EXPORTERS {
            assert!(exporter(name).is_some(), "the diff form of --{name}, which no format has");
        }
    }
}
