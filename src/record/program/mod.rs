//! The part of `memprof record` that runs inside the profiled program: everything here is
//! called by the preload library (through `memprof::__private`), in the program's own
//! threads and at its own moments (its constructors, `fork`, `exec`, `dlclose`, exit).

pub(crate) mod agent;
