//! Kafka's inline JAAS configuration (`sasl.jaas.config` and its listener and mechanism
//! prefixed forms): `<LoginModule> <flag> key="value" ...;`, one or more entries
//! (Kafka: `org.apache.kafka.common.security.JaasConfig`, a `StreamTokenizer` with `//` and
//! `/* */` comments; unquoted values are words of letters, digits, `-`, `_`, `$` and `.`).

use std::collections::BTreeMap;

/// One login module entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaasEntry {
    /// The login module class, e.g. `org.apache.kafka.common.security.plain.PlainLoginModule`.
    pub module: String,
    /// `required`, `requisite`, `sufficient` or `optional` (lower-cased).
    pub flag: String,
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Symbol(char),
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            if i + 1 >= chars.len() {
                return Err("unclosed /* comment".into());
            }
            i += 2;
        } else if c == '"' || c == '\'' {
            let quote = c;
            let mut value = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err("unclosed quoted value".into()),
                    Some(&q) if q == quote => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        if let Some(&next) = chars.get(i + 1) {
                            value.push(next);
                        }
                        i += 2;
                    }
                    Some(&other) => {
                        value.push(other);
                        i += 1;
                    }
                }
            }
            out.push(Token::Quoted(value));
        } else if c.is_alphanumeric() || matches!(c, '-' | '_' | '$' | '.') {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || matches!(chars[i], '-' | '_' | '$' | '.'))
            {
                i += 1;
            }
            out.push(Token::Word(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Symbol(c));
            i += 1;
        }
    }
    Ok(out)
}

/// Parses a JAAS configuration; an error says what is wrong (never echoing option values,
/// which may be passwords).
pub fn parse(text: &str) -> Result<Vec<JaasEntry>, String> {
    let tokens = tokens(text)?;
    let mut entries = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let module = match &tokens[i] {
            Token::Word(w) => w.clone(),
            _ => return Err("expected a login module class name".into()),
        };
        i += 1;
        let flag = match tokens.get(i) {
            Some(Token::Word(w)) => w.to_ascii_lowercase(),
            _ => {
                return Err(format!(
                    "login module control flag not specified for {module}"
                ))
            }
        };
        if !matches!(
            flag.as_str(),
            "required" | "requisite" | "sufficient" | "optional"
        ) {
            return Err(format!("invalid login module control flag {flag:?}"));
        }
        i += 1;
        let mut options = BTreeMap::new();
        loop {
            match tokens.get(i) {
                None => return Err(format!("the entry of {module} does not end with ';'")),
                Some(Token::Symbol(';')) => {
                    i += 1;
                    break;
                }
                Some(Token::Word(key)) => {
                    if tokens.get(i + 1) != Some(&Token::Symbol('=')) {
                        return Err(format!("value not specified for key {key:?}"));
                    }
                    let value = match tokens.get(i + 2) {
                        Some(Token::Quoted(v)) | Some(Token::Word(v)) => v.clone(),
                        _ => return Err(format!("value not specified for key {key:?}")),
                    };
                    options.insert(key.clone(), value);
                    i += 3;
                }
                Some(_) => return Err(format!("unexpected symbol in the entry of {module}")),
            }
        }
        entries.push(JaasEntry {
            module,
            flag,
            options,
        });
    }
    if entries.is_empty() {
        return Err("login module not specified".into());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: Kafka's documented broker and client JAAS lines parse — quoted and bare values,
    // several options, comments, several entries; malformed lines are refused without the
    // values in the message.
    #[test]
    fn kafka_jaas_lines() {
        let entries = parse(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required
               username="admin" password="admin-secret" // the broker's own
               user_admin="admin-secret" user_alice="alice;secret=1";"#,
        )
        .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].flag, "required");
        assert_eq!(entries[0].options["user_alice"], "alice;secret=1");
        assert_eq!(entries[0].options["username"], "admin");
        let two = parse("a.B required x=1; /* c */ org.C optional y=\"2\";").unwrap();
        assert_eq!(two[1].module, "org.C");
        assert_eq!(two[0].options["x"], "1");
        for bad in [
            "",
            "Module",
            "Module maybe;",
            "Module required key;",
            "Module required key=\"unclosed;",
            "Module required key=\"v\"",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(!err.contains("unclosed;"), "{err}");
        }
    }
}
