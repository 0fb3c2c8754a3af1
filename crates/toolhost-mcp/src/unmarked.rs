//! Requests toolhost sends to clients, with no progress token they did not
//! ask for.
//!
//! rmcp puts a fresh `_meta.progressToken` on every request a peer sends,
//! `elicitation/create` included. A question asked during a call that had
//! no progress token must not carry one: a client would take it as an
//! invitation to expect progress that never comes. The handler marks such
//! a request ([`NoProgressToken`], in its extensions, which are never
//! serialized), and the transport wrapper here ([`Unmarked`]) takes the
//! token off marked requests on their way out, for stdio and, through
//! [`UnmarkedSessions`], for every streamable HTTP session.
//!
//! This module must not change anything else about a message: the
//! extensions that route a request to its originating SSE stream stay.

use futures::Stream;
use rmcp::model::{
    ClientJsonRpcMessage, GetExtensions as _, GetMeta as _, JsonRpcMessage, ServerJsonRpcMessage,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use std::sync::Arc;

/// Marks a request to a client that must go without a progress token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoProgressToken;

/// Takes the progress token off a marked request.
fn unmark(mut item: TxJsonRpcMessage<RoleServer>) -> TxJsonRpcMessage<RoleServer> {
    if let JsonRpcMessage::Request(r) = &mut item
        && r.request.extensions().get::<NoProgressToken>().is_some()
    {
        let meta = r.request.get_meta_mut();
        meta.0.remove("progressToken");
        if meta.0.is_empty() {
            // No `_meta: {}` on the wire either.
            r.request
                .extensions_mut()
                .remove::<rmcp::model::RequestMetaObject>();
        }
    }
    item
}

/// A server transport that sends marked requests without their progress
/// token, and passes everything else through.
#[derive(Debug)]
pub struct Unmarked<T>(pub T);

impl<T: Transport<RoleServer>> Transport<RoleServer> for Unmarked<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.0.send(unmark(item))
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.0.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.close()
    }
}

/// rmcp's local session manager, with every session's transport
/// [`Unmarked`].
#[derive(Debug, Clone)]
pub struct UnmarkedSessions(pub Arc<LocalSessionManager>);

type Local = LocalSessionManager;
type LocalError = <Local as SessionManager>::Error;

impl SessionManager for UnmarkedSessions {
    type Error = LocalError;
    type Transport = Unmarked<<Local as SessionManager>::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.0.create_session().await?;
        Ok((id, Unmarked(transport)))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.0.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.0.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.0.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.0.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.0.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.0.restore_session(id).await? {
            RestoreOutcome::Restored(t) => RestoreOutcome::Restored(Unmarked(t)),
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            // NotSupported, and whatever a later rmcp adds: a 404, as
            // for a session this manager never knew.
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(
        &self,
    ) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::EventStore>> {
        self.0.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ElicitRequest, ElicitRequestParams, NumberOrString, ServerRequest};

    fn question(marked: bool) -> TxJsonRpcMessage<RoleServer> {
        let params: ElicitRequestParams = serde_json::from_value(serde_json::json!({
            "message": "go on?",
            "requestedSchema": { "type": "object", "properties": {} }
        }))
        .expect("elicitation params");
        let mut request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        request
            .get_meta_mut()
            .set_progress_token(rmcp::model::ProgressToken(NumberOrString::Number(0)));
        if marked {
            request.extensions_mut().insert(NoProgressToken);
        }
        JsonRpcMessage::request(request, rmcp::model::RequestId::Number(1))
    }

    #[test]
    fn a_marked_question_loses_its_token_and_an_unmarked_one_keeps_it() {
        let wire = |m| serde_json::to_value(unmark(m)).expect("serializes");
        let marked = wire(question(true));
        assert!(
            marked["params"]
                .get("_meta")
                .is_none_or(|m| m.get("progressToken").is_none()),
            "{marked}"
        );
        let kept = wire(question(false));
        assert_eq!(kept["params"]["_meta"]["progressToken"], 0, "{kept}");
    }
}
