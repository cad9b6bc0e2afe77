//! `sasl.jaas.config`, as Kafka clients and MirrorMaker 2 write it: one JAAS login module entry,
//! `<LoginModule class> <flag> key="value" key=value ...;`.
//!
//! Only what a client needs is read: the login module's class (which says the mechanism family)
//! and its options (`username`, `password`, `clientId`, `clientSecret`, `scope`,
//! `unsecuredLoginStringClaim_sub`, ...). Values may be double-quoted (with `\` escaping the next
//! character) or bare tokens. Errors name the position and never echo a value, since values
//! are secrets.

use super::error::ClientError;
use std::collections::BTreeMap;

/// One parsed login module entry.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasEntry {
    /// The login module's class name, e.g.
    /// `org.apache.kafka.common.security.scram.ScramLoginModule`.
    pub login_module: String,
    /// The control flag (`required`, `requisite`, `sufficient`, `optional`).
    pub flag: String,
    /// The options, by name.
    pub options: BTreeMap<String, String>,
}

impl std::fmt::Debug for JaasEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JaasEntry")
            .field("login_module", &self.login_module)
            .field("flag", &self.flag)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The login module families Kafka's clients ship.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginModule {
    /// `org.apache.kafka.common.security.plain.PlainLoginModule`.
    Plain,
    /// `org.apache.kafka.common.security.scram.ScramLoginModule`.
    Scram,
    /// `org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule` (also its old
    /// `...oauthbearer.internals` spelling).
    OAuthBearer,
}

impl JaasEntry {
    /// The login module family, from the class's simple name.
    pub fn module(&self) -> Result<LoginModule, ClientError> {
        let simple = self
            .login_module
            .rsplit('.')
            .next()
            .unwrap_or(&self.login_module);
        match simple {
            "PlainLoginModule" => Ok(LoginModule::Plain),
            "ScramLoginModule" => Ok(LoginModule::Scram),
            "OAuthBearerLoginModule" => Ok(LoginModule::OAuthBearer),
            _ => Err(ClientError::Config(format!(
                "sasl.jaas.config names login module {}; kmirror supports PlainLoginModule, \
                 ScramLoginModule and OAuthBearerLoginModule",
                self.login_module
            ))),
        }
    }

    /// An option's value.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options.get(name).map(String::as_str)
    }
}

fn bad(at: usize, what: &str) -> ClientError {
    ClientError::Config(format!(
        "sasl.jaas.config is not a JAAS login module entry: {what} at character {at}"
    ))
}

/// Parses `text` (one entry, ending with `;`).
pub fn parse(text: &str) -> Result<JaasEntry, ClientError> {
    let chars: Vec<char> = text.chars().collect();
    let mut at = 0;
    let skip_space = |at: &mut usize| {
        while *at < chars.len() && chars[*at].is_whitespace() {
            *at += 1;
        }
    };
    let token = |at: &mut usize| -> String {
        let start = *at;
        while *at < chars.len()
            && !chars[*at].is_whitespace()
            && !matches!(chars[*at], '=' | ';' | '"')
        {
            *at += 1;
        }
        chars[start..*at].iter().collect()
    };
    skip_space(&mut at);
    let login_module = token(&mut at);
    if login_module.is_empty() {
        return Err(bad(at, "a login module class is expected"));
    }
    skip_space(&mut at);
    let flag = token(&mut at);
    if !matches!(
        flag.as_str(),
        "required" | "requisite" | "sufficient" | "optional"
    ) {
        return Err(bad(
            at,
            "a control flag (required, requisite, sufficient or optional) is expected",
        ));
    }
    let mut options = BTreeMap::new();
    loop {
        skip_space(&mut at);
        match chars.get(at) {
            None => return Err(bad(at, "the entry does not end with ';'")),
            Some(';') => {
                at += 1;
                break;
            }
            Some(_) => {}
        }
        let name = token(&mut at);
        if name.is_empty() {
            return Err(bad(at, "an option name is expected"));
        }
        skip_space(&mut at);
        if chars.get(at) != Some(&'=') {
            return Err(bad(at, "'=' is expected after an option name"));
        }
        at += 1;
        skip_space(&mut at);
        let value = if chars.get(at) == Some(&'"') {
            at += 1;
            let mut value = String::new();
            loop {
                match chars.get(at) {
                    None => return Err(bad(at, "a quoted value is not closed")),
                    Some('"') => {
                        at += 1;
                        break;
                    }
                    Some('\\') => {
                        let escaped = chars.get(at + 1).ok_or_else(|| bad(at, "a lone '\\'"))?;
                        value.push(*escaped);
                        at += 2;
                    }
                    Some(c) => {
                        value.push(*c);
                        at += 1;
                    }
                }
            }
            value
        } else {
            let value = token(&mut at);
            if value.is_empty() {
                return Err(bad(at, "a value is expected after '='"));
            }
            value
        };
        options.insert(name, value);
    }
    skip_space(&mut at);
    if at < chars.len() {
        return Err(bad(
            at,
            "only one login module entry is expected; text follows its ';'",
        ));
    }
    Ok(JaasEntry {
        login_module,
        flag,
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_scram_entry_is_read_with_its_quoted_options() {
        let entry = parse(
            "org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"alice\" password=\"se;cr\\\"et\";",
        )
        .expect("parses");
        assert_eq!(entry.module().expect("known"), LoginModule::Scram);
        assert_eq!(entry.flag, "required");
        assert_eq!(entry.option("username"), Some("alice"));
        assert_eq!(entry.option("password"), Some("se;cr\"et"));
    }

    #[test]
    fn bare_values_and_line_breaks_are_read() {
        let entry = parse(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required\n  \
             clientId=mirror clientSecret=\"s3cret\"\n  scope=kafka ;  ",
        )
        .expect("parses");
        assert_eq!(entry.module().expect("known"), LoginModule::OAuthBearer);
        assert_eq!(entry.option("clientId"), Some("mirror"));
        assert_eq!(entry.option("scope"), Some("kafka"));
    }

    #[test]
    fn malformed_entries_are_refused_without_echoing_secrets() {
        for (text, reason) in [
            ("", "login module class"),
            ("x.PlainLoginModule", "control flag"),
            ("x.PlainLoginModule maybe username=\"a\";", "control flag"),
            ("x.PlainLoginModule required username=\"a\"", "does not end"),
            (
                "x.PlainLoginModule required password=\"hunter2",
                "not closed",
            ),
            ("x.PlainLoginModule required password hunter2;", "'='"),
            ("x.PlainLoginModule required a=b; y.Z required;", "only one"),
        ] {
            let error = parse(text).expect_err(text).to_string();
            assert!(error.contains(reason), "{text:?}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
        let unknown = parse("com.example.KerberosLoginModule required;").expect("parses");
        assert!(unknown.module().is_err());
    }
}
