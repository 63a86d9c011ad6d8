//! SASL/PLAIN (RFC 4616): `[authzid] NUL authcid NUL password`, checked
//! against the user's salted SCRAM credential (ADR 0028), so no clear
//! password is stored.

use super::credentials::Credentials;

/// Most bytes of a PLAIN message: two names and a password.
const MAX_MESSAGE: usize = 4096;

/// The authenticated user, or None.
pub fn authenticate(credentials: &Credentials, message: &[u8]) -> Option<String> {
    if message.len() > MAX_MESSAGE {
        return None;
    }
    let text = std::str::from_utf8(message).ok()?;
    let mut parts = text.split('\0');
    let (authzid, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || user.is_empty() {
        return None;
    }
    // As Kafka: an authorization id, if given, must be the user itself.
    if !authzid.is_empty() && authzid != user {
        return None;
    }
    credentials
        .check_password(user, password)
        .then(|| user.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::sasl::credentials::{ScramCredential, ScramHash, random_salt};

    #[test]
    fn plain_checks_the_password_against_the_salted_credential() {
        let mut creds = Credentials::default();
        creds.insert(
            "alice",
            ScramCredential::derive(ScramHash::Sha256, "pw", random_salt(), 4096),
        );
        assert_eq!(
            authenticate(&creds, b"\0alice\0pw").as_deref(),
            Some("alice")
        );
        assert_eq!(
            authenticate(&creds, b"alice\0alice\0pw").as_deref(),
            Some("alice")
        );
        assert_eq!(authenticate(&creds, b"\0alice\0nope"), None);
        assert_eq!(authenticate(&creds, b"bob\0alice\0pw"), None);
        assert_eq!(authenticate(&creds, b"\0alice"), None);
    }
}
