//! The catalog key's values: read as hostile (size-capped, strict), the
//! latest of those that queued together chosen by the fence, and offered
//! to the managed catalog: a whole snapshot as it is, a sharded header as
//! this daemon's view of it (`shards.rs`).

use crate::parts::FleetParts;
use crate::shards::Sharded;
use crate::status::Applied;

/// Offers the latest of values that queued together: the one the fence
/// ranks highest (epoch, then revision), not merely the last to arrive, so
/// a dead backend's stale write arriving last cannot hide a live one's
/// revision that arrived just before it. When the last to arrive cannot
/// be read at all, that refusal is what the status reports (after the
/// readable one is offered), since it is what the key now holds.
pub(crate) async fn offer_latest(
    state: &FleetParts,
    kv: &async_nats::jetstream::kv::Store,
    sharded: &mut Sharded,
    queued: Vec<async_nats::jetstream::kv::Entry>,
    max: usize,
) -> Applied {
    let last = queued.len().saturating_sub(1);
    let mut best: Option<(u64, toolhost_proto::admin::Snapshot)> = None;
    let mut last_refused = None;
    for (i, value) in queued.into_iter().enumerate() {
        match read(&value, max) {
            Ok(s) => {
                if best
                    .as_ref()
                    .is_none_or(|(_, b)| (s.epoch, s.revision) >= (b.epoch, b.revision))
                {
                    best = Some((value.revision, s));
                }
            }
            Err(why) if i == last => {
                last_refused = Some(Applied {
                    kv_revision: value.revision,
                    outcome: "refused".to_owned(),
                    reasons: vec![why],
                    shards: None,
                });
            }
            Err(_) => {}
        }
    }
    let offered = match best {
        Some((kv_revision, s)) => Some(offer_value(state, kv, sharded, kv_revision, s, max).await),
        None => None,
    };
    last_refused.or(offered).unwrap_or_default()
}

/// The plugins whose shards this daemon reads: those it runs, and those
/// the latest placement names.
fn wanted(state: &FleetParts, sharded: &Sharded) -> std::collections::BTreeSet<String> {
    let mut w = (state.wanted)();
    w.extend(sharded.placed.iter().cloned());
    w
}

/// Offers one catalog value: a whole snapshot as it is, a sharded header
/// as this daemon's view of it (the shards of the plugins it wants).
async fn offer_value(
    state: &FleetParts,
    kv: &async_nats::jetstream::kv::Store,
    sharded: &mut Sharded,
    kv_revision: u64,
    s: toolhost_proto::admin::Snapshot,
    max: usize,
) -> Applied {
    if s.shards.is_empty() {
        sharded.header = None;
        return offer(state, kv_revision, s, false);
    }
    let want = wanted(state, sharded);
    match crate::shards::assemble(kv, &s, &want, &mut sharded.cache, max).await {
        Err(why) => Applied {
            kv_revision,
            outcome: "invalid".to_owned(),
            reasons: vec![why],
            shards: None,
        },
        Ok(a) => {
            sharded.header = Some((kv_revision, s));
            sharded.selected = want;
            let mut applied = offer(state, kv_revision, a.snapshot, true);
            applied.shards = Some((a.used, a.total));
            applied
        }
    }
}

/// After what this daemon runs or is placed changed: the header in force
/// assembled again for the new selection, when it changed.
pub(crate) async fn reselect(
    state: &FleetParts,
    kv: &async_nats::jetstream::kv::Store,
    sharded: &mut Sharded,
    max: usize,
) -> Option<Applied> {
    let (kv_revision, header) = sharded.header.clone()?;
    if wanted(state, sharded) == sharded.selected {
        return None;
    }
    Some(offer_value(state, kv, sharded, kv_revision, header, max).await)
}

/// One value of the catalog key, read as a snapshot, or why it is not one.
pub(crate) fn read(
    value: &async_nats::jetstream::kv::Entry,
    max: usize,
) -> Result<toolhost_proto::admin::Snapshot, String> {
    use async_nats::jetstream::kv::Operation;
    if value.operation != Operation::Put {
        // A deleted key is not a catalog: keep serving the current one.
        return Err("the catalog key was deleted; the current catalog stays".to_owned());
    }
    if value.value.len() > max {
        return Err(format!(
            "the value is {} bytes, over the limit of {max}",
            value.value.len()
        ));
    }
    // A field this toolhost does not know is refused, not dropped: a
    // backend's policy it cannot read must not go unapplied.
    let unknown =
        toolhost_proto::strict::unknown_fields("toolhost.admin.v1.Snapshot", &value.value)
            .map_err(|e| format!("not a toolhost.admin.v1.Snapshot: {e}"))?;
    if !unknown.is_empty() {
        return Err(format!(
            "the value has fields this toolhost does not know ({}); the current catalog stays",
            unknown.join(", ")
        ));
    }
    <toolhost_proto::admin::Snapshot as prost::Message>::decode(value.value.as_ref())
        .map_err(|e| format!("not a toolhost.admin.v1.Snapshot: {e}"))
}

/// Offers a snapshot as an admin push would; what became of it.
fn offer(
    state: &FleetParts,
    kv_revision: u64,
    snapshot: toolhost_proto::admin::Snapshot,
    view: bool,
) -> Applied {
    let offered = if view {
        state.catalog.offer_view(snapshot)
    } else {
        state.catalog.offer(snapshot)
    };
    match offered {
        Err(e) => Applied {
            kv_revision,
            outcome: "refused".to_owned(),
            reasons: vec![format!("taken, but not kept on disk: {e}")],
            shards: None,
        },
        Ok(r) => Applied {
            kv_revision,
            outcome: toolhost_proto::admin::PushOutcome::try_from(r.outcome)
                .map(|o| {
                    o.as_str_name()
                        .trim_start_matches("PUSH_OUTCOME_")
                        .to_lowercase()
                })
                .unwrap_or_else(|_| "unknown".to_owned()),
            reasons: r.reasons,
            shards: None,
        },
    }
}
