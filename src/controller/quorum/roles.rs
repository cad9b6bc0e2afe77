//! `process.roles`: what a node of a multi-process cluster runs (docs/cluster.md).
//!
//! A node with the controller role is a voter of the metadata quorum; a node without it (a
//! broker-only node) follows the quorum's log as a Raft learner (KRaft's observer) and never
//! votes, so it does not count toward the quorum. A node with the broker role serves clients,
//! registers as a broker and heartbeats; a controller-only node does none of that.

/// The roles a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessRoles {
    /// `broker`: serves clients and follows the metadata as a learner.
    Broker,
    /// `controller`: votes in the quorum and serves no clients.
    Controller,
    /// `broker,controller`: both.
    Combined,
}

/// Why a `process.roles` value is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected broker, controller or broker,controller, each once")]
pub struct UnknownRoles;

impl ProcessRoles {
    /// Reads `broker`, `controller` or both (in either order, each once).
    pub fn parse(value: &str) -> Result<ProcessRoles, UnknownRoles> {
        let mut roles: Vec<&str> = value.split(',').map(str::trim).collect();
        roles.sort_unstable();
        match roles[..] {
            ["broker"] => Ok(ProcessRoles::Broker),
            ["controller"] => Ok(ProcessRoles::Controller),
            ["broker", "controller"] => Ok(ProcessRoles::Combined),
            _ => Err(UnknownRoles),
        }
    }

    /// Whether the node votes in the quorum (its `node.id` is one of the voters).
    pub fn is_voter(self) -> bool {
        matches!(self, ProcessRoles::Controller | ProcessRoles::Combined)
    }

    /// Whether the node runs a broker (serves clients, registers, heartbeats).
    pub fn is_broker(self) -> bool {
        matches!(self, ProcessRoles::Broker | ProcessRoles::Combined)
    }

    /// The value as `process.roles` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessRoles::Broker => "broker",
            ProcessRoles::Controller => "controller",
            ProcessRoles::Combined => "broker,controller",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_role_sets_read_in_either_order_and_nothing_else() {
        assert_eq!(ProcessRoles::parse("broker"), Ok(ProcessRoles::Broker));
        assert_eq!(
            ProcessRoles::parse("controller"),
            Ok(ProcessRoles::Controller)
        );
        assert_eq!(
            ProcessRoles::parse("controller, broker"),
            Ok(ProcessRoles::Combined)
        );
        for wrong in [
            "",
            "broker,broker",
            "broker,zookeeper",
            "broker,controller,broker",
        ] {
            assert_eq!(ProcessRoles::parse(wrong), Err(UnknownRoles), "{wrong:?}");
        }
        assert!(ProcessRoles::Controller.is_voter() && !ProcessRoles::Controller.is_broker());
        assert!(ProcessRoles::Broker.is_broker() && !ProcessRoles::Broker.is_voter());
        assert!(ProcessRoles::Combined.is_broker() && ProcessRoles::Combined.is_voter());
    }
}
