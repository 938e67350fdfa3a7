//! Both halves of `memprof record`: the launcher, which runs the program under the preload
//! library, and the agent, which runs inside it.

pub(crate) mod agent;
pub mod bundled;
pub(crate) mod collect;
pub(crate) mod env;
pub mod launcher;
pub(crate) mod ring;
pub(crate) mod unfollowed;
