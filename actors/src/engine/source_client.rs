//! [`Source`] for kmirror's Kafka client of the source cluster: what most hosts hand the engine
//! from [`crate::host::Host::connect_source`].

use crate::host::Source;
use kmirror_protocol::client::source::{
    AclBinding, ClusterMetadata, CommittedOffset, ConfigEntry, GroupListing, PartitionLme,
};
use kmirror_protocol::client::{
    ClientConfig, ClientError, FetchSpec, FetchedPartition, Isolation, SourceClient,
};
use std::future::Future;
use uuid::Uuid;

impl Source for SourceClient {
    fn cluster_id(&self) -> impl Future<Output = Result<String, ClientError>> {
        SourceClient::cluster_id(self)
    }

    fn metadata(
        &self,
        topics: Option<&[&str]>,
    ) -> impl Future<Output = Result<ClusterMetadata, ClientError>> {
        SourceClient::metadata(self, topics)
    }

    fn list_offsets(
        &self,
        leader: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: Isolation,
    ) -> impl Future<Output = Result<(i64, i32), ClientError>> {
        SourceClient::list_offsets(self, leader, topic, partition, timestamp, isolation)
    }

    async fn connect(&self, broker: i32) -> Result<Option<std::time::Duration>, ClientError> {
        let connection = SourceClient::broker(self, broker).await?;
        Ok(Some(connection.quickest_round_trip()))
    }

    fn fetch(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> impl Future<Output = Result<Vec<FetchedPartition>, ClientError>> {
        SourceClient::fetch(self, leader, spec)
    }

    fn last_mirrored_epochs(
        &self,
        cluster_id: &str,
        topic: &str,
        topic_id: Uuid,
        partitions: &[i32],
    ) -> impl Future<Output = Result<Vec<PartitionLme>, ClientError>> {
        SourceClient::last_mirrored_epochs(self, cluster_id, topic, topic_id, partitions)
    }

    fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<ConfigEntry>, ClientError>> {
        SourceClient::describe_topic_configs(self, topic)
    }

    fn list_groups(&self) -> impl Future<Output = Result<Vec<GroupListing>, ClientError>> {
        SourceClient::list_groups(self)
    }

    fn committed_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<Vec<CommittedOffset>, ClientError>> {
        SourceClient::committed_offsets(self, group)
    }

    fn describe_acls(&self) -> impl Future<Output = Result<Vec<AclBinding>, ClientError>> {
        SourceClient::describe_acls(self)
    }

    fn reconfigure(&self, config: ClientConfig) -> Result<(), ClientError> {
        SourceClient::reconfigure(self, config)
    }
}
