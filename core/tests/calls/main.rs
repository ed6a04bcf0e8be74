//! The call styles and the ways a call reaches its backend: the memory backend's waits and
//! bounds (`memory`), batched async calls (`batch`), driven calls (`driven`), blocking calls'
//! own connections (`sync_client`), a Redis backend on a manual clock (`manual_clock`).

#[path = "../support/mod.rs"]
mod support;

mod batch;
mod driven;
mod manual_clock;
mod memory;
mod sync_client;
