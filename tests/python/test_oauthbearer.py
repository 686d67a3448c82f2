"""SASL/OAUTHBEARER on Keel's listeners (issue 21; KIP-255, KIP-768), with real clients.

Kafka's behaviour is the reference: OAuthBearerSaslServer (the {"status":"invalid_token"}
challenge, the client's ^A, then SASL_AUTHENTICATION_FAILED with that JSON),
OAuthBearerClientInitialResponse (the first message), OAuthBearerValidatorCallbackHandler and
ValidatorAccessTokenValidator (signed JWTs against the JWKS of sasl.oauthbearer.jwks.endpoint.url,
expected audience and issuer, clock skew, exp and iat required, the sub claim as the principal),
RefreshingHttpsJwks (a refresh when a token names an unknown key), and KIP-368 (the session ends at
the token's exp). Tokens are signed here with keys the test makes (`cryptography`); the JWKS is a
file or a loopback HTTP endpoint. Clients: librdkafka (an oauth_cb, and its OIDC client-credentials
method against a loopback token endpoint), kafka-python (a token provider) and Apache Kafka's Java
client (Kafka's OAuthBearerLoginCallbackHandler doing the client-credentials grant against the same
endpoint; tests/java/KeelSecureClientCheck.java).
"""

from __future__ import annotations

import base64
import http.server
import json
import logging
import os
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import confluent_kafka as ck
import kafka as kp
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from clients import CONFLUENT_COMMON, unique_topic
from keel_broker import Broker, BrokerError, free_port, retire
from builds import java_build
from test_java_client import CACHE, JAVA_DIR
from test_tls import confluent_round_trip, metric

from kafka.net.sasl.oauth import AbstractTokenProvider

WAIT_S = 60
ISSUER = "https://idp.keel.test"
AUDIENCE = "keel"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
UNSECURED = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
             "OAuthBearerUnsecuredValidatorCallbackHandler")
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
INVALID_TOKEN = '{"status":"invalid_token"}'
CLIENT_ID, CLIENT_SECRET = "keel-test-client", "keel-test-secret"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SigningKey:
    """An RSA (RS256) or P-256 (ES256) key that signs tokens, and its JWK."""

    def __init__(self, kid: str, kind: str = "RSA"):
        self.kid, self.kind = kid, kind
        self.key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "RSA"
                    else ec.generate_private_key(ec.SECP256R1()))

    def jwk(self) -> dict:
        numbers = self.key.public_key().public_numbers()
        if self.kind == "RSA":
            n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
            return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256", "n": b64url(n),
                    "e": b64url(numbers.e.to_bytes(3, "big"))}
        return {"kty": "EC", "kid": self.kid, "crv": "P-256", "x": b64url(numbers.x.to_bytes(32, "big")),
                "y": b64url(numbers.y.to_bytes(32, "big"))}

    def sign(self, claims: dict, header: dict | None = None) -> str:
        alg = "RS256" if self.kind == "RSA" else "ES256"
        header = header if header is not None else {"alg": alg, "kid": self.kid, "typ": "JWT"}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}".encode()
        if self.kind == "RSA":
            signature = self.key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input.decode()}.{b64url(signature)}"


def claims(sub: str = "alice", lifetime_s: int = 600, **changes) -> dict:
    now = int(time.time())
    c = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now - 5, "exp": now + lifetime_s,
         "scope": "kafka"}
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return c


class Endpoints:
    """A loopback identity provider: GET /jwks serves the JWKS (counting requests), POST /token
    the client-credentials grant (RFC 6749 §4.4) answering with the token the test chose, for
    CLIENT_ID / CLIENT_SECRET only."""

    def __init__(self, keys: list[SigningKey]):
        self.keys = list(keys)
        self.jwks_gets = 0
        self.token: str | None = None
        self.token_posts = 0
        endpoints = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path != "/jwks":
                    return self.reply(404, {})
                endpoints.jwks_gets += 1
                self.reply(200, {"keys": [k.jwk() for k in endpoints.keys]})

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                form = self.rfile.read(length).decode()
                expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
                if self.path != "/token" or "grant_type=client_credentials" not in form:
                    return self.reply(400, {"error": "invalid_request"})
                if self.headers.get("Authorization") != expected and f"client_secret={CLIENT_SECRET}" not in form:
                    return self.reply(401, {"error": "invalid_client"})
                endpoints.token_posts += 1
                self.reply(200, {"access_token": endpoints.token, "token_type": "Bearer", "expires_in": 600})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def write_jwks(path: Path, keys: list[SigningKey]) -> None:
    path.write_text(json.dumps({"keys": [k.jwk() for k in keys]}))


def oauth_broker(tmp_path_factory, name: str, jwks_url: str, **extra: str) -> tuple[Broker, str]:
    """A single node with a SASL_PLAINTEXT listener enabling OAUTHBEARER (Kafka's secured
    validator) and the harness's PLAINTEXT one; returns it and the SASL bootstrap."""
    workdir = tmp_path_factory.mktemp(name)
    b = Broker(workdir / "node", name=name)
    sasl_port = free_port()
    b.config.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": f"{LOGIN_MODULE} required ;",
        "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        **extra,
    })
    try:
        b.start()
    except BaseException:
        b.stop()
        raise
    return b, f"127.0.0.1:{sasl_port}"


def confluent_oauth(token_source) -> dict:
    """librdkafka with an oauth_cb: `token_source()` gives the token; its exp is the expiry."""
    calls = []

    def oauth_cb(_config):
        token = token_source()
        calls.append(token)
        payload = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        # librdkafka refuses a token whose lifetime it is told has passed; an expired token is
        # handed over with a minute of client-side lifetime so that the broker judges it.
        expiry = float(payload.get("exp", 0))
        if expiry <= time.time() + 1:
            expiry = time.time() + 60
        return token, expiry, str(payload.get("sub", "unknown"))

    conf = {**CONFLUENT_COMMON, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": oauth_cb}
    return conf, calls


class StaticTokens(AbstractTokenProvider):
    def __init__(self, token: str):
        super().__init__()
        self._token = token

    def token(self):
        return self._token

    def extensions(self):
        return {"traceId": "keel-test"}


def oauth_classpath() -> tuple[Path, str]:
    """The compiled KeelSecureClientCheck and a classpath of kafka-clients 4.1 with jose4j
    (tests/java/oauth/pom.xml), resolved once per pom change."""
    return java_build(JAVA_DIR / "oauth" / "pom.xml", CACHE, [JAVA_DIR / "KeelSecureClientCheck.java"],
                      classpath_file="oauth-classpath.txt", classes_dir="oauth-classes")


def java_oauth(bootstrap: str, endpoints: Endpoints, topic: str, workdir: Path) -> subprocess.CompletedProcess:
    """KeelSecureClientCheck with Kafka's OAuthBearerLoginCallbackHandler fetching its token from
    the loopback token endpoint (Kafka 4 allows only URLs listed in the
    org.apache.kafka.sasl.oauthbearer.allowed.urls system property)."""
    classes, classpath = oauth_classpath()
    props = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class": LOGIN_HANDLER,
        "sasl.oauthbearer.token.endpoint.url": endpoints.token_url,
        "sasl.jaas.config": f'{LOGIN_MODULE} required clientId="{CLIENT_ID}" clientSecret="{CLIENT_SECRET}" ;',
        "request.timeout.ms": "10000",
    }
    props_file = workdir / f"{topic}.properties"
    props_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    env = {**os.environ, "JAVA_TOOL_OPTIONS": f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={endpoints.token_url}"}
    return subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelSecureClientCheck", bootstrap,
                           str(props_file), topic, "20", "1"], capture_output=True, text=True, timeout=240, env=env)


# --- the raw wire: SaslHandshake v1 and SaslAuthenticate v1 (non-flexible) -----------------------

class Wire:
    def __init__(self, bootstrap: str):
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.correlation = 0

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        header = struct.pack(">hhih", api_key, version, self.correlation, 4) + b"test"
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self.recv_exact(4))[0]
        answer = self.recv_exact(size)
        assert struct.unpack(">i", answer[:4])[0] == self.correlation
        return answer[4:]

    def recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def handshake(self, mechanism: str = "OAUTHBEARER") -> int:
        body = self.request(17, 1, struct.pack(">h", len(mechanism)) + mechanism.encode())
        return struct.unpack(">h", body[:2])[0]

    def authenticate(self, token: bytes) -> tuple[int, str | None, bytes, int]:
        body = self.request(36, 1, struct.pack(">i", len(token)) + token)
        error_code, msg_len = struct.unpack(">hh", body[:4])
        pos = 4
        message = None
        if msg_len >= 0:
            message, pos = body[pos:pos + msg_len].decode(), pos + msg_len
        auth_len = struct.unpack(">i", body[pos:pos + 4])[0]
        auth = body[pos + 4:pos + 4 + auth_len]
        lifetime = struct.unpack(">q", body[pos + 4 + auth_len:pos + 12 + auth_len])[0]
        return error_code, message, auth, lifetime

    def metadata(self) -> bytes:
        return self.request(3, 0, struct.pack(">i", 0))

    def close(self):
        self.sock.close()


def first_message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


# --- tests ---------------------------------------------------------------------------------------

def test_signed_tokens_authenticate_librdkafka_kafka_python_and_java(tmp_path_factory):
    """A JWKS file; tokens signed by its keys: librdkafka (oauth_cb with an ES256 token, and its
    OIDC client-credentials method), kafka-python (a token provider sending an extension) and the
    Java client (Kafka's OAuthBearerLoginCallbackHandler against the token endpoint) authenticate
    as the token's subject, produce and read back."""
    rsa_key, ec_key = SigningKey("rsa-1"), SigningKey("ec-1", "EC")
    workdir = tmp_path_factory.mktemp("oauth-jwks")
    jwks = workdir / "jwks.json"
    write_jwks(jwks, [rsa_key, ec_key])
    endpoints = Endpoints([rsa_key])
    endpoints.token = rsa_key.sign(claims("java-client"))
    b, bootstrap = oauth_broker(tmp_path_factory, "oauth-ok", f"file://{jwks}")
    try:
        conf, calls = confluent_oauth(lambda: ec_key.sign(claims("rdkafka")))
        confluent_round_trip(bootstrap, conf, unique_topic("oauth-rd"))
        assert calls, "oauth_cb was never called"

        oidc = {**CONFLUENT_COMMON, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": CLIENT_ID,
                "sasl.oauthbearer.client.secret": CLIENT_SECRET,
                "sasl.oauthbearer.token.endpoint.url": endpoints.token_url}
        posts = endpoints.token_posts
        confluent_round_trip(bootstrap, oidc, unique_topic("oauth-oidc"))
        assert endpoints.token_posts > posts

        topic = unique_topic("oauth-kafka-python")
        common = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                      sasl_oauth_token_provider=StaticTokens(rsa_key.sign(claims("kafka-python"))))
        producer = kp.KafkaProducer(bootstrap_servers=bootstrap, acks="all", **common)
        for i in range(20):
            producer.send(topic, value=f"kp{i}".encode())
        producer.flush(WAIT_S)
        producer.close()
        consumer = kp.KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    consumer_timeout_ms=15000, **common)
        assert [m.value for m in consumer] == [f"kp{i}".encode() for i in range(20)]
        consumer.close()

        posts = endpoints.token_posts
        run = java_oauth(bootstrap, endpoints, unique_topic("oauth-java"), b.workdir)
        assert "SECURE-CLIENT-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
        assert endpoints.token_posts > posts
    finally:
        endpoints.close()
        retire(b)


def test_refused_tokens_get_kafkas_answer_in_every_client(tmp_path_factory, caplog):
    """Expired, not yet valid, wrong audience, wrong issuer, badly signed, unknown key, alg none:
    on the wire the broker answers the first message with the {"status":"invalid_token"}
    challenge, the client's ^A with SASL_AUTHENTICATION_FAILED (58) carrying that JSON, and closes
    the connection; librdkafka, kafka-python and the Java client fail to authenticate with it;
    each failure is counted; the broker logs why, never the token. Malformed framing gets Kafka's
    generic message; an authorization id other than the subject is refused."""
    good, other = SigningKey("k1"), SigningKey("k1")
    stranger = SigningKey("k9")
    workdir = tmp_path_factory.mktemp("oauth-bad-jwks")
    jwks = workdir / "jwks.json"
    write_jwks(jwks, [good])
    metrics_port = free_port()
    endpoints = Endpoints([good])
    b, bootstrap = oauth_broker(tmp_path_factory, "oauth-bad", f"file:{jwks}", **{"metrics.port": str(metrics_port)})
    now = int(time.time())
    unsigned_body = b64url(json.dumps(claims()).encode())
    bad_tokens = {
        "expired": (good.sign(claims(exp=now - 120, iat=now - 700)), "expired"),
        "not yet valid": (good.sign(claims(nbf=now + 300)), "not yet valid"),
        "wrong audience": (good.sign(claims(aud="someone-else")), "aud claim"),
        "wrong issuer": (good.sign(claims(iss="https://evil.test")), "iss claim"),
        "bad signature": (other.sign(claims()), "does not verify"),
        "unknown kid": (stranger.sign(claims()), 'kid "k9"'),
        "alg none": (f"{b64url(json.dumps({'alg': 'none', 'kid': 'k1'}).encode())}.{unsigned_body}.c2ln", "alg none"),
    }
    try:
        before = metric(b, "keel_failed_authentication_total", listener="SASL_PLAINTEXT", mechanism="OAUTHBEARER")
        for name, (token, reason) in bad_tokens.items():
            wire = Wire(bootstrap)
            assert wire.handshake() == 0
            code, message, challenge, _ = wire.authenticate(first_message(token))
            assert (code, challenge) == (0, INVALID_TOKEN.encode()), (name, code, message, challenge)
            code, message, _, _ = wire.authenticate(b"\x01")
            assert (code, message) == (58, INVALID_TOKEN), (name, code, message)
            with pytest.raises(ConnectionError):
                wire.metadata()
            wire.close()

            errors = []
            conf, _ = confluent_oauth(lambda token=token: token)
            producer = ck.Producer({"bootstrap.servers": bootstrap, **conf, "message.timeout.ms": "4000",
                                    "error_cb": lambda e: errors.append(e)})
            producer.produce(unique_topic("oauth-bad-rd"), b"x")
            producer.flush(8)
            assert any(e.code() == ck.KafkaError._AUTHENTICATION and "invalid_token" in e.str() for e in errors), \
                (name, errors)

            # kafka-python gives up bootstrapping; the broker's answer is in its log.
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="kafka"), pytest.raises(kp.errors.KafkaError):
                kp.KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=StaticTokens(token),
                                 request_timeout_ms=5000, bootstrap_timeout_ms=4000)
            assert INVALID_TOKEN in caplog.text, (name, caplog.text[-2000:])

            endpoints.token = token
            run = java_oauth(bootstrap, endpoints, unique_topic("oauth-bad-java"), b.workdir)
            assert run.returncode == 1, (name, run.stdout[-2000:])
            assert "SaslAuthenticationException" in run.stdout and INVALID_TOKEN in run.stdout, \
                (name, run.stdout[-2000:], run.stderr[-2000:])
            assert reason in b.log_text(), (name, reason, b.log_tail())

        wire = Wire(bootstrap)
        wire.handshake()
        code, message, _, _ = wire.authenticate(b"n,,\x01auth=Basic dXNlcg==\x01\x01")
        assert (code, message) == (58, "Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism OAUTHBEARER")
        wire.close()
        wire = Wire(bootstrap)
        wire.handshake()
        code, message, _, _ = wire.authenticate(first_message(good.sign(claims("alice")), authzid="bob"))
        assert (code, message) == (58, "Authentication failed: Client requested an authorization id (bob) that "
                                       "is different from the token's principal name (alice)")
        wire.close()

        after = metric(b, "keel_failed_authentication_total", listener="SASL_PLAINTEXT", mechanism="OAUTHBEARER")
        assert after >= before + 4 * len(bad_tokens), (before, after)
        log = b.log_text()
        for token, _ in bad_tokens.values():
            assert token.split(".")[2] not in log, "a token's signature is in the broker's log"
    finally:
        endpoints.close()
        retire(b)


def test_session_ends_at_the_tokens_exp_and_librdkafka_renews_it(tmp_path_factory):
    """With connections.max.reauth.ms unset the session lifetime told to the client is the token's
    remaining life (KIP-368); a request after exp closes the connection; librdkafka, handed
    8-second tokens by its oauth_cb, re-authenticates in band and produces for 20 s without an
    authentication error."""
    key = SigningKey("k1")
    workdir = tmp_path_factory.mktemp("oauth-exp-jwks")
    jwks = workdir / "jwks.json"
    write_jwks(jwks, [key])
    # No clock skew, so the session and the token end together.
    b, bootstrap = oauth_broker(tmp_path_factory, "oauth-exp", f"file://{jwks}",
                                **{"sasl.oauthbearer.clock.skew.seconds": "0"})
    try:
        now = int(time.time())
        wire = Wire(bootstrap)
        wire.handshake()
        code, _, _, lifetime_ms = wire.authenticate(first_message(key.sign(claims(exp=now + 6, iat=now))))
        expected_ms = (now + 6) * 1000 - int(time.time() * 1000)
        assert code == 0 and abs(lifetime_ms - expected_ms) < 1500, (lifetime_ms, expected_ms)
        assert len(wire.metadata()) > 0
        time.sleep(max(0.0, now + 6 - time.time()) + 0.5)
        with pytest.raises(ConnectionError):
            wire.metadata()
        wire.close()
        assert "expired" in b.log_text()

        conf, calls = confluent_oauth(lambda: key.sign(claims("rdkafka", lifetime_s=8)))
        topic = unique_topic("oauth-reauth")
        errors, delivered = [], []
        producer = ck.Producer({"bootstrap.servers": bootstrap, **conf, "acks": "all",
                                "error_cb": lambda e: errors.append(e)})
        deadline = time.monotonic() + 20
        n = 0
        while time.monotonic() < deadline:
            producer.produce(topic, value=f"r{n}".encode(), on_delivery=lambda err, msg: delivered.append(err))
            n += 1
            producer.poll(0.1)
        assert producer.flush(WAIT_S) == 0
        assert len(delivered) == n and all(err is None for err in delivered), [e for e in delivered if e][:3]
        assert not [e for e in errors if e.code() == ck.KafkaError._AUTHENTICATION], errors
        assert len(calls) >= 3, f"oauth_cb called {len(calls)} times in 20 s with 8 s tokens"
    finally:
        retire(b)


def test_jwks_over_http_is_refreshed_when_a_token_names_an_unknown_key(tmp_path_factory):
    """An http:// JWKS endpoint read at start (refresh.ms an hour): the provider rotates to a new
    key; the first token signed with it is refused and makes the broker read the JWKS again at
    once (RefreshingHttpsJwks.maybeExpediteRefresh), so the next one authenticates; a made-up kid
    asks for one more read, and asking again within a minute reads nothing."""
    old, new = SigningKey("old"), SigningKey("new")
    endpoints = Endpoints([old])
    b, bootstrap = oauth_broker(tmp_path_factory, "oauth-http", endpoints.jwks_url)
    try:
        assert endpoints.jwks_gets == 1
        endpoints.keys = [old, new]

        def attempt(token: str) -> int:
            wire = Wire(bootstrap)
            wire.handshake()
            code, _, challenge, _ = wire.authenticate(first_message(token))
            wire.close()
            return -1 if challenge == INVALID_TOKEN.encode() else code

        token = new.sign(claims("rotated"))
        assert attempt(token) == -1
        deadline = time.monotonic() + 10
        while endpoints.jwks_gets < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert endpoints.jwks_gets == 2
        assert attempt(token) == 0
        assert attempt(old.sign(claims())) == 0

        made_up = SigningKey("made-up").sign(claims())
        assert attempt(made_up) == -1
        deadline = time.monotonic() + 10
        while endpoints.jwks_gets < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert endpoints.jwks_gets == 3
        for _ in range(5):
            assert attempt(made_up) == -1
        time.sleep(2)
        assert endpoints.jwks_gets == 3
    finally:
        endpoints.close()
        retire(b)


@pytest.mark.parametrize("case", ["unsecured", "no-validator", "no-jwks", "missing-file", "bad-jwks"])
def test_oauthbearer_settings_that_cannot_work_stop_the_start(tmp_path, case):
    """A listener enabling OAUTHBEARER starts only with Kafka's secured validator and a JWKS it can
    read: the unsecured validator (Kafka's default, which accepts unsigned tokens), no validator, no
    JWKS URL, a missing file and a document that is not a JWKS each stop the start naming the key."""
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, [SigningKey("k1")])
    handler = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"
    url_key = "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url"
    b = Broker(tmp_path / "node", name=f"oauth-bad-{case}")
    b.config.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{free_port()}",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        handler: VALIDATOR,
        url_key: f"file://{jwks}",
    })
    settings, needles = {
        "unsecured": ({handler: UNSECURED}, [handler, "unsigned tokens"]),
        "no-validator": ({handler: None}, [handler, "unsecured validator"]),
        "no-jwks": ({url_key: None}, [url_key]),
        "missing-file": ({url_key: f"file://{tmp_path}/absent.json"}, [url_key, "absent.json"]),
        "bad-jwks": ({}, [url_key, "keys"]),
    }[case]
    for k, v in settings.items():
        if v is None:
            b.config.pop(k)
        else:
            b.config[k] = v
    if case == "bad-jwks":
        jwks.write_text('{"not": "a jwks"}')
    try:
        with pytest.raises(BrokerError) as refused:
            b.start(timeout_s=20)
        for needle in needles:
            assert needle in str(refused.value), (needle, str(refused.value)[-2000:])
        assert b.last_returncode not in (None, 0)
    finally:
        b.stop()
