//! Errors: Kafka's error codes for API answers ([`ErrorCode`], [`ApiError`]) and the fatal
//! errors of replay ([`ReplayError`]).
//!
//! The numeric codes are Kafka's (`org.apache.kafka.common.protocol.Errors`), checked against
//! the `kafka-protocol` crate's `src/error.rs` (0.18). The wire layer maps [`ErrorCode::code`]
//! straight into responses.

use std::fmt;

use crate::types::{AclId, BrokerId, MetadataOffset, TopicId, TopicPartition};

macro_rules! error_codes {
    ($($variant:ident = $code:literal, $name:literal;)*) => {
        /// A Kafka error code this crate can answer with, under Kafka's name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ErrorCode {
            $(
                #[doc = concat!("`", $name, "` (", stringify!($code), ")")]
                $variant,
            )*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// Kafka's numeric error code.
            pub fn code(self) -> i16 {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// Kafka's name, e.g. `INELIGIBLE_REPLICA`.
            pub fn name(self) -> &'static str {
                match self { $(ErrorCode::$variant => $name,)* }
            }
        }
    };
}

error_codes! {
    None = 0, "NONE";
    UnknownTopicOrPartition = 3, "UNKNOWN_TOPIC_OR_PARTITION";
    TopicAlreadyExists = 36, "TOPIC_ALREADY_EXISTS";
    InvalidPartitions = 37, "INVALID_PARTITIONS";
    InvalidReplicationFactor = 38, "INVALID_REPLICATION_FACTOR";
    InvalidReplicaAssignment = 39, "INVALID_REPLICA_ASSIGNMENT";
    InvalidConfig = 40, "INVALID_CONFIG";
    NotController = 41, "NOT_CONTROLLER";
    InvalidRequest = 42, "INVALID_REQUEST";
    PolicyViolation = 44, "POLICY_VIOLATION";
    UnknownServerError = -1, "UNKNOWN_SERVER_ERROR";
    FencedLeaderEpoch = 74, "FENCED_LEADER_EPOCH";
    StaleBrokerEpoch = 77, "STALE_BROKER_EPOCH";
    PreferredLeaderNotAvailable = 80, "PREFERRED_LEADER_NOT_AVAILABLE";
    EligibleLeadersNotAvailable = 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE";
    ElectionNotNeeded = 84, "ELECTION_NOT_NEEDED";
    NoReassignmentInProgress = 85, "NO_REASSIGNMENT_IN_PROGRESS";
    InvalidUpdateVersion = 95, "INVALID_UPDATE_VERSION";
    UnknownTopicId = 100, "UNKNOWN_TOPIC_ID";
    DuplicateBrokerRegistration = 101, "DUPLICATE_BROKER_REGISTRATION";
    BrokerIdNotRegistered = 102, "BROKER_ID_NOT_REGISTERED";
    InconsistentClusterId = 104, "INCONSISTENT_CLUSTER_ID";
    IneligibleReplica = 107, "INELIGIBLE_REPLICA";
    NewLeaderElected = 108, "NEW_LEADER_ELECTED";
    UnsupportedSaslMechanism = 33, "UNSUPPORTED_SASL_MECHANISM";
    ResourceNotFound = 91, "RESOURCE_NOT_FOUND";
    DuplicateResource = 92, "DUPLICATE_RESOURCE";
    UnacceptableCredential = 93, "UNACCEPTABLE_CREDENTIAL";
    TopicAuthorizationFailed = 29, "TOPIC_AUTHORIZATION_FAILED";
    GroupAuthorizationFailed = 30, "GROUP_AUTHORIZATION_FAILED";
    ClusterAuthorizationFailed = 31, "CLUSTER_AUTHORIZATION_FAILED";
    TransactionalIdAuthorizationFailed = 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED";
    SecurityDisabled = 54, "SECURITY_DISABLED";
    DelegationTokenAuthorizationFailed = 65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED";
}

impl ErrorCode {
    /// Looks a code up by Kafka's name, case-insensitively.
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.name().eq_ignore_ascii_case(name))
    }

    /// Looks a code up by number.
    pub fn from_code(code: i16) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.code() == code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// An error answered to a request: a Kafka error code and a human message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// The Kafka error code.
    pub code: ErrorCode,
    /// What went wrong, for logs and the error message field.
    pub message: String,
}

impl ApiError {
    /// Builds an API error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

/// A record could not be replayed: the metadata log is corrupt or the code generating records
/// is wrong. Fatal: the image is left unchanged and the caller must stop.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// A snapshot has more records than offsets below its end.
    #[error("snapshot ending at offset {end} has {records} records")]
    SnapshotTooLarge {
        /// The snapshot's end offset.
        end: MetadataOffset,
        /// Its record count.
        records: usize,
    },
    /// Records must be replayed at strictly increasing offsets.
    #[error("record at offset {offset} replayed after offset {last}")]
    OffsetNotIncreasing {
        /// The offending offset.
        offset: MetadataOffset,
        /// The last applied offset.
        last: MetadataOffset,
    },
    /// The record names a broker that is not registered.
    #[error("broker {0} is not registered")]
    UnknownBroker(BrokerId),
    /// The record names a broker epoch that is not the registered one.
    #[error("broker {broker}: record epoch {record} but registered epoch {registered}")]
    BrokerEpochMismatch {
        /// The broker.
        broker: BrokerId,
        /// The epoch in the record.
        record: i64,
        /// The registered epoch.
        registered: i64,
    },
    /// A producer-id block that does not move the next producer id forward.
    #[error("producer ids record moves the next producer id from {current} to {next}")]
    ProducerIdsNotIncreasing {
        /// The record's next producer id.
        next: i64,
        /// The image's.
        current: i64,
    },
    /// The record names an unknown topic.
    #[error("unknown topic {0}")]
    UnknownTopic(TopicId),
    /// The record names a topic by an unknown name.
    #[error("unknown topic name {0:?}")]
    UnknownTopicName(String),
    /// A topic with this id or name exists already.
    #[error("topic {0:?} already exists")]
    DuplicateTopic(String),
    /// The record names an unknown partition.
    #[error("unknown partition {0}")]
    UnknownPartition(TopicPartition),
    /// A partition record for an existing partition.
    #[error("partition {0} already exists")]
    DuplicatePartition(TopicPartition),
    /// A SCRAM credential record outside the bounds every credential is checked against.
    #[error("SCRAM credential of user {user:?} for {mechanism}: {reason}")]
    InvalidScramCredential {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A removal of a SCRAM credential that does not exist (Kafka: "Unable to find credential
    /// to delete").
    #[error("no SCRAM credential of user {user:?} for {mechanism} to remove")]
    UnknownScramCredential {
        /// The user.
        user: String,
        /// The mechanism.
        mechanism: &'static str,
    },
    /// A client quota record AlterClientQuotas would have refused, or the removal of a key
    /// that is not set.
    #[error("client quota of {entity}: {reason}")]
    InvalidClientQuota {
        /// The entity.
        entity: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An ACL record CreateAcls would have refused, or a second binding with an existing id or
    /// an existing binding again (Kafka's `AclControlManager.replay`).
    #[error("ACL binding {id}: {reason}")]
    InvalidAcl {
        /// The binding's id.
        id: AclId,
        /// What is wrong with it.
        reason: String,
    },
    /// A removal of an ACL binding that does not exist.
    #[error("no ACL binding with id {0} to remove")]
    UnknownAcl(AclId),
    /// Applying the record would break a partition invariant.
    #[error("partition {partition}: {violation}")]
    Invariant {
        /// The partition.
        partition: TopicPartition,
        /// The broken invariant.
        violation: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_kafka() {
        // Kafka's Errors.java, checked against kafka-protocol 0.18 src/error.rs.
        let expected: &[(&str, i16)] = &[
            ("UNKNOWN_TOPIC_OR_PARTITION", 3),
            ("TOPIC_ALREADY_EXISTS", 36),
            ("INVALID_REPLICATION_FACTOR", 38),
            ("INVALID_REPLICA_ASSIGNMENT", 39),
            ("INVALID_CONFIG", 40),
            ("NOT_CONTROLLER", 41),
            ("INVALID_REQUEST", 42),
            ("POLICY_VIOLATION", 44),
            ("FENCED_LEADER_EPOCH", 74),
            ("STALE_BROKER_EPOCH", 77),
            ("PREFERRED_LEADER_NOT_AVAILABLE", 80),
            ("ELIGIBLE_LEADERS_NOT_AVAILABLE", 83),
            ("ELECTION_NOT_NEEDED", 84),
            ("INVALID_UPDATE_VERSION", 95),
            ("UNKNOWN_TOPIC_ID", 100),
            ("DUPLICATE_BROKER_REGISTRATION", 101),
            ("INCONSISTENT_CLUSTER_ID", 104),
            ("INELIGIBLE_REPLICA", 107),
            ("NEW_LEADER_ELECTED", 108),
            ("UNSUPPORTED_SASL_MECHANISM", 33),
            ("RESOURCE_NOT_FOUND", 91),
            ("DUPLICATE_RESOURCE", 92),
            ("UNACCEPTABLE_CREDENTIAL", 93),
        ];
        for (name, code) in expected {
            let error = ErrorCode::from_name(name).expect(name);
            assert_eq!(error.code(), *code, "{name}");
            assert_eq!(ErrorCode::from_code(*code), Some(error));
        }
        assert_eq!(
            ErrorCode::from_name("ineligible_replica"),
            Some(ErrorCode::IneligibleReplica)
        );
        assert_eq!(ErrorCode::from_name("NO_SUCH_ERROR"), None);
    }
}
