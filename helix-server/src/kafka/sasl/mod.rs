//! SASL on `SASL_PLAINTEXT` and `SASL_SSL` listeners: the per-connection
//! state machine SaslHandshake (v1) and SaslAuthenticate (v0-v2) advance,
//! in request order, before any other request is served (ADR 0028).
//!
//! After a SaslHandshake v0 the client sends the mechanism's tokens as
//! bare length-prefixed frames, not SaslAuthenticate requests, and a failure
//! closes the connection without an answer ([`SaslSession::raw_token`]);
//! librdkafka before 2.x only uses SaslAuthenticate when SaslHandshake is
//! advertised from v0, so v0 is served too.

pub mod credentials;
pub mod plain;
pub mod scram;

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};

use self::credentials::{Credentials, ScramHash};
use self::scram::AwaitingFinal;
use crate::error::code;

/// The versions served (`api_versions` advertises them on SASL listeners only).
pub const HANDSHAKE_VERSIONS: (i16, i16) = (0, 1);
/// Most bytes of one SASL token (PLAIN and SCRAM messages are far smaller).
pub const MAX_TOKEN: usize = 64 * 1024;
pub const AUTHENTICATE_VERSIONS: (i16, i16) = (0, 2);

/// What a SASL listener offers: the enabled mechanisms and the users.
#[derive(Debug)]
pub struct SaslServer {
    pub mechanisms: Vec<String>,
    pub credentials: Credentials,
}

/// A mechanism chosen by SaslHandshake.
#[derive(Debug, Clone, Copy)]
enum Mechanism {
    Plain,
    Scram(ScramHash),
}

/// Where a connection's authentication stands.
enum State {
    AwaitingHandshake,
    AwaitingAuthenticate(Mechanism),
    AwaitingScramFinal(Box<AwaitingFinal>),
    Authenticated,
}

/// One connection's SASL exchange.
pub struct SaslSession {
    server: Arc<SaslServer>,
    state: State,
    /// SaslHandshake v0 chose the mechanism: tokens come as bare frames.
    raw_tokens: bool,
}

/// What the connection does with a SASL request's answer.
pub enum Step<T> {
    /// Answer and go on.
    Answer(T),
    /// Answer after the failed-authentication delay, then close.
    Fail(T),
}

impl SaslSession {
    pub fn new(server: Arc<SaslServer>) -> Self {
        SaslSession {
            server,
            state: State::AwaitingHandshake,
            raw_tokens: false,
        }
    }

    /// The next frame is a bare SASL token (after SaslHandshake v0).
    pub fn expects_raw_token(&self) -> bool {
        self.raw_tokens && !self.authenticated()
    }

    pub fn authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated)
    }

    /// SaslHandshake: picks the mechanism. Err: not expected now (close).
    pub fn handshake(
        &mut self,
        req: &SaslHandshakeRequest,
        version: i16,
    ) -> Result<Step<SaslHandshakeResponse>, String> {
        if !matches!(self.state, State::AwaitingHandshake) {
            return Err("SaslHandshake after the mechanism was chosen".into());
        }
        let mut resp = SaslHandshakeResponse::default();
        resp.mechanisms = self
            .server
            .mechanisms
            .iter()
            .map(|m| super::wire_str(m))
            .collect();
        let name = req.mechanism.as_str();
        let mechanism = if !self.server.mechanisms.iter().any(|m| m == name) {
            None
        } else if name == "PLAIN" {
            Some(Mechanism::Plain)
        } else {
            ScramHash::of_mechanism(name).map(Mechanism::Scram)
        };
        match mechanism {
            Some(m) => {
                self.state = State::AwaitingAuthenticate(m);
                self.raw_tokens = version == 0;
                Ok(Step::Answer(resp))
            }
            None => {
                resp.error_code = code(ResponseError::UnsupportedSaslMechanism);
                Ok(Step::Fail(resp))
            }
        }
    }

    /// A bare token after SaslHandshake v0: the reply token, and the user
    /// once authenticated. Err: failed (the connection closes unanswered).
    pub fn raw_token(&mut self, token: &[u8]) -> Result<(Bytes, Option<String>), String> {
        let outcome = self.exchange(token);
        if let Err(why) = &outcome {
            tracing::info!(reason = %why, "SASL authentication failed");
        }
        outcome
    }

    /// One step of the chosen mechanism: the reply, and the user when the
    /// exchange is complete.
    fn exchange(&mut self, token: &[u8]) -> Result<(Bytes, Option<String>), String> {
        let state = std::mem::replace(&mut self.state, State::AwaitingHandshake);
        let outcome = match state {
            State::AwaitingAuthenticate(Mechanism::Plain) => {
                match plain::authenticate(&self.server.credentials, token) {
                    Some(user) => Ok((Bytes::new(), Some(user))),
                    None => Err("invalid user name or password".into()),
                }
            }
            State::AwaitingAuthenticate(Mechanism::Scram(hash)) => {
                match scram::client_first(hash, &self.server.credentials, token) {
                    Ok((awaiting, reply)) => {
                        self.state = State::AwaitingScramFinal(Box::new(awaiting));
                        Ok((Bytes::from(reply), None))
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            State::AwaitingScramFinal(awaiting) => match awaiting.client_final(token) {
                Ok((user, reply)) => Ok((Bytes::from(reply), Some(user))),
                Err(e) => Err(e.to_string()),
            },
            State::AwaitingHandshake | State::Authenticated => {
                Err("a SASL token before SaslHandshake or after authentication".into())
            }
        };
        if let Ok((_, Some(_))) = &outcome {
            self.state = State::Authenticated;
        }
        outcome
    }

    /// SaslAuthenticate: one step of the chosen mechanism. On success with
    /// the exchange complete, the authenticated user is returned too.
    /// Err: not expected now (close).
    pub fn authenticate(
        &mut self,
        req: &SaslAuthenticateRequest,
    ) -> Result<(Step<SaslAuthenticateResponse>, Option<String>), String> {
        if self.raw_tokens || matches!(self.state, State::AwaitingHandshake | State::Authenticated)
        {
            return Err("SaslAuthenticate before SaslHandshake v1 or after authentication".into());
        }
        let outcome = self.exchange(&req.auth_bytes);
        let mut resp = SaslAuthenticateResponse::default();
        match outcome {
            Ok((bytes, user)) => {
                resp.auth_bytes = bytes;
                Ok((Step::Answer(resp), user))
            }
            Err(why) => {
                // The reason is logged by the caller, never sent: the
                // client learns only that authentication failed.
                tracing::info!(reason = %why, "SASL authentication failed");
                resp.error_code = code(ResponseError::SaslAuthenticationFailed);
                resp.error_message = Some(super::wire_str(
                    "Authentication failed: invalid credentials",
                ));
                Ok((Step::Fail(resp), None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::credentials::{ScramCredential, random_salt};
    use super::*;

    fn session() -> SaslSession {
        let mut credentials = Credentials::default();
        credentials.insert(
            "alice",
            ScramCredential::derive(ScramHash::Sha512, "pw", random_salt(), 4096),
        );
        SaslSession::new(Arc::new(SaslServer {
            mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-512".into()],
            credentials,
        }))
    }

    fn handshake(s: &mut SaslSession, mechanism: &str, version: i16) -> bool {
        let req = SaslHandshakeRequest::default().with_mechanism(super::super::wire_str(mechanism));
        matches!(s.handshake(&req, version), Ok(Step::Answer(_)))
    }

    fn authenticate(s: &mut SaslSession, bytes: &'static [u8]) -> Option<bool> {
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(bytes));
        match s.authenticate(&req).ok()? {
            (Step::Answer(_), _) => Some(true),
            (Step::Fail(r), _) => {
                assert_eq!(r.error_code, 58);
                Some(false)
            }
        }
    }

    #[test]
    fn plain_over_sasl_authenticate_authenticates_once() {
        let mut s = session();
        assert!(!s.authenticated());
        assert!(handshake(&mut s, "PLAIN", 1));
        assert_eq!(authenticate(&mut s, b"\0alice\0pw"), Some(true));
        assert!(s.authenticated());
        assert_eq!(authenticate(&mut s, b"\0alice\0pw"), None, "not twice");
    }

    #[test]
    fn a_wrong_password_or_a_disabled_mechanism_fails() {
        let mut s = session();
        assert!(handshake(&mut s, "PLAIN", 1));
        assert_eq!(authenticate(&mut s, b"\0alice\0nope"), Some(false));
        assert!(!s.authenticated());
        let mut s = session();
        assert!(!handshake(&mut s, "SCRAM-SHA-256", 1));
        assert!(!handshake(&mut s, "GSSAPI", 1));
    }

    #[test]
    fn handshake_v0_takes_bare_tokens_and_refuses_sasl_authenticate() {
        let mut s = session();
        assert!(handshake(&mut s, "PLAIN", 0));
        assert!(s.expects_raw_token());
        assert_eq!(authenticate(&mut s, b"\0alice\0pw"), None);
        assert!(s.raw_token(b"\0alice\0pw").is_ok());
        assert!(s.authenticated() && !s.expects_raw_token());
    }
}
