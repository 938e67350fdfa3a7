//! Outer records: the framing of untrusted bytes.
//!
//! # 1. One record at a time
//! An outer record is `tag · len · payload · crc` ([the format](crate::profile::format) §1).
//! [`read_raw`] reads one, counting bytes so that messages can name offsets, and tells a
//! whole record from a clean end, a cut and a damaged record (tag 0, a length over
//! [`MAX_RECORD`], a checksum mismatch); it never allocates more than the bytes actually
//! there.

use std::io::{self, Read};

use crate::profile::format::spec::MAX_RECORD;

/// Reads bytes while counting them, so that messages can name byte offsets.
pub(super) struct Counting<R> {
    pub(super) inner: R,
    pub(super) pos: u64,
}

/// Outcome of trying to read some bytes of a record.
pub(super) enum Got {
    /// All requested bytes.
    All,
    /// End of input after this many bytes (0 = clean end before the first byte).
    Eof(usize),
}

impl<R: Read> Counting<R> {
    pub(super) fn fill(&mut self, buf: &mut [u8]) -> io::Result<Got> {
        let mut done = 0;
        while done < buf.len() {
            let Some(dst) = buf.get_mut(done..) else { break };
            match self.inner.read(dst) {
                Ok(0) => return Ok(Got::Eof(done)),
                Ok(n) => {
                    done += n.min(dst.len());
                    self.pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Got::All)
    }
}

/// One raw record, or why there is none.
pub(super) enum Raw {
    Record {
        tag: u8,
        payload: Vec<u8>,
    },
    /// Clean end of input at a record boundary.
    End,
    /// Input ended inside a record.
    Cut,
    /// A damaged record; the message says why.
    Bad(String),
}

pub(super) fn read_raw<R: Read>(r: &mut Counting<R>, payload: &mut Vec<u8>) -> io::Result<Raw> {
    let mut tag = [0u8; 1];
    if let Got::Eof(_) = r.fill(&mut tag)? {
        return Ok(Raw::End);
    }
    let tag = tag[0];
    let mut len = 0u64;
    let mut i = 0;
    loop {
        let mut b = [0u8; 1];
        if let Got::Eof(_) = r.fill(&mut b)? {
            return Ok(Raw::Cut);
        }
        let b = b[0];
        if i == 9 && b > 1 {
            return Ok(Raw::Bad("record length overflows 64 bits".into()));
        }
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            break;
        }
        i += 1;
        if i == 10 {
            return Ok(Raw::Bad("record length varint longer than 10 bytes".into()));
        }
    }
    if tag == 0 {
        return Ok(Raw::Bad("invalid record tag 0".into()));
    }
    if len > MAX_RECORD {
        return Ok(Raw::Bad(format!("record length {len} exceeds the limit of {MAX_RECORD}")));
    }
    // Read through `take` so that a cut file with a large declared length never makes us
    // allocate the declared length up front.
    payload.clear();
    let got = (&mut r.inner).take(len).read_to_end(payload)?;
    r.pos += got as u64;
    if (got as u64) < len {
        return Ok(Raw::Cut);
    }
    let mut crc = [0u8; 4];
    if let Got::Eof(_) = r.fill(&mut crc)? {
        return Ok(Raw::Cut);
    }
    let mut h = crc32fast::Hasher::new();
    h.update(&[tag]);
    h.update(payload);
    if h.finalize() != u32::from_le_bytes(crc) {
        return Ok(Raw::Bad("crc mismatch".into()));
    }
    Ok(Raw::Record { tag, payload: std::mem::take(payload) })
}
