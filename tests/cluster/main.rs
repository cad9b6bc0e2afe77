//! A destination cluster of `kmirror broker` processes whose metadata an openraft quorum
//! replicates (docs/cluster.md), each started with `scripts/cluster-local.sh` through
//! `kmirror_testkit::local_cluster`: `quorum_cluster` runs three processes under Kafka's clients,
//! librdkafka transactions, the active controller killed, and Apache Kafka mirrored into them;
//! `quorum_coordinators` the group and transaction coordinators spread over them;
//! `quorum_group_failover` a consumer group's offsets across its coordinator's loss with its disk;
//! `quorum_leader_election` leadership back to the preferred replicas, by
//! `kafka-leader-election.sh` and by the automatic rebalance;
//! `quorum_elections` the quorum's pre-vote; `quorum_replication` replicated partitions and a
//! frozen leader's in-sync follower taking over; `quorum_mirror_replicas` Apache Kafka mirrored
//! into three replicas while leaders die; `quorum_wiped` a node whose data directory was
//! wiped; `quorum_roles` a cluster of mixed `process.roles`. Those that need Apache Kafka, a
//! Python client or four processes are ignored unless scripts/test.sh runs them; the others need
//! only the `kmirror` binary.

mod quorum_cluster;
mod quorum_coordinators;
mod quorum_elections;
mod quorum_group_failover;
mod quorum_leader_election;
mod quorum_mirror_replicas;
mod quorum_replication;
mod quorum_roles;
mod quorum_wiped;
