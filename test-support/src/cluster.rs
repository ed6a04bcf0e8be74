//! A Redis Cluster of three masters on free loopback ports.

use std::process::Command;
use std::time::Duration;

use crate::server::{DetachedServer, RedisServer};
use crate::timing::wait_until;

/// A Redis Cluster of three masters built with `redis-cli --cluster create`.
pub struct RedisCluster {
    /// The masters, each a cluster-enabled [`RedisServer`].
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled nodes, joins them, and waits for `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_cluster_node()).collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        wait_until("cluster_state:ok on every node", Duration::from_secs(20), || {
            nodes.iter().all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        });
        RedisCluster { nodes }
    }

    /// The nodes' URLs, for a cluster backend's seeds.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Leaves the nodes running for another process to stop by pid (see
    /// [`RedisServer::detach`]).
    pub fn detach(self) -> Vec<DetachedServer> {
        self.nodes.into_iter().map(RedisServer::detach).collect()
    }
}
