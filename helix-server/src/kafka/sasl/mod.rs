//! SASL on `SASL_PLAINTEXT` and `SASL_SSL` listeners: the per-connection
//! state machine SaslHandshake (v1) and SaslAuthenticate (v0-v2) advance,
//! in request order, before any other request is served (ADR 0028).
//!
//! SaslHandshake v0 (SASL tokens as raw frames after the handshake) is not
//! served: Kafka 4 removed it (KIP-896) and every client of the last
//! years sends v1 when SaslAuthenticate is advertised.

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
pub const HANDSHAKE_VERSIONS: (i16, i16) = (1, 1);
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
        }
    }

    pub fn authenticated(&self) -> bool {
        matches!(self.state, State::Authenticated)
    }

    /// SaslHandshake: picks the mechanism. Err: not expected now (close).
    pub fn handshake(
        &mut self,
        req: &SaslHandshakeRequest,
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
                Ok(Step::Answer(resp))
            }
            None => {
                resp.error_code = code(ResponseError::UnsupportedSaslMechanism);
                Ok(Step::Fail(resp))
            }
        }
    }

    /// SaslAuthenticate: one step of the chosen mechanism. On success with
    /// the exchange complete, the authenticated user is returned too.
    /// Err: not expected now (close).
    pub fn authenticate(
        &mut self,
        req: &SaslAuthenticateRequest,
    ) -> Result<(Step<SaslAuthenticateResponse>, Option<String>), String> {
        let state = std::mem::replace(&mut self.state, State::AwaitingHandshake);
        let outcome: Result<(Bytes, Option<String>), String> = match state {
            State::AwaitingAuthenticate(Mechanism::Plain) => {
                match plain::authenticate(&self.server.credentials, &req.auth_bytes) {
                    Some(user) => Ok((Bytes::new(), Some(user))),
                    None => Err("invalid user name or password".into()),
                }
            }
            State::AwaitingAuthenticate(Mechanism::Scram(hash)) => {
                match scram::client_first(hash, &self.server.credentials, &req.auth_bytes) {
                    Ok((awaiting, reply)) => {
                        self.state = State::AwaitingScramFinal(Box::new(awaiting));
                        Ok((Bytes::from(reply), None))
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            State::AwaitingScramFinal(awaiting) => match awaiting.client_final(&req.auth_bytes) {
                Ok((user, reply)) => Ok((Bytes::from(reply), Some(user))),
                Err(e) => Err(e.to_string()),
            },
            State::AwaitingHandshake | State::Authenticated => {
                return Err("SaslAuthenticate before SaslHandshake or after authentication".into());
            }
        };
        let mut resp = SaslAuthenticateResponse::default();
        match outcome {
            Ok((bytes, user)) => {
                if user.is_some() {
                    self.state = State::Authenticated;
                }
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
