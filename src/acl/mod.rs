//! ACLs and the authorizer's decision, as pure functions over the bindings the controller
//! stores (durable, replayed with the rest of the metadata).
//!
//! Semantics follow Kafka's standard authorizer: a binding applies to a resource when its
//! pattern is LITERAL with the same name (or `*`) or PREFIXED with a prefix of the name; a
//! matching DENY wins over any ALLOW; READ, WRITE, DELETE and ALTER imply DESCRIBE, and
//! ALTER_CONFIGS implies DESCRIBE_CONFIGS; `ALL` covers every operation; `User:*` and host `*`
//! match anyone. A resource with no binding at all is allowed only with
//! `allow.everyone.if.no.acl.found=true`; `super.users` are always allowed.

#[cfg(test)]
mod tests;

pub use kmirror_protocol::acl::{
    AclBinding, AclError, AclFilter, Operation, PatternType, Permission, ResourceType,
};

/// Who is asking, from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `User:name` (`User:ANONYMOUS` on a PLAINTEXT listener).
    pub principal: String,
    /// The client's address.
    pub host: String,
}

/// The authorizer's settings (`authorizer.enabled`, `super.users`,
/// `allow.everyone.if.no.acl.found`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Whether requests are checked at all.
    pub enabled: bool,
    /// Principals allowed everything.
    pub super_users: Vec<String>,
    /// Whether a resource with no binding is open to everyone.
    pub allow_if_no_acls: bool,
}

/// Operations a granted one implies.
fn implies(granted: Operation, requested: Operation) -> bool {
    granted == requested
        || granted == Operation::All
        || (requested == Operation::Describe
            && matches!(
                granted,
                Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
            ))
        || (requested == Operation::DescribeConfigs && granted == Operation::AlterConfigs)
}

/// The decision for `session` doing `operation` on the resource `(resource_type, name)`.
pub fn authorize(
    config: &AuthorizerConfig,
    acls: &[AclBinding],
    session: &Session,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
) -> bool {
    if !config.enabled || config.super_users.contains(&session.principal) {
        return true;
    }
    let mut applicable = acls
        .iter()
        .filter(|b| b.resource_type == resource_type && b.covers(name))
        .peekable();
    if applicable.peek().is_none() {
        return config.allow_if_no_acls;
    }
    let concerns_session = |b: &&AclBinding| {
        (b.principal == session.principal || b.principal == "User:*")
            && (b.host == session.host || b.host == "*")
    };
    let mut allowed = false;
    for binding in applicable.filter(concerns_session) {
        match binding.permission {
            Permission::Deny
                if binding.operation == operation || binding.operation == Operation::All =>
            {
                return false;
            }
            Permission::Allow if implies(binding.operation, operation) => allowed = true,
            _ => {}
        }
    }
    allowed
}
