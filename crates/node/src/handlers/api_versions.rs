//! ApiVersions (key 18): the served API table.

use keel_wire::kafka_protocol::messages::ApiVersionsResponse;

pub fn handle() -> ApiVersionsResponse {
    keel_wire::versions::api_versions_response(None)
}
