//! Signed JWTs (RFC 7519) in JWS compact form (RFC 7515) as Kafka's secured validator accepts
//! them (`ValidatorAccessTokenValidator`: jose4j's `JwtConsumer` with `DISALLOW_NONE`,
//! `setRequireExpirationTime`, `setRequireIssuedAt`, the expected audiences and issuer and the
//! clock skew; then `ClaimValidationUtils` on the scope, `exp`, subject and `iat` claims).
//!
//! Pure: the keys and the time come in as arguments. Signatures are checked with `ring` (the
//! provider rustls already uses): RS256/384/512 and PS256/384/512 with 2048- to 8192-bit keys
//! (jose4j refuses RSA keys under 2048 bits too), ES256, ES384 and EdDSA (Ed25519). ES512 (P-521)
//! and HMAC algorithms are refused: ring has no P-521, and a JWKS holds no shared secrets.

use std::collections::BTreeSet;

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use serde_json::{Map, Value};

/// The longest access token accepted, in bytes (the SASL frame is bounded separately by
/// `sasl.server.max.receive.size`; identity providers' tokens are a few kilobytes).
pub const TOKEN_MAX_BYTES: usize = 64 * 1024;

/// The most keys a JWKS may hold.
pub const JWKS_MAX_KEYS: usize = 256;

/// base64url (RFC 4648 §5) as JOSE writes it, padding tolerated.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A JWS algorithm Keel verifies (RFC 7518 §3.1, RFC 8037 §3.1 for EdDSA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Rs256,
    Rs384,
    Rs512,
    Ps256,
    Ps384,
    Ps512,
    Es256,
    Es384,
    EdDsa,
}

/// An elliptic curve a JWK names (`crv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
    Ed25519,
}

impl Curve {
    fn name(self) -> &'static str {
        match self {
            Curve::P256 => "P-256",
            Curve::P384 => "P-384",
            Curve::Ed25519 => "Ed25519",
        }
    }

    /// The length of one coordinate (or of the Ed25519 public key), in bytes.
    fn coordinate_bytes(self) -> usize {
        match self {
            Curve::P256 | Curve::Ed25519 => 32,
            Curve::P384 => 48,
        }
    }
}

impl Algorithm {
    /// Every algorithm, in RFC 7518's order.
    pub const ALL: [Algorithm; 9] = [
        Algorithm::Rs256,
        Algorithm::Rs384,
        Algorithm::Rs512,
        Algorithm::Ps256,
        Algorithm::Ps384,
        Algorithm::Ps512,
        Algorithm::Es256,
        Algorithm::Es384,
        Algorithm::EdDsa,
    ];

    /// The `alg` header value.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Rs384 => "RS384",
            Algorithm::Rs512 => "RS512",
            Algorithm::Ps256 => "PS256",
            Algorithm::Ps384 => "PS384",
            Algorithm::Ps512 => "PS512",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
            Algorithm::EdDsa => "EdDSA",
        }
    }

    /// The algorithm an `alg` header names (case-sensitive, RFC 7515 §4.1.1).
    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The JWK key type (`kty`) that verifies it.
    fn key_type(self) -> &'static str {
        match self {
            Algorithm::Rs256
            | Algorithm::Rs384
            | Algorithm::Rs512
            | Algorithm::Ps256
            | Algorithm::Ps384
            | Algorithm::Ps512 => "RSA",
            Algorithm::Es256 | Algorithm::Es384 => "EC",
            Algorithm::EdDsa => "OKP",
        }
    }

    /// The curve an EC or OKP key must be on.
    fn curve(self) -> Option<Curve> {
        match self {
            Algorithm::Es256 => Some(Curve::P256),
            Algorithm::Es384 => Some(Curve::P384),
            Algorithm::EdDsa => Some(Curve::Ed25519),
            _ => None,
        }
    }
}

/// A public key's material.
#[derive(Clone, PartialEq, Eq)]
enum KeyMaterial {
    /// Modulus and public exponent, big-endian without leading zeros.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (`04 || x || y`).
    Ec {
        curve: Curve,
        point: Vec<u8>,
    },
    Ed25519 {
        x: Vec<u8>,
    },
}

/// One verification key of a JWKS (RFC 7517 §4).
#[derive(Clone, PartialEq, Eq)]
pub struct Jwk {
    kid: Option<String>,
    alg: Option<String>,
    usage: Option<String>,
    key_ops: Option<Vec<String>>,
    material: KeyMaterial,
}

impl std::fmt::Debug for Jwk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kty = match &self.material {
            KeyMaterial::Rsa { n, .. } => format!("RSA-{}", n.len() * 8),
            KeyMaterial::Ec { curve, .. } => format!("EC {}", curve.name()),
            KeyMaterial::Ed25519 { .. } => "OKP Ed25519".to_string(),
        };
        f.debug_struct("Jwk")
            .field("kid", &self.kid)
            .field("kty", &kty)
            .field("alg", &self.alg)
            .finish()
    }
}

fn b64(field: &str, text: &str) -> Result<Vec<u8>, String> {
    BASE64URL
        .decode(text)
        .map_err(|_| format!("{field} is not base64url"))
}

fn string_member(object: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match object.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("\"{name}\" is not a string")),
    }
}

fn required_bytes(object: &Map<String, Value>, name: &str) -> Result<Vec<u8>, String> {
    let text = string_member(object, name)?.ok_or_else(|| format!("no \"{name}\""))?;
    b64(name, &text)
}

fn strip_leading_zeros(bytes: &[u8]) -> Vec<u8> {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    bytes[first..].to_vec()
}

impl Jwk {
    /// One JWK of a set; an error says why it cannot verify anything (the set ignores such a
    /// key, as jose4j's `JsonWebKeySet` does).
    pub fn parse(value: &Value) -> Result<Jwk, String> {
        let object = value.as_object().ok_or("not a JSON object")?;
        let kty = string_member(object, "kty")?.ok_or("no \"kty\"")?;
        let material = match kty.as_str() {
            "RSA" => {
                let n = strip_leading_zeros(&required_bytes(object, "n")?);
                let e = strip_leading_zeros(&required_bytes(object, "e")?);
                // ring verifies with 2048- to 8192-bit moduli; jose4j refuses RSA keys under
                // 2048 bits (KeyValidationSupport.checkRsaKeySize).
                if !(256..=1024).contains(&n.len()) {
                    return Err(format!(
                        "an RSA key of {} bits (2048 to 8192 are accepted)",
                        n.len() * 8
                    ));
                }
                if e.is_empty() || e.len() > 8 {
                    return Err("an RSA public exponent of an unusable size".into());
                }
                KeyMaterial::Rsa { n, e }
            }
            "EC" | "OKP" => {
                let crv = string_member(object, "crv")?.ok_or("no \"crv\"")?;
                let curve = match (kty.as_str(), crv.as_str()) {
                    ("EC", "P-256") => Curve::P256,
                    ("EC", "P-384") => Curve::P384,
                    ("OKP", "Ed25519") => Curve::Ed25519,
                    _ => return Err(format!("{kty} curve {crv:?} is not supported")),
                };
                let x = required_bytes(object, "x")?;
                if x.len() != curve.coordinate_bytes() {
                    return Err(format!("\"x\" is not a {} coordinate", curve.name()));
                }
                if curve == Curve::Ed25519 {
                    KeyMaterial::Ed25519 { x }
                } else {
                    let y = required_bytes(object, "y")?;
                    if y.len() != curve.coordinate_bytes() {
                        return Err(format!("\"y\" is not a {} coordinate", curve.name()));
                    }
                    let mut point = Vec::with_capacity(1 + 2 * x.len());
                    point.push(0x04);
                    point.extend_from_slice(&x);
                    point.extend_from_slice(&y);
                    KeyMaterial::Ec { curve, point }
                }
            }
            other => return Err(format!("key type {other:?} cannot verify signatures")),
        };
        let key_ops = match object.get("key_ops") {
            None => None,
            Some(Value::Array(ops)) => Some(
                ops.iter()
                    .map(|op| op.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("\"key_ops\" holds a value that is not a string")?,
            ),
            Some(_) => return Err("\"key_ops\" is not an array".into()),
        };
        Ok(Jwk {
            kid: string_member(object, "kid")?,
            alg: string_member(object, "alg")?,
            usage: string_member(object, "use")?,
            key_ops,
            material,
        })
    }

    /// The key id.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// Whether this key may verify a JWS signed with `alg` naming `kid` (jose4j's
    /// `VerificationJwkSelector`: the same `kid` when the token names one, the key type and
    /// curve of the algorithm, `use` "sig" and `key_ops` "verify" when present, the same `alg`
    /// when the key names one).
    fn suits(&self, alg: Algorithm, kid: Option<&str>) -> bool {
        let kind_matches = match (&self.material, alg.curve()) {
            (KeyMaterial::Rsa { .. }, None) => alg.key_type() == "RSA",
            (KeyMaterial::Ec { curve, .. }, Some(wanted)) => *curve == wanted,
            (KeyMaterial::Ed25519 { .. }, Some(wanted)) => wanted == Curve::Ed25519,
            _ => false,
        };
        kind_matches
            && kid.is_none_or(|kid| self.kid.as_deref() == Some(kid))
            && self.usage.as_deref().is_none_or(|u| u == "sig")
            && self
                .key_ops
                .as_ref()
                .is_none_or(|ops| ops.iter().any(|op| op == "verify"))
            && self.alg.as_deref().is_none_or(|a| a == alg.name())
    }

    /// Whether `signature` is this key's `alg` signature of `message`.
    fn verifies(&self, alg: Algorithm, message: &[u8], signature: &[u8]) -> bool {
        use ring::signature as sig;
        match &self.material {
            KeyMaterial::Rsa { n, e } => {
                let params: &sig::RsaParameters = match alg {
                    Algorithm::Rs256 => &sig::RSA_PKCS1_2048_8192_SHA256,
                    Algorithm::Rs384 => &sig::RSA_PKCS1_2048_8192_SHA384,
                    Algorithm::Rs512 => &sig::RSA_PKCS1_2048_8192_SHA512,
                    Algorithm::Ps256 => &sig::RSA_PSS_2048_8192_SHA256,
                    Algorithm::Ps384 => &sig::RSA_PSS_2048_8192_SHA384,
                    Algorithm::Ps512 => &sig::RSA_PSS_2048_8192_SHA512,
                    _ => return false,
                };
                sig::RsaPublicKeyComponents { n, e }
                    .verify(params, message, signature)
                    .is_ok()
            }
            KeyMaterial::Ec { curve, point } => {
                // JWS carries ECDSA signatures as fixed-width r || s (RFC 7518 §3.4).
                let algorithm: &sig::EcdsaVerificationAlgorithm = match (alg, curve) {
                    (Algorithm::Es256, Curve::P256) => &sig::ECDSA_P256_SHA256_FIXED,
                    (Algorithm::Es384, Curve::P384) => &sig::ECDSA_P384_SHA384_FIXED,
                    _ => return false,
                };
                sig::UnparsedPublicKey::new(algorithm, point)
                    .verify(message, signature)
                    .is_ok()
            }
            KeyMaterial::Ed25519 { x } => {
                alg == Algorithm::EdDsa
                    && sig::UnparsedPublicKey::new(&sig::ED25519, x)
                        .verify(message, signature)
                        .is_ok()
            }
        }
    }
}

/// A JWKS document's usable keys, and why the others were left out.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    pub keys: Vec<Jwk>,
    /// One line per key that cannot verify (its index and the reason).
    pub ignored: Vec<String>,
}

/// Parses a JWK Set (RFC 7517 §5): `{"keys": [...]}` with at most [`JWKS_MAX_KEYS`] keys.
pub fn parse_jwks(text: &[u8]) -> Result<KeySet, String> {
    let value: Value =
        serde_json::from_slice(text).map_err(|e| format!("not a JSON document: {e}"))?;
    let keys = value
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("not a JWK Set: no \"keys\" array")?;
    if keys.len() > JWKS_MAX_KEYS {
        return Err(format!(
            "holds {} keys; at most {JWKS_MAX_KEYS} are accepted",
            keys.len()
        ));
    }
    let mut set = KeySet::default();
    for (index, key) in keys.iter().enumerate() {
        match Jwk::parse(key) {
            Ok(jwk) => set.keys.push(jwk),
            Err(reason) => set.ignored.push(format!("key {index}: {reason}")),
        }
    }
    Ok(set)
}

/// Why a token was not accepted. The text is for the broker's log only: the client is told
/// `{"status":"invalid_token"}` whatever the reason (Kafka's `OAuthBearerValidatorCallbackHandler`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// Not a JWS compact serialization, or a header or claim of the wrong shape.
    Malformed(String),
    /// No key of the JWKS suits the token (its `kid` is unknown, or no key has its type).
    UnknownKey { kid: Option<String>, alg: Algorithm },
    /// Well formed, but refused (signature, algorithm, audience, issuer, times, subject).
    Refused(String),
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::Malformed(reason) => write!(f, "malformed token: {reason}"),
            Invalid::UnknownKey { kid, alg } => match kid {
                Some(kid) => write!(
                    f,
                    "no key of the JWKS has kid {:?} for {}",
                    truncated(kid),
                    alg.name()
                ),
                None => write!(
                    f,
                    "the token names no kid and no key of the JWKS suits {}",
                    alg.name()
                ),
            },
            Invalid::Refused(reason) => f.write_str(reason),
        }
    }
}

/// At most 64 characters of a client-chosen string, for the log.
pub fn truncated(text: &str) -> String {
    const MAX_CHARS: usize = 64;
    match text.char_indices().nth(MAX_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}... ({} bytes)", &text[..cut], text.len()),
    }
}

fn malformed(reason: impl Into<String>) -> Invalid {
    Invalid::Malformed(reason.into())
}

fn refused(reason: impl Into<String>) -> Invalid {
    Invalid::Refused(reason.into())
}

/// A token split and its header read; the payload is parsed only after the signature checks.
pub struct SignedToken<'a> {
    pub alg: Algorithm,
    pub kid: Option<String>,
    signing_input: &'a str,
    payload: &'a str,
    signature: Vec<u8>,
}

impl std::fmt::Debug for SignedToken<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token: it is a bearer credential.
        f.debug_struct("SignedToken")
            .field("alg", &self.alg)
            .field("kid", &self.kid.as_deref().map(truncated))
            .finish_non_exhaustive()
    }
}

/// Splits `token` into its three sections and reads its header (Kafka's `SerializedJwt`, then
/// jose4j's header checks: `alg` present and not `none`, no unknown `crit` extension).
pub fn parse(token: &str) -> Result<SignedToken<'_>, Invalid> {
    let token = token.trim();
    if token.is_empty() {
        return Err(malformed(
            "empty JWT; expected three sections (header, payload, and signature)",
        ));
    }
    if token.len() > TOKEN_MAX_BYTES {
        return Err(malformed(format!(
            "a token of {} bytes; at most {TOKEN_MAX_BYTES} are accepted",
            token.len()
        )));
    }
    let sections: Vec<&str> = token.split('.').collect();
    if sections.len() != 3 {
        return Err(malformed(format!(
            "expected three sections (header, payload, and signature), but {} provided",
            sections.len()
        )));
    }
    for (section, name) in sections.iter().zip(["header", "payload", "signature"]) {
        if section.is_empty() {
            return Err(malformed(format!("the {name} section is missing")));
        }
    }
    let header_bytes = b64("the header", sections[0]).map_err(malformed)?;
    let header: Map<String, Value> = serde_json::from_slice(&header_bytes)
        .map_err(|_| malformed("the header is not a JSON object"))?;
    let alg = match header.get("alg") {
        Some(Value::String(alg)) => alg.as_str(),
        Some(_) => return Err(malformed("the alg header is not a string")),
        None => return Err(malformed("no alg header")),
    };
    if alg == "none" {
        // jose4j's AlgorithmConstraints.DISALLOW_NONE.
        return Err(refused("alg none (an unsigned token) is not permitted"));
    }
    let alg = Algorithm::parse(alg).ok_or_else(|| {
        refused(format!(
            "algorithm {:?} is not supported (RS256/384/512, PS256/384/512, ES256, ES384 and \
             EdDSA are)",
            truncated(alg)
        ))
    })?;
    if header.contains_key("crit") {
        // RFC 7515 §4.1.11: a recipient that does not understand a critical extension must
        // refuse the JWS; Keel understands none.
        return Err(refused("the header marks extensions critical (crit)"));
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(kid)) => Some(kid.clone()),
        Some(_) => return Err(malformed("the kid header is not a string")),
    };
    let signature = b64("the signature", sections[2]).map_err(malformed)?;
    let signing_input = &token[..sections[0].len() + 1 + sections[1].len()];
    Ok(SignedToken {
        alg,
        kid,
        signing_input,
        payload: sections[1],
        signature,
    })
}

impl SignedToken<'_> {
    /// Checks the signature with the first key of `keys` that suits the token (jose4j's
    /// `VerificationJwkSelector.select`), and returns the claims.
    pub fn verify(&self, keys: &[Jwk]) -> Result<Map<String, Value>, Invalid> {
        let key = keys
            .iter()
            .find(|k| k.suits(self.alg, self.kid.as_deref()))
            .ok_or_else(|| Invalid::UnknownKey {
                kid: self.kid.clone(),
                alg: self.alg,
            })?;
        if !key.verifies(self.alg, self.signing_input.as_bytes(), &self.signature) {
            return Err(refused(format!(
                "the {} signature does not verify with key {:?}",
                self.alg.name(),
                key.kid.as_deref().map(truncated)
            )));
        }
        let payload = b64("the payload", self.payload).map_err(malformed)?;
        serde_json::from_slice(&payload).map_err(|_| malformed("the claims are not a JSON object"))
    }
}

/// What the broker requires of a token's claims (`sasl.oauthbearer.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRules {
    /// `sasl.oauthbearer.clock.skew.seconds`.
    pub clock_skew_seconds: i64,
    /// `sasl.oauthbearer.expected.audience` (empty: a token must carry no `aud`, as jose4j).
    pub expected_audiences: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name`.
    pub sub_claim: String,
    /// `sasl.oauthbearer.scope.claim.name`.
    pub scope_claim: String,
}

/// A token that passed: whom it names and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    /// The subject claim, trimmed: the principal's name.
    pub principal: String,
    /// `exp` in ms.
    pub expires_at_ms: i64,
    /// `iat` in ms.
    pub issued_at_ms: i64,
    pub scopes: BTreeSet<String>,
}

/// A NumericDate claim (RFC 7519 §2) in whole seconds, as jose4j reads one (`longValue()`:
/// fractions truncated, out-of-range values saturated).
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, Invalid> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => Ok(Some(match n.as_i64() {
            Some(seconds) => seconds,
            // Saturating: `as` clamps a float to the i64 range.
            None => n.as_f64().map_or(i64::MAX, |f| f as i64),
        })),
        Some(_) => Err(malformed(format!("the {name} claim is not a number"))),
    }
}

/// A claim that is a string or an array of strings (`aud`, and the scope claim).
fn strings(claims: &Map<String, Value>, name: &str) -> Result<Option<Vec<String>>, Invalid> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| {
                malformed(format!(
                    "the {name} claim holds a value that is not a string"
                ))
            }),
        Some(_) => Err(malformed(format!(
            "the {name} claim is neither a string nor an array of strings"
        ))),
    }
}

/// Kafka's `ClaimValidationUtils.validateString`: present, not empty, not only whitespace;
/// trimmed.
fn non_blank(name: &str, value: Option<&str>) -> Result<String, Invalid> {
    let value = value.ok_or_else(|| refused(format!("{name} value must be non-null")))?;
    if value.is_empty() {
        return Err(refused(format!("{name} value must be non-empty")));
    }
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(refused(format!(
            "{name} value must not contain only whitespace"
        )));
    }
    Ok(trimmed.to_string())
}

/// Checks verified claims at `now_ms`: jose4j's audience, issuer and time checks, then Kafka's
/// scope, `exp`, subject and `iat` rules, in that order.
pub fn check_claims(
    claims: &Map<String, Value>,
    rules: &ClaimRules,
    now_ms: i64,
) -> Result<ValidToken, Invalid> {
    // jose4j's AudValidator: with no expected audience a token carrying one is refused too.
    let audiences = strings(claims, "aud")?;
    match (&audiences, rules.expected_audiences.is_empty()) {
        (None, true) => {}
        (None, false) => {
            return Err(refused(format!(
                "no aud claim; expected one of {:?}",
                rules.expected_audiences
            )))
        }
        (Some(audiences), true) => {
            return Err(refused(format!(
                "aud claim {:?} present but sasl.oauthbearer.expected.audience is not set",
                audiences.iter().map(|a| truncated(a)).collect::<Vec<_>>()
            )))
        }
        (Some(audiences), false) => {
            if !audiences
                .iter()
                .any(|a| rules.expected_audiences.contains(a))
            {
                return Err(refused(format!(
                    "aud claim {:?} contains none of the expected audiences {:?}",
                    audiences.iter().map(|a| truncated(a)).collect::<Vec<_>>(),
                    rules.expected_audiences
                )));
            }
        }
    }
    // jose4j's IssValidator: required and equal when an issuer is expected.
    if let Some(expected) = &rules.expected_issuer {
        match claims.get("iss") {
            None => return Err(refused(format!("no iss claim; expected {expected:?}"))),
            Some(Value::String(iss)) if iss == expected => {}
            Some(Value::String(iss)) => {
                return Err(refused(format!(
                    "iss claim {:?} does not match the expected issuer {expected:?}",
                    truncated(iss)
                )))
            }
            Some(_) => return Err(malformed("the iss claim is not a string")),
        }
    }
    // jose4j's NumericDateValidator, in whole seconds with the allowed skew.
    let now_s = now_ms.div_euclid(1000);
    let skew = rules.clock_skew_seconds;
    let exp = numeric_date(claims, "exp")?
        .ok_or_else(|| refused("no exp claim (an expiration time is required)"))?;
    if now_s.saturating_sub(skew) >= exp {
        return Err(refused(format!(
            "expired: now ({now_s}) is on or after exp ({exp}) even with {skew} s of clock skew"
        )));
    }
    if let Some(nbf) = numeric_date(claims, "nbf")? {
        if now_s.saturating_add(skew) < nbf {
            return Err(refused(format!(
                "not yet valid: now ({now_s}) is before nbf ({nbf}) even with {skew} s of clock \
                 skew"
            )));
        }
    }
    let iat = numeric_date(claims, "iat")?
        .ok_or_else(|| refused("no iat claim (an issued-at time is required)"))?;
    // Kafka's ValidatorAccessTokenValidator.validate, then ClaimValidationUtils.
    let scope_claim = &rules.scope_claim;
    let mut scopes = BTreeSet::new();
    match claims.get(scope_claim) {
        None | Some(Value::String(_)) | Some(Value::Array(_)) => {
            for scope in strings(claims, scope_claim)?.unwrap_or_default() {
                let scope = non_blank(scope_claim, Some(&scope))?;
                if !scopes.insert(scope.clone()) {
                    return Err(refused(format!(
                        "{scope_claim} value must not contain duplicates - {} already present",
                        truncated(&scope)
                    )));
                }
            }
        }
        // Kafka takes a scope claim of another type as no scopes.
        Some(_) => {}
    }
    if exp < 0 {
        return Err(refused(format!(
            "exp value must be non-negative; value given was \"{exp}\""
        )));
    }
    let sub = match claims.get(&rules.sub_claim) {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return Err(malformed(format!(
                "could not extract the '{}' claim from the access token",
                rules.sub_claim
            )))
        }
    };
    let principal = non_blank(&rules.sub_claim, sub)?;
    if iat < 0 {
        return Err(refused(format!(
            "iat value must be null or non-negative; value given was \"{iat}\""
        )));
    }
    Ok(ValidToken {
        principal,
        expires_at_ms: exp.saturating_mul(1000),
        issued_at_ms: iat.saturating_mul(1000),
        scopes,
    })
}
