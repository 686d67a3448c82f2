use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, KeyPair};
use serde_json::{json, Value};

use super::jwt::Algorithm;
use super::*;
use crate::security::sasl::gate::{SaslGate, Verdict};
use crate::security::sasl::{NoCredentials, SaslListener};

/// A clock the test sets (ms).
#[derive(Debug)]
struct TestClock(AtomicI64);

impl crate::clock::Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    fn new_uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_u128(1)
    }
}

/// 2026-01-01T00:00:00Z, where the tests' clock stands.
const NOW_MS: i64 = 1_767_225_600_000;
const NOW_S: i64 = NOW_MS / 1000;

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

enum Key {
    Rsa(sig::RsaKeyPair),
    Ec(sig::EcdsaKeyPair, &'static str),
    Ed(sig::Ed25519KeyPair),
}

/// A key that signs test tokens, and its JWK.
struct Signer {
    kid: String,
    key: Key,
}

impl Signer {
    fn rsa(kid: &str, which: char) -> Signer {
        let pem = match which {
            'a' => include_str!("testdata/rsa-a.pem"),
            _ => include_str!("testdata/rsa-b.pem"),
        };
        Signer {
            kid: kid.into(),
            key: Key::Rsa(sig::RsaKeyPair::from_pkcs8(&pem_der(pem)).unwrap()),
        }
    }

    fn ec(kid: &str, alg: &'static sig::EcdsaSigningAlgorithm, crv: &'static str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = sig::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        Signer {
            kid: kid.into(),
            key: Key::Ec(
                sig::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap(),
                crv,
            ),
        }
    }

    fn ed(kid: &str) -> Signer {
        let pkcs8 = sig::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Signer {
            kid: kid.into(),
            key: Key::Ed(sig::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()),
        }
    }

    fn jwk(&self) -> Value {
        match &self.key {
            Key::Rsa(pair) => {
                let public = sig::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
                json!({"kty": "RSA", "kid": self.kid, "use": "sig", "n": b64url(&public.n), "e": b64url(&public.e)})
            }
            Key::Ec(pair, crv) => {
                let point = pair.public_key().as_ref();
                let half = (point.len() - 1) / 2;
                json!({"kty": "EC", "kid": self.kid, "crv": crv,
                       "x": b64url(&point[1..1 + half]), "y": b64url(&point[1 + half..])})
            }
            Key::Ed(pair) => {
                json!({"kty": "OKP", "kid": self.kid, "crv": "Ed25519", "x": b64url(pair.public_key().as_ref())})
            }
        }
    }

    /// `header.payload.signature` with `header` as given.
    fn sign_with_header(&self, alg: Algorithm, header: Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match &self.key {
            Key::Rsa(pair) => {
                let padding: &dyn sig::RsaEncoding = match alg {
                    Algorithm::Rs256 => &sig::RSA_PKCS1_SHA256,
                    Algorithm::Rs384 => &sig::RSA_PKCS1_SHA384,
                    Algorithm::Rs512 => &sig::RSA_PKCS1_SHA512,
                    Algorithm::Ps256 => &sig::RSA_PSS_SHA256,
                    Algorithm::Ps384 => &sig::RSA_PSS_SHA384,
                    _ => &sig::RSA_PSS_SHA512,
                };
                let mut out = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, input.as_bytes(), &mut out)
                    .unwrap();
                out
            }
            Key::Ec(pair, _) => pair.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            Key::Ed(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64url(&signature))
    }

    fn sign(&self, alg: Algorithm, claims: &Value) -> String {
        self.sign_with_header(
            alg,
            json!({"alg": alg.name(), "kid": self.kid, "typ": "JWT"}),
            claims,
        )
    }
}

/// Claims valid at [`NOW_MS`] for an audience and issuer the tests expect.
fn claims() -> Value {
    json!({"sub": "alice", "iss": "https://idp.test", "aud": "keel", "iat": NOW_S - 10,
           "exp": NOW_S + 600, "scope": "produce consume"})
}

fn rules() -> ClaimRules {
    ClaimRules {
        clock_skew_seconds: 30,
        expected_audiences: vec!["keel".into()],
        expected_issuer: Some("https://idp.test".into()),
        sub_claim: "sub".into(),
        scope_claim: "scope".into(),
    }
}

fn write_jwks(path: &std::path::Path, keys: &[Value]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json!({ "keys": keys }).to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A JWKS file holding `keys`, and a resolver reading it every `refresh`.
fn resolver(
    keys: &[Value],
    refresh: Duration,
) -> (tempfile::TempDir, std::path::PathBuf, KeyResolver) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    write_jwks(&path, keys);
    let source = JwksSource::new(JwksLocation::File(path.clone()), None).unwrap();
    let resolver = KeyResolver::start(
        source,
        RefreshTiming {
            refresh,
            retry_backoff: Duration::from_millis(10),
            retry_backoff_max: Duration::from_millis(50),
        },
    )
    .unwrap();
    (dir, path, resolver)
}

fn context(now_ms: i64) -> (ExchangeContext, Arc<TestClock>) {
    let clock = Arc::new(TestClock(AtomicI64::new(now_ms)));
    (
        ExchangeContext {
            credentials: Arc::new(NoCredentials),
            clock: clock.clone(),
        },
        clock,
    )
}

/// Kafka's client first message for `token` (`OAuthBearerClientInitialResponse.toBytes`).
fn first_message(token: &str) -> Vec<u8> {
    format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
}

const GENERIC: &str =
    "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER";

/// Runs one exchange as a client does: the first message, and `^A` after an error challenge.
fn exchange(server: &OAuthBearerServer, now_ms: i64, message: &[u8]) -> Result<Step, Failure> {
    let (context, _) = context(now_ms);
    let mut exchange = server.start(&context);
    match exchange.step(message)? {
        Step::Challenge(challenge) => {
            assert_eq!(challenge, INVALID_TOKEN_JSON.as_bytes());
            let failure = exchange.step(b"\x01").unwrap_err();
            assert_eq!(failure.client_message, INVALID_TOKEN_JSON);
            Err(failure)
        }
        done => Ok(done),
    }
}

// Shows: a token signed with each supported algorithm (RFC 7518 RS/PS/ES, RFC 8037 EdDSA) by a
// key of the JWKS authenticates its subject until its exp (KIP-255; the lifetime the gate turns
// into KIP-368's session lifetime).
#[test]
fn signed_tokens_of_every_algorithm_authenticate() {
    let rsa = Signer::rsa("rsa", 'a');
    let p256 = Signer::ec("p256", &sig::ECDSA_P256_SHA256_FIXED_SIGNING, "P-256");
    let p384 = Signer::ec("p384", &sig::ECDSA_P384_SHA384_FIXED_SIGNING, "P-384");
    let ed = Signer::ed("ed");
    let (_dir, _path, keys) = resolver(
        &[rsa.jwk(), p256.jwk(), p384.jwk(), ed.jwk()],
        Duration::from_secs(3600),
    );
    let server = OAuthBearerServer::new(keys, rules());
    let cases = [
        (&rsa, Algorithm::Rs256),
        (&rsa, Algorithm::Rs384),
        (&rsa, Algorithm::Rs512),
        (&rsa, Algorithm::Ps256),
        (&rsa, Algorithm::Ps384),
        (&rsa, Algorithm::Ps512),
        (&p256, Algorithm::Es256),
        (&p384, Algorithm::Es384),
        (&ed, Algorithm::EdDsa),
    ];
    for (signer, alg) in cases {
        let token = signer.sign(alg, &claims());
        assert_eq!(
            exchange(&server, NOW_MS, &first_message(&token)),
            Ok(Step::Done {
                response: vec![],
                principal: "alice".into(),
                expires_at_ms: Some((NOW_S + 600) * 1000),
            }),
            "{}",
            alg.name()
        );
        // Debug output never shows the bearer token.
        let shown = format!("{:?}", jwt::parse(&token).unwrap());
        assert!(
            !shown.contains(token.rsplit('.').next().unwrap()),
            "{shown}"
        );
        assert!(!shown.contains(token.split('.').nth(1).unwrap()), "{shown}");
    }
}

// Shows: every token Kafka's secured validator refuses is answered with the
// {"status":"invalid_token"} challenge and then fails with that message (OAuthBearerSaslServer),
// the reason — never the token — going to the log; clock skew widens exp and nbf by 30 s.
#[test]
fn refused_tokens_get_kafkas_invalid_token_answer() {
    let a = Signer::rsa("a", 'a');
    let b_as_a = Signer::rsa("a", 'b');
    let unknown = Signer::rsa("zz", 'b');
    let (_dir, _path, keys) = resolver(&[a.jwk()], Duration::from_secs(3600));
    let server = OAuthBearerServer::new(keys, rules());
    let with = |changes: Value| {
        let mut c = claims();
        for (k, v) in changes.as_object().unwrap() {
            match v {
                Value::Null => {
                    c.as_object_mut().unwrap().remove(k);
                }
                v => {
                    c[k] = v.clone();
                }
            }
        }
        a.sign(Algorithm::Rs256, &c)
    };
    let header_token = |header: Value| a.sign_with_header(Algorithm::Rs256, header, &claims());
    let valid = with(json!({}));
    let (head, rest) = valid.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let tampered = format!(
        "{head}.{}.{signature}",
        b64url(
            json!({"sub": "mallory", "iss": "https://idp.test", "aud": "keel", "iat": NOW_S, "exp": NOW_S + 600})
                .to_string()
                .as_bytes()
        )
    );
    let unsigned = format!(
        "{}.{}.",
        b64url(br#"{"alg":"none"}"#),
        b64url(claims().to_string().as_bytes())
    );
    let none_signed = format!(
        "{}.{}.{signature}",
        b64url(br#"{"alg":"none","kid":"a"}"#),
        b64url(claims().to_string().as_bytes())
    );
    let cases: Vec<(&str, String, &str)> = vec![
        ("expired", with(json!({"exp": NOW_S - 31})), "expired"),
        (
            "not yet valid",
            with(json!({"nbf": NOW_S + 31})),
            "not yet valid",
        ),
        (
            "wrong audience",
            with(json!({"aud": ["other", "x"]})),
            "aud claim",
        ),
        ("no audience", with(json!({"aud": null})), "no aud claim"),
        (
            "wrong issuer",
            with(json!({"iss": "https://evil.test"})),
            "iss claim",
        ),
        ("no issuer", with(json!({"iss": null})), "no iss claim"),
        ("no exp", with(json!({"exp": null})), "no exp claim"),
        ("no iat", with(json!({"iat": null})), "no iat claim"),
        (
            "no subject",
            with(json!({"sub": null})),
            "sub value must be non-null",
        ),
        (
            "blank subject",
            with(json!({"sub": "  "})),
            "only whitespace",
        ),
        (
            "subject not a string",
            with(json!({"sub": 7})),
            "'sub' claim",
        ),
        (
            "duplicate scopes",
            with(json!({"scope": ["a", "a"]})),
            "duplicates",
        ),
        (
            "exp not a number",
            with(json!({"exp": "soon"})),
            "not a number",
        ),
        (
            "bad signature",
            b_as_a.sign(Algorithm::Rs256, &claims()),
            "does not verify",
        ),
        ("tampered claims", tampered, "does not verify"),
        (
            "unknown kid",
            unknown.sign(Algorithm::Rs256, &claims()),
            "no key of the JWKS has kid \"zz\"",
        ),
        (
            "alg none unsigned",
            unsigned,
            "signature section is missing",
        ),
        ("alg none", none_signed, "alg none"),
        (
            "alg HS256",
            header_token(json!({"alg": "HS256", "kid": "a"})),
            "not supported",
        ),
        (
            "alg ES512",
            header_token(json!({"alg": "ES512", "kid": "a"})),
            "not supported",
        ),
        (
            "critical extension",
            header_token(json!({"alg": "RS256", "kid": "a", "crit": ["exp"]})),
            "crit",
        ),
        (
            "key for another alg",
            a.sign_with_header(
                Algorithm::Es256,
                json!({"alg": "ES256", "kid": "a"}),
                &claims(),
            ),
            "no key of the JWKS",
        ),
        ("two sections", "abc.def".into(), "but 2 provided"),
        (
            "empty section",
            "abc..def".into(),
            "payload section is missing",
        ),
        (
            "header not JSON",
            format!("{}.e30.c2ln", b64url(b"nope")),
            "header is not a JSON",
        ),
        ("oversized", "a".repeat(jwt::TOKEN_MAX_BYTES + 1), "at most"),
    ];
    for (name, token, reason) in cases {
        let failure = exchange(&server, NOW_MS, &first_message(&token)).unwrap_err();
        assert!(
            failure.reason.contains(reason),
            "{name}: {}",
            failure.reason
        );
        assert!(
            !failure.reason.contains(&token),
            "{name}: the token is logged"
        );
    }
    // Within the skew: exp 29 s ago and nbf 29 s ahead still pass; a token with an audience
    // is refused when no audience is expected (jose4j's AudValidator).
    for token in [
        with(json!({"exp": NOW_S - 29})),
        with(json!({"nbf": NOW_S + 29})),
    ] {
        assert!(exchange(&server, NOW_MS, &first_message(&token)).is_ok());
    }
    let (_dir2, _path2, keys) = resolver(&[a.jwk()], Duration::from_secs(3600));
    let no_audience = OAuthBearerServer::new(
        keys,
        ClaimRules {
            expected_audiences: vec![],
            expected_issuer: None,
            ..rules()
        },
    );
    let failure = exchange(&no_audience, NOW_MS, &first_message(&valid)).unwrap_err();
    assert!(
        failure.reason.contains("expected.audience is not set"),
        "{}",
        failure.reason
    );
    let without_aud = with(json!({"aud": null, "iss": null}));
    assert!(exchange(&no_audience, NOW_MS, &first_message(&without_aud)).is_ok());
}

// Shows: the client's first message is read as Kafka's OAuthBearerClientInitialResponse
// (RFC 7628 §3.1): an authorization id, extensions (auth reserved, the others accepted), several
// spaces and padding in the auth value; malformed ones fail at once with Kafka's generic message.
#[test]
fn first_messages_are_framed_as_kafka_reads_them() {
    let parsed = InitialResponse::parse(
        b"n,a=alice,\x01auth=Bearer  abc.def-_~+/=\x01traceId=42 x\x01logicalCluster=lkc-1\x01\x01",
    )
    .unwrap();
    assert_eq!(parsed.authorization_id, "alice");
    assert_eq!(parsed.token, "abc.def-_~+/=");
    assert_eq!(
        parsed.extensions,
        [("logicalCluster", "lkc-1"), ("traceId", "42 x")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into()
    );
    assert!(!format!("{parsed:?}").contains("abc.def"));
    assert_eq!(
        InitialResponse::parse(b"n,,\x01auth=bearer t\x01\x01")
            .unwrap()
            .token,
        "t"
    );
    assert_eq!(
        InitialResponse::parse(b"n,a=a=2Cb=3D,\x01auth=Bearer t\x01\x01")
            .unwrap()
            .authorization_id,
        "a=2Cb=3D"
    );
    let bad: &[(&[u8], &str)] = &[
        (b"", "first message"),
        (b"y,,\x01auth=Bearer t\x01\x01", "first message"),
        (b"n,\x01auth=Bearer t\x01\x01", "first message"),
        (b"n,,auth=Bearer t\x01\x01", "first message"),
        (b"n,,\x01auth=Bearer t\x01", "first message"),
        (b"n,,\x01auth=Bearer t", "first message"),
        (b"n,a=,\x01auth=Bearer t\x01\x01", "first message"),
        (b"n,a=a=b,\x01auth=Bearer t\x01\x01", "first message"),
        (b"n,,\x01auth=Bearer t\x01k1=v\x01\x01", "first message"),
        (b"n,,\x01auth=Bearer t\x01k=\x01\x01", "first message"),
        (b"n,,\x01auth=Bearer t\x01novalue\x01\x01", "first message"),
        (b"n,,\x01auth=Bearer \xff\x01\x01", "first message"),
        (b"n,,\x01\x01", "'auth' not specified"),
        (b"n,,\x01other=x\x01\x01", "'auth' not specified"),
        (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer a=b\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer t t\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Basic dXNlcg==\x01\x01", "Invalid scheme"),
    ];
    let (_dir, _path, keys) = resolver(&[Signer::rsa("a", 'a').jwk()], Duration::from_secs(3600));
    let server = OAuthBearerServer::new(keys, rules());
    for (message, reason) in bad {
        let failure = exchange(&server, NOW_MS, message).unwrap_err();
        assert_eq!(failure.client_message, GENERIC, "{message:?}");
        assert!(
            failure.reason.contains(reason),
            "{message:?}: {}",
            failure.reason
        );
    }
    // A ^A that answers no error challenge is a malformed first message too.
    let failure = exchange(&server, NOW_MS, b"\x01").unwrap_err();
    assert_eq!(failure.client_message, GENERIC);
}

// Shows: an authorization id must be the token's subject (OAuthBearerSaslServer.process), and
// after an error challenge a client may send a new first message instead of ^A.
#[test]
fn authorization_id_must_be_the_subject() {
    let a = Signer::rsa("a", 'a');
    let (_dir, _path, keys) = resolver(&[a.jwk()], Duration::from_secs(3600));
    let server = OAuthBearerServer::new(keys, rules());
    let token = a.sign(Algorithm::Rs256, &claims());
    let message = format!("n,a=bob,\u{1}auth=Bearer {token}\u{1}\u{1}");
    let failure = exchange(&server, NOW_MS, message.as_bytes()).unwrap_err();
    assert_eq!(
        failure.client_message,
        "Authentication failed: Client requested an authorization id (bob) that is different \
         from the token's principal name (alice)"
    );
    let message = format!("n,a=alice,\u{1}auth=Bearer {token}\u{1}\u{1}");
    assert!(exchange(&server, NOW_MS, message.as_bytes()).is_ok());

    let (context, _) = context(NOW_MS);
    let mut retry = server.start(&context);
    let expired = a.sign(
        Algorithm::Rs256,
        &json!({"sub": "alice", "iss": "https://idp.test", "aud": "keel", "iat": 1, "exp": 2}),
    );
    assert!(matches!(
        retry.step(&first_message(&expired)),
        Ok(Step::Challenge(_))
    ));
    assert!(matches!(
        retry.step(&first_message(&token)),
        Ok(Step::Done { .. })
    ));
}

/// A SASL listener with OAUTHBEARER over a JWKS file, and its clock.
fn oauth_listener(
    jwks: &std::path::Path,
    extra: &[(&str, &str)],
) -> (Arc<SaslListener>, Arc<TestClock>) {
    let url = format!("file://{}", jwks.display());
    let mut props: BTreeMap<String, String> = [
        (
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
            "OAUTHBEARER",
        ),
        (
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class",
            VALIDATOR_CALLBACK_HANDLER,
        ),
        (
            "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url",
            url.as_str(),
        ),
        ("sasl.oauthbearer.expected.audience", "other, keel"),
        ("sasl.oauthbearer.expected.issuer", "https://idp.test"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    props.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let (context, clock) = context(NOW_MS);
    (
        Arc::new(SaslListener::new(&props, "SASL_PLAINTEXT", context).unwrap()),
        clock,
    )
}

fn request<T: keel_wire::kafka_protocol::protocol::Encodable>(
    key: keel_wire::kafka_protocol::messages::ApiKey,
    version: i16,
    body: &T,
) -> bytes::Bytes {
    keel_wire::client::encode_request(key, version, 7, "test", body)
        .unwrap()
        .slice(4..)
}

fn handshake() -> bytes::Bytes {
    use keel_wire::kafka_protocol::messages::{ApiKey, SaslHandshakeRequest};
    request(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism("OAUTHBEARER".into()),
    )
}

fn authenticate(token: &[u8]) -> bytes::Bytes {
    use keel_wire::kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest};
    request(
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::copy_from_slice(token)),
    )
}

fn authenticate_answer(
    bytes: &bytes::Bytes,
) -> keel_wire::kafka_protocol::messages::SaslAuthenticateResponse {
    use keel_wire::kafka_protocol::messages::ApiKey;
    keel_wire::client::decode_response(ApiKey::SaslAuthenticate, 2, 7, bytes.slice(4..)).unwrap()
}

// Shows: through the connection's gate, with connections.max.reauth.ms unset, the session
// lifetime told to the client is the token's remaining life (KIP-368, Kafka's
// ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs), a request after exp closes the
// connection, re-authentication with a fresh token of the same subject works, another subject is
// refused, and a malformed re-authentication gets the generic message for re-authentication.
#[test]
fn the_session_ends_at_the_tokens_exp() {
    let a = Signer::rsa("a", 'a');
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[a.jwk()]);
    let (listener, clock) = oauth_listener(&jwks, &[]);
    let mut gate = SaslGate::new(listener.clone());
    assert!(matches!(gate.on_frame(&handshake()), Verdict::Answer(_)));
    let token = a.sign(Algorithm::Rs256, &claims());
    let Verdict::Authenticated { answer, principal } =
        gate.on_frame(&authenticate(&first_message(&token)))
    else {
        panic!("not authenticated");
    };
    assert_eq!(principal.to_string(), "User:alice");
    assert_eq!(authenticate_answer(&answer).session_lifetime_ms, 600_000);

    // Re-authentication before exp with a later token of the same subject.
    clock.0.store(NOW_MS + 500_000, Ordering::SeqCst);
    assert!(matches!(gate.on_frame(&handshake()), Verdict::Answer(_)));
    let later = a.sign(Algorithm::Rs256, &json!({"sub": "alice", "iss": "https://idp.test", "aud": "keel", "iat": NOW_S + 490, "exp": NOW_S + 1200}));
    let Verdict::Authenticated { answer, .. } =
        gate.on_frame(&authenticate(&first_message(&later)))
    else {
        panic!("not re-authenticated");
    };
    assert_eq!(authenticate_answer(&answer).session_lifetime_ms, 700_000);
    // A request after the new exp closes the connection.
    clock.0.store((NOW_S + 1200) * 1000, Ordering::SeqCst);
    let metadata = request(
        keel_wire::kafka_protocol::messages::ApiKey::Metadata,
        12,
        &keel_wire::kafka_protocol::messages::MetadataRequest::default(),
    );
    assert!(matches!(gate.on_frame(&metadata), Verdict::Fail { .. }));

    // Another subject on re-authentication is refused.
    clock.0.store(NOW_MS, Ordering::SeqCst);
    let mut gate = SaslGate::new(listener.clone());
    gate.on_frame(&handshake());
    assert!(matches!(
        gate.on_frame(&authenticate(&first_message(&token))),
        Verdict::Authenticated { .. }
    ));
    gate.on_frame(&handshake());
    let bob = a.sign(Algorithm::Rs256, &json!({"sub": "bob", "iss": "https://idp.test", "aud": "keel", "iat": NOW_S, "exp": NOW_S + 60}));
    let Verdict::Fail {
        answer: Some(answer),
        ..
    } = gate.on_frame(&authenticate(&first_message(&bob)))
    else {
        panic!("a new principal was accepted");
    };
    assert_eq!(
        authenticate_answer(&answer).error_message.as_deref(),
        Some("Cannot change principals during re-authentication from User:alice: User:bob")
    );
    let mut gate = SaslGate::new(listener);
    gate.on_frame(&handshake());
    gate.on_frame(&authenticate(&first_message(&token)));
    gate.on_frame(&handshake());
    let Verdict::Fail {
        answer: Some(answer),
        mechanism,
        ..
    } = gate.on_frame(&authenticate(b"garbage"))
    else {
        panic!("garbage was accepted");
    };
    assert_eq!(mechanism.as_deref(), Some("OAUTHBEARER"));
    let answer = authenticate_answer(&answer);
    assert_eq!(answer.error_code, 58);
    assert_eq!(
        answer.error_message.as_deref(),
        Some("Authentication failed during re-authentication due to invalid credentials with SASL mechanism OAUTHBEARER")
    );
}

// Shows: through the gate, a refused token is the invalid_token challenge, then
// SASL_AUTHENTICATION_FAILED (58) with that JSON as the message, and the connection closes.
#[test]
fn the_gate_sends_kafkas_failure_flow() {
    let a = Signer::rsa("a", 'a');
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[a.jwk()]);
    let (listener, _clock) = oauth_listener(&jwks, &[]);
    let mut gate = SaslGate::new(listener);
    gate.on_frame(&handshake());
    let expired = a.sign(
        Algorithm::Rs256,
        &json!({"sub": "alice", "iss": "https://idp.test", "aud": "keel", "iat": 1, "exp": 2}),
    );
    let Verdict::Answer(challenge) = gate.on_frame(&authenticate(&first_message(&expired))) else {
        panic!("no challenge");
    };
    let challenge = authenticate_answer(&challenge);
    assert_eq!(challenge.error_code, 0);
    assert_eq!(&challenge.auth_bytes[..], INVALID_TOKEN_JSON.as_bytes());
    let Verdict::Fail {
        answer: Some(answer),
        reason,
        ..
    } = gate.on_frame(&authenticate(b"\x01"))
    else {
        panic!("no failure");
    };
    let answer = authenticate_answer(&answer);
    assert_eq!(answer.error_code, 58);
    assert_eq!(answer.error_message.as_deref(), Some(INVALID_TOKEN_JSON));
    assert!(reason.contains("expired"), "{reason}");
}

fn listener_error(props: &[(&str, &str)]) -> SaslConfigError {
    let props: BTreeMap<String, String> = [(
        "listener.name.sasl_ssl.sasl.enabled.mechanisms",
        "OAUTHBEARER",
    )]
    .iter()
    .chain(props.iter())
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    SaslListener::new(&props, "SASL_SSL", context(NOW_MS).0).unwrap_err()
}

// Shows: a listener enables OAUTHBEARER only with Kafka's secured validator and a usable JWKS;
// the unsecured validator (Kafka's default), other classes, a missing or unusable JWKS URL and
// out-of-range numbers are refused naming the key.
#[test]
fn listener_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    write_jwks(&jwks, &[Signer::rsa("a", 'a').jwk()]);
    let url = format!("file:{}", jwks.display());
    let handler = "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class";
    let jwks_key = "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url";
    let secured = (handler, VALIDATOR_CALLBACK_HANDLER);
    let with_url = (jwks_key, url.as_str());

    let err = listener_error(&[with_url]);
    assert_eq!(err.key, handler);
    assert!(err.reason.contains("unsecured"), "{err}");
    let err = listener_error(&[(handler, UNSECURED_VALIDATOR_CALLBACK_HANDLER), with_url]);
    assert!(err.reason.contains("unsigned tokens"), "{err}");
    let err = listener_error(&[(handler, "com.example.MyHandler"), with_url]);
    assert!(err.reason.contains("com.example.MyHandler"), "{err}");
    // Not read without the listener and mechanism prefix (SaslChannelBuilder).
    let err = listener_error(&[
        (
            "sasl.server.callback.handler.class",
            VALIDATOR_CALLBACK_HANDLER,
        ),
        with_url,
    ]);
    assert_eq!(err.key, handler);

    let err = listener_error(&[secured]);
    assert_eq!(err.key, jwks_key);
    let missing = format!("file://{}/missing.json", dir.path().display());
    let cases: Vec<(&str, String, &str)> = vec![
        (jwks_key, missing, "No such file"),
        (
            jwks_key,
            format!("file://{}", dir.path().display()),
            "not a file",
        ),
        (jwks_key, "ftp://idp/jwks".into(), "unsupported scheme"),
        (
            jwks_key,
            "file://otherhost/etc/jwks".into(),
            "must be local",
        ),
        (jwks_key, "https://".into(), "no host"),
        (
            "sasl.oauthbearer.clock.skew.seconds",
            "-1".into(),
            "seconds",
        ),
        (
            "sasl.oauthbearer.jwks.endpoint.refresh.ms",
            "0".into(),
            "ms",
        ),
        (
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
            "10".into(),
            "less than",
        ),
        (
            "sasl.oauthbearer.expected.issuer",
            "  ".into(),
            "whitespace",
        ),
        ("sasl.oauthbearer.sub.claim.name", "".into(), "empty"),
        (
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required;".into(),
            "OAuthBearerLoginModule",
        ),
    ];
    for (key, value, reason) in cases {
        let props: Vec<(&str, &str)> = match key == jwks_key {
            true => vec![secured, (key, value.as_str())],
            false => vec![secured, with_url, (key, value.as_str())],
        };
        let err = listener_error(&props);
        assert!(err.reason.contains(reason), "{key}={value}: {err}");
    }
    // A JWKS that is not one, or is too large, stops the start too.
    std::fs::write(&jwks, "{\"nokeys\": []}").unwrap();
    assert!(listener_error(&[secured, with_url])
        .reason
        .contains("no \"keys\" array"));
    let big = vec![b' '; jwks::JWKS_MAX_BYTES as usize + 1];
    std::fs::write(&jwks, big).unwrap();
    assert!(listener_error(&[secured, with_url])
        .reason
        .contains("larger than"));
}

// Shows: keys that cannot verify are left out of the set (jose4j's JsonWebKeySet): RSA under
// 2048 bits, P-521, symmetric keys, bad coordinates; more than 256 keys is refused.
#[test]
fn unusable_keys_are_ignored_and_sets_are_bounded() {
    let good = Signer::rsa("a", 'a').jwk();
    let small = json!({"kty": "RSA", "kid": "small", "n": b64url(&[0xc1; 128]), "e": "AQAB"});
    let p521 = json!({"kty": "EC", "kid": "p521", "crv": "P-521", "x": b64url(&[1; 66]), "y": b64url(&[1; 66])});
    let oct = json!({"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"});
    let short = json!({"kty": "EC", "kid": "short", "crv": "P-256", "x": b64url(&[1; 31]), "y": b64url(&[1; 32])});
    let text = json!({"keys": [good, small, p521, oct, short, "nope"]}).to_string();
    let set = jwt::parse_jwks(text.as_bytes()).unwrap();
    assert_eq!(set.keys.len(), 1);
    assert_eq!(set.ignored.len(), 5);
    assert!(set.ignored[0].contains("1024 bits"), "{:?}", set.ignored);
    let many: Vec<Value> = (0..=jwt::JWKS_MAX_KEYS)
        .map(|_| Signer::rsa("a", 'a').jwk())
        .collect();
    let text = json!({ "keys": many }).to_string();
    assert!(jwt::parse_jwks(text.as_bytes())
        .unwrap_err()
        .contains("at most 256"));
}

fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// Shows: a token whose kid the JWKS lacks fails but has the keys read again at once, so the
// identity provider's new key works for the next token (RefreshingHttpsJwks.maybeExpediteRefresh);
// the same unknown kid asks again only after a minute, ids over 1,000 characters never, and only
// 16 ids are remembered.
#[test]
fn an_unknown_kid_refreshes_the_keys_boundedly() {
    let a = Signer::rsa("a", 'a');
    let b = Signer::rsa("b", 'b');
    let (_dir, path, keys) = resolver(&[a.jwk()], Duration::from_secs(3600));
    let server = OAuthBearerServer::new(keys.clone(), rules());
    let token = b.sign(Algorithm::Rs256, &claims());
    write_jwks(&path, &[a.jwk(), b.jwk()]);
    let failure = exchange(&server, NOW_MS, &first_message(&token)).unwrap_err();
    assert!(failure.reason.contains("kid \"b\""), "{}", failure.reason);
    wait_for("key b", || keys.keys().iter().any(|k| k.kid() == Some("b")));
    assert!(exchange(&server, NOW_MS, &first_message(&token)).is_ok());

    assert!(keys.on_unknown_key(Some("c"), NOW_MS));
    assert!(!keys.on_unknown_key(Some("c"), NOW_MS + 59_999));
    assert!(keys.on_unknown_key(Some("c"), NOW_MS + 60_000));
    assert!(!keys.on_unknown_key(Some(&"k".repeat(1001)), NOW_MS));
    assert!(keys.on_unknown_key(None, NOW_MS));
    assert!(!keys.on_unknown_key(None, NOW_MS + 1));
    for i in 0..16 {
        assert!(keys.on_unknown_key(Some(&format!("id{i}")), NOW_MS + 60_000));
    }
    // "c" was the least recently asked and is forgotten: it may ask again.
    assert!(keys.on_unknown_key(Some("c"), NOW_MS + 60_001));
}

// Shows: the keys are read again every sasl.oauthbearer.jwks.endpoint.refresh.ms (a removed key
// stops verifying), and a refresh that fails keeps the keys in use.
#[test]
fn keys_refresh_on_schedule_and_survive_a_bad_refresh() {
    let a = Signer::rsa("a", 'a');
    let b = Signer::rsa("b", 'b');
    let (_dir, path, keys) = resolver(&[a.jwk(), b.jwk()], Duration::from_millis(50));
    let server = OAuthBearerServer::new(keys.clone(), rules());
    let token = a.sign(Algorithm::Rs256, &claims());
    assert!(exchange(&server, NOW_MS, &first_message(&token)).is_ok());
    write_jwks(&path, &[b.jwk()]);
    wait_for("key a removed", || keys.keys().len() == 1);
    assert!(exchange(&server, NOW_MS, &first_message(&token)).is_err());
    std::fs::write(&path, "not json").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(keys.keys().len(), 1);
    let token_b = b.sign(Algorithm::Rs256, &claims());
    assert!(exchange(&server, NOW_MS, &first_message(&token_b)).is_ok());
}

/// Serves `body` to `count` HTTP GETs on a loopback port; returns the port.
fn serve_http(body: String, count: usize) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let mut stream = stream.unwrap();
            let mut buf = [0u8; 4096];
            let mut seen = Vec::new();
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = std::io::Read::read(&mut stream, &mut buf).unwrap();
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

// Shows: an http:// JWKS endpoint is read with the HTTP client (a loopback server here), and
// one that does not answer JSON stops the listener's start.
#[test]
fn keys_come_from_an_http_endpoint() {
    let a = Signer::rsa("a", 'a');
    let port = serve_http(json!({"keys": [a.jwk()]}).to_string(), 1);
    let url = format!("http://127.0.0.1:{port}/jwks");
    let props: BTreeMap<String, String> = [
        (
            "listener.name.sasl_ssl.sasl.enabled.mechanisms",
            "OAUTHBEARER",
        ),
        (
            "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class",
            VALIDATOR_CALLBACK_HANDLER,
        ),
        ("sasl.oauthbearer.jwks.endpoint.url", url.as_str()),
        ("sasl.oauthbearer.expected.audience", "keel"),
        ("sasl.oauthbearer.expected.issuer", "https://idp.test"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let view = MechanismProps::new(&props, "sasl_ssl", OAUTHBEARER);
    let server = OAuthBearerServer::from_props(&view).unwrap();
    let token = a.sign(Algorithm::Rs256, &claims());
    assert!(exchange(&server, NOW_MS, &first_message(&token)).is_ok());

    let port = serve_http("<html>".into(), 1);
    let url = format!("http://127.0.0.1:{port}/jwks");
    let mut bad = props.clone();
    bad.insert("sasl.oauthbearer.jwks.endpoint.url".into(), url);
    bad.insert(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms".into(),
        "100".into(),
    );
    let view = MechanismProps::new(&bad, "sasl_ssl", OAUTHBEARER);
    let err = OAuthBearerServer::from_props(&view).unwrap_err();
    assert!(err.reason.contains("not a JSON document"), "{err}");
}

// Shows: Keel's own connections refuse OAUTHBEARER with a message saying why.
#[test]
fn keels_own_connections_refuse_oauthbearer() {
    let entries =
        crate::security::sasl::jaas::parse(&format!("{OAUTHBEARER_LOGIN_MODULE} required;"))
            .unwrap();
    let err = crate::security::sasl::client_mechanism(OAUTHBEARER, "sasl.jaas.config", &entries)
        .unwrap_err();
    assert!(err.reason.contains("fetches no tokens"), "{err}");
}
