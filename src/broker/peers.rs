//! Calls from this broker to another broker of the cluster, on its client listener
//! (docs/cluster.md): transaction markers, transactional-produce verification, and the group
//! coordinator's APIs for the mirror's offset sync.
//!
//! Contract: a call either returns the other broker's answer or says why there is none (not
//! registered, unreachable, no answer within the request timeout); the caller decides whether
//! to retry. Each call opens its own connection, since these calls are rare next to client
//! traffic (one per transaction end or verification, one per synced group).

use super::Broker;
use kafka_protocol::protocol::Request;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;

impl Broker {
    /// `host:port` of the client listener of broker `node_id`, if it is registered.
    pub fn address_of(&self, node_id: i32) -> Option<String> {
        self.brokers()
            .into_iter()
            .find(|b| b.node_id == node_id)
            .map(|b| format!("{}:{}", b.host, b.port))
    }

    /// Sends `request` (API `api`, at most `max_version`) to broker `node_id` and returns its
    /// answer, or why there is none.
    pub(crate) async fn call_broker<R: Request>(
        &self,
        node_id: i32,
        api: &'static str,
        request: &R,
        max_version: i16,
    ) -> Result<R::Response, String> {
        let address = self
            .address_of(node_id)
            .ok_or_else(|| format!("broker {node_id} is not registered"))?;
        let config = ClientConfig::plaintext(&address);
        let connection = Connection::connect(&address, &config, None)
            .await
            .map_err(|e| e.to_string())?;
        let (_, answer) = tokio::time::timeout(
            config.request_timeout,
            connection.send(api, request, max_version),
        )
        .await
        .map_err(|_| format!("broker {node_id} did not answer {api}"))?
        .map_err(|e| e.to_string())?;
        Ok(answer)
    }
}
