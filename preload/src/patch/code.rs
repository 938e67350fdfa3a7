//! What the patcher writes, computed from a function's bytes alone (no memory is touched
//! here, so it is tested on byte strings): which first instructions move, whether moving
//! them is safe, and the trampoline's and the patch's bytes.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Decoder, DecoderOptions, Instruction, InstructionBlock,
};

/// The patch's length: `jmp rel32`.
pub(crate) const JMP_LEN: usize = 5;

/// The length of the absolute jump a trampoline ends with and a relay is made of:
/// `jmp qword ptr [rip]` followed by the 8-byte target.
pub(crate) const ABS_JMP_LEN: usize = 14;

/// Why a function was left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its symbol is shorter than the patch: the jump would overwrite the next function.
    TooShort,
    /// Its first bytes are not instructions the decoder knows.
    Undecodable,
    /// A branch inside the function lands inside the bytes the patch overwrites.
    BranchIntoPatch,
    /// The block encoder cannot re-encode the moved instructions at the trampoline (a
    /// RIP-relative operand out of reach from there).
    Unrelocatable,
    /// No page within reach of a `jmp rel32` from the function could be mapped.
    NoRoom,
    /// `mprotect` refused to make its page writable.
    Protect,
    /// Another function of its family was refused: a family is patched whole or not at all.
    Family,
}

impl Refusal {
    /// A few words for the log.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Refusal::TooShort => "shorter than the patch",
            Refusal::Undecodable => "undecodable first instructions",
            Refusal::BranchIntoPatch => "a branch lands inside the patched bytes",
            Refusal::Unrelocatable => "its first instructions cannot be relocated",
            Refusal::NoRoom => "no page within reach of a rel32 jump",
            Refusal::Protect => "its code page cannot be made writable",
            Refusal::Family => "another function of its family was refused",
        }
    }
}

/// The whole instructions at the start of `code` (a function's bytes: `code.len()` is its
/// symbol's size) that a `jmp rel32` at `ip` overwrites, once the function is known safe to
/// patch: long enough, decodable, and with no branch of its own into the overwritten bytes
/// past the first (a loop back to the entry itself is a new call, and goes through the
/// hook as one). Branches from other functions into its first bytes cannot be seen; none
/// is made by compilers, which enter a function at its symbol.
pub(crate) fn moved(code: &[u8], ip: u64) -> Result<Vec<Instruction>, Refusal> {
    if code.len() < JMP_LEN {
        return Err(Refusal::TooShort);
    }
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut moved = Vec::new();
    let mut len = 0;
    while len < JMP_LEN {
        if !decoder.can_decode() {
            return Err(Refusal::TooShort);
        }
        let i = decoder.decode();
        if i.is_invalid() {
            return Err(Refusal::Undecodable);
        }
        len += i.len();
        moved.push(i);
    }
    let inside = ip + 1..ip + len as u64;
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    while decoder.can_decode() {
        // An undecodable byte further on (data, padding) ends nothing: its target is 0.
        if inside.contains(&decoder.decode().near_branch_target()) {
            return Err(Refusal::BranchIntoPatch);
        }
    }
    Ok(moved)
}

/// The total length of `moved`.
pub(crate) fn moved_len(moved: &[Instruction]) -> usize {
    moved.iter().map(Instruction::len).sum()
}

/// The trampoline at address `at`: `moved` (the first instructions of the function at
/// `ip`) re-encoded there by iced's block encoder, which rewrites RIP-relative operands and
/// branch targets so that they reach what they reached from `ip`, then an absolute jump
/// back to the first instruction left in place.
pub(crate) fn trampoline(moved: &[Instruction], ip: u64, at: u64) -> Result<Vec<u8>, Refusal> {
    let block = InstructionBlock::new(moved, at);
    let encoded = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE)
        .map_err(|_| Refusal::Unrelocatable)?;
    let mut code = encoded.code_buffer;
    code.extend_from_slice(&abs_jmp(ip + moved_len(moved) as u64));
    Ok(code)
}

/// `jmp qword ptr [rip]; .quad to`: a jump to anywhere (a relay to a hook, and a
/// trampoline's way back).
pub(crate) fn abs_jmp(to: u64) -> [u8; ABS_JMP_LEN] {
    let mut b = [0u8; ABS_JMP_LEN];
    b[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    b[6..].copy_from_slice(&to.to_le_bytes());
    b
}

/// The patch at `at`: `jmp rel32` to `to`; `None` when `to` is out of reach.
pub(crate) fn rel_jmp(at: u64, to: u64) -> Option<[u8; JMP_LEN]> {
    let rel = i32::try_from((to as i64).wrapping_sub(at as i64 + JMP_LEN as i64)).ok()?;
    let mut b = [0xe9, 0, 0, 0, 0];
    b[1..].copy_from_slice(&rel.to_le_bytes());
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: u64 = 0x40_1000;

    /// Decodes `code` at `at`, for the tests' checks.
    fn decode(code: &[u8], at: u64) -> Vec<Instruction> {
        let mut d = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
        let mut v = Vec::new();
        while d.can_decode() {
            v.push(d.decode());
        }
        v
    }

    /// rustc's jemalloc `malloc` starts `cmp rdi, 0x1001` (7 bytes): one instruction moves,
    /// and the trampoline jumps back right after it.
    #[test]
    fn one_long_instruction_moves_alone() {
        let code = [0x48, 0x81, 0xff, 0x01, 0x10, 0, 0, 0x0f, 0x83, 0xb3, 0, 0, 0, 0xc3];
        let m = moved(&code, IP).unwrap();
        assert_eq!(moved_len(&m), 7);
        let t = trampoline(&m, IP, 0x50_0000).unwrap();
        assert_eq!(&t[..7], &code[..7]);
        assert_eq!(&t[7..], &abs_jmp(IP + 7));
    }

    /// A RIP-relative load in the first bytes (`mov rax, [rip + 0x100]`) still reads the
    /// same address from the trampoline.
    #[test]
    fn rip_relative_operands_keep_their_target() {
        let code = [0x48, 0x8b, 0x05, 0x00, 0x01, 0, 0, 0xc3];
        let m = moved(&code, IP).unwrap();
        let at = IP + 0x1000_0000;
        let t = trampoline(&m, IP, at).unwrap();
        let i = decode(&t[..t.len() - ABS_JMP_LEN], at);
        assert_eq!(i.len(), 1);
        assert_eq!(i[0].ip_rel_memory_address(), IP + 7 + 0x100);
    }

    /// A RIP-relative operand that the trampoline cannot reach (over 2 GiB away) and that
    /// has no other form (`add rax, [rip + 0x100]` above 4 GiB; a `mov rax, [rip + x]`
    /// becomes `mov rax, [abs64]`, and a target below 4 GiB an `[eip + x]`) is refused,
    /// not truncated.
    #[test]
    fn an_unreachable_rip_relative_operand_is_refused() {
        let ip = 0x7f00_0000_1000;
        let code = [0x48, 0x03, 0x05, 0x00, 0x01, 0, 0, 0xc3];
        let m = moved(&code, ip).unwrap();
        assert_eq!(trampoline(&m, ip, ip + (8 << 30)), Err(Refusal::Unrelocatable));
    }

    /// A short conditional jump among the moved instructions (`test edi, edi; je +0x10;
    /// ret`) is re-encoded to the same target from the trampoline; `xor ecx, ecx; jmp
    /// rel32` (jemalloc's `rallocx`) moves whole.
    #[test]
    fn short_and_near_jumps_keep_their_target() {
        let code =
            [0x85, 0xff, 0x74, 0x10, 0x90, 0x90, 0xc3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xc3];
        let m = moved(&code, IP).unwrap();
        assert_eq!(moved_len(&m), 5);
        let at = IP + 0x10_0000;
        let t = trampoline(&m, IP, at).unwrap();
        let i = decode(&t[..t.len() - ABS_JMP_LEN], at);
        assert!(i.iter().any(|i| i.near_branch_target() == IP + 4 + 0x10), "{i:?}");
        assert!(t.ends_with(&abs_jmp(IP + 5)));

        let code = [0x31, 0xc9, 0xe9, 0x00, 0x20, 0, 0];
        let m = moved(&code, IP).unwrap();
        let t = trampoline(&m, IP, at).unwrap();
        let i = decode(&t[..t.len() - ABS_JMP_LEN], at);
        assert_eq!(i.last().unwrap().near_branch_target(), IP + 7 + 0x2000);
    }

    /// A function shorter than the patch (`xor eax, eax; ret`) is refused.
    #[test]
    fn a_function_shorter_than_the_patch_is_refused() {
        assert_eq!(moved(&[0x31, 0xc0, 0xc3], IP), Err(Refusal::TooShort));
        assert_eq!(moved(&[0xc3], IP), Err(Refusal::TooShort));
    }

    /// A loop whose branch goes back into the bytes the patch overwrites is refused; one
    /// back to the entry itself is not.
    #[test]
    fn a_branch_into_the_patched_bytes_is_refused() {
        // 0: push rbx; 1: mov ebx, edi; 3: dec ebx; 5: jne 1; 7: pop rbx; 8: ret
        let code = [0x53, 0x89, 0xfb, 0xff, 0xcb, 0x75, 0xfa, 0x5b, 0xc3];
        assert_eq!(moved(&code, IP), Err(Refusal::BranchIntoPatch));
        // 0: push rbx; 1: mov ebx, edi; 3: dec ebx; 5: jne 0; 7: pop rbx; 8: ret
        let code = [0x53, 0x89, 0xfb, 0xff, 0xcb, 0x75, 0xf9, 0x5b, 0xc3];
        assert_eq!(moved_len(&moved(&code, IP).unwrap()), 5);
    }

    /// The patch's rel32 reaches ±2 GiB and no further.
    #[test]
    fn the_patch_jump_reaches_two_gib() {
        assert_eq!(rel_jmp(IP, IP + 5), Some([0xe9, 0, 0, 0, 0]));
        assert!(rel_jmp(IP, IP + 5 + i32::MAX as u64).is_some());
        assert!(rel_jmp(IP, IP + 6 + i32::MAX as u64).is_none());
    }
}
