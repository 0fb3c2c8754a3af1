//! The `Admin` service.

use crate::requests::{Source, bounded_values, source_of};
use crate::status::{config_items, plugin_status, status_of};
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use toolhost_calls::{Tasks, TokenTable};
use toolhost_catalog::Store;
use toolhost_lifecycle::{Lifecycle, LifecycleError};
use toolhost_managed::{LinkStatus, Managed, binding_from_proto, snapshot_to_proto};
use toolhost_pipeline::Binding;
use toolhost_proto::admin as pb;
use toolhost_proto::admin::admin_server::Admin;
use toolhost_runtime::Plugins;

/// The response metadata key that says what a refusal means when its
/// status code alone could mean more than one thing.
pub const OUTCOME_KEY: &str = "toolhost-outcome";

/// [`OUTCOME_KEY`]'s value on an install or upgrade that succeeded and now
/// waits only for configuration values (`FAILED_PRECONDITION`).
pub const NEEDS_CONFIG: &str = "needs-config";

/// What the admin API works on: a narrow view of each part of the daemon
/// it serves, handed over by the daemon that owns them.
pub struct AdminState {
    /// The catalog, as served now.
    pub store: Arc<Store>,
    /// Where pushes go: `Some` in managed mode only.
    pub managed: Option<Arc<Managed>>,
    /// Supervised plugins.
    pub plugins: Arc<Plugins>,
    /// Install, upgrade, enable, disable, remove.
    pub lifecycle: Arc<Lifecycle>,
    /// HTTP bearer tokens.
    pub tokens: Arc<TokenTable>,
    /// The tool calls run as MCP tasks.
    pub tasks: Arc<Tasks>,
    /// The operator's policy over calls, and the approvals waiting for
    /// the operator.
    pub policy: Arc<toolhost_policy::OperatorPolicy>,
    /// How many MCP sessions and subscriptions listen for list changes.
    pub sessions: Arc<dyn Fn() -> usize + Send + Sync>,
    /// The fleet link, when the catalog comes through NATS.
    pub fleet: Option<Arc<dyn LinkStatus>>,
}

impl AdminState {
    /// What `ListPlugins` and the count by state read.
    fn listing(&self) -> crate::listing::Sources<'_> {
        crate::listing::Sources {
            lifecycle: &self.lifecycle,
            plugins: &self.plugins,
            store: &self.store,
            policy: &self.policy,
        }
    }
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("managed", &self.managed.is_some())
            .finish_non_exhaustive()
    }
}

fn lifecycle_status(e: LifecycleError) -> Status {
    let message = e.to_string();
    match e {
        LifecycleError::Invalid { .. } | LifecycleError::Unreadable { .. } => {
            Status::invalid_argument(message)
        }
        LifecycleError::NotFound { .. } | LifecycleError::NothingHeld { .. } => {
            Status::not_found(message)
        }
        // Installed, and waiting only for its configuration: a success with
        // a next step. Marked so a client never mistakes another refusal
        // for it.
        LifecycleError::NeedsConfig { .. } => {
            let mut s = Status::failed_precondition(message);
            s.metadata_mut().insert(
                OUTCOME_KEY,
                tonic::metadata::MetadataValue::from_static(NEEDS_CONFIG),
            );
            s
        }
        LifecycleError::Managed
        | LifecycleError::NotManaged
        | LifecycleError::Static { .. }
        | LifecycleError::AlreadyThere { .. }
        | LifecycleError::Downgrade { .. }
        | LifecycleError::NotReviewed { .. } => Status::failed_precondition(message),
        LifecycleError::StartFailed { .. } => Status::aborted(message),
        LifecycleError::Untrusted { .. } => Status::permission_denied(message),
        LifecycleError::Registry { .. } => Status::failed_precondition(message),
        LifecycleError::Io { .. } => Status::internal(message),
    }
}

/// The shortest token `BindSession` binds.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The `toolhost.admin.v1.Admin` implementation.
#[derive(Debug, Clone)]
pub struct AdminService {
    state: Arc<AdminState>,
}

impl AdminService {
    /// A service over the daemon's state.
    #[must_use]
    pub fn new(state: Arc<AdminState>) -> Self {
        Self { state }
    }

    /// The running plugins, whose processes the Unix socket refuses.
    pub(crate) fn plugins(&self) -> Arc<Plugins> {
        Arc::clone(&self.state.plugins)
    }

    /// A lifecycle operation's answer: the revision it produced, in the
    /// current generation, or its error as a gRPC status.
    fn lifecycle_answer(
        &self,
        done: Result<u64, LifecycleError>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let revision = done.map_err(lifecycle_status)?;
        let generation = self.state.store.current().generation().to_owned();
        Ok(Response::new(pb::LifecycleResponse {
            generation,
            revision,
            ..Default::default()
        }))
    }

    /// The answer to an upgrade (or its acceptance, or a dry run): the
    /// revision, what it changes, and why it is held when it is.
    fn upgrade_answer(
        &self,
        done: Result<toolhost_lifecycle::Upgraded, LifecycleError>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let done = done.map_err(lifecycle_status)?;
        let mut answer = self.lifecycle_answer(Ok(done.revision))?;
        answer.get_mut().changes = done.changes;
        answer.get_mut().held = done.held.unwrap_or_default();
        answer.get_mut().plugin = done.id;
        answer.get_mut().source = done.source.unwrap_or_default();
        Ok(answer)
    }
}

fn binding_of(b: Option<pb::SessionBinding>) -> Result<Binding, Status> {
    let b = b.ok_or_else(|| Status::invalid_argument("binding is required"))?;
    binding_from_proto(b).map_err(Status::invalid_argument)
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::Event, Status>> + Send>>;

#[tonic::async_trait]
impl Admin for AdminService {
    async fn push_catalog(
        &self,
        request: Request<pb::PushCatalogRequest>,
    ) -> Result<Response<pb::PushCatalogResponse>, Status> {
        let Some(managed) = &self.state.managed else {
            return Err(Status::failed_precondition(
                "toolhost builds its own catalog from the installed plugins; set [backend] managed = true to accept pushes",
            ));
        };
        let snapshot = request
            .into_inner()
            .snapshot
            .ok_or_else(|| Status::invalid_argument("snapshot is required"))?;
        let answer = managed
            .offer(snapshot)
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(answer))
    }

    async fn get_catalog(
        &self,
        _: Request<pb::GetCatalogRequest>,
    ) -> Result<Response<pb::Snapshot>, Status> {
        Ok(Response::new(snapshot_to_proto(
            &self.state.store.current().to_snapshot(),
        )))
    }

    async fn accept_contract(
        &self,
        request: Request<pb::AcceptContractRequest>,
    ) -> Result<Response<pb::AcceptContractResponse>, Status> {
        let r = request.into_inner();
        let (tool, reviewed) = (r.tool, r.contract);
        if self.state.managed.is_none() {
            return Err(lifecycle_status(LifecycleError::NotManaged));
        }
        let catalog = self.state.store.current();
        // The name is the caller's: looked up, and repeated only when it
        // names a tool of the catalog.
        let Some(entry) = catalog.get(&tool) else {
            return Err(Status::not_found(
                "no tool by that name is in the catalog (toolhost tools lists them)",
            ));
        };
        let held = entry
            .defect()
            .is_some_and(|r| r.starts_with(toolhost_catalog::HELD_FOR_THE_OPERATOR));
        if !held {
            return Err(Status::failed_precondition(format!(
                "{tool} is not held for the operator: only a pushed tool whose texts differ from its plugin's \
                 declaration, under contract_changes = \"hold\", is"
            )));
        }
        let d = &entry.descriptor;
        let contract = entry.contract_fingerprint();
        // The operator accepts what they read, not whatever the backend
        // pushed after: the fingerprint they were shown must be the one
        // held now.
        if reviewed.trim().is_empty() {
            return Err(Status::failed_precondition(format!(
                "say which contract of {tool} you reviewed: toolhost catalog accept {tool} --contract {contract} \
                 (toolhost status names the held contract and its texts)"
            )));
        }
        if !reviewed.trim().eq_ignore_ascii_case(&contract) {
            return Err(Status::failed_precondition(format!(
                "the contract pushed for {tool} is now {contract}, not the one you named: the backend pushed other \
                 texts after your review. Read them (toolhost status) before you accept"
            )));
        }
        let (title, description) = (d.title.clone().unwrap_or_default(), d.description.clone());
        drop(catalog);
        let lifecycle = &self.state.lifecycle;
        lifecycle
            .accept_contract(&tool, &contract)
            .map_err(lifecycle_status)?;
        self.state.store.rejudge(&lifecycle.installed().load());
        let now = self.state.store.current();
        Ok(Response::new(pb::AcceptContractResponse {
            contract,
            title,
            description,
            generation: now.generation().to_owned(),
            revision: now.revision(),
        }))
    }

    async fn bind_session(
        &self,
        request: Request<pb::BindSessionRequest>,
    ) -> Result<Response<pb::BindSessionResponse>, Status> {
        let r = request.into_inner();
        if r.token.len() < MIN_TOKEN_BYTES {
            return Err(Status::invalid_argument(format!(
                "a token must be at least {MIN_TOKEN_BYTES} characters (docs/CONTRACT.md §3): a shorter one could be guessed"
            )));
        }
        self.state.tokens.bind(&r.token, binding_of(r.binding)?);
        Ok(Response::new(pb::BindSessionResponse {}))
    }

    async fn revoke_session(
        &self,
        request: Request<pb::RevokeSessionRequest>,
    ) -> Result<Response<pb::RevokeSessionResponse>, Status> {
        let revoked = self.state.tokens.revoke(&request.into_inner().token);
        Ok(Response::new(pb::RevokeSessionResponse { revoked }))
    }

    async fn list_plugins(
        &self,
        request: Request<pb::ListPluginsRequest>,
    ) -> Result<Response<pb::ListPluginsResponse>, Status> {
        crate::listing::list_plugins(&self.state.listing(), request.get_ref()).map(Response::new)
    }

    async fn install_plugin(
        &self,
        request: Request<pb::InstallPluginRequest>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let r = request.into_inner();
        let set = bounded_values(r.values)?;
        let lifecycle = &self.state.lifecycle;
        match source_of(&r.path, &r.reference)? {
            Source::Path(path) => self.lifecycle_answer(lifecycle.install(&path, &set).await),
            Source::Reference(reference) => {
                let done = lifecycle
                    .install_reference(&reference, &set)
                    .await
                    .map_err(lifecycle_status)?;
                let mut answer = self.lifecycle_answer(Ok(done.revision))?;
                answer.get_mut().plugin = done.id;
                answer.get_mut().source = done.source;
                Ok(answer)
            }
        }
    }

    async fn upgrade_plugin(
        &self,
        request: Request<pb::UpgradePluginRequest>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let r = request.into_inner();
        let set = bounded_values(r.values)?;
        let lifecycle = &self.state.lifecycle;
        let options = toolhost_lifecycle::UpgradeOptions {
            allow_downgrade: r.allow_downgrade,
        };
        let done = match source_of(&r.path, &r.reference)? {
            Source::Reference(reference) => {
                lifecycle
                    .upgrade_reference(&reference, &set, options, r.dry_run)
                    .await
            }
            Source::Path(path) if r.dry_run => lifecycle.upgrade_preview(&path, options).await,
            Source::Path(path) => lifecycle.upgrade_reporting(&path, &set, options).await,
        };
        self.upgrade_answer(done)
    }

    async fn accept_upgrade(
        &self,
        request: Request<pb::AcceptUpgradeRequest>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let r = request.into_inner();
        let set = bounded_values(r.values)?;
        let nonempty = |s: String| (!s.trim().is_empty()).then_some(s);
        let reviewed = toolhost_lifecycle::Reviewed {
            version: nonempty(r.version),
            statement: nonempty(r.statement),
        };
        let done = self.state.lifecycle.accept(&r.id, &reviewed, &set).await;
        self.upgrade_answer(done)
    }

    async fn place_plugins(
        &self,
        request: Request<pb::Placement>,
    ) -> Result<Response<pb::PlacementStatus>, Status> {
        let placement =
            crate::placement::from_proto(request.into_inner()).map_err(Status::invalid_argument)?;
        let status = self.state.lifecycle.apply_placement(placement).await;
        Ok(Response::new(crate::placement::to_proto(status)))
    }

    async fn reject_upgrade(
        &self,
        request: Request<pb::PluginRef>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let id = request.into_inner().id;
        let lifecycle = &self.state.lifecycle;
        let done = lifecycle
            .reject(&id)
            .await
            .map(|_| self.state.store.current().revision());
        self.lifecycle_answer(done)
    }

    async fn enable_plugin(
        &self,
        request: Request<pb::PluginRef>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let id = request.into_inner().id;
        self.lifecycle_answer(self.state.lifecycle.enable(&id).await)
    }

    async fn disable_plugin(
        &self,
        request: Request<pb::PluginRef>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let id = request.into_inner().id;
        self.lifecycle_answer(self.state.lifecycle.disable(&id).await)
    }

    async fn remove_plugin(
        &self,
        request: Request<pb::RemovePluginRequest>,
    ) -> Result<Response<pb::LifecycleResponse>, Status> {
        let r = request.into_inner();
        self.lifecycle_answer(self.state.lifecycle.remove(&r.id, r.purge).await)
    }

    async fn set_plugin_config(
        &self,
        request: Request<pb::SetPluginConfigRequest>,
    ) -> Result<Response<pb::SetPluginConfigResponse>, Status> {
        let r = request.into_inner();
        // Bounded before anything is looked up or named in an error: ids
        // are at most 64 bytes, item names at most 64, and a plugin
        // declares at most 64 items.
        if r.id.len() > 64
            || r.values.len() + r.unset.len() > 128
            || r.values.keys().chain(&r.unset).any(|n| n.len() > 64)
        {
            return Err(Status::invalid_argument(
                "id and item names are at most 64 bytes, and at most 128 items per call",
            ));
        }
        let set: std::collections::BTreeMap<String, String> = r.values.into_iter().collect();
        let (revision, items) = self
            .state
            .lifecycle
            .set_config(&r.id, &set, &r.unset)
            .await
            .map_err(lifecycle_status)?;
        let state = self
            .state
            .lifecycle
            .info(&r.id)
            .map(|info| {
                let handle = self.state.plugins.get(&info.id);
                plugin_status(info, handle.as_ref()).state
            })
            .unwrap_or_default();
        Ok(Response::new(pb::SetPluginConfigResponse {
            generation: self.state.store.current().generation().to_owned(),
            revision,
            config: config_items(&items),
            state,
        }))
    }

    async fn restart_plugin(
        &self,
        request: Request<pb::RestartPluginRequest>,
    ) -> Result<Response<pb::RestartPluginResponse>, Status> {
        let id = request.into_inner().id;
        if let Some(missing) = self.state.plugins.needs_config().get(&id) {
            return Err(Status::failed_precondition(format!(
                "plugin {id} is not started: it needs configuration ({}); set it with SetPluginConfig",
                missing.join(", ")
            )));
        }
        let h = self.state.plugins.get(&id).ok_or_else(|| {
            Status::not_found(format!(
                "no plugin {:?} is running",
                toolhost_base::log_safe(&id, 128)
            ))
        })?;
        h.restart();
        Ok(Response::new(pb::RestartPluginResponse {}))
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(
        &self,
        _: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<pb::Event, Status>>(256);
        let store = Arc::clone(&self.state.store);
        let catalog_tx = tx.clone();
        tokio::spawn(async move {
            let mut changes = store.subscribe();
            while changes.changed().await.is_ok() {
                let c = store.current();
                let event = pb::Event {
                    kind: Some(pb::event::Kind::CatalogChanged(pb::CatalogChanged {
                        generation: c.generation().to_owned(),
                        revision: c.revision(),
                        changed_surfaces: vec![],
                    })),
                };
                if catalog_tx.send(Ok(event)).await.is_err() {
                    break;
                }
            }
        });
        for h in self.state.plugins.all() {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut w = h.subscribe();
                while w.changed().await.is_ok() {
                    let event = pb::Event {
                        kind: Some(pb::event::Kind::PluginStateChanged(
                            pb::PluginStateChanged {
                                plugin: Some(status_of(&h)),
                            },
                        )),
                    };
                    if tx.send(Ok(event)).await.is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn get_status(
        &self,
        _: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let c = self.state.store.current();
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        Ok(Response::new(pb::StatusResponse {
            generation: c.generation().to_owned(),
            revision: c.revision(),
            tools: n(c.len()),
            defects: n(c.withheld().len()),
            managed: self.state.managed.is_some(),
            sessions: n((self.state.sessions)()),
            bound_tokens: n(self.state.tokens.len()),
            withheld: c
                .withheld()
                .iter()
                .take(toolhost_catalog::MAX_LISTED)
                .map(|d| pb::Defect {
                    tool: d.tool.clone(),
                    reason: d.reason.clone(),
                })
                .collect(),
            admin_socket: format!(
                "0600, refusing peers it cannot identify; plugins are kept out by {}",
                toolhost_sandbox::how_plugins_are_recognized()
            ),
            last_good: self.state.store.serving_last_good(),
            fleet: self.state.fleet.as_ref().map(|l| {
                let v = l.view();
                pb::FleetLink {
                    server: v.server,
                    bucket: v.bucket,
                    daemon: v.daemon,
                    connected: v.connected,
                    last_error: v.last_error,
                    applied_kv_revision: v.applied_kv_revision,
                    applied_outcome: v.applied_outcome,
                    reconnects: v.reconnects,
                    seconds_in_state: v.seconds_in_state,
                }
            }),
            tasks: self
                .state
                .tasks
                .counts()
                .into_iter()
                .map(|(state, count)| (state.to_owned(), n(count)))
                .collect(),
            policy: Some(crate::policy::summary(&self.state.policy)),
            plugin_states: crate::listing::plugin_states(&self.state.listing()),
        }))
    }

    async fn list_tasks(
        &self,
        _: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let tasks = self
            .state
            .tasks
            .list(std::time::Instant::now())
            .into_iter()
            .map(|t| pb::TaskEntry {
                id: t.id,
                tool: t.tool,
                state: t.state.to_owned(),
                owner: t.owner,
                age_ms: u64::try_from(t.age.as_millis()).unwrap_or(u64::MAX),
            })
            .collect();
        Ok(Response::new(pb::ListTasksResponse { tasks }))
    }

    async fn cancel_task(
        &self,
        request: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::CancelTaskResponse>, Status> {
        let id = request.into_inner().id;
        if self
            .state
            .tasks
            .cancel(None, &id, std::time::Instant::now())
            == toolhost_calls::Cancelled::Now
        {
            tracing::info!(target: "toolhost::audit", task = %toolhost_base::log_safe(&id, 64), "task cancelled by the operator");
            Ok(Response::new(pb::CancelTaskResponse {}))
        } else {
            Err(Status::not_found(
                "no task by that id is running (toolhost tasks lists them)",
            ))
        }
    }

    async fn list_approvals(
        &self,
        _: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let approvals = self
            .state
            .policy
            .approvals()
            .pending()
            .into_iter()
            .map(crate::policy::approval_entry)
            .collect();
        Ok(Response::new(pb::ListApprovalsResponse { approvals }))
    }

    async fn decide_approval(
        &self,
        request: Request<pb::DecideApprovalRequest>,
    ) -> Result<Response<pb::DecideApprovalResponse>, Status> {
        let r = request.into_inner();
        match self.state.policy.approvals().decide(&r.id, r.approve) {
            Ok(p) => {
                tracing::info!(target: "toolhost::audit", approval = %toolhost_base::log_safe(&p.id, 64),
                    tool = %p.tool, arguments_digest = %p.arguments_digest, approved = r.approve,
                    decided_by = "operator", "approval decided");
                Ok(Response::new(pb::DecideApprovalResponse {
                    approval: Some(crate::policy::approval_entry(p)),
                }))
            }
            Err(e) => Err(Status::not_found(format!(
                "{e}; toolhost approvals list shows those pending"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(s: &Status) -> bool {
        s.metadata()
            .get(OUTCOME_KEY)
            .is_some_and(|v| v == NEEDS_CONFIG)
    }

    #[test]
    fn only_waiting_for_configuration_carries_the_needs_config_mark() {
        let waiting = lifecycle_status(LifecycleError::NeedsConfig {
            id: "notes".into(),
            missing: vec!["api_key".into()],
        });
        assert_eq!(waiting.code(), tonic::Code::FailedPrecondition);
        assert!(marked(&waiting));
        // The same code for other refusals, without the mark: a client
        // reads the mark, never the code alone.
        for other in [
            LifecycleError::Managed,
            LifecycleError::AlreadyThere {
                id: "notes".into(),
                state: "installed".into(),
            },
            LifecycleError::Static {
                id: "notes".into(),
                what: "remove",
            },
        ] {
            let s = lifecycle_status(other);
            assert_eq!(s.code(), tonic::Code::FailedPrecondition);
            assert!(!marked(&s), "{}", s.message());
        }
    }

    #[test]
    fn each_lifecycle_error_has_the_code_a_client_can_act_on() {
        let code = |e| lifecycle_status(e).code();
        assert_eq!(
            code(LifecycleError::Invalid {
                problems: vec!["bad".into()]
            }),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            code(LifecycleError::NotFound {
                id: "x".into(),
                hint: ""
            }),
            tonic::Code::NotFound
        );
        assert_eq!(
            code(LifecycleError::StartFailed {
                id: "x".into(),
                reason: "exited".into()
            }),
            tonic::Code::Aborted
        );
        assert_eq!(
            code(LifecycleError::Io {
                what: "write",
                path: "/x".into(),
                source: std::io::Error::other("disk full"),
            }),
            tonic::Code::Internal
        );
    }

    #[test]
    fn values_with_an_install_are_bounded_before_anything_names_them() {
        let many: std::collections::HashMap<String, String> =
            (0..129).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(bounded_values(many).is_err());
        let long = [("k".repeat(65), "v".to_owned())].into_iter().collect();
        assert!(bounded_values(long).is_err());
        let fine = [("api_key".to_owned(), "v".to_owned())]
            .into_iter()
            .collect();
        assert_eq!(bounded_values(fine).map(|v| v.len()).ok(), Some(1));
    }

    #[test]
    fn a_binding_is_required_and_checked() {
        assert_eq!(
            binding_of(None).err().map(|s| s.code()),
            Some(tonic::Code::InvalidArgument)
        );
        let bad = pb::SessionBinding {
            surface: "Bad Surface".into(),
            task_id: "t".into(),
            session_id: "s".into(),
            workspace_id: String::new(),
        };
        assert!(binding_of(Some(bad)).is_err());
        let good = pb::SessionBinding {
            surface: "chat".into(),
            task_id: "t".into(),
            session_id: "s".into(),
            workspace_id: String::new(),
        };
        assert_eq!(
            binding_of(Some(good)).map(|b| b.surface).ok().as_deref(),
            Some("chat")
        );
    }
}
