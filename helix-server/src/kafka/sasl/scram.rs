//! The server side of SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka's
//! `ScramSaslServer` runs it: client-first → server-first, client-final →
//! server-final, each carried by one SaslAuthenticate. Channel binding is
//! not offered (`n,,` only) and extensions in the client-first message are
//! accepted but unused (Kafka's `tokenauth` needs delegation tokens, which
//! Helix does not have).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use subtle::ConstantTimeEq;

use super::credentials::{Credentials, ScramCredential, ScramHash};

/// Why an exchange failed; the client only ever sees one message for all
/// of them, so a wrong password and an unknown user look alike.
#[derive(Debug, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("unknown user")]
    UnknownUser,
    #[error("invalid proof")]
    InvalidProof,
}

/// After the server-first message: what the client-final must match.
pub struct AwaitingFinal {
    user: String,
    credential: ScramCredential,
    /// client nonce + server nonce.
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

/// Reads `n=...` style attributes of a message, in order.
fn attributes(message: &str) -> impl Iterator<Item = (char, &str)> {
    message.split(',').filter_map(|a| {
        let mut chars = a.chars();
        let key = chars.next()?;
        a.get(1..)
            .and_then(|rest| rest.strip_prefix('='))
            .map(|v| (key, v))
    })
}

/// RFC 5802 §5.1: `=2C` is `,` and `=3D` is `=` in a user name.
fn decode_username(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at + 1..at + 3);
        out.push(match escape {
            Some("2C") => ',',
            Some("3D") => '=',
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The client-first message: finds the user's credential and answers the
/// server-first message.
pub fn client_first(
    hash: ScramHash,
    credentials: &Credentials,
    message: &[u8],
) -> Result<(AwaitingFinal, Vec<u8>), ScramError> {
    let message = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    // gs2-header: "n," or "y," (no channel binding), then an optional
    // authzid "a=...", then ",".
    let (cbind, rest) = message
        .split_once(',')
        .ok_or(ScramError::Malformed("no gs2 header"))?;
    if cbind != "n" && cbind != "y" {
        return Err(ScramError::Malformed("channel binding is not supported"));
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or(ScramError::Malformed("no gs2 header"))?;
    let mut user = None;
    let mut client_nonce = None;
    for (key, value) in attributes(bare) {
        match key {
            'n' if user.is_none() => user = Some(decode_username(value)?),
            'r' if client_nonce.is_none() => client_nonce = Some(value),
            'm' => return Err(ScramError::Malformed("mandatory extension")),
            _ => {} // Kafka's extensions (KIP-255)
        }
    }
    let user = user.ok_or(ScramError::Malformed("no user name"))?;
    let client_nonce = client_nonce.ok_or(ScramError::Malformed("no nonce"))?;
    if client_nonce.is_empty() {
        return Err(ScramError::Malformed("empty nonce"));
    }
    if let Some(a) = authzid.strip_prefix("a=")
        && decode_username(a)? != user
    {
        return Err(ScramError::Malformed("authorization id is not the user"));
    }
    let credential = credentials
        .scram(&user, hash)
        .ok_or(ScramError::UnknownUser)?;
    // Alphanumeric, as Kafka's (`ScramFormatter.secureRandomString`).
    let server_nonce: String = rand::random::<[u8; 24]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!(
        "r={nonce},s={},i={}",
        B64.encode(&credential.salt),
        credential.iterations
    );
    let reply = server_first.clone().into_bytes();
    Ok((
        AwaitingFinal {
            user,
            credential,
            nonce,
            client_first_bare: bare.to_string(),
            server_first,
        },
        reply,
    ))
}

impl AwaitingFinal {
    /// The client-final message: checks the proof and returns the user and
    /// the server-final message (`v=` the server signature).
    pub fn client_final(self, message: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
        let message =
            std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut channel_binding = None;
        let mut nonce = None;
        for (key, value) in attributes(without_proof) {
            match key {
                'c' if channel_binding.is_none() => channel_binding = Some(value),
                'r' if nonce.is_none() => nonce = Some(value),
                _ => {}
            }
        }
        // "biws" is base64("n,,"); "eSws" is base64("y,,").
        if !matches!(channel_binding, Some("biws") | Some("eSws")) {
            return Err(ScramError::Malformed("unexpected channel binding"));
        }
        // As Kafka, the nonce must end with the server-first one:
        // librdkafka before 2.1 sends its own nonce in front of it again.
        if !nonce.is_some_and(|n| n.ends_with(self.nonce.as_str())) {
            return Err(ScramError::Malformed("nonce does not match"));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let hash = self.credential.hash;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let client_signature = hash.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError::InvalidProof);
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        if !bool::from(hash.hash(&client_key).ct_eq(&self.credential.stored_key)) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = hash.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok((
            self.user,
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::sasl::credentials::random_salt;

    /// A client's side of the exchange, as RFC 5802 §3 computes it.
    fn client_final_for(password: &str, client_first_bare: &str, server_first: &str) -> String {
        let hash = ScramHash::Sha512;
        let mut salt = None;
        let mut iterations = 0;
        let mut nonce = "";
        for (k, v) in attributes(server_first) {
            match k {
                's' => salt = B64.decode(v).ok(),
                'i' => iterations = v.parse().unwrap_or(0),
                'r' => nonce = v,
                _ => {}
            }
        }
        let salted =
            hash.salted_password(password.as_bytes(), &salt.unwrap_or_default(), iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        let stored_key = hash.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hash.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    fn exchange(password: &str) -> Result<String, ScramError> {
        let mut creds = Credentials::default();
        creds.insert(
            "alice",
            ScramCredential::derive(ScramHash::Sha512, "right", random_salt(), 4096),
        );
        let bare = "n=alice,r=clientnonce";
        let (state, server_first) =
            client_first(ScramHash::Sha512, &creds, format!("n,,{bare}").as_bytes())?;
        let server_first = String::from_utf8(server_first).expect("utf-8");
        let last = client_final_for(password, bare, &server_first);
        state.client_final(last.as_bytes()).map(|(user, _)| user)
    }

    #[test]
    fn the_right_password_authenticates_and_a_wrong_one_does_not() {
        assert_eq!(exchange("right").expect("authenticates"), "alice");
        assert!(matches!(exchange("wrong"), Err(ScramError::InvalidProof)));
    }

    #[test]
    fn user_names_are_unescaped_as_rfc_5802_says() {
        assert_eq!(decode_username("a=2Cb=3Dc").expect("valid"), "a,b=c");
        assert!(decode_username("a=").is_err());
        assert!(decode_username("a=41").is_err());
    }

    #[test]
    fn unknown_users_and_malformed_messages_are_refused() {
        let creds = Credentials::default();
        assert!(matches!(
            client_first(ScramHash::Sha256, &creds, b"n,,n=bob,r=x"),
            Err(ScramError::UnknownUser)
        ));
        for bad in [&b""[..], b"p=tls,,n=a,r=x", b"n,,r=x", b"n,,n=a", b"\xff"] {
            assert!(client_first(ScramHash::Sha256, &creds, bad).is_err());
        }
    }
}
