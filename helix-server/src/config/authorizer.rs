//! The authorizer's settings (ADR 0028, slice 2), under Kafka's names:
//! `authorizer.class.name`, `super.users`,
//! `allow.everyone.if.no.acl.found`.

use crate::error::{HelixError, Result};

/// Names that turn the authorizer on: Helix's own and Kafka's class names,
/// so a Kafka `server.properties` value can be copied.
pub const AUTHORIZER_NAMES: &[&str] = &[
    "standard",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];

/// Default: no authorizer, every request allowed (Kafka without
/// `authorizer.class.name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// `authorizer = "standard"` (or a Kafka class name); `none` or empty
    /// turns it off.
    pub enabled: bool,
    /// Principals allowed everything (`User:admin;User:CN=ops`).
    pub super_users: Vec<String>,
    /// A resource no ACL covers is open to everyone (default false).
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Reads `authorizer`: one of [`AUTHORIZER_NAMES`], or `none` / empty.
    pub fn set_authorizer(&mut self, name: &str) -> Result<()> {
        let name = name.trim();
        self.enabled = match name {
            "" | "none" => false,
            n if AUTHORIZER_NAMES.contains(&n) => true,
            other => {
                return Err(HelixError::Config(format!(
                    "authorizer: {other:?} is not one of none, {}",
                    AUTHORIZER_NAMES.join(", ")
                )));
            }
        };
        Ok(())
    }

    /// Reads `super_users`: principals separated by `;`, each `Type:Name`.
    pub fn set_super_users(&mut self, text: &str) -> Result<()> {
        let mut users = Vec::new();
        for p in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            if !p.contains(':') {
                return Err(HelixError::Config(format!(
                    "super_users: {p:?} is not a principal (Type:Name, e.g. User:admin)"
                )));
            }
            users.push(p.to_string());
        }
        self.super_users = users;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_turn_the_authorizer_on_and_super_users_split_on_semicolons() {
        let mut c = AuthorizerConfig::default();
        c.set_authorizer("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
            .expect("kafka class name");
        assert!(c.enabled);
        c.set_authorizer("none").expect("none");
        assert!(!c.enabled);
        assert!(c.set_authorizer("com.example.Mine").is_err());
        c.set_super_users("User:admin; User:CN=ops,O=x ;")
            .expect("users");
        assert_eq!(c.super_users, vec!["User:admin", "User:CN=ops,O=x"]);
        assert!(c.set_super_users("admin").is_err());
    }
}
