//! AlterUserScramCredentials (51) and DescribeUserScramCredentials (50) on the controller
//! listener (KIP-554): an alteration — forwarded by a broker, or sent by a client that talks
//! to the controllers directly — is validated and committed by the active controller
//! (`keel_controller::Controller::alter_user_scram_credentials`, Kafka's
//! `ScramControlManager.alterCredentials`); a description is answered by any controller from
//! its committed image.

use keel_controller::{ScramDeletion, ScramUpsertion};
use keel_wire::kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use keel_wire::kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

use super::state::{CallError, ControllerHandle};

/// AlterUserScramCredentials, answered once its records are committed.
pub(super) async fn alter(
    handle: &ControllerHandle,
    req: AlterUserScramCredentialsRequest,
) -> Result<AlterUserScramCredentialsResponse, CallError> {
    let deletions: Vec<ScramDeletion> = req
        .deletions
        .iter()
        .map(|d| ScramDeletion {
            name: d.name.to_string(),
            mechanism: d.mechanism,
        })
        .collect();
    let upsertions: Vec<ScramUpsertion> = req
        .upsertions
        .iter()
        .map(|u| ScramUpsertion {
            name: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    let results = handle
        .call(move |s| {
            s.commit(|c, now_ms| c.alter_user_scram_credentials(&deletions, &upsertions, now_ms))
        })
        .await?;
    for r in results.iter().filter(|r| r.error.is_none()) {
        tracing::info!(user = %r.user, "SCRAM credentials altered");
    }
    Ok(AlterUserScramCredentialsResponse::default().with_results(
        results
            .into_iter()
            .map(|r| {
                let result = AlterUserScramCredentialsResult::default()
                    .with_user(StrBytes::from_string(r.user));
                match r.error {
                    None => result.with_error_code(0).with_error_message(None),
                    Some(e) => result
                        .with_error_code(e.code.code())
                        .with_error_message(Some(StrBytes::from_string(e.message))),
                }
            })
            .collect(),
    ))
}

/// DescribeUserScramCredentials from the committed image.
pub(super) fn describe(
    handle: &ControllerHandle,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    handle
        .machine()
        .with_image(|image| crate::handlers::scram_credentials::describe_from(image, req))
}

/// What a controller's SCRAM listeners authenticate with: the credentials of its committed
/// metadata image — or, while that image has never applied a record (a new cluster whose
/// first records are not committed yet), those of its bootstrap metadata, so the controllers
/// of a new quorum can authenticate each other before any of them can commit.
#[derive(Debug)]
pub struct ControllerCredentials {
    machine: std::sync::OnceLock<crate::raft::state_machine::StateMachine>,
    bootstrap: keel_controller::image::ScramUsers,
}

impl ControllerCredentials {
    /// Credentials from `bootstrap` until [`ControllerCredentials::attach`] gives the state
    /// machine.
    pub fn new(bootstrap: keel_controller::image::ScramUsers) -> Self {
        ControllerCredentials {
            machine: std::sync::OnceLock::new(),
            bootstrap,
        }
    }

    /// Reads the credentials of `machine`'s committed image from now on.
    pub fn attach(&self, machine: crate::raft::state_machine::StateMachine) {
        let _ = self.machine.set(machine);
    }

    fn bootstrap_credential(
        &self,
        user: &str,
        mechanism: &str,
    ) -> Option<crate::security::sasl::ScramCredential> {
        let mechanism = keel_controller::scram::ScramMechanism::from_name(mechanism)?;
        self.bootstrap
            .get(user)?
            .get(&mechanism)
            .map(crate::security::sasl::ScramCredential::from)
    }
}

impl crate::security::sasl::Credentials for ControllerCredentials {
    fn scram(&self, user: &str, mechanism: &str) -> Option<crate::security::sasl::ScramCredential> {
        match self.machine.get() {
            Some(machine) => machine.with_image(|image| match image.last_applied() {
                Some(_) => crate::security::sasl::image_scram(image, user, mechanism),
                None => self.bootstrap_credential(user, mechanism),
            }),
            None => self.bootstrap_credential(user, mechanism),
        }
    }
}
