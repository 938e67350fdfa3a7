//! The side log's records (`ring` §3): what the collector needs to know of the process
//! (its executable, command line and parent) and the module lists, as bytes.

/// Encodes what the collector needs to know of the process: its executable, command line
/// and parent ([`super::LOG_PROCESS`]).
pub(crate) fn encode_process(executable: &str, cmdline: &[String], ppid: u32) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, executable);
    out.extend_from_slice(&(cmdline.len() as u32).to_le_bytes());
    for a in cmdline {
        put_str(&mut out, a);
    }
    out.extend_from_slice(&ppid.to_le_bytes());
    out
}

/// Decodes [`encode_process`]: the executable, the arguments and the parent's pid.
#[cfg(any(feature = "cli", test))]
pub(crate) fn decode_process(mut b: &[u8]) -> Option<(String, Vec<String>, u32)> {
    let exe = get_str(&mut b)?;
    let n = get_u32(&mut b)?;
    let mut args = Vec::new();
    for _ in 0..n.min(1 << 16) {
        args.push(get_str(&mut b)?);
    }
    let ppid = get_u32(&mut b).unwrap_or(0);
    Some((exe, args, ppid))
}

/// Encodes a module list ([`super::LOG_MODULES`]).
pub(crate) fn encode_modules(modules: &[crate::profile::Module]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(modules.len() as u32).to_le_bytes());
    for m in modules {
        for v in [m.base, m.start, m.end, m.file_size, m.file_mtime_ns] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        put_bytes(&mut out, &m.build_id);
        put_str(&mut out, &m.path);
    }
    out
}

/// Decodes [`encode_modules`].
#[cfg(any(feature = "cli", test))]
pub(crate) fn decode_modules(mut b: &[u8]) -> Option<Vec<crate::profile::Module>> {
    let n = get_u32(&mut b)?;
    let mut out = Vec::new();
    for _ in 0..n.min(1 << 16) {
        let mut v = [0u64; 5];
        for x in &mut v {
            let (head, rest) = b.split_first_chunk::<8>()?;
            *x = u64::from_le_bytes(*head);
            b = rest;
        }
        let build_id = get_bytes(&mut b)?;
        let path = get_str(&mut b)?;
        out.push(crate::profile::Module {
            path,
            base: v[0],
            start: v[1],
            end: v[2],
            build_id,
            file_size: v[3],
            file_mtime_ns: v[4],
        });
    }
    Some(out)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn get_u32(b: &mut &[u8]) -> Option<u32> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    *b = rest;
    Some(u32::from_le_bytes(*head))
}

fn get_bytes(b: &mut &[u8]) -> Option<Vec<u8>> {
    let n = get_u32(b)? as usize;
    if n > b.len() {
        return None;
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Some(head.to_vec())
}

fn get_str(b: &mut &[u8]) -> Option<String> {
    get_bytes(b).map(|v| String::from_utf8_lossy(&v).into_owned())
}
