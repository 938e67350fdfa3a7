//! The GOT slots through which each loaded object calls functions of given names: what
//! `memprof attach` reroutes to the preload library in a process that bound its malloc
//! family before the library was there (`record/program/attached.rs`).
//!
//! An object calls a function of another object (and, on x86-64, glibc calls its own
//! `malloc` and `free`) through a slot of its global offset table, filled by the dynamic
//! loader from a relocation that names the function: `R_X86_64_JUMP_SLOT` for the PLT
//! (`DT_JMPREL`), `R_X86_64_GLOB_DAT` for a `-fno-plt` call or a taken address (`DT_RELA`).
//! The walk reads each object's dynamic section and relocations in memory, as the loader
//! left them (addresses relocated in place, or link-time ones below the object's bias: see
//! `elf_lookup.rs` §3), every read checked to lie inside one of the object's `PT_LOAD`
//! segments. It allocates nothing and calls nothing of the loader but `dl_iterate_phdr`.

use crate::sys::loader::{for_each_object, Object};

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_STRSZ: i64 = 10;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const RELA_SIZE: usize = 24;
const SYM_SIZE: usize = 24;

/// A slot found by [`slots`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Index of the name in the list asked for.
    pub name: usize,
    /// The slot's address.
    pub addr: usize,
    /// What it holds now.
    pub value: usize,
    /// The value lies inside the slot's own object: a lazy binding not made yet (the
    /// object's PLT stub), or the object's own definition.
    pub own: bool,
    /// The bias of the slot's object, which names it.
    pub object: usize,
}

/// Calls `f` with every slot of every loaded object, except the one that holds the address
/// `skip`, whose relocation names one of `names`.
pub fn slots(names: &[&[u8]], skip: usize, mut f: impl FnMut(Slot)) {
    for_each_object(|object| {
        if object.loads().any(|(start, size)| skip.wrapping_sub(start) < size) {
            return;
        }
        if let Some(d) = Dynamic::of(object) {
            d.each(names, &mut f);
        }
    });
}

/// An object's dynamic section: what [`slots`] reads.
struct Dynamic<'a> {
    object: &'a Object<'a>,
    strtab: usize,
    strsz: usize,
    symtab: usize,
    tables: [(usize, usize); 2],
}

impl<'a> Dynamic<'a> {
    fn of(object: &'a Object<'a>) -> Option<Dynamic<'a>> {
        let bias = object.bias();
        let dynamic = object.phdrs().iter().find(|ph| ph.p_type == libc::PT_DYNAMIC)?;
        let at = |v: u64| {
            let v = v as usize;
            if v < bias {
                v.wrapping_add(bias)
            } else {
                v
            }
        };
        let mut d = Dynamic { object, strtab: 0, strsz: 0, symtab: 0, tables: [(0, 0); 2] };
        let mut pltrel_rela = true;
        let start = bias.wrapping_add(dynamic.p_vaddr as usize);
        for i in 0..(dynamic.p_memsz as usize / 16) {
            let tag = d.read::<i64>(start + i * 16)?;
            let value = d.read::<u64>(start + i * 16 + 8)?;
            match tag {
                DT_NULL => break,
                DT_STRTAB => d.strtab = at(value),
                DT_STRSZ => d.strsz = value as usize,
                DT_SYMTAB => d.symtab = at(value),
                DT_RELA => d.tables[0].0 = at(value),
                DT_RELASZ => d.tables[0].1 = value as usize,
                DT_JMPREL => d.tables[1].0 = at(value),
                DT_PLTRELSZ => d.tables[1].1 = value as usize,
                DT_PLTREL => pltrel_rela = value == DT_RELA as u64,
                _ => {}
            }
        }
        if !pltrel_rela {
            d.tables[1] = (0, 0);
        }
        (d.strtab != 0 && d.symtab != 0).then_some(d)
    }

    fn each(&self, names: &[&[u8]], f: &mut impl FnMut(Slot)) {
        for &(table, size) in &self.tables {
            if table == 0 {
                continue;
            }
            for i in 0..size / RELA_SIZE {
                let rela = table + i * RELA_SIZE;
                let (Some(offset), Some(info)) =
                    (self.read::<u64>(rela), self.read::<u64>(rela + 8))
                else {
                    return;
                };
                let kind = info as u32;
                let sym = (info >> 32) as usize;
                if (kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT) || sym == 0 {
                    continue;
                }
                let Some(st_name) = self.read::<u32>(self.symtab + sym * SYM_SIZE) else {
                    continue;
                };
                let Some(name) = names.iter().position(|n| self.name_is(st_name as usize, n))
                else {
                    continue;
                };
                let addr = self.object.bias().wrapping_add(offset as usize);
                let Some(value) = self.read::<usize>(addr) else {
                    continue;
                };
                let own = self.object.loads().any(|(start, size)| value.wrapping_sub(start) < size);
                f(Slot { name, addr, value, own, object: self.object.bias() });
            }
        }
    }

    /// Whether the string at `offset` of the string table is `name`.
    fn name_is(&self, offset: usize, name: &[u8]) -> bool {
        if self.strsz != 0 && offset.saturating_add(name.len()) >= self.strsz {
            return false;
        }
        let at = self.strtab + offset;
        name.iter()
            .chain(core::iter::once(&0))
            .enumerate()
            .all(|(i, &c)| self.read::<u8>(at + i) == Some(c))
    }

    /// Reads a `T` at `addr` if the object maps all of it ([`Object::read`]).
    fn read<T: Copy>(&self, addr: usize) -> Option<T> {
        self.object.read(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary calls `malloc` and `free` through slots of its own or of the
    /// objects it links (glibc's own calls go through its GOT on x86-64), and each slot
    /// holds glibc's definition or a lazy binding's stub.
    #[test]
    fn the_slots_of_malloc_and_free_hold_the_definitions() {
        extern "C" {
            fn malloc(n: usize) -> *mut core::ffi::c_void;
            fn free(p: *mut core::ffi::c_void);
        }
        let defs = [malloc as *const () as usize, free as *const () as usize];
        let mut seen = [0; 2];
        slots(&[b"malloc", b"free"], 0, |s| {
            assert!(s.own || s.value == defs[s.name], "{s:?} {defs:x?}");
            seen[s.name] += 1;
        });
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    }
}
