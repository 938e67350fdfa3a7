//! errno: the hooks keep the program's (a `free` must not change it).

/// This thread's errno, kept: [`SavedErrno::restore`] puts it back (one
/// `__errno_location` call for both).
pub(crate) struct SavedErrno {
    slot: *mut libc::c_int,
    value: libc::c_int,
}

impl SavedErrno {
    #[inline(always)]
    /// Keeps this thread's errno.
    pub(crate) fn save() -> SavedErrno {
        // SAFETY: __errno_location returns this thread's errno slot, always valid.
        let slot = unsafe { libc::__errno_location() };
        // SAFETY: as above.
        SavedErrno { slot, value: unsafe { *slot } }
    }

    #[inline(always)]
    /// Puts the kept errno back.
    pub(crate) fn restore(self) {
        // SAFETY: the slot is this thread's errno (the value is not Send: a raw pointer).
        unsafe { *self.slot = self.value }
    }
}

/// This thread's errno.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's errno.
pub fn set_errno(v: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = v }
}
