//! Which loaded objects keep frame pointers, read from their unwind tables: the evidence
//! behind `Unwinder::Auto` (x86_64).
//!
//! A frame-pointer walk is right only if every function on the stack that calls another
//! keeps the chain: `push rbp; mov rbp, rsp` before its first call, so that `rbp` points at
//! the saved caller's `rbp` with the return address above it. Whether the profiler's own
//! code does says nothing about the program's (distribution compilers omit frame pointers
//! by default), so the decision is made from every loaded object's `.eh_frame`, where the
//! compiler describes each function's frame:
//! - a function that keeps the chain moves its canonical frame address (CFA) onto `rbp`
//!   (`DW_CFA_def_cfa_register rbp`, or `DW_CFA_def_cfa rbp, …`);
//! - a function that never moves the CFA off `rsp + 8` has no frame at all: it calls
//!   nothing (a call needs the stack realigned, which moves the CFA) or only tail-jumps, so
//!   it is never a caller on a walked stack;
//! - a CFA given by an expression (PLT stubs, signal trampolines) is not a caller either.
//!
//! Every other function (its CFA moved along `rsp` only: `sub rsp` or pushes, no `rbp`
//! frame) breaks the chain where it is a caller. An object holding one such function does
//! not keep frame pointers; an object without `.eh_frame` cannot be proven to.

use crate::sys::loader::{for_each_object, Object};
use gimli::{BaseAddresses, CallFrameInstruction, CieOrFde, EhFrame, NativeEndian, UnwindSection};

/// DWARF register numbers of x86-64.
const RSP: gimli::Register = gimli::X86_64::RSP;
const RBP: gimli::Register = gimli::X86_64::RBP;

/// What the unwind tables of one object say about its frame pointers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// Every function that has a frame keeps the frame-pointer chain.
    Kept,
    /// At least one function has a frame without `rbp`: a walk through it loses frames.
    Omitted,
    /// No readable `.eh_frame`: nothing is known.
    Unknown,
}

/// True when every loaded object is shown to keep frame pointers, except the vDSO and the
/// object holding this code: the profiler's frames on a sampled stack are its hooks, built
/// with frame pointers (`build.rs`), and the rest of it (the C of its compressor) runs only
/// while the thread is busy, never under a sample. Stops at the first object that is not.
/// Call it at a safe point, never on the sample path.
pub(crate) fn all_objects_keep_frame_pointers() -> bool {
    let own = all_objects_keep_frame_pointers as fn() -> bool as usize;
    let mut all = true;
    for_each_object(|object| {
        if !all || is_vdso(object) || object.loads().any(|(s, n)| own.wrapping_sub(s) < n) {
            return;
        }
        // SAFETY: the loader holds its lock during the walk, so the object's segments stay
        // mapped while `evidence` reads them.
        if unsafe { evidence(object) } != Evidence::Kept {
            all = false;
        }
    });
    all
}

/// The kernel's vDSO: a few functions without calls, whose table may be absent.
fn is_vdso(object: &Object<'_>) -> bool {
    object.name().to_bytes().starts_with(b"linux-vdso")
}

/// Reads one object's `.eh_frame` (found through its `PT_GNU_EH_FRAME` header).
///
/// # Safety
/// The object's `PT_LOAD` segments stay mapped during the call.
unsafe fn evidence(object: &Object<'_>) -> Evidence {
    let phdrs = object.phdrs();
    let bias = object.bias();
    let Some(hdr) = phdrs.iter().find(|p| p.p_type == libc::PT_GNU_EH_FRAME) else {
        return Evidence::Unknown;
    };
    if hdr.p_memsz < 12 {
        return Evidence::Unknown;
    }
    let hdr_avma = bias.wrapping_add(hdr.p_vaddr as usize);
    // SAFETY: the header lies inside a mapped PT_LOAD of the object (the caller keeps it
    // mapped) and is at least 12 bytes long.
    let (version, enc) = unsafe { (*(hdr_avma as *const u8), *((hdr_avma + 1) as *const u8)) };
    if version != 1 {
        return Evidence::Unknown;
    }
    // SAFETY: bytes 4..12 of the header are inside it (checked above).
    let Some(eh_avma) = (unsafe { super::cfi::read_encoded(hdr_avma + 4, enc) }) else {
        return Evidence::Unknown;
    };
    let eh_svma = eh_avma.wrapping_sub(bias);
    // `.eh_frame` runs at most to the end of the PT_LOAD holding it; the parser stops at its
    // zero terminator, before that.
    let Some(seg) = phdrs.iter().find(|p| {
        p.p_type == libc::PT_LOAD
            && (p.p_vaddr as usize) <= eh_svma
            && eh_svma < (p.p_vaddr + p.p_memsz) as usize
    }) else {
        return Evidence::Unknown;
    };
    let len = (seg.p_vaddr + seg.p_memsz) as usize - eh_svma;
    // SAFETY: the range lies inside a PT_LOAD segment that stays mapped during the call.
    let data = unsafe { core::slice::from_raw_parts(eh_avma as *const u8, len) };
    tables_evidence(data, eh_avma as u64)
}

/// The verdict over the `.eh_frame` bytes `data`, mapped at `address`.
pub(crate) fn tables_evidence(data: &[u8], address: u64) -> Evidence {
    let eh = EhFrame::new(data, NativeEndian);
    let bases = BaseAddresses::default().set_eh_frame(address);
    let mut entries = eh.entries(&bases);
    let mut functions = 0usize;
    loop {
        let entry = match entries.next() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            // A table the parser cannot read to its end proves nothing.
            Err(_) => return Evidence::Unknown,
        };
        let CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(|eh, bases, offset| eh.cie_from_offset(bases, offset)) else {
            return Evidence::Unknown;
        };
        functions += 1;
        let cie = fde.cie();
        let align = cie.data_alignment_factor();
        let mut frame = Frame::default();
        let mut cie_rules = cie.instructions(&eh, &bases);
        let mut fde_rules = fde.instructions(&eh, &bases);
        loop {
            let next = match cie_rules.next() {
                Ok(Some(i)) => Some(i),
                Ok(None) => match fde_rules.next() {
                    Ok(i) => i,
                    Err(_) => return Evidence::Unknown,
                },
                Err(_) => return Evidence::Unknown,
            };
            let Some(instruction) = next else { break };
            frame.apply(&instruction, align);
        }
        if frame.breaks_chain() {
            return Evidence::Omitted;
        }
    }
    if functions == 0 {
        Evidence::Unknown
    } else {
        Evidence::Kept
    }
}

/// What one function's unwind rules did to its CFA.
#[derive(Default)]
struct Frame {
    /// The CFA was put on `rbp`: a frame-pointer frame.
    on_rbp: bool,
    /// The CFA moved away from `rsp + 8`, the rule at entry: the function has a frame.
    moved: bool,
    /// The CFA is an expression: a stub or trampoline, not an ordinary caller.
    expression: bool,
}

impl Frame {
    fn apply(&mut self, i: &CallFrameInstruction<usize>, align: i64) {
        match *i {
            CallFrameInstruction::DefCfa { register, offset } => {
                self.register(register);
                self.offset(offset as i64);
            }
            CallFrameInstruction::DefCfaSf { register, factored_offset } => {
                self.register(register);
                self.offset(factored_offset.wrapping_mul(align));
            }
            CallFrameInstruction::DefCfaRegister { register } => self.register(register),
            CallFrameInstruction::DefCfaOffset { offset } => self.offset(offset as i64),
            CallFrameInstruction::DefCfaOffsetSf { factored_offset } => {
                self.offset(factored_offset.wrapping_mul(align))
            }
            CallFrameInstruction::DefCfaExpression { .. } => self.expression = true,
            _ => {}
        }
    }

    fn register(&mut self, r: gimli::Register) {
        if r == RBP {
            self.on_rbp = true;
        } else if r != RSP {
            self.moved = true;
        }
    }

    fn offset(&mut self, offset: i64) {
        if offset != 8 {
            self.moved = true;
        }
    }

    fn breaks_chain(&self) -> bool {
        self.moved && !self.on_rbp && !self.expression
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    const SOURCE: &str = "
        extern void *malloc(unsigned long);
        void *keep;
        __attribute__((noinline)) int inner(int n) { keep = malloc(n); return n + 1; }
        int outer(int n) { int r = inner(n); keep = malloc(r); return r * 3; }
        int leaf(int x) { return x * 2; }
    ";

    /// Builds SOURCE with `flags` into a shared library, loads it, and reads its evidence
    /// from the mapped image, as a session start does.
    fn evidence_of(name: &str, flags: &[&str]) -> Evidence {
        let dir = std::env::temp_dir().join(format!("memprof-fp-proof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("f.c");
        std::fs::write(&src, SOURCE).unwrap();
        let lib = dir.join(name);
        let out = std::process::Command::new("cc")
            .args(["-O2", "-shared", "-fPIC"])
            .args(flags)
            .arg("-o")
            .arg(&lib)
            .arg(&src)
            .output()
            .expect("the system C compiler `cc` runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let path = CString::new(lib.to_str().unwrap()).unwrap();
        // SAFETY: a valid path; the library has no constructors and stays loaded.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null(), "dlopen {}", lib.display());
        let mut found = None;
        for_each_object(|object| {
            if object.name().to_bytes() == path.as_bytes() {
                // SAFETY: the loader's lock keeps the object mapped during the walk.
                found = Some(unsafe { evidence(object) });
            }
        });
        found.expect("the loaded library is listed")
    }

    #[test]
    fn omitted_frame_pointers_are_seen_in_the_tables() {
        assert_eq!(evidence_of("libomit.so", &["-fomit-frame-pointer"]), Evidence::Omitted);
    }

    #[test]
    fn kept_frame_pointers_are_proven() {
        let flags = ["-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"];
        assert_eq!(evidence_of("libkeep.so", &flags), Evidence::Kept);
    }

    #[test]
    fn a_table_that_is_not_one_proves_nothing() {
        assert_eq!(tables_evidence(&[], 0x1000), Evidence::Unknown);
        assert_eq!(tables_evidence(&[0xff; 64], 0x1000), Evidence::Unknown);
    }
}
