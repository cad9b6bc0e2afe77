//! CreateAcls, DescribeAcls and DeleteAcls: the bindings the authorizer enforces, durable in the
//! controller's log. Creating and deleting need ALTER on the cluster, describing DESCRIBE; they
//! work whether or not the authorizer is enabled, so ACLs can be set up before turning it on.

use super::access::Access;
use crate::acl::{AclBinding, AclFilter, Operation};
use crate::broker::Broker;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn denied() -> Option<StrBytes> {
    Some(StrBytes::from_static_str(
        "ALTER on the cluster is needed to change ACLs",
    ))
}

pub(super) async fn create(
    broker: &Broker,
    access: &Access<'_>,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    if !access.cluster(Operation::Alter) {
        let results = request
            .creations
            .iter()
            .map(|_| {
                AclCreationResult::default()
                    .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0)
                    .with_error_message(denied())
            })
            .collect();
        return CreateAclsResponse::default().with_results(results);
    }
    let parsed: Vec<_> = request
        .creations
        .iter()
        .map(|c| {
            AclBinding::from_wire(
                c.resource_type,
                &c.resource_name,
                c.resource_pattern_type,
                &c.principal,
                &c.host,
                c.operation,
                c.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclBinding> = parsed.iter().filter_map(|p| p.clone().ok()).collect();
    // The valid bindings are stored together, or none of them.
    let stored = broker.create_acls(valid).await;
    let results = parsed
        .into_iter()
        .map(|p| match (p, &stored) {
            (Err(e), _) => AclCreationResult::default()
                .with_error_code(ErrorCode::INVALID_REQUEST.0)
                .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            (Ok(_), Ok(())) => AclCreationResult::default(),
            (Ok(_), Err(e)) => AclCreationResult::default()
                .with_error_code(e.error_code())
                .with_error_message(Some(StrBytes::from_string(e.to_string()))),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

pub(super) fn describe(
    broker: &Broker,
    access: &Access<'_>,
    request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    if !access.cluster(Operation::Describe) {
        return DescribeAclsResponse::default()
            .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0)
            .with_error_message(Some(StrBytes::from_static_str(
                "DESCRIBE on the cluster is needed to list ACLs",
            )));
    }
    let filter = match AclFilter::from_wire(
        request.resource_type_filter,
        request.resource_name_filter.as_deref(),
        request.pattern_type_filter,
        request.principal_filter.as_deref(),
        request.host_filter.as_deref(),
        request.operation,
        request.permission_type,
    ) {
        Ok(filter) => filter,
        Err(e) => {
            return DescribeAclsResponse::default()
                .with_error_code(ErrorCode::INVALID_REQUEST.0)
                .with_error_message(Some(StrBytes::from_string(e.to_string())));
        }
    };
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for binding in broker.acls().iter().filter(|b| filter.matches(b)) {
        by_resource
            .entry((
                binding.resource_type.code(),
                binding.resource_name.clone(),
                binding.pattern_type.code(),
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(text(&binding.principal))
                    .with_host(text(&binding.host))
                    .with_operation(binding.operation.code())
                    .with_permission_type(binding.permission.code()),
            );
    }
    let resources = by_resource
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name))
                .with_pattern_type(pattern_type)
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}

pub(super) async fn delete(
    broker: &Broker,
    access: &Access<'_>,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    if !access.cluster(Operation::Alter) {
        let results = request
            .filters
            .iter()
            .map(|_| {
                DeleteAclsFilterResult::default()
                    .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0)
                    .with_error_message(denied())
            })
            .collect();
        return DeleteAclsResponse::default().with_filter_results(results);
    }
    let parsed: Vec<_> = request
        .filters
        .iter()
        .map(|f| {
            AclFilter::from_wire(
                f.resource_type_filter,
                f.resource_name_filter.as_deref(),
                f.pattern_type_filter,
                f.principal_filter.as_deref(),
                f.host_filter.as_deref(),
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclFilter> = parsed.iter().filter_map(|p| p.clone().ok()).collect();
    let (mut deleted, failed) = match broker.delete_acls(valid).await {
        Ok(deleted) => (deleted.into_iter(), None),
        Err(e) => (Vec::new().into_iter(), Some(e)),
    };
    let results = parsed
        .into_iter()
        .map(|p| match p {
            Err(e) => DeleteAclsFilterResult::default()
                .with_error_code(ErrorCode::INVALID_REQUEST.0)
                .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            Ok(_) => match deleted.next() {
                Some(bindings) => DeleteAclsFilterResult::default().with_matching_acls(
                    bindings
                        .iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.resource_type.code())
                                .with_resource_name(text(&b.resource_name))
                                .with_pattern_type(b.pattern_type.code())
                                .with_principal(text(&b.principal))
                                .with_host(text(&b.host))
                                .with_operation(b.operation.code())
                                .with_permission_type(b.permission.code())
                        })
                        .collect(),
                ),
                None => DeleteAclsFilterResult::default()
                    .with_error_code(
                        failed
                            .as_ref()
                            .map_or(ErrorCode::KAFKA_STORAGE_ERROR.0, |e| e.error_code()),
                    )
                    .with_error_message(failed.as_ref().map(|e| text(&e.to_string()))),
            },
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
