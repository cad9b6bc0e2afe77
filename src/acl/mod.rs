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

use serde::{Deserialize, Serialize};

macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $code:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Kafka's wire code.
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)+
                }
            }

            /// The value for a wire code, if Kafka defines it.
            pub fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

kafka_enum!(
    /// What kind of resource a binding protects.
    ResourceType {
        /// Filters only.
        Any = 1,
        /// A topic.
        Topic = 2,
        /// A consumer group.
        Group = 3,
        /// The cluster (`kafka-cluster`).
        Cluster = 4,
        /// A transactional id.
        TransactionalId = 5,
        /// A delegation token.
        DelegationToken = 6,
        /// A user principal.
        User = 7,
        /// A cluster mirror (KIP-1279).
        ClusterMirror = 8,
    }
);

kafka_enum!(
    /// How a binding's resource name matches.
    PatternType {
        /// Filters only: any pattern with this exact name.
        Any = 1,
        /// Filters only: every binding that applies to this resource name.
        Match = 2,
        /// The exact name, or `*` for every name.
        Literal = 3,
        /// Every name starting with it.
        Prefixed = 4,
    }
);

kafka_enum!(
    /// An operation on a resource.
    Operation {
        /// Filters only.
        Any = 1,
        /// Every operation.
        All = 2,
        /// Read.
        Read = 3,
        /// Write.
        Write = 4,
        /// Create.
        Create = 5,
        /// Delete.
        Delete = 6,
        /// Alter.
        Alter = 7,
        /// Describe.
        Describe = 8,
        /// Inter-broker actions.
        ClusterAction = 9,
        /// Describe configs.
        DescribeConfigs = 10,
        /// Alter configs.
        AlterConfigs = 11,
        /// Idempotent produce.
        IdempotentWrite = 12,
        /// Create delegation tokens.
        CreateTokens = 13,
        /// Describe delegation tokens.
        DescribeTokens = 14,
        /// Two-phase commit (KIP-939).
        TwoPhaseCommit = 15,
    }
);

kafka_enum!(
    /// Whether a binding allows or denies.
    Permission {
        /// Filters only.
        Any = 1,
        /// Deny.
        Deny = 2,
        /// Allow.
        Allow = 3,
    }
);

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    /// The resource type (never `Any`).
    pub resource_type: ResourceType,
    /// The resource name or prefix.
    pub resource_name: String,
    /// `Literal` or `Prefixed`.
    pub pattern_type: PatternType,
    /// `User:name`, or `User:*`.
    pub principal: String,
    /// A client host, or `*`.
    pub host: String,
    /// The operation (never `Any`).
    pub operation: Operation,
    /// `Allow` or `Deny`.
    pub permission: Permission,
}

/// Why a binding cannot be created (Kafka: INVALID_REQUEST with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// A code Kafka does not define, or a filter-only value in a binding.
    #[error("invalid {field}: {code}")]
    InvalidCode {
        /// The field.
        field: &'static str,
        /// The code sent.
        code: i8,
    },
    /// Not `Type:name`.
    #[error("invalid principal {0:?}: expected Type:name")]
    InvalidPrincipal(String),
    /// Empty resource name or host.
    #[error("the {0} must not be empty")]
    Empty(&'static str),
}

impl AclBinding {
    /// A binding from wire codes, refusing filter-only values and malformed names.
    pub fn from_wire(
        resource_type: i8,
        resource_name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, AclError> {
        let invalid = |field, code| AclError::InvalidCode { field, code };
        let binding = AclBinding {
            resource_type: ResourceType::from_code(resource_type)
                .filter(|t| *t != ResourceType::Any)
                .ok_or(invalid("resource type", resource_type))?,
            resource_name: resource_name.to_string(),
            pattern_type: PatternType::from_code(pattern_type)
                .filter(|p| matches!(p, PatternType::Literal | PatternType::Prefixed))
                .ok_or(invalid("pattern type", pattern_type))?,
            principal: principal.to_string(),
            host: host.to_string(),
            operation: Operation::from_code(operation)
                .filter(|o| *o != Operation::Any)
                .ok_or(invalid("operation", operation))?,
            permission: Permission::from_code(permission)
                .filter(|p| *p != Permission::Any)
                .ok_or(invalid("permission type", permission))?,
        };
        if binding.resource_name.is_empty() {
            return Err(AclError::Empty("resource name"));
        }
        if binding.host.is_empty() {
            return Err(AclError::Empty("host"));
        }
        match binding.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(binding),
            _ => Err(AclError::InvalidPrincipal(binding.principal)),
        }
    }

    /// Whether this binding's pattern covers the resource `name`.
    fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.resource_name == name || self.resource_name == "*",
            PatternType::Prefixed => name.starts_with(&self.resource_name),
            PatternType::Any | PatternType::Match => false,
        }
    }
}

/// A DescribeAcls / DeleteAcls filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// A resource type, or `Any`.
    pub resource_type: ResourceType,
    /// A name, or any.
    pub resource_name: Option<String>,
    /// `Any`, `Match`, `Literal` or `Prefixed`.
    pub pattern_type: PatternType,
    /// A principal, or any.
    pub principal: Option<String>,
    /// A host, or any.
    pub host: Option<String>,
    /// An operation, or `Any`.
    pub operation: Operation,
    /// A permission, or `Any`.
    pub permission: Permission,
}

impl AclFilter {
    /// A filter from wire codes.
    pub fn from_wire(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, AclError> {
        let invalid = |field, code| AclError::InvalidCode { field, code };
        Ok(AclFilter {
            resource_type: ResourceType::from_code(resource_type)
                .ok_or(invalid("resource type", resource_type))?,
            resource_name: resource_name.map(str::to_string),
            pattern_type: PatternType::from_code(pattern_type)
                .ok_or(invalid("pattern type", pattern_type))?,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: Operation::from_code(operation).ok_or(invalid("operation", operation))?,
            permission: Permission::from_code(permission)
                .ok_or(invalid("permission type", permission))?,
        })
    }

    /// The filter selecting exactly `binding`.
    pub fn exactly(binding: &AclBinding) -> AclFilter {
        AclFilter {
            resource_type: binding.resource_type,
            resource_name: Some(binding.resource_name.clone()),
            pattern_type: binding.pattern_type,
            principal: Some(binding.principal.clone()),
            host: Some(binding.host.clone()),
            operation: binding.operation,
            permission: binding.permission,
        }
    }

    /// Whether `binding` is selected by this filter.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        let name_matches = match (&self.resource_name, self.pattern_type) {
            (None, PatternType::Any | PatternType::Match) => true,
            (None, pattern) => binding.pattern_type == pattern,
            (Some(name), PatternType::Any) => binding.resource_name == *name,
            (Some(name), PatternType::Match) => binding.covers(name),
            (Some(name), pattern) => {
                binding.pattern_type == pattern && binding.resource_name == *name
            }
        };
        name_matches
            && (self.resource_type == ResourceType::Any
                || self.resource_type == binding.resource_type)
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == binding.principal)
            && self.host.as_ref().is_none_or(|h| *h == binding.host)
            && (self.operation == Operation::Any || self.operation == binding.operation)
            && (self.permission == Permission::Any || self.permission == binding.permission)
    }
}

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
