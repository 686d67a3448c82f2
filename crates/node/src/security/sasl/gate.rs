//! One connection's SASL state machine on a SASL listener (Kafka's `SaslServerAuthenticator`,
//! and `KafkaChannel`'s session expiry for KIP-368):
//!
//! - before authentication only ApiVersions (once, first), SaslHandshake and SaslAuthenticate
//!   are answered; anything else closes the connection ("Unexpected Kafka request of type X
//!   during SASL handshake");
//! - SaslHandshake v1 is followed by SaslAuthenticate requests; v0 (KIP-152's legacy framing)
//!   by raw size-prefixed tokens;
//! - an unknown mechanism gets `UNSUPPORTED_SASL_MECHANISM` with the enabled ones, a failed
//!   exchange `SASL_AUTHENTICATION_FAILED` with Kafka's message; both close the connection;
//! - a session lasts `connections.max.reauth.ms` (or until the credential expires): the client
//!   is told the lifetime in SaslAuthenticate (v1+) and re-authenticates on the same connection
//!   with a new SaslHandshake (the mechanism and the principal must stay the same); a request
//!   after the session expired closes the connection.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use keel_wire::kafka_protocol::messages::{
    ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::request::{decode_sasl, SaslRequest};
use keel_wire::ResponseError;

use super::{Failure, SaslListener, ServerExchange, Step};
use crate::security::KafkaPrincipal;

/// What the connection does with a frame, as the gate decides.
#[derive(Debug)]
pub enum Verdict {
    /// Not the gate's: the listener's handler answers it.
    Pass,
    /// Write this answer (a SASL response or a legacy token).
    Answer(Bytes),
    /// Authenticated (or re-authenticated) as `principal`: write `answer`.
    Authenticated {
        answer: Bytes,
        principal: KafkaPrincipal,
    },
    /// Write `answer` (if any) and close the connection.
    Fail {
        answer: Option<Bytes>,
        /// For the log (no secrets).
        reason: String,
        /// The mechanism whose exchange failed (counted as a failed authentication), or
        /// `None` for a protocol mistake.
        mechanism: Option<String>,
    },
}

/// An authenticated session.
#[derive(Debug, Clone)]
struct Session {
    mechanism: String,
    principal: KafkaPrincipal,
    /// When it must be renewed (clock ms), if ever.
    expires_at_ms: Option<i64>,
}

enum State {
    /// A new connection: ApiVersions or SaslHandshake.
    HandshakeOrVersions,
    /// After ApiVersions, or re-authenticating: SaslHandshake.
    Handshake {
        previous: Option<Session>,
    },
    /// Exchanging tokens.
    Authenticating {
        mechanism: String,
        exchange: Box<dyn ServerExchange>,
        /// SaslHandshake v0: raw tokens, no SaslAuthenticate headers.
        legacy: bool,
        previous: Option<Session>,
        /// Re-authentication asked for another mechanism: the exchange fails with this.
        bad_mechanism: Option<String>,
    },
    Authenticated(Session),
    Failed,
}

/// One connection's authenticator.
pub struct SaslGate {
    listener: Arc<SaslListener>,
    state: State,
    /// Whether the client sent SaslAuthenticate v1+ (it knows session lifetimes, KIP-368).
    supports_reauth: bool,
}

impl std::fmt::Debug for SaslGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslGate")
            .field("listener", &self.listener.listener)
            .field("authenticated", &self.is_authenticated())
            .finish()
    }
}

/// Kafka's header fields of a frame: api key, version, correlation id.
fn header(frame: &[u8]) -> Option<(i16, i16, i32)> {
    (frame.len() >= 8).then(|| {
        (
            i16::from_be_bytes([frame[0], frame[1]]),
            i16::from_be_bytes([frame[2], frame[3]]),
            i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
        )
    })
}

fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map_or_else(|()| format!("api key {key}"), |k| format!("{k:?}"))
}

fn protocol_failure(reason: String) -> Verdict {
    Verdict::Fail {
        answer: None,
        reason,
        mechanism: None,
    }
}

/// A legacy (SaslHandshake v0) token on the wire: size-prefixed bytes.
fn legacy_token(token: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + token.len());
    out.put_u32(u32::try_from(token.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(token);
    out.freeze()
}

fn encode<T: keel_wire::kafka_protocol::protocol::Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Option<Bytes> {
    keel_wire::response::encode(key, version, correlation_id, body).ok()
}

impl SaslGate {
    /// A new connection's authenticator on `listener`.
    pub fn new(listener: Arc<SaslListener>) -> SaslGate {
        SaslGate {
            listener,
            state: State::HandshakeOrVersions,
            supports_reauth: false,
        }
    }

    /// Whether the connection has authenticated (and not started to re-authenticate).
    pub fn is_authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated(_))
    }

    /// The largest frame to read now: `sasl.server.max.receive.size` until authenticated.
    pub fn frame_limit(&self, authenticated_limit: usize) -> usize {
        match self.state {
            State::Authenticated(_) => authenticated_limit,
            _ => self.listener.max_receive_size.min(authenticated_limit),
        }
    }

    /// The mechanism of the exchange under way or done, if any.
    pub fn mechanism(&self) -> Option<&str> {
        match &self.state {
            State::Authenticating { mechanism, .. } => Some(mechanism),
            State::Authenticated(session) => Some(&session.mechanism),
            _ => None,
        }
    }

    /// Decides what to do with `frame` (a whole frame without its size prefix).
    pub fn on_frame(&mut self, frame: &Bytes) -> Verdict {
        let state = std::mem::replace(&mut self.state, State::Failed);
        let (verdict, next) = self.step(state, frame);
        self.state = next;
        verdict
    }

    fn step(&mut self, state: State, frame: &Bytes) -> (Verdict, State) {
        match state {
            State::HandshakeOrVersions | State::Handshake { .. } => self.handshake(state, frame),
            State::Authenticating {
                mechanism,
                exchange,
                legacy,
                previous,
                bad_mechanism,
            } => self.authenticate(mechanism, exchange, legacy, previous, bad_mechanism, frame),
            State::Authenticated(session) => self.authenticated(session, frame),
            State::Failed => (
                protocol_failure("a request after authentication failed".into()),
                State::Failed,
            ),
        }
    }

    fn handshake(&mut self, state: State, frame: &Bytes) -> (Verdict, State) {
        let Some((key, _, _)) = header(frame) else {
            return (
                protocol_failure(
                    "a frame too short for a request header during SASL handshake".into(),
                ),
                State::Failed,
            );
        };
        let first = matches!(state, State::HandshakeOrVersions);
        let previous = match state {
            State::Handshake { previous } => previous,
            _ => None,
        };
        if key == ApiKey::ApiVersions as i16 {
            return match first {
                true => (Verdict::Pass, State::Handshake { previous }),
                false => (
                    protocol_failure(
                        "Unexpected ApiVersions request received during SASL authentication".into(),
                    ),
                    State::Failed,
                ),
            };
        }
        if key != ApiKey::SaslHandshake as i16 {
            return (
                protocol_failure(format!(
                    "Unexpected Kafka request of type {} during SASL handshake.",
                    api_name(key)
                )),
                State::Failed,
            );
        }
        let request = match decode_sasl(frame.clone()) {
            Ok(r) => r,
            Err(e) => {
                return (
                    protocol_failure(format!("bad SaslHandshake: {e}")),
                    State::Failed,
                )
            }
        };
        let SaslRequest::Handshake(handshake) = request.body else {
            return (
                protocol_failure("not a SaslHandshake".into()),
                State::Failed,
            );
        };
        let version = request.header.request_api_version;
        let correlation_id = request.header.correlation_id;
        let mechanism = handshake.mechanism.to_string();
        let enabled: Vec<StrBytes> = self
            .listener
            .enabled
            .iter()
            .map(|m| StrBytes::from_string(m.clone()))
            .collect();
        let Some(server) = self.listener.mechanism(&mechanism).cloned() else {
            let answer = SaslHandshakeResponse::default()
                .with_error_code(ResponseError::UnsupportedSaslMechanism.code())
                .with_mechanisms(enabled);
            return (
                Verdict::Fail {
                    answer: encode(ApiKey::SaslHandshake, version, correlation_id, &answer),
                    reason: format!(
                        "unsupported SASL mechanism {mechanism:?} (enabled: {})",
                        self.listener.enabled.join(", ")
                    ),
                    mechanism: Some(mechanism),
                },
                State::Failed,
            );
        };
        let bad_mechanism = previous
            .as_ref()
            .filter(|p| p.mechanism != mechanism)
            .map(|p| {
                format!(
                    "SASL mechanism '{mechanism}' requested by client is not supported for \
                     re-authentication of mechanism '{}'",
                    p.mechanism
                )
            });
        let answer = SaslHandshakeResponse::default()
            .with_error_code(0)
            .with_mechanisms(enabled);
        let Some(answer) = encode(ApiKey::SaslHandshake, version, correlation_id, &answer) else {
            return (
                protocol_failure("cannot encode SaslHandshake".into()),
                State::Failed,
            );
        };
        let exchange = server.start(&self.listener.context);
        (
            Verdict::Answer(answer),
            State::Authenticating {
                mechanism,
                exchange,
                legacy: version == 0,
                previous,
                bad_mechanism,
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn authenticate(
        &mut self,
        mechanism: String,
        mut exchange: Box<dyn ServerExchange>,
        legacy: bool,
        previous: Option<Session>,
        bad_mechanism: Option<String>,
        frame: &Bytes,
    ) -> (Verdict, State) {
        // The token, and how to answer it.
        let (token, answer_with): (Bytes, Option<(i16, i32)>) = if legacy {
            (frame.clone(), None)
        } else {
            let Some((key, _, _)) = header(frame) else {
                return (
                    protocol_failure("a frame too short for a request header".into()),
                    State::Failed,
                );
            };
            if key != ApiKey::SaslAuthenticate as i16 {
                return (
                    protocol_failure(format!(
                        "Unexpected Kafka request of type {} during SASL authentication.",
                        api_name(key)
                    )),
                    State::Failed,
                );
            }
            match decode_sasl(frame.clone()) {
                Ok(request) => match request.body {
                    SaslRequest::Authenticate(authenticate) => {
                        let version = request.header.request_api_version;
                        self.supports_reauth |= version > 0;
                        (
                            authenticate.auth_bytes,
                            Some((version, request.header.correlation_id)),
                        )
                    }
                    SaslRequest::Handshake(_) => {
                        return (
                            protocol_failure("a second SaslHandshake".into()),
                            State::Failed,
                        )
                    }
                },
                Err(e) => {
                    return (
                        protocol_failure(format!("bad SaslAuthenticate: {e}")),
                        State::Failed,
                    )
                }
            }
        };
        let failure_answer = |message: &str| {
            answer_with.and_then(|(version, correlation_id)| {
                encode(
                    ApiKey::SaslAuthenticate,
                    version,
                    correlation_id,
                    &SaslAuthenticateResponse::default()
                        .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                        .with_error_message(Some(StrBytes::from_string(message.to_string()))),
                )
            })
        };
        let reauthenticating = previous.is_some();
        let fail = |failure: Failure| {
            let failure = match reauthenticating {
                true => failure.during_reauthentication(),
                false => failure,
            };
            (
                Verdict::Fail {
                    answer: failure_answer(&failure.client_message),
                    reason: failure.reason,
                    mechanism: Some(mechanism.clone()),
                },
                State::Failed,
            )
        };
        if let Some(message) = bad_mechanism {
            return fail(Failure::new(message));
        }
        let step = match exchange.step(&token) {
            Ok(step) => step,
            Err(failure) => return fail(failure),
        };
        let answer = |token: Vec<u8>, lifetime_ms: i64| -> Option<Bytes> {
            match answer_with {
                None => Some(legacy_token(&token)),
                Some((version, correlation_id)) => encode(
                    ApiKey::SaslAuthenticate,
                    version,
                    correlation_id,
                    &SaslAuthenticateResponse::default()
                        .with_error_code(0)
                        .with_auth_bytes(Bytes::from(token))
                        .with_session_lifetime_ms(lifetime_ms),
                ),
            }
        };
        match step {
            Step::Challenge(challenge) => match answer(challenge, 0) {
                Some(bytes) => (
                    Verdict::Answer(bytes),
                    State::Authenticating {
                        mechanism,
                        exchange,
                        legacy,
                        previous,
                        bad_mechanism: None,
                    },
                ),
                None => (
                    protocol_failure("cannot encode SaslAuthenticate".into()),
                    State::Failed,
                ),
            },
            Step::Done {
                response,
                principal,
                expires_at_ms,
            } => {
                let principal = KafkaPrincipal::user(principal);
                if let Some(previous) = previous.as_ref().filter(|p| p.principal != principal) {
                    return fail(Failure::new(format!(
                        "Cannot change principals during re-authentication from {}: {}",
                        previous.principal, principal
                    )));
                }
                let now_ms = self.listener.context.clock.now_ms();
                // Kafka's ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs: the
                // shorter of connections.max.reauth.ms and the credential's remaining life.
                let max_reauth = self.listener.reauth_ms(&mechanism);
                let until_expiry = expires_at_ms.map(|at| (at - now_ms).max(0));
                let lifetime_ms = match (max_reauth > 0, until_expiry) {
                    (true, Some(left)) => left.min(max_reauth),
                    (true, None) => max_reauth,
                    (false, Some(left)) => left,
                    (false, None) => 0,
                };
                let Some(bytes) = answer(response, lifetime_ms) else {
                    return (
                        protocol_failure("cannot encode SaslAuthenticate".into()),
                        State::Failed,
                    );
                };
                let session = Session {
                    mechanism,
                    principal: principal.clone(),
                    expires_at_ms: (lifetime_ms > 0 || until_expiry.is_some())
                        .then_some(now_ms + lifetime_ms),
                };
                (
                    Verdict::Authenticated {
                        answer: bytes,
                        principal,
                    },
                    State::Authenticated(session),
                )
            }
        }
    }

    fn authenticated(&mut self, session: Session, frame: &Bytes) -> (Verdict, State) {
        let key = header(frame).map(|(key, _, _)| key);
        if key == Some(ApiKey::SaslHandshake as i16) {
            // KIP-368: re-authentication on the same connection.
            return self.handshake(
                State::Handshake {
                    previous: Some(session),
                },
                frame,
            );
        }
        if key == Some(ApiKey::SaslAuthenticate as i16) {
            // Kafka's KafkaApis.handleSaslAuthenticateRequest after authentication.
            return match illegal_state(
                frame,
                "SaslAuthenticate request received after successful authentication",
            ) {
                Some(answer) => (Verdict::Answer(answer), State::Authenticated(session)),
                None => (
                    protocol_failure("bad SaslAuthenticate".into()),
                    State::Failed,
                ),
            };
        }
        let now_ms = self.listener.context.clock.now_ms();
        if session.expires_at_ms.is_some_and(|at| now_ms >= at) {
            let how = match self.supports_reauth {
                true => "the client did not re-authenticate in time",
                false => "the client cannot re-authenticate (SaslAuthenticate v0)",
            };
            return (
                protocol_failure(format!(
                    "the SASL session of {} expired ({how})",
                    session.principal
                )),
                State::Failed,
            );
        }
        (Verdict::Pass, State::Authenticated(session))
    }
}

/// The answer to a SASL request on a connection that is not authenticating: Kafka's
/// `ILLEGAL_SASL_STATE` (its KafkaApis answers SaslHandshake and SaslAuthenticate so on a
/// listener without SASL, and SaslAuthenticate after authentication).
pub fn illegal_state(frame: &Bytes, message: &str) -> Option<Bytes> {
    let request = decode_sasl(frame.clone()).ok()?;
    let version = request.header.request_api_version;
    let correlation_id = request.header.correlation_id;
    match request.body {
        SaslRequest::Handshake(_) => encode(
            ApiKey::SaslHandshake,
            version,
            correlation_id,
            &SaslHandshakeResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code()),
        ),
        SaslRequest::Authenticate(_) => encode(
            ApiKey::SaslAuthenticate,
            version,
            correlation_id,
            &SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code())
                .with_error_message(Some(StrBytes::from_string(message.to_string()))),
        ),
    }
}

#[cfg(test)]
mod tests;
