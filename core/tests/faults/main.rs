//! What callers see when Redis fails: errors the failure policy covers or not (`errors`), a
//! server that dies or hangs (`failures`), one that never answers (`hung`).

#[path = "../support/mod.rs"]
mod support;

mod errors;
mod failures;
mod hung;
