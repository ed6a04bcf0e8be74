//! A Sentinel-managed group on free loopback ports: a primary, two replicas and three
//! sentinels (`redis-server --sentinel`, quorum 2), each process stopped by pid when dropped.

use std::time::Duration;

use crate::server::{DetachedServer, RedisServer};
use crate::timing::wait_until;

/// The name the sentinels know the primary by.
pub const SERVICE: &str = "rkprimary";

/// How long the sentinels wait before judging a silent primary down.
pub const DOWN_AFTER: Duration = Duration::from_secs(1);

/// A primary, its replicas and the sentinels watching them.
pub struct SentinelGroup {
    /// The data nodes; `nodes[0]` is the primary the group started with (it may have been
    /// failed over since: ask [`Self::primary_port`]).
    pub nodes: Vec<RedisServer>,
    /// The sentinels.
    pub sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Starts a primary, two replicas of it and three sentinels, and waits until every sentinel
    /// knows both replicas and the other two sentinels, and both replicas are in sync.
    pub fn start() -> SentinelGroup {
        SentinelGroup::start_with(None)
    }

    /// [`Self::start`] with `passwords`: the data nodes' (`requirepass`, `masterauth`) and the
    /// sentinels' own (`requirepass`), which differ.
    pub fn start_with(passwords: Option<(&str, &str)>) -> SentinelGroup {
        let auth: Vec<String> = match passwords {
            Some((nodes, _)) => ["--requirepass", nodes, "--masterauth", nodes].map(String::from).to_vec(),
            None => Vec::new(),
        };
        let primary = RedisServer::start_with(&auth);
        let replica_args = |port: u16| {
            let mut args = vec!["--replicaof".to_string(), "127.0.0.1".to_string(), port.to_string()];
            args.extend(auth.iter().cloned());
            args
        };
        let replicas: Vec<RedisServer> = (0..2).map(|_| RedisServer::start_with(&replica_args(primary.port))).collect();
        let sentinels: Vec<RedisServer> =
            (0..3).map(|_| RedisServer::start_sentinel(primary.port, SERVICE, DOWN_AFTER, passwords)).collect();
        let mut nodes = vec![primary];
        nodes.extend(replicas);
        let group = SentinelGroup { nodes, sentinels };
        group.wait_settled();
        group
    }

    /// Waits until every sentinel sees the current primary with both replicas and two other
    /// sentinels, and every replica's link to the primary is up.
    pub fn wait_settled(&self) {
        wait_until("a settled Sentinel group", Duration::from_secs(60), || {
            let Some(primary) = self.primary_port() else { return false };
            let sentinels_agree = self.sentinels.iter().filter(|s| s.pid_alive()).all(|s| {
                let master = s.cli(&["SENTINEL", "MASTER", SERVICE]);
                let field = |name: &str| {
                    let lines: Vec<&str> = master.lines().collect();
                    lines.iter().position(|l| *l == name).and_then(|i| lines.get(i + 1)).map(|v| v.to_string())
                };
                field("port").as_deref() == Some(&primary.to_string())
                    && field("flags").as_deref() == Some("master")
                    && field("num-slaves").as_deref() == Some("2")
                    && field("num-other-sentinels").as_deref() == Some("2")
            });
            let replicas_linked = self
                .nodes
                .iter()
                .filter(|n| n.port != primary && n.pid_alive())
                .all(|n| n.cli(&["INFO", "replication"]).contains("master_link_status:up"));
            sentinels_agree && replicas_linked
        });
    }

    /// The primary's port as the first live sentinel names it.
    pub fn primary_port(&self) -> Option<u16> {
        let sentinel = self.sentinels.iter().find(|s| s.pid_alive())?;
        let answer = sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]);
        answer.lines().nth(1)?.trim().parse().ok()
    }

    /// The data node listening on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes.iter().find(|n| n.port == port).expect("a node of the group")
    }

    /// The data node listening on `port`, to stop or kill it.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port == port).expect("a node of the group")
    }

    /// The sentinels as `127.0.0.1:PORT`.
    pub fn sentinel_addresses(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect()
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/SERVICE`.
    pub fn url(&self) -> String {
        format!("redis+sentinel://{}/{SERVICE}", self.sentinel_addresses().join(","))
    }

    /// Waits until the sentinels name a primary other than `old` (a failover ended) and the
    /// group is settled again around it (the old primary, if dead, stays listed as a replica).
    pub fn wait_failed_over_from(&self, old: u16, give_up: Duration) -> u16 {
        let mut new = old;
        wait_until("a failover", give_up, || {
            new = self.primary_port().unwrap_or(old);
            new != old && self.node(new).cli(&["ROLE"]).starts_with("master")
        });
        new
    }

    /// Leaves every process running for another process to stop by pid: the data nodes first
    /// (the primary first), then the sentinels.
    pub fn detach(self) -> Vec<DetachedServer> {
        self.nodes.into_iter().chain(self.sentinels).map(RedisServer::detach).collect()
    }
}
