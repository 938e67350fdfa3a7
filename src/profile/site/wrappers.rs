//! Allocation wrappers that no list knows: a program's own `my_alloc` is the site of every
//! allocation made through it, so the top table names the wrapper instead of the code that
//! allocated. [`Profile::wrappers`] finds the sites that look like one, and the reports
//! (the top table of `record`, `report` and `attach`, `--json`, the HTML page) print the
//! `--site-skip` expression that would name their callers instead ([`Wrapper::suggestion`]).
//!
//! # The rule
//! A site is taken for a wrapper when
//! - it is a function with a name (not an address without symbols, not a closure, whose
//!   short name `--site-skip` cannot single out) that is not plumbing itself (a stack whose
//!   every frame is plumbing has its innermost frame as site);
//! - its allocations come from at least [`MIN_CALLERS`] distinct immediate callers: the
//!   next frame outward of the site, by name (an inline frame counts, so a wrapper inlined
//!   into its callers is found too). Callers without symbols count once per object: each
//!   of their return addresses has a name of its own, and many could be one function;
//! - none of those callers holds more than [`MAX_SHARE`] of the site's allocated bytes: a
//!   function that allocates mostly for one caller is best named as itself;
//! - the site has at least [`MIN_SAMPLES`] samples: from fewer, the callers' shares of a
//!   sampled profile are too rough to tell a main caller from many.
//!
//! Shares are taken over sample points (integers: a site's bytes are its points times the
//! interval), so the answer does not depend on the order of the sums.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::{is_bare_closure, Site};
use crate::profile::{Profile, StackId};

/// The fewest distinct callers of a wrapper.
const MIN_CALLERS: usize = 3;

/// The largest share of a wrapper's allocated bytes one caller may hold.
const MAX_SHARE: f64 = 0.6;

/// The fewest samples of a wrapper.
const MIN_SAMPLES: u64 = 20;

/// A site that looks like an allocation wrapper ([`Profile::wrappers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Wrapper {
    /// The site's function, as the top table names it (a program's string).
    pub site: String,
    /// Its distinct immediate callers in the stacks that allocated.
    pub callers: usize,
    /// The largest share of its allocated bytes that one caller holds (0 to 1).
    pub largest_share: f64,
    /// Its estimated allocated bytes.
    pub alloc_bytes: f64,
}

impl Wrapper {
    /// The `--site-skip` expression that matches this function's name and no other:
    /// anchored, each regular-expression metacharacter escaped (`regex::escape`), and each
    /// character that is not printable ASCII written `\x{…}`, so the expression is plain
    /// text that a terminal shows as it is and a shell quotes safely.
    pub fn site_skip(&self) -> String {
        let mut re = String::from("^");
        for c in self.site.chars() {
            if c == ' ' || c.is_ascii_graphic() {
                re.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
            } else {
                let _ = write!(re, "\\x{{{:x}}}", u32::from(c));
            }
        }
        re.push('$');
        re
    }

    /// [`Wrapper::site_skip`] as one word of a POSIX shell: in single quotes, inside which
    /// nothing is special, and each single quote written `'\''` (close, a quoted quote,
    /// reopen). A name cannot end the quoting early or run anything.
    pub fn site_skip_quoted(&self) -> String {
        format!("'{}'", self.site_skip().replace('\'', r"'\''"))
    }

    /// The line the reports print: `my_alloc looks like an allocation wrapper (its bytes
    /// come from 5 callers): --site-skip '^my_alloc$' names them`. The site's name is the
    /// program's string: a terminal report escapes the line.
    pub fn suggestion(&self) -> String {
        format!(
            "{} looks like an allocation wrapper (its bytes come from {} callers): \
             --site-skip {} names them",
            self.site,
            self.callers,
            self.site_skip_quoted()
        )
    }
}

/// A site's allocations by immediate caller.
#[derive(Default)]
struct Callers {
    k: u64,
    samples: u64,
    by_caller: HashMap<String, u64>,
}

impl Profile {
    /// The sites that look like allocation wrappers, the largest allocated first: named
    /// functions, not plumbing themselves, whose allocations come from at least 3 distinct
    /// immediate callers, none with more than 60 % of their bytes, over at least 20
    /// samples (`profile/site/wrappers.rs` says why).
    pub fn wrappers(&self) -> Vec<Wrapper> {
        // Each stack's points and samples, so that its frames are named once.
        let mut per_stack: BTreeMap<StackId, (u64, u64)> = BTreeMap::new();
        for (&(stack, _), t) in &self.allocated {
            let e = per_stack.entry(stack).or_default();
            // Sums saturate: a damaged or hostile file may name any k.
            e.0 = e.0.saturating_add(t.k);
            e.1 = e.1.saturating_add(t.samples);
        }
        let mut by_site: BTreeMap<String, Callers> = BTreeMap::new();
        for (stack, (k, samples)) in per_stack {
            if k == 0 {
                continue;
            }
            let frames = self.frame_refs(stack);
            let Some(Site { name, index, .. }) = self.site_in(&frames) else { continue };
            let f = &frames[index];
            let module = self.module_of(f.addr.saturating_sub(1));
            if !f.resolved || is_bare_closure(&f.function) || self.is_plumbing(f, module) {
                continue;
            }
            let caller = match frames.get(index + 1) {
                Some(c) if c.resolved => c.function.to_string(),
                Some(c) => match self.module_of(c.addr.saturating_sub(1)) {
                    Some(m) => format!("{}+?", m.path),
                    None => "?".to_owned(),
                },
                None => String::new(),
            };
            let e = by_site.entry(name).or_default();
            e.k = e.k.saturating_add(k);
            e.samples = e.samples.saturating_add(samples);
            let c = e.by_caller.entry(caller).or_default();
            *c = c.saturating_add(k);
        }
        let mut out: Vec<Wrapper> = by_site
            .into_iter()
            .filter_map(|(site, c)| {
                let largest = c.by_caller.values().copied().max().unwrap_or(0);
                let share = largest as f64 / c.k as f64;
                let wrapper = c.by_caller.len() >= MIN_CALLERS
                    && c.samples >= MIN_SAMPLES
                    && share <= MAX_SHARE;
                wrapper.then(|| Wrapper {
                    site,
                    callers: c.by_caller.len(),
                    largest_share: share,
                    alloc_bytes: self.estimated_bytes(c.k),
                })
            })
            .collect();
        out.sort_by(|a, b| {
            b.alloc_bytes.total_cmp(&a.alloc_bytes).then_with(|| a.site.cmp(&b.site))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Module, Stack, Symbol, Totals};

    const MALLOC: u64 = 0x7000_1000;
    const WRAPPER: u64 = 0x100;

    /// A profile of stacks `malloc ← frames…`, each with `samples` allocations of 100
    /// bytes (exact mode), the named frames at 0x100 (the wrapper), 0x200 + 0x10·i (callers).
    fn profile(stacks: &[(&[u64], u64)]) -> Profile {
        let mut p = Profile::default();
        p.header.interval = 1.0;
        p.modules.push(Module {
            path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            base: 0x7000_0000,
            start: 0x7000_0000,
            end: 0x7010_0000,
            ..Default::default()
        });
        p.modules.push(Module {
            path: "/usr/bin/prog".into(),
            start: 0x100,
            end: 0x1000,
            ..Default::default()
        });
        let sym = |f: &str| vec![Symbol { function: f.into(), file: None, line: None }];
        p.symbols.insert(MALLOC, sym("malloc"));
        p.symbols.insert(WRAPPER, sym("my_alloc"));
        p.symbols.insert(0x180, sym("{closure#0}"));
        for i in 0..8 {
            p.symbols.insert(0x200 + 0x10 * i, sym(&format!("caller_{i}")));
        }
        for (frames, samples) in stacks {
            let id = p.stacks.len() as StackId;
            let mut all = vec![MALLOC];
            all.extend_from_slice(frames);
            p.stacks.push(Stack { frames: all, truncated: false, label: 0 });
            p.allocated.insert((id, 100), Totals { samples: *samples, k: samples * 100 });
        }
        p
    }

    #[test]
    fn a_wrapper_of_many_callers_is_found() {
        // Five callers, 10 to 50 allocations each: the largest holds a third.
        let stacks: Vec<(Vec<u64>, u64)> =
            (0..5).map(|i| (vec![WRAPPER, 0x200 + 0x10 * i], 10 * (i + 1))).collect();
        let refs: Vec<(&[u64], u64)> = stacks.iter().map(|(f, n)| (&f[..], *n)).collect();
        let w = profile(&refs).wrappers();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].site.as_str(), w[0].callers), ("my_alloc", 5));
        assert!((w[0].largest_share - 50.0 / 150.0).abs() < 1e-12, "{w:?}");
        assert_eq!(w[0].alloc_bytes, 15_000.0);
        assert_eq!(
            w[0].suggestion(),
            "my_alloc looks like an allocation wrapper (its bytes come from 5 callers): \
             --site-skip '^my_alloc$' names them"
        );
    }

    #[test]
    fn one_dominant_caller_one_caller_or_few_samples_is_no_wrapper() {
        // Four callers, one of which allocates 70 % of the bytes.
        let dominant: &[(&[u64], u64)] = &[
            (&[WRAPPER, 0x200], 70),
            (&[WRAPPER, 0x210], 10),
            (&[WRAPPER, 0x220], 10),
            (&[WRAPPER, 0x230], 10),
        ];
        assert_eq!(profile(dominant).wrappers(), []);
        // A single caller, however much it allocates, and two callers.
        assert_eq!(profile(&[(&[WRAPPER, 0x200], 500)]).wrappers(), []);
        assert_eq!(profile(&[(&[WRAPPER, 0x200], 50), (&[WRAPPER, 0x210], 50)]).wrappers(), []);
        // Three callers of equal shares, but too few samples to tell.
        let few: &[(&[u64], u64)] =
            &[(&[WRAPPER, 0x200], 5), (&[WRAPPER, 0x210], 5), (&[WRAPPER, 0x220], 5)];
        assert_eq!(profile(few).wrappers(), []);
        let enough: &[(&[u64], u64)] =
            &[(&[WRAPPER, 0x200], 7), (&[WRAPPER, 0x210], 7), (&[WRAPPER, 0x220], 7)];
        assert_eq!(profile(enough).wrappers().len(), 1);
    }

    #[test]
    fn unnamed_callers_count_once_per_object_and_closures_are_left_out() {
        // Many return addresses without symbols in one object: one caller, not six.
        let unnamed: Vec<(Vec<u64>, u64)> =
            (0..6).map(|i| (vec![WRAPPER, 0x800 + 0x10 * i], 10)).collect();
        let refs: Vec<(&[u64], u64)> = unnamed.iter().map(|(f, n)| (&f[..], *n)).collect();
        assert_eq!(profile(&refs).wrappers(), []);
        // A closure called from everywhere: `{closure#0}` would skip every closure.
        let closure: Vec<(Vec<u64>, u64)> =
            (0..5).map(|i| (vec![0x180, 0x200 + 0x10 * i], 10)).collect();
        let refs: Vec<(&[u64], u64)> = closure.iter().map(|(f, n)| (&f[..], *n)).collect();
        assert_eq!(profile(&refs).wrappers(), []);
    }

    /// Hostile names: the expression matches the name and nothing else, and a shell gives
    /// the expression back whole from the quoted word.
    #[test]
    fn the_expression_is_escaped_for_the_regex_and_quoted_for_the_shell() {
        let names = [
            "my_alloc",
            "app::Pool::get(unsigned long) const",
            "operator()(int) const",
            "a.b*c+d?[e]{2}|f^$\\g#h&i-j~k",
            "it's",
            "x'; rm -rf ~; echo '",
            "$(touch /tmp/x)`id`\"q\"",
            "tab\there\nnewline",
            "né€",
        ];
        for name in names {
            let w = Wrapper { site: name.into(), callers: 3, largest_share: 0.4, alloc_bytes: 1.0 };
            let expr = w.site_skip();
            assert!(expr.chars().all(|c| c == ' ' || c.is_ascii_graphic()), "{expr}");
            let re = regex::Regex::new(&expr).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(re.is_match(name), "{name}: {expr}");
            for other in [format!("{name}x"), format!("x{name}"), name.replace('a', "b")] {
                assert!(other == name || !re.is_match(&other), "{other}: {expr}");
            }
            let o = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", w.site_skip_quoted()))
                .output()
                .expect("sh runs");
            assert!(o.status.success(), "{name}");
            assert_eq!(String::from_utf8(o.stdout).unwrap(), expr, "{name}");
        }
    }
}
