//! The client side of the Kafka protocol that mirroring needs: connections to a source cluster
//! (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL with PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER; mutual TLS), ApiVersions
//! negotiation, and typed calls (Metadata, DescribeCluster, consumer Fetch with
//! `LastFetchedEpoch`, ListOffsets, OffsetForLeaderEpoch, DescribeConfigs, LastMirroredEpochs).
//! Fetched records stay zero-copy slices of the response buffer.

pub mod config;
pub mod connection;
pub mod error;
mod fetch;
pub mod jaas;
pub mod oauthbearer;
pub mod sasl;
pub mod source;
pub mod stores;
pub mod tls;

pub use config::{ClientConfig, SaslConfig, SaslMechanism, SecurityProtocol};
pub use error::ClientError;
pub use source::{
    ClusterMetadata, FetchPartitionSpec, FetchSpec, FetchedPartition, Isolation, SourceClient,
};
