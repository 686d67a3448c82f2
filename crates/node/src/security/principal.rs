//! Who a connection acts as: Kafka's `KafkaPrincipal` (`User:<name>`), the distinguished name of
//! a TLS client certificate as Java writes it (RFC 2253, `X500Principal.getName()`), and Kafka's
//! `ssl.principal.mapping.rules` that turn that name into a principal name
//! (`org.apache.kafka.common.security.ssl.SslPrincipalMapper`).

use std::fmt;

/// A principal: Kafka writes it `<type>:<name>`, e.g. `User:alice`; a connection that has not
/// authenticated is `User:ANONYMOUS`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KafkaPrincipal {
    pub principal_type: String,
    pub name: String,
}

impl KafkaPrincipal {
    /// Kafka's `KafkaPrincipal.USER_TYPE`.
    pub const USER_TYPE: &'static str = "User";

    /// `User:<name>`.
    pub fn user(name: impl Into<String>) -> Self {
        KafkaPrincipal {
            principal_type: Self::USER_TYPE.to_string(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS` (Kafka's `KafkaPrincipal.ANONYMOUS`): a PLAINTEXT connection, or a TLS
    /// one without a client certificate.
    pub fn anonymous() -> Self {
        Self::user("ANONYMOUS")
    }

    /// The principal as Kafka's `DefaultKafkaPrincipalBuilder.serialize` writes it into an
    /// Envelope: the version of `DefaultPrincipalData` (0) and the message.
    pub fn serialize(&self) -> bytes::Bytes {
        use keel_wire::kafka_protocol::messages::DefaultPrincipalData;
        use keel_wire::kafka_protocol::protocol::{Encodable, StrBytes};
        let data = DefaultPrincipalData::default()
            .with_type(StrBytes::from_string(self.principal_type.clone()))
            .with_name(StrBytes::from_string(self.name.clone()))
            .with_token_authenticated(false);
        let mut buf = bytes::BytesMut::new();
        bytes::BufMut::put_i16(&mut buf, PRINCIPAL_DATA_VERSION);
        // Encoding strings and a bool into memory cannot fail (a name is at most what a
        // connection authenticated with).
        let _ = data.encode(&mut buf, PRINCIPAL_DATA_VERSION);
        buf.freeze()
    }

    /// [`KafkaPrincipal::serialize`]'s reverse (Kafka's `deserialize`); `None` when the bytes
    /// are not a principal of a version Keel reads.
    pub fn deserialize(mut bytes: bytes::Bytes) -> Option<KafkaPrincipal> {
        use bytes::Buf;
        use keel_wire::kafka_protocol::messages::DefaultPrincipalData;
        use keel_wire::kafka_protocol::protocol::Decodable;
        if bytes.remaining() < 2 {
            return None;
        }
        let version = bytes.get_i16();
        if version != PRINCIPAL_DATA_VERSION {
            return None;
        }
        let data = DefaultPrincipalData::decode(&mut bytes, version).ok()?;
        Some(KafkaPrincipal {
            principal_type: data._type.to_string(),
            name: data.name.to_string(),
        })
    }
}

/// The `DefaultPrincipalData` version Keel writes and reads (Kafka's only one).
const PRINCIPAL_DATA_VERSION: i16 = 0;

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// Why a certificate could not be turned into a principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("the client certificate cannot be parsed: {0}")]
    BadCertificate(String),
    #[error("no ssl.principal.mapping.rules rule matches the distinguished name {0:?}")]
    NoMatchingRule(String),
}

/// The subject of a DER certificate as Java's `X500Principal.getName()` writes it (RFC 2253:
/// the most specific name first, `CN=alice,OU=eng,O=Acme,C=US`; attributes without an RFC 2253
/// keyword as `<dotted oid>=#<hex of the DER value>`).
pub fn subject_name(certificate_der: &[u8]) -> Result<String, PrincipalError> {
    use x509_parser::prelude::FromDer;
    let (_, certificate) = x509_parser::certificate::X509Certificate::from_der(certificate_der)
        .map_err(|e| PrincipalError::BadCertificate(e.to_string()))?;
    let rdns: Vec<String> = certificate
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attribute| {
                    let oid = attribute.attr_type().to_id_string();
                    let value = attribute.attr_value();
                    match (
                        rfc2253_keyword(&oid),
                        directory_string(value.tag(), value.data),
                    ) {
                        (Some(keyword), Some(text)) => format!("{keyword}={}", escape(&text)),
                        _ => format!("{oid}=#{}", hex_der(value.tag().0, value.data)),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// The keywords RFC 2253 (and so Java) writes by name.
fn rfc2253_keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

/// The text of a string-typed attribute value (the DirectoryString choices and IA5String).
fn directory_string(tag: x509_parser::der_parser::asn1_rs::Tag, data: &[u8]) -> Option<String> {
    use x509_parser::der_parser::asn1_rs::Tag;
    match tag {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::NumericString => {
            std::str::from_utf8(data).ok().map(str::to_string)
        }
        // T.61 as Latin-1, which is what Java makes of it in practice.
        Tag::TeletexString => Some(data.iter().map(|&b| b as char).collect()),
        Tag::BmpString => {
            let units: Vec<u16> = data
                .chunks(2)
                .map(|pair| match pair {
                    [high, low] => Some(u16::from_be_bytes([*high, *low])),
                    _ => None,
                })
                .collect::<Option<Vec<u16>>>()?;
            String::from_utf16(&units).ok()
        }
        Tag::UniversalString => data
            .chunks(4)
            .map(|quad| {
                let bytes: [u8; 4] = quad.try_into().ok()?;
                char::from_u32(u32::from_be_bytes(bytes))
            })
            .collect(),
        _ => None,
    }
}

/// RFC 2253 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `#`-form hex of a universal-class DER value: tag, length, content.
fn hex_der(tag: u32, content: &[u8]) -> String {
    let mut der = vec![u8::try_from(tag).unwrap_or(0x04)];
    let len = content.len();
    if len < 0x80 {
        der.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        der.push(0x80 | bytes.len() as u8);
        der.extend(bytes);
    }
    der.extend_from_slice(content);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

/// One `ssl.principal.mapping.rules` rule.
#[derive(Debug, Clone)]
enum Rule {
    /// `DEFAULT`: the distinguished name as it is.
    Default,
    /// `RULE:pattern/replacement/[L|U]`: when the whole name matches `pattern`, the replacement
    /// (`$1` … refer to its groups), lower- or upper-cased.
    Replace {
        pattern: regex::Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Kafka's `ssl.principal.mapping.rules`: the first rule that applies names the principal; no
/// rule applying fails the authentication (Kafka's `NoMatchingRule`).
#[derive(Debug, Clone)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for SslPrincipalMapper {
    fn default() -> Self {
        SslPrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl SslPrincipalMapper {
    /// Parses the rules: a comma-separated list of `DEFAULT` and `RULE:pattern/replacement/`
    /// with an optional `L` or `U` (a `/` inside the pattern or replacement is written `\/`;
    /// commas inside a rule need no escaping as long as the rule is complete before them).
    pub fn parse(text: &str) -> Result<SslPrincipalMapper, String> {
        let mut rules = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = take_segment(after)
                    .ok_or_else(|| format!("rule {rest:?} has no replacement"))?;
                let (replacement, after) = take_segment(after)
                    .ok_or_else(|| format!("rule {rest:?} is not closed by /"))?;
                let (case, after) = match after.chars().next() {
                    Some('L') => (Case::Lower, &after[1..]),
                    Some('U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                let anchored = format!("^(?:{pattern})$");
                let pattern = regex::Regex::new(&anchored)
                    .map_err(|e| format!("bad pattern {pattern:?}: {e}"))?;
                rules.push(Rule::Replace {
                    pattern,
                    replacement: java_replacement(&replacement),
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "{rest:?} is neither DEFAULT nor RULE:pattern/replacement/[LU]"
                ));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("expected a comma before {rest:?}")),
            }
        }
        if rules.is_empty() {
            return Err("no rules".to_string());
        }
        Ok(SslPrincipalMapper { rules })
    }

    /// The principal name for distinguished name `dn`.
    pub fn name_for(&self, dn: &str) -> Result<String, PrincipalError> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Replace {
                    pattern,
                    replacement,
                    case,
                } => {
                    if let Some(captures) = pattern.captures(dn) {
                        let mut name = String::new();
                        captures.expand(replacement, &mut name);
                        return Ok(match case {
                            Case::Keep => name,
                            Case::Lower => name.to_lowercase(),
                            Case::Upper => name.to_uppercase(),
                        });
                    }
                }
            }
        }
        Err(PrincipalError::NoMatchingRule(dn.to_string()))
    }
}

/// Takes text up to the next unescaped `/`; `\/` stands for `/`.
fn take_segment(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some((_, '/'))) => {
                out.push('/');
                chars.next();
            }
            '/' => return Some((out, &text[i + 1..])),
            _ => out.push(c),
        }
    }
    None
}

/// A Java replacement string (`$1`, `\$` for a dollar) in the `regex` crate's form (`${1}`,
/// `$$`).
fn java_replacement(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: a principal is written as Kafka's DefaultKafkaPrincipalBuilder writes it into an
    // Envelope (version 0, then DefaultPrincipalData v0: compact strings, a bool, no tags) and
    // read back; other versions and truncated bytes are not a principal.
    #[test]
    fn principals_serialize_as_kafkas_envelope_writes_them() {
        let alice = KafkaPrincipal::user("alice");
        let bytes = alice.serialize();
        assert_eq!(
            &bytes[..],
            b"\x00\x00\x05User\x06alice\x00\x00",
            "Kafka's bytes"
        );
        assert_eq!(KafkaPrincipal::deserialize(bytes.clone()), Some(alice));
        let mut other_version = bytes.to_vec();
        other_version[1] = 1;
        assert_eq!(KafkaPrincipal::deserialize(other_version.into()), None);
        assert_eq!(KafkaPrincipal::deserialize(bytes.slice(..6)), None);
        assert_eq!(KafkaPrincipal::deserialize(bytes::Bytes::new()), None);
    }

    // Shows: Kafka's documented mapping examples (SslPrincipalMapperTest): DEFAULT keeps the
    // name; a rule takes the CN, lower- or upper-cases it; the first applying rule wins; a name
    // no rule matches fails; malformed rules are refused.
    #[test]
    fn kafka_mapping_rules() {
        let dn = "CN=Duke,OU=ServiceUsers,O=Org,C=US";
        assert_eq!(SslPrincipalMapper::default().name_for(dn).unwrap(), dn);
        let cn = SslPrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,DEFAULT",
        )
        .unwrap();
        assert_eq!(cn.name_for(dn).unwrap(), "Duke");
        assert_eq!(
            cn.name_for("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US")
                .unwrap(),
            "duke@javasoft"
        );
        assert_eq!(cn.name_for("CN=other,O=x").unwrap(), "CN=other,O=x");
        let upper = SslPrincipalMapper::parse("RULE:^CN=(.*?),.*$/$1/U").unwrap();
        assert_eq!(upper.name_for(dn).unwrap(), "DUKE");
        assert_eq!(
            upper.name_for("O=no-cn"),
            Err(PrincipalError::NoMatchingRule("O=no-cn".into()))
        );
        let slash = SslPrincipalMapper::parse(r"RULE:^CN=(.*?)\/(.*?),.*$/$1\/$2/").unwrap();
        assert_eq!(slash.name_for("CN=a/b,O=x").unwrap(), "a/b");
        for bad in [
            "",
            "RULE:x",
            "RULE:x/y",
            "NOPE",
            "DEFAULT DEFAULT",
            "RULE:(/x/",
        ] {
            assert!(SslPrincipalMapper::parse(bad).is_err(), "{bad:?}");
        }
    }

    // Shows: a certificate's subject reads as Java's X500Principal.getName() writes it: the
    // most specific name first, RFC 2253 escaping, unknown attributes as #hex.
    #[test]
    fn subject_names_are_rfc2253() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "US");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc.");
        dn.push(rcgen::DnType::OrganizationalUnitName, "eng");
        dn.push(rcgen::DnType::CommonName, " alice");
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_name(cert.der()).unwrap(),
            r"CN=\ alice,OU=eng,O=Acme\, Inc.,C=US"
        );
        assert!(subject_name(b"not a certificate").is_err());
    }

    #[test]
    fn escaping_and_hex() {
        assert_eq!(escape("#a+b "), r"\#a\+b\ ");
        assert_eq!(hex_der(0x16, b"a@b"), "1603614062");
    }

    #[test]
    fn principals_print_as_kafka() {
        assert_eq!(KafkaPrincipal::user("alice").to_string(), "User:alice");
        assert_eq!(KafkaPrincipal::anonymous().to_string(), "User:ANONYMOUS");
    }
}
