//! Kafka's ACL vocabulary: resource, pattern, operation and permission types with their wire
//! codes, a binding, and a filter over bindings. The broker's authorizer decides with them, and
//! the mirroring engine copies the source's bindings in these terms.

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
    pub fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.resource_name == name || self.resource_name == "*",
            PatternType::Prefixed => name.starts_with(&self.resource_name),
            PatternType::Any | PatternType::Match => false,
        }
    }
}

/// A DescribeAcls / DeleteAcls filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
