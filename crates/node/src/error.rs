//! API errors: a Kafka error code plus a message for the client. They exist at the request
//! boundary; inside, failures are typed (`LogError`, `ConfigError`).

use keel_wire::ResponseError;

/// A failure to report to a client in a response field.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub error: ResponseError,
    pub message: Option<String>,
}

impl ApiError {
    pub fn new(error: ResponseError, message: impl Into<String>) -> ApiError {
        ApiError {
            error,
            message: Some(message.into()),
        }
    }

    pub fn bare(error: ResponseError) -> ApiError {
        ApiError {
            error,
            message: None,
        }
    }

    pub fn code(&self) -> i16 {
        self.error.code()
    }

    pub fn message_str(&self) -> Option<keel_wire::kafka_protocol::protocol::StrBytes> {
        self.message
            .as_ref()
            .map(|m| keel_wire::kafka_protocol::protocol::StrBytes::from_string(m.clone()))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => write!(f, "{:?}: {m}", self.error),
            None => write!(f, "{:?}", self.error),
        }
    }
}

/// Maps a log failure to the error a client sees. I/O failures are the broker's problem and
/// are reported as `KAFKA_STORAGE_ERROR` (the caller also logs them).
pub fn from_log_error(error: &keel_log::LogError) -> ApiError {
    let code = error
        .kafka_error_code()
        .and_then(ResponseError::try_from_code)
        .unwrap_or(ResponseError::KafkaStorageError);
    ApiError::new(code, error.to_string())
}
