//! Redis deployments beyond one server: Cluster (`cluster`, `cluster_migration`), Sentinel
//! (`sentinel`) and `replica_acks`.

#[path = "../support/mod.rs"]
mod support;

mod cluster;
mod cluster_migration;
mod replica_acks;
mod sentinel;
