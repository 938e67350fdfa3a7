//! Heap by tracing span (the `tracing` feature): [`SpanLayer`], a
//! [`tracing_subscriber::Layer`] that labels every sample with the path of the spans
//! entered on the allocating thread when it was taken.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! #[global_allocator]
//! static GLOBAL: memprof::Sampled<std::alloc::System> = memprof::Sampled::new(std::alloc::System);
//!
//! let layer = memprof::tracing::SpanLayer::new().with_field("endpoint");
//! tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();
//! let session = memprof::start(memprof::Config::default(), memprof::Recorder::new()).unwrap();
//! let kept = tracing::info_span!("handle", endpoint = "/upload").in_scope(|| vec![0u8; 1 << 20]);
//! let profile = session.stop().unwrap().into_profile();
//! // The 1 MiB block's stack carries the label "handle{endpoint=/upload}".
//! # drop(kept);
//! ```
//!
//! # How
//! - When a span is created the layer builds its *segment*: the span's name and the values
//!   of the fields it was told to keep ([`SpanLayer::with_field`]), as
//!   `name{field=value,…}`, interned once in the process's label registry and kept in the
//!   span's extensions (a field recorded later, `Span::record`, re-interns it).
//! - Each thread keeps the stack of the spans it entered, each with the label of its
//!   *path*: the segments from the outermost entered span to it, joined by `;`
//!   (`server;handle{endpoint=/upload}`), interned once per (parent path, segment) and
//!   cached per thread. Entering a span pushes, leaving it pops (spans may be left out of
//!   order: the latest entry of that span goes), and either publishes the label of the new
//!   top in the thread's label word (`crate::engine::label`). Async tasks enter their span
//!   on every poll (`tracing::Instrument`), so on a multi-thread runtime the word follows
//!   the task from worker to worker.
//! - A sampled allocation copies the word into its event: the sample path reads one more
//!   thread-local word and nothing else; an unsampled allocation does not read it. The
//!   drain turns the id back into its text without a lock ([`crate::session::Allocation::label`]),
//!   and the [`Recorder`](crate::session::recorder::Recorder) makes the label part of the stack's identity
//!   ([`crate::profile::Stack::label`]): the allocated, live, peak and windowed views all
//!   break down by span, and a free keeps the label of its allocation, whichever thread or
//!   span frees it.
//!
//! Everything the layer does runs in the program's context, outside the allocator: it may
//! allocate (those allocations are sampled like any other, under the label that was
//! current), and it takes the registry's mutex only to intern a text never seen before.
//! The drain never takes that mutex. Texts are kept for the life of the process: a program
//! has as many as it has distinct span paths (field values multiply them: keep fields
//! whose values are few, such as an endpoint, not a request id). A segment's `;` and
//! control characters become `_`, so that a path splits back into its segments.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;

use ::tracing::field::{Field, Visit};
use ::tracing::span::{Attributes, Id, Record};
use ::tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::session::label;

/// A [`Layer`] that labels samples with the path of the entered spans (see the [module
/// documentation](self)). Install it in a `tracing_subscriber::registry()`.
#[derive(Clone, Debug, Default)]
pub struct SpanLayer {
    /// The fields whose values go into a span's segment, in this order.
    fields: Vec<&'static str>,
}

impl SpanLayer {
    /// A layer that labels with span names only.
    pub fn new() -> SpanLayer {
        SpanLayer::default()
    }

    /// Also keeps field `name`'s value in the segment of every span that has it:
    /// `handle{endpoint=/upload}` (strings without quotes, other values as `Debug` prints
    /// them).
    pub fn with_field(mut self, name: &'static str) -> SpanLayer {
        if !self.fields.contains(&name) {
            self.fields.push(name);
        }
        self
    }
}

/// A span's segment, kept in its extensions.
struct Segment {
    name: &'static str,
    /// The kept fields' values, in the layer's order.
    values: Vec<(&'static str, Option<String>)>,
    /// The interned text (0: the registry is full).
    id: u32,
}

impl Segment {
    fn intern(&mut self) {
        let mut text = String::with_capacity(32);
        push_clean(&mut text, self.name);
        let mut first = true;
        for (field, value) in &self.values {
            let Some(value) = value else { continue };
            text.push(if first { '{' } else { ',' });
            first = false;
            push_clean(&mut text, field);
            text.push('=');
            push_clean(&mut text, value);
        }
        if !first {
            text.push('}');
        }
        self.id = label::intern(&text);
    }

    fn set(&mut self, field: &Field, value: impl FnOnce() -> String) {
        if let Some(slot) = self.values.iter_mut().find(|(f, _)| *f == field.name()) {
            slot.1 = Some(value());
        }
    }
}

/// Appends `s` with `;` and control characters replaced by `_`.
fn push_clean(out: &mut String, s: &str) {
    out.extend(s.chars().map(|c| if c == ';' || c.is_control() { '_' } else { c }));
}

impl Visit for Segment {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, || value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, || {
            let mut s = String::new();
            let _ = write!(s, "{value:?}");
            s
        });
    }
}

thread_local! {
    /// The spans this thread entered, innermost last: (span id, label of its path).
    static ENTERED: RefCell<Vec<(u64, u32)>> = const { RefCell::new(Vec::new()) };
    /// Path labels by (parent path label, segment label), this thread's cache.
    static PATHS: RefCell<HashMap<(u32, u32), u32>> = RefCell::new(HashMap::new());
}

/// The label of the path `parent;segment` (0 when the registry is full).
fn path(parent: u32, segment: u32) -> u32 {
    if parent == 0 || segment == 0 {
        return if parent == 0 { segment } else { parent };
    }
    let cached = PATHS.try_with(|p| p.try_borrow().ok()?.get(&(parent, segment)).copied());
    if let Ok(Some(id)) = cached {
        return id;
    }
    let (Some(p), Some(s)) = (label::text(parent), label::text(segment)) else {
        return parent;
    };
    let id = label::intern(&format!("{p};{s}"));
    let _ = PATHS.try_with(|paths| {
        if let Ok(mut paths) = paths.try_borrow_mut() {
            paths.insert((parent, segment), id);
        }
    });
    id
}

/// Publishes the label of the innermost entered span (0: none) in the thread's word.
fn publish(entered: &[(u64, u32)]) {
    crate::engine::label::set(entered.last().map_or(0, |&(_, l)| l));
}

impl<S> Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut segment = Segment {
            name: attrs.metadata().name(),
            values: self.fields.iter().map(|&f| (f, None)).collect(),
            id: 0,
        };
        attrs.record(&mut segment);
        segment.intern();
        span.extensions_mut().insert(segment);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if self.fields.is_empty() {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(segment) = ext.get_mut::<Segment>() {
            values.record(segment);
            segment.intern();
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let segment =
            ctx.span(id).and_then(|s| s.extensions().get::<Segment>().map(|g| g.id)).unwrap_or(0);
        let _ = ENTERED.try_with(|e| {
            let Ok(mut entered) = e.try_borrow_mut() else { return };
            let parent = entered.last().map_or(0, |&(_, l)| l);
            let label = path(parent, segment);
            entered.push((id.into_u64(), label));
            publish(&entered);
        });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        let _ = ENTERED.try_with(|e| {
            let Ok(mut entered) = e.try_borrow_mut() else { return };
            let key = id.into_u64();
            if let Some(i) = entered.iter().rposition(|&(s, _)| s == key) {
                entered.remove(i);
            }
            publish(&entered);
        });
    }
}
