//! AlterUserScramCredentials (KIP-554) as Kafka's `ScramControlManager.alterCredentials`
//! validates it, and the bootstrap records `keel format --add-scram` leaves for the first
//! active controller of a fresh cluster (Kafka's `bootstrap.checkpoint`).
//!
//! Validation, per alteration, in Kafka's order: a user already refused is skipped; the same
//! user and mechanism twice → `DUPLICATE_RESOURCE` ("A user credential cannot be altered twice
//! in the same request"); an empty user name → `UNACCEPTABLE_CREDENTIAL`; an unknown mechanism
//! → `UNSUPPORTED_SASL_MECHANISM`; then a deletion of a credential that does not exist →
//! `RESOURCE_NOT_FOUND`, an upsertion with iterations out of 4096..=16384 →
//! `UNACCEPTABLE_CREDENTIAL` ("Too few iterations" / "Too many iterations"). Keel also bounds
//! names, salts and the salted password's size. One answer per user: a user with any refused
//! alteration changes nothing. Kafka refuses two alterations of one *user* in a request, which
//! makes `kafka-configs --add-config 'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'` (its own
//! documented example) fail; Keel refuses the same user *and mechanism* twice.

use std::collections::{BTreeMap, BTreeSet};

use super::{Batch, Controller, Output};
use crate::errors::{ApiError, ErrorCode, ReplayError};
use crate::records::{Record, RemoveUserScramCredentialRecord, UserScramCredentialRecord};
use crate::scram::{self, ScramCredentialData, ScramMechanism};

use super::partitions::{EXCESSIVE_BATCH, MAX_RECORDS_PER_USER_OP};

/// One deletion of an AlterUserScramCredentials request (the mechanism as Kafka's type id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramDeletion {
    pub name: String,
    pub mechanism: i8,
}

/// One upsertion: the client computed `salted_password = Hi(password, salt, iterations)`.
/// Its `Debug` hides the salted password.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramUpsertion {
    pub name: String,
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
}

impl std::fmt::Debug for ScramUpsertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramUpsertion")
            .field("name", &self.name)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// One user's answer: `None` when every alteration of the user was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramAlterResult {
    pub user: String,
    pub error: Option<ApiError>,
}

/// Kafka's message for an alteration named twice.
pub const ALTERED_TWICE: &str = "A user credential cannot be altered twice in the same request";
/// Kafka's message for an unknown mechanism.
pub const UNKNOWN_SCRAM_MECHANISM: &str = "Unknown SCRAM mechanism";
/// Kafka's message for deleting a credential that does not exist.
pub const DELETE_MISSING: &str = "Attempt to delete a user credential that does not exist";

fn mechanism_of(name: &str, id: i8) -> Result<ScramMechanism, ApiError> {
    scram::check_user_name(name)?;
    ScramMechanism::from_type(id)
        .ok_or_else(|| ApiError::new(ErrorCode::UnsupportedSaslMechanism, UNKNOWN_SCRAM_MECHANISM))
}

impl Controller {
    /// AlterUserScramCredentials: validates every alteration (see the module docs) and writes
    /// the accepted users' records — removals first, then credentials derived from the salted
    /// passwords — in one batch. Answers each user once, in the order the request first names
    /// it (deletions, then upsertions).
    pub fn alter_user_scram_credentials(
        &mut self,
        deletions: &[ScramDeletion],
        upsertions: &[ScramUpsertion],
        now_ms: u64,
    ) -> Output<Vec<ScramAlterResult>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let users: Vec<&str> = {
            let mut seen = BTreeSet::new();
            deletions
                .iter()
                .map(|d| d.name.as_str())
                .chain(upsertions.iter().map(|u| u.name.as_str()))
                .filter(|name| seen.insert(*name))
                .collect()
        };
        // Kafka's QuorumController caps the records of one user operation.
        if deletions.len() + upsertions.len() > MAX_RECORDS_PER_USER_OP {
            let error = ApiError::new(
                ErrorCode::PolicyViolation,
                format!(
                    "{EXCESSIVE_BATCH} {} SCRAM credential changes; at most {MAX_RECORDS_PER_USER_OP} in one request.",
                    deletions.len() + upsertions.len()
                ),
            );
            let results = users
                .iter()
                .map(|user| ScramAlterResult {
                    user: user.to_string(),
                    error: Some(error.clone()),
                })
                .collect();
            return batch.finish(results);
        }
        let mut errors: BTreeMap<&str, ApiError> = BTreeMap::new();
        let mut named: BTreeSet<(&str, i8)> = BTreeSet::new();
        let mut removals = Vec::new();
        for d in deletions {
            if errors.contains_key(d.name.as_str()) {
                continue;
            }
            let checked = if !named.insert((d.name.as_str(), d.mechanism)) {
                Err(ApiError::new(ErrorCode::DuplicateResource, ALTERED_TWICE))
            } else {
                mechanism_of(&d.name, d.mechanism).and_then(|mechanism| {
                    match self.image.scram_credential(&d.name, mechanism) {
                        Some(_) => Ok(mechanism),
                        None => Err(ApiError::new(ErrorCode::ResourceNotFound, DELETE_MISSING)),
                    }
                })
            };
            match checked {
                Ok(mechanism) => removals.push(RemoveUserScramCredentialRecord {
                    name: d.name.clone(),
                    mechanism,
                }),
                Err(e) => {
                    errors.insert(&d.name, e);
                }
            }
        }
        let mut credentials = Vec::new();
        for u in upsertions {
            if errors.contains_key(u.name.as_str()) {
                continue;
            }
            let checked = if !named.insert((u.name.as_str(), u.mechanism)) {
                Err(ApiError::new(ErrorCode::DuplicateResource, ALTERED_TWICE))
            } else {
                mechanism_of(&u.name, u.mechanism).and_then(|mechanism| {
                    scram::check_iterations(u.iterations)?;
                    scram::check_salt(&u.salt)?;
                    scram::check_salted_password(mechanism, &u.salted_password)?;
                    Ok(mechanism)
                })
            };
            match checked {
                Ok(mechanism) => credentials.push(UserScramCredentialRecord {
                    name: u.name.clone(),
                    mechanism,
                    credential: ScramCredentialData::from_salted_password(
                        mechanism,
                        &u.salt,
                        &u.salted_password,
                        u.iterations,
                    ),
                }),
                Err(e) => {
                    errors.insert(&u.name, e);
                }
            }
        }
        for r in removals {
            if !errors.contains_key(r.name.as_str()) {
                batch.push(Record::RemoveUserScramCredential(r));
            }
        }
        for r in credentials {
            if !errors.contains_key(r.name.as_str()) {
                batch.push(Record::UserScramCredential(r));
            }
        }
        let results = users
            .iter()
            .map(|user| ScramAlterResult {
                user: user.to_string(),
                error: errors.get(user).cloned(),
            })
            .collect();
        batch.finish(results)
    }

    /// The records `keel format` left for a fresh cluster (Kafka's bootstrap metadata: SCRAM
    /// credentials from `--add-scram`), written only while the metadata log has never had a
    /// record — by the first controller to become active; any later one finds them there.
    /// Records that would not replay are refused, nothing written.
    pub fn bootstrap(
        &mut self,
        records: &[Record],
        now_ms: u64,
    ) -> Output<Result<usize, ReplayError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        if self.image.last_applied().is_some() || records.is_empty() {
            return batch.finish(Ok(0));
        }
        let mut trial = self.image.clone();
        for record in records {
            if let Err(e) = trial.replay(trial.next_offset(), record) {
                return batch.finish(Err(e));
            }
        }
        for record in records {
            batch.push(record.clone());
        }
        batch.finish(Ok(records.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ControllerConfig;

    fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramUpsertion {
        let len = ScramMechanism::from_type(mechanism).map_or(32, |m| m.hash_bytes());
        ScramUpsertion {
            name: name.into(),
            mechanism,
            iterations,
            salt: b"salt".to_vec(),
            salted_password: vec![9; len],
        }
    }

    fn delete(name: &str, mechanism: i8) -> ScramDeletion {
        ScramDeletion {
            name: name.into(),
            mechanism,
        }
    }

    fn run(
        c: &mut Controller,
        deletions: &[ScramDeletion],
        upsertions: &[ScramUpsertion],
    ) -> Vec<(String, Option<(ErrorCode, String)>)> {
        let out = c.alter_user_scram_credentials(deletions, upsertions, 0);
        c.replay_all(&out.records).unwrap();
        out.response
            .into_iter()
            .map(|r| (r.user, r.error.map(|e| (e.code, e.message))))
            .collect()
    }

    fn ok(user: &str) -> (String, Option<(ErrorCode, String)>) {
        (user.to_string(), None)
    }

    fn err(user: &str, code: ErrorCode, message: &str) -> (String, Option<(ErrorCode, String)>) {
        (user.to_string(), Some((code, message.to_string())))
    }

    // Shows (KIP-554, Kafka's AlterUserScramCredentialsRequestTest): an upsertion stores the
    // keys derived from the salted password (never the salted password itself) with its
    // iterations; both mechanisms of one user in one request are accepted (Keel's difference);
    // a deletion removes one mechanism, and deleting the last removes the user.
    #[test]
    fn upsert_then_delete() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        assert_eq!(
            run(
                &mut c,
                &[],
                &[
                    upsert("alice", 1, 4096),
                    upsert("alice", 2, 8192),
                    upsert("bob", 2, 4096)
                ]
            ),
            vec![ok("alice"), ok("bob")]
        );
        let stored = c
            .image()
            .scram_credential("alice", ScramMechanism::Sha512)
            .unwrap();
        assert_eq!(stored.iterations, 8192);
        assert_eq!(stored.salt, b"salt");
        let expected = ScramCredentialData::from_salted_password(
            ScramMechanism::Sha512,
            b"salt",
            &[9; 64],
            8192,
        );
        assert_eq!(stored, &expected);
        assert_ne!(stored.stored_key, vec![9; 64]);
        assert_ne!(stored.server_key, vec![9; 64]);
        assert_eq!(run(&mut c, &[delete("alice", 1)], &[]), vec![ok("alice")]);
        assert!(c
            .image()
            .scram_credential("alice", ScramMechanism::Sha256)
            .is_none());
        assert!(c
            .image()
            .scram_credential("alice", ScramMechanism::Sha512)
            .is_some());
        assert_eq!(run(&mut c, &[delete("alice", 2)], &[]), vec![ok("alice")]);
        assert!(!c.image().scram_users().contains_key("alice"));
        assert!(c.image().scram_users().contains_key("bob"));
    }

    // Shows: Kafka's refusals with its codes and messages, table-driven; each refused user
    // changes nothing, the others are applied.
    #[test]
    fn refusals_in_kafkas_order() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        run(&mut c, &[], &[upsert("carol", 1, 4096)]);
        /// (case, deletions, upsertions, expected code, expected message)
        type Case = (
            &'static str,
            Vec<ScramDeletion>,
            Vec<ScramUpsertion>,
            ErrorCode,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "empty name",
                vec![],
                vec![upsert("", 1, 4096)],
                ErrorCode::UnacceptableCredential,
                "Username must not be empty",
            ),
            (
                "empty name deleted",
                vec![delete("", 1)],
                vec![],
                ErrorCode::UnacceptableCredential,
                "Username must not be empty",
            ),
            (
                "unknown mechanism 0",
                vec![],
                vec![upsert("u", 0, 4096)],
                ErrorCode::UnsupportedSaslMechanism,
                UNKNOWN_SCRAM_MECHANISM,
            ),
            (
                "unknown mechanism 10",
                vec![delete("u", 10)],
                vec![],
                ErrorCode::UnsupportedSaslMechanism,
                UNKNOWN_SCRAM_MECHANISM,
            ),
            (
                "too few",
                vec![],
                vec![upsert("u", 1, 1)],
                ErrorCode::UnacceptableCredential,
                "Too few iterations",
            ),
            (
                "too many",
                vec![],
                vec![upsert("u", 2, i32::MAX)],
                ErrorCode::UnacceptableCredential,
                "Too many iterations",
            ),
            (
                "missing",
                vec![delete("u", 2)],
                vec![],
                ErrorCode::ResourceNotFound,
                DELETE_MISSING,
            ),
            (
                "deleted twice",
                vec![delete("carol", 1), delete("carol", 1)],
                vec![],
                ErrorCode::DuplicateResource,
                ALTERED_TWICE,
            ),
            (
                "upserted twice",
                vec![],
                vec![upsert("u", 1, 4096), upsert("u", 1, 8192)],
                ErrorCode::DuplicateResource,
                ALTERED_TWICE,
            ),
            (
                "deleted and upserted",
                vec![delete("carol", 1)],
                vec![upsert("carol", 1, 4096)],
                ErrorCode::DuplicateResource,
                ALTERED_TWICE,
            ),
        ];
        for (name, deletions, upsertions, code, message) in cases {
            let user = deletions
                .first()
                .map(|d| d.name.clone())
                .unwrap_or_else(|| upsertions[0].name.clone());
            let before = c.image().clone();
            assert_eq!(
                run(&mut c, &deletions, &upsertions),
                vec![err(&user, code, message)],
                "{name}"
            );
            assert_eq!(c.image().scram_users(), before.scram_users(), "{name}");
        }
        // Keel's bounds: a salted password that is not one hash long, an empty salt.
        let mut short = upsert("u", 2, 4096);
        short.salted_password = b"saltedPassword".to_vec();
        let mut no_salt = upsert("v", 1, 4096);
        no_salt.salt.clear();
        let results = run(&mut c, &[], &[short, no_salt, upsert("w", 1, 4096)]);
        assert_eq!(
            results[0].1.as_ref().unwrap().0,
            ErrorCode::UnacceptableCredential
        );
        assert_eq!(
            results[1].1.as_ref().unwrap().0,
            ErrorCode::UnacceptableCredential
        );
        assert_eq!(results[2], ok("w"));
        assert!(c.image().scram_users().contains_key("w"));
        assert!(!c.image().scram_users().contains_key("u"));
    }

    // Shows: a user with one refused alteration keeps its credentials as they were, even when
    // its other alteration was valid (one answer per user, as Kafka's response).
    #[test]
    fn a_refused_user_changes_nothing() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        run(&mut c, &[], &[upsert("dave", 1, 4096)]);
        let results = run(&mut c, &[delete("dave", 1)], &[upsert("dave", 2, 1)]);
        assert_eq!(
            results,
            vec![err(
                "dave",
                ErrorCode::UnacceptableCredential,
                "Too few iterations"
            )]
        );
        assert!(c
            .image()
            .scram_credential("dave", ScramMechanism::Sha256)
            .is_some());
        assert!(c
            .image()
            .scram_credential("dave", ScramMechanism::Sha512)
            .is_none());
    }

    // Shows: more alterations than one user operation may write are all refused with Kafka's
    // POLICY_VIOLATION message, nothing written.
    #[test]
    fn excessive_batches_are_refused() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        let many: Vec<ScramUpsertion> = (0..=MAX_RECORDS_PER_USER_OP)
            .map(|i| upsert(&format!("u{i}"), 1, 4096))
            .collect();
        let out = c.alter_user_scram_credentials(&[], &many, 0);
        assert!(out.records.is_empty());
        assert_eq!(out.response.len(), many.len());
        assert!(out
            .response
            .iter()
            .all(|r| r.error.as_ref().unwrap().code == ErrorCode::PolicyViolation));
    }

    // Shows: credentials survive a snapshot (to_snapshot / from_snapshot rebuild them equal),
    // and replay refuses a credential out of bounds or the removal of a missing one.
    #[test]
    fn credentials_in_snapshots_and_replay_checks() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        run(
            &mut c,
            &[],
            &[
                upsert("alice", 1, 4096),
                upsert("alice", 2, 16384),
                upsert("bob", 1, 5000),
            ],
        );
        let image = c.image().clone();
        let records = image.to_snapshot();
        let end = image.next_offset();
        let rebuilt = crate::ClusterImage::from_snapshot(end, &records).unwrap();
        assert_eq!(rebuilt.scram_users(), image.scram_users());
        let mut bad = crate::ClusterImage::new();
        let weak = Record::UserScramCredential(UserScramCredentialRecord {
            name: "x".into(),
            mechanism: ScramMechanism::Sha256,
            credential: ScramCredentialData {
                salt: b"s".to_vec(),
                stored_key: vec![0; 32],
                server_key: vec![0; 32],
                iterations: 1,
            },
        });
        assert!(matches!(
            bad.replay(crate::types::MetadataOffset(0), &weak),
            Err(ReplayError::InvalidScramCredential { .. })
        ));
        let remove = Record::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
            name: "x".into(),
            mechanism: ScramMechanism::Sha256,
        });
        assert!(matches!(
            bad.replay(crate::types::MetadataOffset(0), &remove),
            Err(ReplayError::UnknownScramCredential { .. })
        ));
        let shown = format!("{records:?}");
        assert!(
            shown.contains("[hidden]") && !shown.contains("stored_key: ["),
            "{shown}"
        );
    }

    // Shows (kafka-storage format --add-scram): bootstrap records are written on a log that
    // never had a record and not on one that has; records that would not replay are refused.
    #[test]
    fn bootstrap_only_on_an_empty_log() {
        let credential = ScramCredentialData::from_salted_password(
            ScramMechanism::Sha512,
            b"salt",
            &[1; 64],
            4096,
        );
        let record = Record::UserScramCredential(UserScramCredentialRecord {
            name: "admin".into(),
            mechanism: ScramMechanism::Sha512,
            credential,
        });
        let mut c = Controller::new(ControllerConfig::new("c"));
        let out = c.bootstrap(std::slice::from_ref(&record), 0);
        assert_eq!(out.response, Ok(1));
        assert_eq!(out.records, vec![record.clone()]);
        c.replay_all(&out.records).unwrap();
        assert!(c
            .image()
            .scram_credential("admin", ScramMechanism::Sha512)
            .is_some());
        let again = c.bootstrap(std::slice::from_ref(&record), 0);
        assert_eq!((again.response, again.records.len()), (Ok(0), 0));

        let mut fresh = Controller::new(ControllerConfig::new("c"));
        let remove = Record::RemoveUserScramCredential(RemoveUserScramCredentialRecord {
            name: "nobody".into(),
            mechanism: ScramMechanism::Sha256,
        });
        let refused = fresh.bootstrap(&[remove], 0);
        assert!(refused.response.is_err() && refused.records.is_empty());
    }

    // Shows: DescribeUserScramCredentials from the image (Kafka's ScramImage.describe): all
    // users sorted when none are named; a named user without credentials gets
    // RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE (answered once); never a key.
    #[test]
    fn describe_from_the_image() {
        let mut c = Controller::new(ControllerConfig::new("c"));
        run(
            &mut c,
            &[],
            &[
                upsert("bob", 2, 8192),
                upsert("alice", 1, 4096),
                upsert("alice", 2, 8192),
            ],
        );
        let all = scram::describe(c.image(), None);
        assert_eq!(
            all.iter().map(|d| d.user.as_str()).collect::<Vec<_>>(),
            ["alice", "bob"]
        );
        assert_eq!(
            all[0].credentials,
            Ok(vec![
                (ScramMechanism::Sha256, 4096),
                (ScramMechanism::Sha512, 8192)
            ])
        );
        assert_eq!(scram::describe(c.image(), Some(&[])).len(), 2);
        let named: Vec<String> = ["bob", "nobody", "alice", "alice"]
            .map(String::from)
            .to_vec();
        let some = scram::describe(c.image(), Some(&named));
        assert_eq!(some.len(), 3);
        assert_eq!(
            some[0].credentials,
            Ok(vec![(ScramMechanism::Sha512, 8192)])
        );
        let missing = some[1].credentials.clone().unwrap_err();
        assert_eq!(missing.code, ErrorCode::ResourceNotFound);
        assert_eq!(
            missing.message,
            "Attempt to describe a user credential that does not exist: nobody"
        );
        let twice = some[2].credentials.clone().unwrap_err();
        assert_eq!(twice.code, ErrorCode::DuplicateResource);
        assert_eq!(
            twice.message,
            "Cannot describe SCRAM credentials for the same user twice in a single request: alice"
        );
    }
}
