//! The controller's image as records: what a quorum's snapshot holds (docs/cluster.md).
//!
//! Contract: applying [`Controller::image_records`] to an empty image rebuilds this image
//! exactly (cluster id, brokers with their epochs, topics with their replicas, leaders, ISRs,
//! leader and partition epochs and configs, the next producer id, mirrors, ACLs).
//! [`Controller::restore`] replaces an image with such records, and readers following the
//! changes are told to look at everything.

use super::{Controller, MetadataRecord};

impl Controller {
    /// The records that rebuild this image from empty.
    pub fn image_records(&self) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        if !self.cluster_id.is_empty() {
            records.push(MetadataRecord::ClusterId {
                id: self.cluster_id.clone(),
            });
        }
        for broker in self.brokers.values() {
            records.push(MetadataRecord::BrokerRegistered {
                node_id: broker.node_id,
                host: broker.host.clone(),
                port: broker.port,
                directory_id: broker.directory_id.clone(),
                epoch: broker.epoch,
            });
        }
        for node_id in &self.fenced {
            records.push(MetadataRecord::BrokerFenced {
                node_id: *node_id,
                fenced: true,
            });
        }
        for node_id in &self.shutting_down {
            records.push(MetadataRecord::BrokerShuttingDown { node_id: *node_id });
        }
        for (name, topic) in &self.topics {
            records.push(MetadataRecord::Topic {
                name: name.clone(),
                topic_id: kmirror_protocol::topic_id::to_kafka_string(&topic.topic_id),
                partitions: topic.partitions.len() as i32,
                configs: topic.configs.clone(),
                leaders: topic.partitions.iter().map(|p| p.leader).collect(),
                replicas: topic
                    .partitions
                    .iter()
                    .map(|p| p.replicas.clone())
                    .collect(),
                all_in_sync: true,
            });
            for (index, partition) in topic.partitions.iter().enumerate() {
                let replicas = std::slice::from_ref(&partition.replicas);
                let placed = super::placed_partition(name, (&[], replicas, true), 0);
                if *partition != placed {
                    records.push(super::partition_change_record(name, index, partition));
                }
            }
        }
        records.push(MetadataRecord::ProducerIdBlock {
            next: self.next_producer_id,
        });
        for (name, configs) in &self.mirrors {
            records.push(MetadataRecord::MirrorCreated {
                name: name.clone(),
                configs: configs.clone(),
            });
        }
        for binding in &self.acls {
            records.push(MetadataRecord::AclCreated {
                binding: binding.clone(),
            });
        }
        records
    }

    /// Replaces the image with the one `records` build (a snapshot received or loaded).
    pub fn restore(&mut self, records: &[MetadataRecord]) {
        let fresh = Controller::replica();
        self.cluster_id = fresh.cluster_id;
        self.topics = fresh.topics;
        self.next_producer_id = fresh.next_producer_id;
        self.acls = fresh.acls;
        self.mirrors = fresh.mirrors;
        self.brokers = fresh.brokers;
        self.fenced = fresh.fenced;
        // Else a broker shut down before the image and registered again since stayed
        // ineligible (found by review).
        self.shutting_down = fresh.shutting_down;
        for record in records {
            self.apply(record);
        }
        let version = self.change_count() + 1;
        self.journal.everything(version);
        self.changes.send_replace(version);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn an_image_rebuilt_from_its_records_is_the_same_image() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut c = Controller::open(dir.path()).expect("opens");
        c.register_broker(1, "h1", 9092, Some("d1"))
            .expect("registers");
        c.register_broker(2, "h2", 9092, None).expect("registers");
        c.register_broker(3, "h3", 9092, None).expect("registers");
        c.fence_broker(2, true).expect("fences");
        c.create_topic(
            "orders",
            4,
            2,
            BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
            None,
        )
        .expect("creates");
        c.bump_leader_epochs(&[("orders".into(), 2, 6)])
            .expect("bumps");
        c.allocate_producer_ids(1000).expect("ids");
        c.create_mirror(
            "m",
            BTreeMap::from([("bootstrap.servers".into(), "s:1".into())]),
        )
        .expect("mirror");
        c.create_acl(AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "orders".into(),
            pattern_type: PatternType::Literal,
            principal: "User:a".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        })
        .expect("acl");

        let mut replica = Controller::replica();
        let version = replica.change_count();
        replica.restore(&c.image_records());
        assert_eq!(replica.image_records(), c.image_records());
        assert_eq!(replica.topics(), c.topics());
        assert_eq!(replica.brokers(), c.brokers());
        assert_eq!(replica.fenced(), &BTreeSet::from([2]));
        assert_eq!(replica.acls(), c.acls());
        assert_eq!(replica.mirrors(), c.mirrors());
        assert_eq!(replica.cluster_id(), c.cluster_id());
        assert_eq!(
            replica.allocate_producer_ids(1).expect("id"),
            crate::controller::producer_id_base(c.cluster_id()) + 1000
        );
        assert!(
            replica.changes_since(Some(version)).1.everything,
            "readers look at everything after a restore"
        );
        // A broker this node saw shut down, back in the image restored: eligible again.
        let mut stale = Controller::replica();
        stale.restore(&c.image_records());
        stale.controlled_shutdown(3).expect("shuts down");
        assert!(stale.ineligible().contains(&3));
        stale.restore(&c.image_records());
        assert_eq!(stale.ineligible(), c.ineligible());
        assert_eq!(stale.image_records(), c.image_records());
    }
}
