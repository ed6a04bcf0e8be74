//! A Redis Cluster of three masters (with or without a replica each) on free loopback ports.

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
        RedisCluster::start_with(0)
    }

    /// Three masters with one replica each (six nodes), once every replica's link is up.
    pub fn start_with_replicas() -> RedisCluster {
        let cluster = RedisCluster::start_with(1);
        wait_until("every replica linked to its master", Duration::from_secs(30), || {
            cluster.nodes.iter().all(|n| {
                let info = n.cli(&["INFO", "replication"]);
                info.contains("role:master") && info.contains("connected_slaves:1")
                    || info.contains("master_link_status:up")
            })
        });
        cluster
    }

    /// `3 * (1 + replicas)` nodes joined with `replicas` replicas per master.
    fn start_with(replicas: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas)).map(|_| RedisServer::start_cluster_node()).collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        wait_until("cluster_state:ok on every node", Duration::from_secs(20), || {
            nodes.iter().all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        });
        RedisCluster { nodes }
    }

    /// The node listening on `port`, to stop or kill it.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port == port).expect("a node of the cluster")
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
