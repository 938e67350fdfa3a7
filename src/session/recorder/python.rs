//! The Python frames of a recorded stack named as it is first seen, while the process runs
//! (`profile::symbolize::python`): each frame's word gets its function, file and line,
//! written with the stack's other symbols, so every report shows them as it shows a
//! native frame's.

use super::Recorder;
use crate::profile::symbolize::PythonReader;
use crate::profile::{is_python_word, StackId, Symbol};

impl Recorder {
    /// Names the Python frames of stack `id` not named yet. A frame whose code object
    /// cannot be read (freed since, or the process gone) is named by its address.
    pub(super) fn name_python_frames(&mut self, id: StackId) {
        let Some(stack) = self.profile.stacks.get(id as usize) else {
            return;
        };
        let words: Vec<u64> = stack
            .frames
            .iter()
            .copied()
            .filter(|&w| is_python_word(w) && !self.profile.symbols.contains_key(&w))
            .collect();
        if words.is_empty() {
            return;
        }
        if self.python.is_none() {
            let pid = match &self.other {
                Some(facts) => facts.pid,
                None => std::process::id(),
            };
            let paths = self.profile.modules.iter().map(|m| m.path.as_str());
            self.python = PythonReader::for_modules(pid, paths);
        }
        for w in words {
            let named = self.python.as_ref().and_then(|r| r.name(w));
            let code = w & crate::engine::python::CODE_MASK as u64;
            let s = vec![named.unwrap_or_else(|| Symbol {
                function: format!("<python code at {code:#x}>"),
                file: None,
                line: None,
            })];
            self.write(|wr| wr.write_symbols(w, &s));
            self.resolved.insert(w);
            self.profile.symbols.insert(w, s);
        }
    }
}
