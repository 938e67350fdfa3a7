//! The folded lines a flamegraph is drawn from, with what inferno would not draw folded
//! away first.
//!
//! inferno reads every folded line, sorts them, merges their frames and only then drops the
//! frames narrower than its `min_width` (a share of the whole width). An interpreter's
//! exact-mode profile has thousands of distinct stacks a hundred frames deep, most of them
//! far too narrow to draw (the CPython workload of `cargo bench --bench pipeline`: most of
//! its lines' bytes reach nothing drawn), and reading them was most of the flamegraph's
//! time. So the stacks
//! are merged into a tree of names here, and each subtree inferno would drop whole (its
//! root narrower than `min_width`) becomes one of its own lines carrying the subtree's
//! bytes. inferno then draws the same picture, byte for byte:
//! - The subtree's root gets the same width (its bytes), starting where it started, so
//!   every frame outside the subtree keeps its place; the root and the frames below it on
//!   the one line are narrower than `min_width`, and are dropped as before.
//! - inferno orders lines as strings. A subtree's lines are all `path;root` then `;…` or,
//!   for the root's own line, ` bytes`, so they stay together in that order, and any one of
//!   them sorts where they all did, unless a sibling's name is the root's name followed by
//!   a character between the space and `;` (`root2`, `root (file)`), whose lines then fall
//!   between the root's own line and the others. Such a subtree is not folded.
//! - The counts are [`merged_lines`](super::folded::merged_lines)' (the same sums, in the
//!   same order, rounded the same way), so the whole, and every share of it, is the same.
//!
//! One kind of name is drawn differently, as inferno drew it wrongly before: a frame name
//! ending in a space and digits (`f 2`), which inferno reads, at the end of a line, as the
//! first count of a differential line. Which lines end with it may change here.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::sys::hash::{FastHash, SeededHash};

/// One name of the tree: a frame at one place among the stacks.
#[derive(Clone, Debug)]
struct Node {
    name: u32,
    parent: u32,
    /// Bytes of the stacks that end here, summed in the order they came.
    own_bytes: f64,
    /// Their line's count (`own_bytes` rounded; 0 when below 1, where no line is written).
    own: u64,
    /// `own` of this node and every node below it.
    total: u64,
}

/// Stacks (their frame names, root first, each safe for a folded line) and their bytes,
/// merged by name and written as folded lines (`root;…;leaf count`, in no order) from which
/// inferno, with its `min_width` at `min_width`, draws what it draws from every line.
pub(crate) fn drawn_lines<'a, S, N>(stacks: S, min_width: f64) -> Vec<String>
where
    S: IntoIterator<Item = (N, f64)>,
    N: IntoIterator<Item = Cow<'a, str>>,
{
    let tree = Tree::of(stacks);
    let time = tree.nodes[0].total;
    if time == 0 {
        return Vec::new();
    }
    // inferno's own test, in its own arithmetic: a frame is dropped when its width in
    // counts is below this.
    let widthpertime_pct = 100.0 / time as f64;
    let minwidth_time = min_width / widthpertime_pct;
    tree.lines(|n| (n.total as f64) < minwidth_time)
}

/// The stacks merged by name.
struct Tree {
    /// `nodes[0]` is the root above every stack's first frame (no name of its own).
    nodes: Vec<Node>,
    names: Vec<String>,
    children: Vec<Vec<u32>>,
}

impl Tree {
    fn of<'a, S, N>(stacks: S) -> Tree
    where
        S: IntoIterator<Item = (N, f64)>,
        N: IntoIterator<Item = Cow<'a, str>>,
    {
        let root = Node { name: u32::MAX, parent: 0, own_bytes: 0.0, own: 0, total: 0 };
        let mut nodes = vec![root];
        // Names come from the program: a seeded hash. Node ids are ours.
        let mut name_ids: HashMap<String, u32, SeededHash> = HashMap::default();
        let mut names: Vec<String> = Vec::new();
        let mut child: HashMap<(u32, u32), u32, FastHash> = HashMap::default();
        for (frames, bytes) in stacks {
            let mut at = 0u32;
            for name in frames {
                let id = match name_ids.get(name.as_ref()) {
                    Some(&id) => id,
                    None => {
                        let id = names.len() as u32;
                        names.push(name.clone().into_owned());
                        name_ids.insert(name.into_owned(), id);
                        id
                    }
                };
                at = *child.entry((at, id)).or_insert_with(|| {
                    nodes.push(Node { name: id, parent: at, own_bytes: 0.0, own: 0, total: 0 });
                    nodes.len() as u32 - 1
                });
            }
            nodes[at as usize].own_bytes += bytes;
        }
        let mut children = vec![Vec::new(); nodes.len()];
        // A child comes after its parent: totals summed from the last node back.
        for i in (1..nodes.len()).rev() {
            let v = nodes[i].own_bytes.round();
            nodes[i].own = if v >= 1.0 { v as u64 } else { 0 };
            let (total, parent) = (nodes[i].total + nodes[i].own, nodes[i].parent as usize);
            nodes[i].total = total;
            nodes[parent].total += total;
            if total > 0 {
                children[parent].push(i as u32);
            }
        }
        Tree { nodes, names, children }
    }

    fn name(&self, n: u32) -> &str {
        &self.names[self.nodes[n as usize].name as usize]
    }

    /// True when the lines below `n` may be written as one (the module documentation).
    fn foldable(&self, n: u32) -> bool {
        let node = &self.nodes[n as usize];
        if node.own == 0 {
            return true;
        }
        let name = self.name(n).as_bytes();
        let between = |s: u32| {
            let other = self.name(s).as_bytes();
            other.len() > name.len()
                && other.starts_with(name)
                && (b' '..b';').contains(&other[name.len()])
        };
        !self.children[node.parent as usize].iter().any(|&s| s != n && between(s))
    }

    /// The lines, each subtree whose root `narrow` says inferno drops written as one.
    fn lines(&self, narrow: impl Fn(&Node) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        // The path of the node being visited, and the lengths to cut it back to.
        let mut path = String::new();
        let mut todo: Vec<(u32, usize)> = self.children[0].iter().map(|&c| (c, 0)).collect();
        while let Some((n, cut)) = todo.pop() {
            path.truncate(cut);
            if cut > 0 {
                path.push(';');
            }
            path.push_str(self.name(n));
            let node = &self.nodes[n as usize];
            if narrow(node) && self.foldable(n) {
                // One of the subtree's own lines, carrying the whole subtree.
                let mut line = path.clone();
                let mut m = n;
                while self.nodes[m as usize].own == 0 {
                    m = self.children[m as usize][0];
                    line.push(';');
                    line.push_str(self.name(m));
                }
                out.push(format!("{line} {}", node.total));
                continue;
            }
            if node.own > 0 {
                out.push(format!("{path} {}", node.own));
            }
            let here = path.len();
            todo.extend(self.children[n as usize].iter().map(|&c| (c, here)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// inferno's picture of `lines` at `min_width`.
    fn draw(lines: &[String], min_width: f64) -> Vec<u8> {
        let mut o = inferno::flamegraph::Options::default();
        o.deterministic = true;
        o.min_width = min_width;
        let mut out = Vec::new();
        let lines = lines.iter().map(String::as_str);
        inferno::flamegraph::from_lines(&mut o, lines, &mut out).unwrap();
        out
    }

    /// Every line, merged by the joined names (what `merged_lines` does).
    fn all_lines(stacks: &[(Vec<String>, f64)]) -> Vec<String> {
        let mut merged: HashMap<String, f64> = HashMap::new();
        let mut order = Vec::new();
        for (names, bytes) in stacks {
            let key = names.join(";");
            if !merged.contains_key(&key) {
                order.push(key.clone());
            }
            *merged.entry(key).or_default() += bytes;
        }
        order
            .into_iter()
            .filter_map(|k| {
                let v = merged[&k].round();
                (v >= 1.0).then(|| format!("{k} {v:.0}"))
            })
            .collect()
    }

    /// inferno draws the same SVG from the folded lines as from every line: random trees
    /// of stacks, deep and narrow and wide, with names that are prefixes of their siblings'
    /// (`a`, `a2`, `a (x)`, `a!`, `a_b`, `a x`), stacks ending inside others, bytes below a
    /// half. (Not names that end in a space and digits: the module documentation.)
    #[test]
    fn inferno_draws_the_same_from_fewer_lines() {
        let names = ["a", "a2", "a (x)", "a!", "a_b", "b", "ab", "a x", "a,", "c"];
        let mut rng = rand::rngs::SmallRng::seed_from_u64(46);
        let mut folded_any = false;
        for round in 0..200 {
            let mut stacks = Vec::new();
            for _ in 0..rng.random_range(1..300) {
                let depth = rng.random_range(1..12);
                let frames: Vec<String> = (0..depth)
                    .map(|_| names[rng.random_range(0..names.len())].to_owned())
                    .collect();
                // Mostly small, some heavy: wide frames beside many narrow ones.
                let bytes = match rng.random_range(0..10) {
                    0 => rng.random_range(0.0..1.0),
                    1 => rng.random_range(1e4..1e6),
                    _ => rng.random_range(1.0..50.0),
                };
                stacks.push((frames, bytes));
            }
            let all = all_lines(&stacks);
            if all.is_empty() {
                continue;
            }
            // inferno's default, and a wider one that folds more.
            for min_width in [0.01, 0.5] {
                let input =
                    stacks.iter().map(|(f, b)| (f.iter().map(|s| Cow::from(s.as_str())), *b));
                let fewer = drawn_lines(input, min_width);
                folded_any |= fewer.len() < all.len();
                let same = draw(&all, min_width) == draw(&fewer, min_width);
                assert!(same, "round {round}, min_width {min_width}");
            }
        }
        assert!(folded_any, "some subtree was folded");
    }

    /// The lines' counts are the merged lines' counts: the whole is the same.
    #[test]
    fn nothing_folded_gives_every_line() {
        let stacks = [
            (vec!["main".to_owned(), "f".to_owned()], 10.4),
            (vec!["main".to_owned(), "f".to_owned()], 0.4),
            (vec!["main".to_owned()], 3.0),
            (vec!["main".to_owned(), "g".to_owned()], 0.2),
        ];
        let input = stacks.iter().map(|(f, b)| (f.iter().map(|s| Cow::from(s.as_str())), *b));
        let mut lines = drawn_lines(input, 0.0);
        lines.sort();
        assert_eq!(lines, ["main 3", "main;f 11"]);
    }
}
