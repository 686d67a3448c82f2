//! Kafka error codes this crate answers with or reacts to ([`ErrorCode`]), and the errors its
//! methods return when the caller (the shell) breaks a precondition ([`ReplicationError`]).
//!
//! The numeric codes are Kafka's (`org.apache.kafka.common.protocol.Errors`), checked against
//! the `kafka-protocol` crate's `src/error.rs` (0.18). Codes the crate does not know arrive as
//! [`ErrorCode::Other`] and are treated as retriable, like Kafka's default branch.

use std::fmt;

use crate::types::{BrokerId, LeaderEpoch, Offset, RequestId};

macro_rules! error_codes {
    ($($variant:ident = $code:literal, $name:literal;)*) => {
        /// A Kafka error code, under Kafka's name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ErrorCode {
            $(
                #[doc = concat!("`", $name, "` (", stringify!($code), ")")]
                $variant,
            )*
            /// Any other code, by number.
            Other(i16),
        }

        impl ErrorCode {
            /// Every named code, in declaration order.
            pub const NAMED: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// Kafka's numeric error code.
            pub fn code(self) -> i16 {
                match self { $(ErrorCode::$variant => $code,)* ErrorCode::Other(code) => code }
            }

            /// Kafka's name, e.g. `NOT_ENOUGH_REPLICAS`; `UNKNOWN` for [`ErrorCode::Other`].
            pub fn name(self) -> &'static str {
                match self { $(ErrorCode::$variant => $name,)* ErrorCode::Other(_) => "UNKNOWN" }
            }

            /// The code for a number (named when this crate knows it).
            pub fn from_code(code: i16) -> ErrorCode {
                match code { $($code => ErrorCode::$variant,)* other => ErrorCode::Other(other) }
            }
        }
    };
}

error_codes! {
    OffsetOutOfRange = 1, "OFFSET_OUT_OF_RANGE";
    UnknownTopicOrPartition = 3, "UNKNOWN_TOPIC_OR_PARTITION";
    NotLeaderOrFollower = 6, "NOT_LEADER_OR_FOLLOWER";
    RequestTimedOut = 7, "REQUEST_TIMED_OUT";
    NotEnoughReplicas = 19, "NOT_ENOUGH_REPLICAS";
    NotEnoughReplicasAfterAppend = 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND";
    NotController = 41, "NOT_CONTROLLER";
    InvalidRequest = 42, "INVALID_REQUEST";
    OperationNotAttempted = 55, "OPERATION_NOT_ATTEMPTED";
    KafkaStorageError = 56, "KAFKA_STORAGE_ERROR";
    FencedLeaderEpoch = 74, "FENCED_LEADER_EPOCH";
    UnknownLeaderEpoch = 75, "UNKNOWN_LEADER_EPOCH";
    StaleBrokerEpoch = 77, "STALE_BROKER_EPOCH";
    InvalidUpdateVersion = 95, "INVALID_UPDATE_VERSION";
    UnknownTopicId = 100, "UNKNOWN_TOPIC_ID";
    IneligibleReplica = 107, "INELIGIBLE_REPLICA";
    NewLeaderElected = 108, "NEW_LEADER_ELECTED";
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// The caller broke a precondition of a method. The state is left unchanged. Nothing the
/// network sends can cause one of these; a shell bug can.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplicationError {
    /// The local broker is not among the partition's replicas.
    #[error("broker {0} is not a replica of this partition")]
    NotAReplica(BrokerId),
    /// A leader was set up with an ISR that lacks it (the controller never does this).
    #[error("the leader {0} is not in the ISR")]
    LeaderNotInIsr(BrokerId),
    /// Offsets that must be ordered are not: `what` names them.
    #[error("offsets out of order: {what}")]
    OffsetsOutOfOrder {
        /// Which ordering failed, e.g. "high watermark ≤ log end offset".
        what: &'static str,
    },
    /// The leader's log end offset may only grow.
    #[error("log end offset {new} below the current {current}")]
    LogEndOffsetBackward {
        /// The current log end offset.
        current: Offset,
        /// The offset passed in.
        new: Offset,
    },
    /// A produce request waits for an offset the leader has not appended.
    #[error("{request} waits for offset {required} beyond the log end offset {log_end_offset}")]
    BeyondLogEnd {
        /// The request.
        request: RequestId,
        /// The offset it waits for.
        required: Offset,
        /// The leader's log end offset.
        log_end_offset: Offset,
    },
    /// The request id is already waiting in the purgatory.
    #[error("{0} is already waiting")]
    DuplicateRequest(RequestId),
    /// This leadership has ended; build a new partition state from metadata.
    #[error("leadership in leader epoch {0} has ended")]
    LeadershipEnded(LeaderEpoch),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_kafka() {
        // Kafka's Errors.java, checked against kafka-protocol 0.18 src/error.rs.
        let expected: &[(ErrorCode, i16, &str)] = &[
            (ErrorCode::OffsetOutOfRange, 1, "OFFSET_OUT_OF_RANGE"),
            (
                ErrorCode::UnknownTopicOrPartition,
                3,
                "UNKNOWN_TOPIC_OR_PARTITION",
            ),
            (ErrorCode::NotLeaderOrFollower, 6, "NOT_LEADER_OR_FOLLOWER"),
            (ErrorCode::RequestTimedOut, 7, "REQUEST_TIMED_OUT"),
            (ErrorCode::NotEnoughReplicas, 19, "NOT_ENOUGH_REPLICAS"),
            (
                ErrorCode::NotEnoughReplicasAfterAppend,
                20,
                "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            ),
            (ErrorCode::NotController, 41, "NOT_CONTROLLER"),
            (ErrorCode::InvalidRequest, 42, "INVALID_REQUEST"),
            (
                ErrorCode::OperationNotAttempted,
                55,
                "OPERATION_NOT_ATTEMPTED",
            ),
            (ErrorCode::KafkaStorageError, 56, "KAFKA_STORAGE_ERROR"),
            (ErrorCode::FencedLeaderEpoch, 74, "FENCED_LEADER_EPOCH"),
            (ErrorCode::UnknownLeaderEpoch, 75, "UNKNOWN_LEADER_EPOCH"),
            (ErrorCode::StaleBrokerEpoch, 77, "STALE_BROKER_EPOCH"),
            (
                ErrorCode::InvalidUpdateVersion,
                95,
                "INVALID_UPDATE_VERSION",
            ),
            (ErrorCode::UnknownTopicId, 100, "UNKNOWN_TOPIC_ID"),
            (ErrorCode::IneligibleReplica, 107, "INELIGIBLE_REPLICA"),
            (ErrorCode::NewLeaderElected, 108, "NEW_LEADER_ELECTED"),
        ];
        assert_eq!(expected.len(), ErrorCode::NAMED.len());
        for (error, code, name) in expected {
            assert_eq!(error.code(), *code, "{name}");
            assert_eq!(error.name(), *name);
            assert_eq!(ErrorCode::from_code(*code), *error);
        }
        assert_eq!(ErrorCode::from_code(15), ErrorCode::Other(15));
        assert_eq!(ErrorCode::Other(15).code(), 15);
    }
}
