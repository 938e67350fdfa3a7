//! [`OwnFile`]: a file the profiler opened in the profiled process, proven to be that file
//! before each write.
//!
//! A daemon closes every descriptor at start and opens its own files, which take the
//! lowest free numbers: a profiler that kept writing to its old descriptor number would
//! write into the program's file. So each write and flush first checks, with `fstat`, that
//! the descriptor still names the file it opened (its device and inode); once it does not,
//! nothing more is written, and the descriptor, which is the program's now, is never
//! closed by us.

use std::fs::File;
use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// A file checked to still be ours before each use.
#[derive(Debug)]
pub(crate) struct OwnFile {
    file: ManuallyDrop<File>,
    id: (u64, u64),
    lost: bool,
}

impl OwnFile {
    /// Wraps a file this process just opened.
    pub(crate) fn new(file: File) -> std::io::Result<OwnFile> {
        let m = file.metadata()?;
        Ok(OwnFile { file: ManuallyDrop::new(file), id: (m.dev(), m.ino()), lost: false })
    }

    fn check(&mut self) -> std::io::Result<()> {
        if !self.lost {
            let fd = self.file.as_raw_fd();
            // SAFETY: `st` is plain data for fstat to fill; `fd` is only read.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: valid out pointer; a closed `fd` fails with EBADF.
            let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
            if ok && (st.st_dev as u64, st.st_ino as u64) == self.id {
                return Ok(());
            }
            self.lost = true;
        }
        Err(std::io::Error::other(format!(
            "the program closed the profile's descriptor {} (and may have reused it); the \
             profile stops here",
            self.file.as_raw_fd()
        )))
    }
}

impl OwnFile {
    /// Reads at `offset`, once the descriptor is proven to be still ours: a descriptor the
    /// program took over (a socket, a pipe) is never read, which would take its data.
    pub(crate) fn read_at(&mut self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        self.check()?;
        self.file.read_at(buf, offset)
    }
}

impl Write for OwnFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.check()?;
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.check()?;
        self.file.flush()
    }
}

impl Drop for OwnFile {
    fn drop(&mut self) {
        if self.check().is_ok() {
            // SAFETY: dropped once, here; the descriptor is still the file we opened.
            unsafe { ManuallyDrop::drop(&mut self.file) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_descriptor_is_never_written() {
        let dir = std::env::temp_dir().join(format!("memprof-ownfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
        let mut f = OwnFile::new(File::create(&ours).unwrap()).unwrap();
        f.write_all(b"ok").unwrap();
        let fd = f.file.as_raw_fd();
        // The program closes the descriptor and opens its own file, which takes the number.
        // SAFETY: closes a descriptor this test owns; the OwnFile will not close it again.
        unsafe { libc::close(fd) };
        let other = File::create(&theirs).unwrap();
        assert_eq!(other.as_raw_fd(), fd, "the lowest free number is reused");
        assert!(f.write_all(b"profile bytes").is_err());
        drop(f);
        drop(other);
        assert_eq!(std::fs::read(&ours).unwrap(), b"ok");
        assert_eq!(std::fs::read(&theirs).unwrap(), b"", "nothing written into theirs");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
