//! ApiVersions: the APIs and version ranges this broker serves, Kafka's and KIP-1279's.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::MirrorApiKey;

fn versions() -> Vec<ApiVersion> {
    let kafka = super::served()
        .into_iter()
        .map(|(key, min, max)| (key as i16, min, max));
    let mirror = MirrorApiKey::ALL
        .into_iter()
        .filter_map(|api| super::supported_mirror(api).map(|(min, max)| (api as i16, min, max)));
    kafka
        .chain(mirror)
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

pub(super) fn handle(_request: &ApiVersionsRequest) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(versions())
}

/// The v0 answer to an ApiVersions at a version above ours: UNSUPPORTED_VERSION with the ranges.
pub(in crate::broker) fn unsupported() -> Vec<u8> {
    use kafka_protocol::protocol::Encodable;
    let response = ApiVersionsResponse::default()
        .with_error_code(ErrorCode::UNSUPPORTED_VERSION.0)
        .with_api_keys(versions());
    let mut out = bytes::BytesMut::new();
    // Encoding a default-shaped v0 response cannot fail.
    response
        .encode(&mut out, 0)
        .map(|()| out.to_vec())
        .unwrap_or_default()
}
