//! Everything that runs inside the allocator: the hooks, the sampler, the live table, the
//! event queue and the call-stack capture. Nothing here takes a `std::sync` lock or
//! allocates through the profiled allocator (memory comes from `mmap`, see
//! [`crate::sys`]); nothing here depends on the session, the recorder or the profile.

pub(crate) mod alloc;
pub(crate) mod callstack;
pub(crate) mod clock;
pub(crate) mod hot;
pub(crate) mod live;
pub(crate) mod queue;
pub(crate) mod sampler;
