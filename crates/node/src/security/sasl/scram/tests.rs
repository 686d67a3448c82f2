use std::collections::BTreeMap;

use super::*;
use crate::security::sasl::{ScramCredential, SCRAM_SHA_256, SCRAM_SHA_512};

/// Stored credentials for tests: (user, mechanism) → credential.
#[derive(Debug, Default)]
struct Users(BTreeMap<(String, String), ScramCredential>);

impl Users {
    fn with(
        mut self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
        iterations: i32,
    ) -> Self {
        let data = credential_of_password(mechanism, password, b"a-salt-of-the-user", iterations);
        self.0.insert(
            (user.to_string(), mechanism.name().to_string()),
            ScramCredential::from(&data),
        );
        self
    }
}

impl Credentials for Users {
    fn scram(&self, user: &str, mechanism: &str) -> Option<ScramCredential> {
        self.0
            .get(&(user.to_string(), mechanism.to_string()))
            .cloned()
    }
}

fn server(mechanism: ScramMechanism, users: Users, nonce: &str) -> ScramServerExchange {
    ScramServerExchange::new(mechanism, Arc::new(users), nonce.to_string())
}

fn client(
    mechanism: ScramMechanism,
    user: &str,
    password: &str,
    nonce: &str,
) -> ScramClientExchange {
    ScramClientExchange::new(mechanism, user, password, nonce.to_string())
}

fn generic(mechanism: ScramMechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        mechanism.name()
    )
}

/// Runs a whole exchange between a Keel client and a Keel server; the server's outcome.
fn exchange(
    mechanism: ScramMechanism,
    users: Users,
    user: &str,
    password: &str,
) -> Result<String, Failure> {
    let mut s = server(mechanism, users, "server-nonce");
    let mut c = client(mechanism, user, password, "client-nonce");
    let first = c.initial().unwrap();
    let Step::Challenge(server_first) = s.step(&first)? else {
        panic!("a challenge first")
    };
    let last = c.step(&server_first).unwrap().unwrap();
    match s.step(&last)? {
        Step::Done {
            response,
            principal,
            expires_at_ms,
        } => {
            assert_eq!(expires_at_ms, None);
            assert_eq!(
                c.step(&response),
                Ok(None),
                "the client verifies the server"
            );
            Ok(principal)
        }
        Step::Challenge(_) => panic!("done after the client-final message"),
    }
}

// Shows: RFC 7677 §3's example exchange, byte for byte, on the server side (user "user",
// password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations): the server-first message,
// the acceptance of the client's proof and the server signature v=6rriTRBi23WpRR/wtup+....
#[test]
fn rfc_7677_server() {
    let salt = base64("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    let data = credential_of_password(ScramMechanism::Sha256, "pencil", &salt, 4096);
    let mut users = Users::default();
    users.0.insert(
        ("user".into(), SCRAM_SHA_256.into()),
        ScramCredential::from(&data),
    );
    let mut s = server(
        ScramMechanism::Sha256,
        users,
        "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    );
    assert_eq!(
        s.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"),
        Ok(Step::Challenge(
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".to_vec()
        ))
    );
    assert_eq!(
        s.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
        Ok(Step::Done {
            response: b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec(),
            principal: "user".into(),
            expires_at_ms: None,
        })
    );
    assert!(s.step(b"more").is_err(), "nothing after completion");
}

// Shows: the same example on the client side: Keel's client with RFC 7677's nonce sends its
// client-first and client-final messages exactly, accepts the server's signature and refuses a
// forged one ("Invalid server signature in server final message", Kafka's ScramSaslClient).
#[test]
fn rfc_7677_client() {
    let run = |last: &[u8]| {
        let mut c = client(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(c.initial().unwrap(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let answer = c
            .step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap()
            .unwrap();
        assert_eq!(
            String::from_utf8(answer).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.step(last)
    };
    assert_eq!(
        run(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        Ok(None)
    );
    assert_eq!(
        run(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        Err("Invalid server signature in server final message".to_string())
    );
    assert_eq!(
        run(b"e=invalid-proof"),
        Err("Sasl authentication using SCRAM-SHA-256 failed with error: invalid-proof".to_string())
    );
}

// Shows: both mechanisms authenticate Keel's client against Keel's server with credentials
// made from the password; a wrong password and an unknown user fail with Kafka's one generic
// message, and both fail at the proof — the unknown user got a server-first message too, with
// a salt that looks like Kafka's tools' (base 36) and is the same on every attempt.
#[test]
fn both_mechanisms_and_what_failures_reveal() {
    for m in ScramMechanism::ALL {
        let users = || Users::default().with("alice", m, "alice-secret", 8192);
        assert_eq!(
            exchange(m, users(), "alice", "alice-secret"),
            Ok("alice".to_string())
        );
        let wrong = exchange(m, users(), "alice", "not-hers").unwrap_err();
        let unknown = exchange(m, users(), "mallory", "alice-secret").unwrap_err();
        assert_eq!(wrong.client_message, generic(m));
        assert_eq!(unknown.client_message, generic(m));
        assert!(!wrong.reason.contains("not-hers"), "{}", wrong.reason);
        let salt_of = |user: &str| {
            let mut s = server(m, users(), "n");
            let Ok(Step::Challenge(first)) = s.step(format!("n,,n={user},r=abc").as_bytes()) else {
                panic!("a server-first message for {user}")
            };
            parse_server_first(std::str::from_utf8(&first).unwrap()).unwrap()
        };
        let fake = salt_of("mallory");
        assert_eq!(fake, salt_of("mallory"), "the same made-up salt every time");
        assert_ne!(fake.salt, salt_of("trudy").salt);
        assert_eq!(fake.iterations, 4096);
        assert!(fake
            .salt
            .iter()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()));
    }
}

// Shows: Kafka's refusals of malformed or unsupported client messages, each with the generic
// message (the reason only in the log) — except a different authorization id, which Kafka
// answers with its own message; the saslname escapes (=2C, =3D) are decoded.
#[test]
fn client_first_refusals() {
    let m = ScramMechanism::Sha256;
    let users = || {
        Users::default()
            .with("a,b=c", m, "pw", 4096)
            .with("alice", m, "pw", 4096)
    };
    let first = |token: &[u8]| server(m, users(), "srv").step(token);
    for bad in [
        &b"p=tls-unique,,n=alice,r=abc"[..],
        b"x,,n=alice,r=abc",
        b"n,,m=ext,n=alice,r=abc",
        b"n,,n=,r=abc",
        b"n,,n=al=ce,r=abc",
        b"n,,n=alice,r=",
        b"n,,n=alice,r=a b",
        b"n,,n=alice",
        b"n,,n=alice,r=abc,tokenauth=true",
        b"n,,n=alice,r=abc,1=x",
        b"n,,r=abc,n=alice",
        b"n,a=,n=alice,r=abc",
        b"\xff\xfe",
        b"",
    ] {
        let failure = first(bad).unwrap_err();
        assert_eq!(
            failure.client_message,
            generic(m),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let other = first(b"n,a=bob,n=alice,r=abc").unwrap_err();
    assert_eq!(
        other.client_message,
        "Authentication failed: Client requested an authorization id that is different from username"
    );
    assert!(matches!(
        first(b"n,a=alice,n=alice,r=abc"),
        Ok(Step::Challenge(_))
    ));
    assert!(matches!(
        first(b"y,,n=alice,r=abc,ext=ignored"),
        Ok(Step::Challenge(_))
    ));
    assert!(matches!(
        first(b"n,,n=alice,r=abc,tokenauth=false"),
        Ok(Step::Challenge(_))
    ));
    // "a,b=c" travels as a=2Cb=3Dc and authenticates as itself.
    assert_eq!(escape_name("a,b=c"), "a=2Cb=3Dc");
    assert_eq!(unescape_name("a=2Cb=3Dc").as_deref(), Some("a,b=c"));
    assert_eq!(unescape_name("a=2"), None);
    assert_eq!(exchange(m, users(), "a,b=c", "pw"), Ok("a,b=c".to_string()));
}

// Shows: the client-final checks — the whole nonce (RFC 5802 §5.1; Kafka: "Invalid client
// nonce in the final client message."), the channel binding equal to the GS2 header, a proof
// of the hash's size — each failing with the generic message.
#[test]
fn client_final_refusals() {
    let m = ScramMechanism::Sha512;
    let users = || Users::default().with("alice", m, "pw", 4096);
    let honest = || {
        let mut s = server(m, users(), "SRV");
        let mut c = client(m, "alice", "pw", "CLI");
        let first = c.initial().unwrap();
        let Ok(Step::Challenge(server_first)) = s.step(&first) else {
            panic!()
        };
        let last = String::from_utf8(c.step(&server_first).unwrap().unwrap()).unwrap();
        (s, last)
    };
    let (mut s, last) = honest();
    assert!(matches!(s.step(last.as_bytes()), Ok(Step::Done { .. })));
    for tamper in [
        |l: &str| l.replace("r=CLISRV", "r=CLISRVX"),
        |l: &str| l.replace("r=CLISRV", "r=XCLISRV"),
        |l: &str| l.replace("c=biws", "c=eSws"),
        |l: &str| l.replace("c=biws", "c=!!"),
        |l: &str| format!("{},p=AAAA", l.rsplit_once(",p=").unwrap().0),
        |l: &str| l.replace(",p=", ",x=1,p=").replace(",x=1", ",1=1"),
        |l: &str| l.rsplit_once(",p=").unwrap().0.to_string(),
    ] {
        let (mut s, last) = honest();
        let tampered = tamper(&last);
        let failure = s.step(tampered.as_bytes()).unwrap_err();
        assert_eq!(failure.client_message, generic(m), "{tampered}");
    }
}

// Shows: a stored credential out of Kafka's bounds (fewer than 4096 iterations) is refused
// ("Iterations … is less than the minimum" in Kafka), and a delegation-token request too.
#[test]
fn unusable_credentials_are_refused() {
    let m = ScramMechanism::Sha256;
    let mut users = Users::default();
    let weak = credential_of_password(m, "pw", b"salt", 100);
    users.0.insert(
        ("weak".into(), SCRAM_SHA_256.into()),
        ScramCredential::from(&weak),
    );
    let failure = server(m, users, "s").step(b"n,,n=weak,r=abc").unwrap_err();
    assert_eq!(failure.client_message, generic(m));
    assert!(failure.reason.contains("unusable"), "{}", failure.reason);
}

// Shows: Keel's client refuses a server that does not extend its nonce or asks for iterations
// outside 4096..=16384 (a hostile server cannot make it hash for minutes).
#[test]
fn client_refuses_hostile_servers() {
    let m = ScramMechanism::Sha256;
    let try_first = |server_first: &str| {
        let mut c = client(m, "alice", "pw", "CLI");
        c.initial().unwrap();
        c.step(server_first.as_bytes())
    };
    assert!(try_first("r=CLISRV,s=c2FsdA==,i=4096").is_ok());
    for bad in [
        "r=OTHER,s=c2FsdA==,i=4096",
        "r=CLI,s=c2FsdA==,i=4096",
        "r=CLISRV,s=c2FsdA==,i=4095",
        "r=CLISRV,s=c2FsdA==,i=2147483647",
        "r=CLISRV,s=c2FsdA==,i=99999999999999",
        "r=CLISRV,s=,i=4096",
        "r=CLISRV,s=c2FsdA==",
        "m=x,r=CLISRV,s=c2FsdA==,i=4096",
        "e=other-error",
    ] {
        assert!(try_first(bad).is_err(), "{bad}");
    }
}

// Shows: the node's own identity comes from Kafka's ScramLoginModule line (username and
// password; tokenauth=true refused; another module refused); a server's JAAS line, if any, must
// name the SCRAM module; the factories build both mechanisms; Debug shows no password.
#[test]
fn jaas_and_factories() {
    let line = |options: &str| jaas_entries(&format!("{SCRAM_LOGIN_MODULE} required {options};"));
    let client = ScramClient::from_jaas(
        ScramMechanism::Sha512,
        "k",
        &line("username=\"b\" password=\"b-secret\""),
    )
    .unwrap();
    assert_eq!(client.name(), SCRAM_SHA_512);
    assert!(!format!("{client:?}").contains("b-secret"));
    assert!(ScramClient::from_jaas(ScramMechanism::Sha512, "k", &line("username=\"b\"")).is_err());
    assert!(ScramClient::from_jaas(
        ScramMechanism::Sha512,
        "k",
        &line("username=\"b\" password=\"p\" tokenauth=\"true\"")
    )
    .is_err());
    let plain = jaas_entries("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"b\" password=\"p\";");
    assert!(ScramClient::from_jaas(ScramMechanism::Sha256, "k", &plain).is_err());
    let built = crate::security::sasl::client_mechanism(
        SCRAM_SHA_256,
        "k",
        &line("username=\"b\" password=\"p\""),
    )
    .unwrap();
    assert_eq!(built.name(), SCRAM_SHA_256);

    let props: BTreeMap<String, String> = [
        (
            "listener.name.sasl_ssl.sasl.enabled.mechanisms".to_string(),
            "SCRAM-SHA-256,SCRAM-SHA-512".to_string(),
        ),
        (
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config".to_string(),
            format!("{SCRAM_LOGIN_MODULE} required username=\"admin\" password=\"admin-secret\";"),
        ),
    ]
    .into_iter()
    .collect();
    let context = ExchangeContext {
        credentials: Arc::new(crate::security::sasl::NoCredentials),
        clock: Arc::new(crate::clock::SystemClock),
    };
    let listener =
        crate::security::sasl::SaslListener::new(&props, "SASL_SSL", context.clone()).unwrap();
    assert_eq!(
        listener.mechanism(SCRAM_SHA_256).unwrap().name(),
        SCRAM_SHA_256
    );
    assert_eq!(
        listener.mechanism(SCRAM_SHA_512).unwrap().name(),
        SCRAM_SHA_512
    );
    let mut wrong = props.clone();
    wrong.insert(
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config".into(),
        "org.Other required a=\"b\";".into(),
    );
    assert!(crate::security::sasl::SaslListener::new(&wrong, "SASL_SSL", context).is_err());
}

fn jaas_entries(text: &str) -> Vec<JaasEntry> {
    crate::security::sasl::jaas::parse(text).unwrap()
}

// Shows: Kafka's random strings — a 130-bit number in base 36 — from 17 bytes; the top six
// bits of the first byte are dropped.
#[test]
fn random_strings_are_kafkas_base_36() {
    assert_eq!(random_string(&[0; 17]), "0");
    assert_eq!(random_string(&[0xff; 17]), "1omfro7zwmumr3umxudzyj6scf");
    let mut bytes = [0u8; 17];
    bytes[0] = 0xfd; // only its low two bits count: 1
    bytes[16] = 35;
    assert_eq!(random_string(&bytes), "f5lxx1zz5pnorynqglhzmsp43");
    let clock = crate::clock::SystemClock;
    assert_ne!(random_salt(&clock), random_salt(&clock));
}
