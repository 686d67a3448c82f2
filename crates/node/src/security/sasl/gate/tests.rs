use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use keel_wire::client::{decode_response, encode_request};
use keel_wire::kafka_protocol::messages::{
    ApiVersionsRequest, MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};

use super::*;
use crate::security::sasl::plain::PLAIN_LOGIN_MODULE;
use crate::security::sasl::{ExchangeContext, NoCredentials};

/// A clock the test moves.
#[derive(Debug, Default)]
struct TestClock(AtomicI64);

impl crate::clock::Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    fn new_uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_u128(1)
    }
}

fn listener(extra: &[(&str, &str)]) -> (Arc<SaslListener>, Arc<TestClock>) {
    let jaas = format!(
        "{PLAIN_LOGIN_MODULE} required user_alice=\"alice-secret\" user_bob=\"bob-secret\";"
    );
    let mut props: BTreeMap<String, String> = [
        (
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
            "PLAIN",
        ),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            jaas.as_str(),
        ),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    props.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let clock = Arc::new(TestClock::default());
    let context = ExchangeContext {
        credentials: Arc::new(NoCredentials),
        clock: clock.clone(),
    };
    (
        Arc::new(SaslListener::new(&props, "SASL_PLAINTEXT", context).unwrap()),
        clock,
    )
}

/// A request frame without its size prefix.
fn frame<T: keel_wire::kafka_protocol::protocol::Encodable>(
    key: ApiKey,
    version: i16,
    body: &T,
) -> Bytes {
    encode_request(key, version, 7, "test", body)
        .unwrap()
        .slice(4..)
}

fn handshake(mechanism: &str, version: i16) -> Bytes {
    frame(
        ApiKey::SaslHandshake,
        version,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
    )
}

fn authenticate(token: &[u8], version: i16) -> Bytes {
    frame(
        ApiKey::SaslAuthenticate,
        version,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
    )
}

fn metadata() -> Bytes {
    frame(ApiKey::Metadata, 12, &MetadataRequest::default())
}

fn decode<T: keel_wire::kafka_protocol::protocol::Decodable>(
    key: ApiKey,
    version: i16,
    bytes: &Bytes,
) -> T {
    decode_response(key, version, 7, bytes.slice(4..)).unwrap()
}

// Shows: the happy path as Kafka's clients drive it — ApiVersions passes to the listener,
// SaslHandshake v1 lists the enabled mechanisms, SaslAuthenticate with the right password
// authenticates as the user; from then on requests pass, and before that the frame limit is
// sasl.server.max.receive.size.
#[test]
fn authenticates_with_plain() {
    let (listener, _) = listener(&[]);
    let mut gate = SaslGate::new(listener);
    assert_eq!(gate.frame_limit(100 << 20), 524_288);
    assert!(matches!(
        gate.on_frame(&frame(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default()
        )),
        Verdict::Pass
    ));
    let Verdict::Answer(answer) = gate.on_frame(&handshake("PLAIN", 1)) else {
        panic!("handshake not answered");
    };
    let answer: SaslHandshakeResponse = decode(ApiKey::SaslHandshake, 1, &answer);
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.mechanisms, vec![StrBytes::from_static_str("PLAIN")]);
    let Verdict::Authenticated { answer, principal } =
        gate.on_frame(&authenticate(b"\0alice\0alice-secret", 2))
    else {
        panic!("not authenticated");
    };
    assert_eq!(principal, KafkaPrincipal::user("alice"));
    let answer: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 2, &answer);
    assert_eq!((answer.error_code, answer.session_lifetime_ms), (0, 0));
    assert!(gate.is_authenticated());
    assert_eq!(gate.frame_limit(100 << 20), 100 << 20);
    assert!(matches!(gate.on_frame(&metadata()), Verdict::Pass));
    // SaslAuthenticate after authentication: ILLEGAL_SASL_STATE, the connection stays.
    let Verdict::Answer(again) = gate.on_frame(&authenticate(b"x", 2)) else {
        panic!("second SaslAuthenticate not answered");
    };
    let again: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 2, &again);
    assert_eq!(again.error_code, ResponseError::IllegalSaslState.code());
    assert!(gate.is_authenticated());
}

// Shows: the refusals, each closing the connection — a request other than ApiVersions or
// SaslHandshake first (Kafka's message), a second ApiVersions, an unknown mechanism
// (UNSUPPORTED_SASL_MECHANISM with the enabled list), a wrong password (SASL_AUTHENTICATION_FAILED
// with Kafka's message, which does not say whether the user exists), another request where
// SaslAuthenticate was due.
#[test]
fn refusals_close_the_connection() {
    let fail_reason = |verdict: Verdict| match verdict {
        Verdict::Fail { reason, .. } => reason,
        other => panic!("not a failure: {other:?}"),
    };
    let (l, _) = listener(&[]);
    let reason = fail_reason(SaslGate::new(l.clone()).on_frame(&metadata()));
    assert_eq!(
        reason,
        "Unexpected Kafka request of type Metadata during SASL handshake."
    );

    let mut twice = SaslGate::new(l.clone());
    let versions = frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert!(matches!(twice.on_frame(&versions), Verdict::Pass));
    assert!(fail_reason(twice.on_frame(&versions)).contains("ApiVersions"));

    let Verdict::Fail {
        answer: Some(answer),
        mechanism,
        ..
    } = SaslGate::new(l.clone()).on_frame(&handshake("SCRAM-SHA-512", 1))
    else {
        panic!("unknown mechanism accepted");
    };
    assert_eq!(mechanism.as_deref(), Some("SCRAM-SHA-512"));
    let answer: SaslHandshakeResponse = decode(ApiKey::SaslHandshake, 1, &answer);
    assert_eq!(
        answer.error_code,
        ResponseError::UnsupportedSaslMechanism.code()
    );
    assert_eq!(answer.mechanisms, vec![StrBytes::from_static_str("PLAIN")]);

    for token in [
        b"\0alice\0wrong".as_slice(),
        b"\0nobody\0alice-secret".as_slice(),
    ] {
        let mut gate = SaslGate::new(l.clone());
        assert!(matches!(
            gate.on_frame(&handshake("PLAIN", 1)),
            Verdict::Answer(_)
        ));
        let Verdict::Fail {
            answer: Some(answer),
            reason,
            ..
        } = gate.on_frame(&authenticate(token, 1))
        else {
            panic!("wrong credentials accepted");
        };
        let answer: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 1, &answer);
        assert_eq!(
            answer.error_code,
            ResponseError::SaslAuthenticationFailed.code()
        );
        assert_eq!(
            answer.error_message.as_deref(),
            Some("Authentication failed: Invalid username or password")
        );
        assert!(!reason.contains("wrong"), "{reason}");
        assert!(matches!(gate.on_frame(&metadata()), Verdict::Fail { .. }));
    }

    let mut gate = SaslGate::new(l);
    assert!(matches!(
        gate.on_frame(&handshake("PLAIN", 1)),
        Verdict::Answer(_)
    ));
    assert!(fail_reason(gate.on_frame(&metadata())).contains("during SASL authentication"));
}

// Shows: KIP-152's legacy framing — after SaslHandshake v0 the token comes raw and the answer
// is a raw size-prefixed token (empty for PLAIN).
#[test]
fn legacy_handshake_v0_exchanges_raw_tokens() {
    let (l, _) = listener(&[]);
    let mut gate = SaslGate::new(l);
    assert!(matches!(
        gate.on_frame(&handshake("PLAIN", 0)),
        Verdict::Answer(_)
    ));
    let Verdict::Authenticated { answer, principal } =
        gate.on_frame(&Bytes::from_static(b"\0bob\0bob-secret"))
    else {
        panic!("legacy token not accepted");
    };
    assert_eq!(principal, KafkaPrincipal::user("bob"));
    assert_eq!(&answer[..], &[0, 0, 0, 0]);
}

// Shows: KIP-368 — with connections.max.reauth.ms the session lifetime is announced; the client
// re-authenticates on the same connection before it ends (same mechanism, same principal), a
// request after it ended closes the connection, and re-authenticating as someone else is
// refused.
#[test]
fn sessions_expire_and_are_renewed_in_band() {
    let (l, clock) = listener(&[(
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms",
        "60000",
    )]);
    let mut gate = SaslGate::new(l.clone());
    gate.on_frame(&handshake("PLAIN", 1));
    let Verdict::Authenticated { answer, .. } =
        gate.on_frame(&authenticate(b"\0alice\0alice-secret", 2))
    else {
        panic!("not authenticated");
    };
    let answer: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 2, &answer);
    assert_eq!(answer.session_lifetime_ms, 60_000);

    clock.0.store(50_000, Ordering::SeqCst);
    assert!(matches!(gate.on_frame(&metadata()), Verdict::Pass));
    assert!(matches!(
        gate.on_frame(&handshake("PLAIN", 1)),
        Verdict::Answer(_)
    ));
    assert!(matches!(
        gate.on_frame(&authenticate(b"\0alice\0alice-secret", 2)),
        Verdict::Authenticated { .. }
    ));
    clock.0.store(100_000, Ordering::SeqCst);
    assert!(matches!(gate.on_frame(&metadata()), Verdict::Pass));
    clock.0.store(110_000, Ordering::SeqCst);
    match gate.on_frame(&metadata()) {
        Verdict::Fail { reason, .. } => assert!(reason.contains("expired"), "{reason}"),
        other => panic!("an expired session served: {other:?}"),
    }

    let mut other = SaslGate::new(l);
    other.on_frame(&handshake("PLAIN", 1));
    other.on_frame(&authenticate(b"\0alice\0alice-secret", 2));
    other.on_frame(&handshake("PLAIN", 1));
    let Verdict::Fail {
        answer: Some(answer),
        ..
    } = other.on_frame(&authenticate(b"\0bob\0bob-secret", 2))
    else {
        panic!("a re-authentication changed the principal");
    };
    let answer: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 2, &answer);
    assert!(answer
        .error_message
        .as_deref()
        .unwrap_or_default()
        .contains("Cannot change principals"));
}

// Shows: on a listener without SASL, SaslHandshake and SaslAuthenticate are answered with
// ILLEGAL_SASL_STATE, as Kafka's KafkaApis does.
#[test]
fn sasl_requests_without_sasl_are_illegal_state() {
    let answer = illegal_state(&handshake("PLAIN", 1), "x").unwrap();
    let answer: SaslHandshakeResponse = decode(ApiKey::SaslHandshake, 1, &answer);
    assert_eq!(answer.error_code, ResponseError::IllegalSaslState.code());
    let answer = illegal_state(&authenticate(b"t", 1), "why").unwrap();
    let answer: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 1, &answer);
    assert_eq!(answer.error_message.as_deref(), Some("why"));
}

// Shows: a listener that enables no mechanism, GSSAPI or an unknown one is refused naming the
// key, as is a PLAIN listener without users.
#[test]
fn listener_settings_are_checked() {
    let context = || ExchangeContext {
        credentials: Arc::new(NoCredentials),
        clock: Arc::new(TestClock::default()),
    };
    let props = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let err = SaslListener::new(&props(&[]), "SASL_SSL", context()).unwrap_err();
    assert!(err.reason.contains("GSSAPI"), "{err}");
    let err = SaslListener::new(
        &props(&[("sasl.enabled.mechanisms", "GSSAPI")]),
        "SASL_SSL",
        context(),
    )
    .unwrap_err();
    assert!(err.reason.contains("Kerberos"), "{err}");
    let err = SaslListener::new(
        &props(&[("sasl.enabled.mechanisms", "MAGIC")]),
        "SASL_SSL",
        context(),
    )
    .unwrap_err();
    assert!(err.reason.contains("MAGIC"), "{err}");
    let err = SaslListener::new(
        &props(&[("sasl.enabled.mechanisms", "PLAIN")]),
        "SASL_SSL",
        context(),
    )
    .unwrap_err();
    assert!(err.reason.contains("user_"), "{err}");
}

/// A SCRAM-SHA-256 listener whose only user is alice (password "alice-secret").
fn scram_listener() -> Arc<SaslListener> {
    #[derive(Debug)]
    struct Alice(crate::security::sasl::ScramCredential);
    impl crate::security::sasl::Credentials for Alice {
        fn scram(
            &self,
            user: &str,
            mechanism: &str,
        ) -> Option<crate::security::sasl::ScramCredential> {
            (user == "alice" && mechanism == "SCRAM-SHA-256").then(|| self.0.clone())
        }
    }
    let data = crate::security::sasl::scram::credential_of_password(
        keel_controller::scram::ScramMechanism::Sha256,
        "alice-secret",
        b"salt",
        4096,
    );
    let props: BTreeMap<String, String> = [(
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms".to_string(),
        "SCRAM-SHA-256".to_string(),
    )]
    .into_iter()
    .collect();
    let context = ExchangeContext {
        credentials: Arc::new(Alice((&data).into())),
        clock: Arc::new(TestClock::default()),
    };
    Arc::new(SaslListener::new(&props, "SASL_PLAINTEXT", context).unwrap())
}

/// Runs Keel's SCRAM client through the gate; the gate's last verdict.
fn scram_through(gate: &mut SaslGate, password: &str) -> Verdict {
    use crate::security::sasl::scram::ScramClient;
    use crate::security::sasl::ClientMechanism;
    let client = ScramClient::new(
        keel_controller::scram::ScramMechanism::Sha256,
        "alice",
        password,
    );
    let mut exchange = client.start();
    assert!(matches!(
        gate.on_frame(&handshake("SCRAM-SHA-256", 1)),
        Verdict::Answer(_)
    ));
    let Verdict::Answer(first) = gate.on_frame(&authenticate(&exchange.initial().unwrap(), 2))
    else {
        panic!("no server-first message");
    };
    let first: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 2, &first);
    let last = exchange.step(&first.auth_bytes).unwrap().unwrap();
    gate.on_frame(&authenticate(&last, 2))
}

// Shows: SCRAM through the per-connection gate — two SaslAuthenticate round trips, the server's
// signature verified by Keel's client — and a failed re-authentication (KIP-368) answered with
// Kafka's generic message naming the re-authentication
// (ReauthInfo.authenticationOrReauthenticationText).
#[test]
fn scram_through_the_gate_and_failed_reauthentication() {
    let mut gate = SaslGate::new(scram_listener());
    let Verdict::Authenticated { principal, .. } = scram_through(&mut gate, "alice-secret") else {
        panic!("alice not authenticated");
    };
    assert_eq!(principal, KafkaPrincipal::user("alice"));
    let Verdict::Fail {
        answer: Some(answer),
        mechanism,
        ..
    } = scram_through(&mut gate, "wrong")
    else {
        panic!("a wrong password re-authenticated");
    };
    assert_eq!(mechanism.as_deref(), Some("SCRAM-SHA-256"));
    let answer: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 2, &answer);
    assert_eq!(
        answer.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    assert_eq!(
        answer.error_message.as_deref(),
        Some("Authentication failed during re-authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")
    );
    let mut fresh = SaslGate::new(scram_listener());
    let Verdict::Fail {
        answer: Some(answer),
        ..
    } = scram_through(&mut fresh, "wrong")
    else {
        panic!("a wrong password authenticated");
    };
    let answer: SaslAuthenticateResponse = decode(ApiKey::SaslAuthenticate, 2, &answer);
    assert_eq!(
        answer.error_message.as_deref(),
        Some("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")
    );
}
