//! Who is asking: the session every handler authorizes against (a denied request is answered
//! with the resource's `ErrorCode::*_AUTHORIZATION_FAILED`). On a PLAINTEXT listener every
//! client is `User:ANONYMOUS`, told apart by host.

use crate::acl::{Operation, ResourceType, Session};
use crate::broker::Broker;

/// The name of the one cluster resource.
const CLUSTER: &str = "kafka-cluster";

/// A request's session on a broker.
pub(in crate::broker) struct Access<'a> {
    broker: &'a Broker,
    session: Session,
}

impl<'a> Access<'a> {
    /// The access of an unauthenticated client at `host`.
    pub(in crate::broker) fn anonymous(broker: &'a Broker, host: &str) -> Access<'a> {
        Access {
            broker,
            session: Session {
                principal: "User:ANONYMOUS".to_string(),
                // The listener writes hosts as Kafka's DescribeGroups shows them ("/10.0.0.7");
                // ACLs name the bare address.
                host: host.trim_start_matches('/').to_string(),
            },
        }
    }

    /// `operation` on topic `name`.
    pub(super) fn topic(&self, operation: Operation, name: &str) -> bool {
        self.broker
            .authorize(&self.session, operation, ResourceType::Topic, name)
    }

    /// `operation` on any resource of type `resource`, as a check the mirroring engine makes
    /// per resource it selects (the topics a pattern matches, every mirror).
    pub(super) fn of_every(
        &self,
        broker: &std::sync::Arc<Broker>,
        operation: Operation,
        resource: ResourceType,
    ) -> std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync> {
        let (broker, session) = (broker.clone(), self.session.clone());
        std::sync::Arc::new(move |name: &str| broker.authorize(&session, operation, resource, name))
    }

    /// `operation` on group `name`.
    pub(super) fn group(&self, operation: Operation, name: &str) -> bool {
        self.broker
            .authorize(&self.session, operation, ResourceType::Group, name)
    }

    /// `operation` on the cluster.
    pub(super) fn cluster(&self, operation: Operation) -> bool {
        self.broker
            .authorize(&self.session, operation, ResourceType::Cluster, CLUSTER)
    }

    /// `operation` on mirror `name` (the ClusterMirror resource).
    pub(super) fn mirror(&self, operation: Operation, name: &str) -> bool {
        self.broker
            .authorize(&self.session, operation, ResourceType::ClusterMirror, name)
    }

    /// `operation` on transactional id `id`.
    pub(super) fn transactional_id(&self, operation: Operation, id: &str) -> bool {
        self.broker
            .authorize(&self.session, operation, ResourceType::TransactionalId, id)
    }
}
