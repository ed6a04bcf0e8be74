//! Every engine and every limiter kind, declared once. The tables below are read by the code
//! that needs one arm per engine or per kind, so that nothing else lists them:
//! - [`for_each_engine!`] generates [`super::Algorithm`] and its dispatch (`engine/mod.rs`), the
//!   memory backend's per-key state and its dispatch (`backend/memory.rs`) and the list of
//!   scripts (`engine/script.rs`);
//!
//! A new engine is its file (an [`super::Engine`]) with its `.lua` beside it, and one line here.

/// Calls `$callback!` with the table of engines (after `$first`, if given), one line each:
/// `Variant: engine type, inline | boxed;` where the last word says whether the memory backend
/// keeps the engine's [`super::Engine::State`] in the slot itself (small, fixed-size states) or
/// behind a pointer (states that grow), so that a slot stays one cache line.
macro_rules! for_each_engine {
    ($callback:ident $($first:tt)*) => {
        $callback! {
            $($first)*
            Gcra: $crate::engine::gcra::Gcra, inline;
            Leased: $crate::engine::leased::Leased, inline;
            Sliding: $crate::engine::sliding::Sliding, boxed;
            Log: $crate::engine::log::Log, boxed;
            Concurrent: $crate::engine::concurrent::Concurrent, boxed;
            Calendar: $crate::engine::calendar::Calendar, inline;
            Partitions: $crate::engine::partitions::Partitions, inline;
            Unlimited: $crate::engine::unlimited::Unlimited, inline;
        }
    };
}
pub(crate) use for_each_engine;
