//! The reader's cursor over one record's payload ([`Payload`], every read bounds-checked)
//! and the header record it decodes first ([`decode_header`]).

use super::super::spec::{unzigzag, MAX_LIST, MAX_STRING, VERSION};
use crate::error::Error;
use crate::profile::header::Header;

/// A cursor over one record's payload. Every read is bounds-checked.
pub(in crate::profile::format) struct Payload<'a> {
    pub(in crate::profile::format) rest: &'a [u8],
}

impl<'a> Payload<'a> {
    #[inline]
    pub(in crate::profile::format) fn byte(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.rest.split_first().ok_or("payload ends too early")?;
        self.rest = rest;
        Ok(b)
    }

    #[inline]
    pub(in crate::profile::format) fn u(&mut self) -> Result<u64, String> {
        if let Some((&b, rest)) = self.rest.split_first() {
            if b < 0x80 {
                self.rest = rest;
                return Ok(u64::from(b));
            }
        }
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            if i == 9 && b > 1 {
                return Err("varint overflows 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    pub(in crate::profile::format) fn z(&mut self) -> Result<i64, String> {
        self.u().map(unzigzag)
    }

    pub(in crate::profile::format) fn u32(&mut self, what: &str) -> Result<u32, String> {
        let v = self.u()?;
        u32::try_from(v).map_err(|_| format!("{what} {v} does not fit in 32 bits"))
    }

    pub(in crate::profile::format) fn f64(&mut self) -> Result<f64, String> {
        let bytes = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(bytes);
        Ok(f64::from_le_bytes(a))
    }

    pub(in crate::profile::format) fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        let n = usize::try_from(n).map_err(|_| "length does not fit in memory")?;
        if n > self.rest.len() {
            return Err("payload ends too early".into());
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    pub(in crate::profile::format) fn str(&mut self) -> Result<String, String> {
        let n = self.u()?;
        if n > MAX_STRING {
            return Err(format!("string of {n} bytes exceeds the limit of {MAX_STRING}"));
        }
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "string is not valid UTF-8".into())
    }

    /// A count of items that each take at least one payload byte, bounded by `max`.
    pub(in crate::profile::format) fn count(
        &mut self,
        what: &str,
        max: u64,
    ) -> Result<usize, String> {
        let n = self.u()?;
        if n > max {
            return Err(format!("{n} {what} exceed the limit of {max}"));
        }
        if n > self.rest.len() as u64 {
            return Err(format!("{n} {what} cannot fit in the {} bytes left", self.rest.len()));
        }
        // n ≤ rest.len(), so it fits in usize.
        Ok(n as usize)
    }
}

pub(super) fn decode_header(p: &mut Payload<'_>) -> Result<Header, Error> {
    let bad = |m: String| Error::Format(format!("profile header is damaged: {m}"));
    let version = p.u32("version").map_err(bad)?;
    if version == 0 || version > VERSION {
        return Err(Error::Format(format!(
            "unsupported version {version} (this memprof reads versions 1 to {VERSION}; \
             the file was written by a newer memprof)"
        )));
    }
    let interval = p.f64().map_err(bad)?;
    if !interval.is_finite() || interval < 1.0 {
        return Err(bad(format!("invalid sampling interval {interval}")));
    }
    let depth = p.u32("depth").map_err(bad)?;
    let pid = p.u32("pid").map_err(bad)?;
    let executable = p.str().map_err(bad)?;
    let argc = p.count("arguments", MAX_LIST).map_err(bad)?;
    let mut cmdline = Vec::with_capacity(argc);
    for _ in 0..argc {
        cmdline.push(p.str().map_err(bad)?);
    }
    let start_unix_ns = p.u().map_err(bad)?;
    let time_unit_ns = if version >= 2 { p.u().map_err(bad)? } else { 1 };
    if time_unit_ns == 0 || time_unit_ns > 1_000_000_000 {
        return Err(bad(format!("invalid time unit of {time_unit_ns} ns")));
    }
    // Appended later in version 2: absent from older files.
    let ppid = if version >= 2 && !p.rest.is_empty() { p.u32("ppid").map_err(bad)? } else { 0 };
    // Appended after it: flags, bit 0 set by `memprof record`'s collector, bit 1 by
    // `memprof attach`'s.
    let flags = if version >= 2 && !p.rest.is_empty() { p.u().map_err(bad)? } else { 0 };
    let (collected, attached) = (flags & 1 == 1, flags & 2 == 2);
    // Appended after them: the pid in the process's own PID namespace.
    let ns_pid =
        if version >= 2 && !p.rest.is_empty() { p.u32("ns_pid").map_err(bad)? } else { 0 };
    Ok(Header {
        version,
        interval,
        depth,
        pid,
        ppid,
        ns_pid,
        executable,
        cmdline,
        start_unix_ns,
        time_unit_ns,
        collected,
        attached,
    })
}
