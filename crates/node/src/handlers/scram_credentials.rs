//! DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554: what
//! `kafka-configs --entity-type users` sends. Describe is answered from the metadata image
//! (mechanism and iterations per user, never a salt or key: Kafka's `ScramImage.describe`);
//! Alter is forwarded to the controller, which validates it and commits the credentials
//! (Kafka's `KafkaApis` forwards it, `ScramControlManager` decides). The broker answers an
//! alteration once its own image shows it, so a client that sets a password and then
//! authenticates to this broker finds it. The controller listener answers both too (Kafka 4.4
//! lists both APIs on it), with the same code.

use std::sync::Arc;

use keel_controller::scram::{self, ScramCredentialData, ScramMechanism};
use keel_controller::ClusterImage;
use keel_wire::kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use keel_wire::kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use keel_wire::kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

/// How long the broker waits for an alteration to reach its own image before answering.
const METADATA_WAIT_MS: u64 = 5_000;

/// DescribeUserScramCredentials from `image`.
pub(crate) fn describe_from(
    image: &ClusterImage,
    request: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let users: Option<Vec<String>> = request
        .users
        .as_ref()
        .map(|users| users.iter().map(|u| u.name.to_string()).collect());
    let results = scram::describe(image, users.as_deref())
        .into_iter()
        .map(|d| {
            let result = DescribeUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(d.user));
            match d.credentials {
                Ok(credentials) => result
                    .with_error_code(0)
                    .with_error_message(None)
                    .with_credential_infos(
                        credentials
                            .into_iter()
                            .map(|(mechanism, iterations)| {
                                CredentialInfo::default()
                                    .with_mechanism(mechanism.type_id())
                                    .with_iterations(iterations)
                            })
                            .collect(),
                    ),
                Err(e) => result
                    .with_error_code(e.code.code())
                    .with_error_message(Some(StrBytes::from_string(e.message))),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default()
        .with_error_code(0)
        .with_error_message(None)
        .with_results(results)
}

/// DescribeUserScramCredentials on a broker: from its applied image.
pub fn describe(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    // Kafka: DESCRIBE on the cluster.
    let authz = super::authz::Authz::new(broker, session, ApiKey::DescribeUserScramCredentials);
    if !authz.cluster(keel_controller::acl::AclOperation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(keel_wire::ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(None);
    }
    describe_from(&broker.image(), &request)
}

/// Every user of `request` answered with `code` and `message` (a request that did not reach
/// the controller).
pub(crate) fn alter_failed(
    request: &AlterUserScramCredentialsRequest,
    code: i16,
    message: &str,
) -> AlterUserScramCredentialsResponse {
    let mut seen = std::collections::BTreeSet::new();
    let results = request
        .deletions
        .iter()
        .map(|d| &d.name)
        .chain(request.upsertions.iter().map(|u| &u.name))
        .filter(|name| seen.insert(name.to_string()))
        .map(|name| {
            AlterUserScramCredentialsResult::default()
                .with_user(name.clone())
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message.to_string())))
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// What the image must show once the alterations of the users answered without an error are
/// applied: each upserted credential as derived from its salted password, each deleted one
/// gone.
fn applied(
    image: &ClusterImage,
    request: &AlterUserScramCredentialsRequest,
    ok: &std::collections::BTreeSet<String>,
) -> bool {
    let deleted = request
        .deletions
        .iter()
        .filter(|d| ok.contains(d.name.as_str()));
    let upserted = request
        .upsertions
        .iter()
        .filter(|u| ok.contains(u.name.as_str()));
    deleted.into_iter().all(|d| {
        ScramMechanism::from_type(d.mechanism)
            .is_none_or(|m| image.scram_credential(&d.name, m).is_none())
    }) && upserted.into_iter().all(|u| {
        ScramMechanism::from_type(u.mechanism).is_none_or(|m| {
            let expected = ScramCredentialData::from_salted_password(
                m,
                &u.salt,
                &u.salted_password,
                u.iterations,
            );
            image.scram_credential(&u.name, m) == Some(&expected)
        })
    })
}

/// AlterUserScramCredentials on a broker: forwarded to the controller.
pub async fn alter(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: AlterUserScramCredentialsRequest,
    version: i16,
) -> AlterUserScramCredentialsResponse {
    // Kafka: ALTER on the cluster, else every user CLUSTER_AUTHORIZATION_FAILED.
    let authz = super::authz::Authz::new(broker, session, ApiKey::AlterUserScramCredentials);
    if !authz.cluster(keel_controller::acl::AclOperation::Alter) {
        let code = keel_wire::ResponseError::ClusterAuthorizationFailed.code();
        return alter_failed(&request, code, "Cluster authorization failed.");
    }
    let answer: AlterUserScramCredentialsResponse = match broker
        .controller()
        .forward(ApiKey::AlterUserScramCredentials, version, &request)
        .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let e = super::controller_unavailable(e);
            return alter_failed(&request, e.code(), e.message.as_deref().unwrap_or_default());
        }
    };
    let ok: std::collections::BTreeSet<String> = answer
        .results
        .iter()
        .filter(|r| r.error_code == 0)
        .map(|r| r.user.to_string())
        .collect();
    if !ok.is_empty() {
        broker
            .await_image(METADATA_WAIT_MS, |image| applied(image, &request, &ok))
            .await;
    }
    answer
}
