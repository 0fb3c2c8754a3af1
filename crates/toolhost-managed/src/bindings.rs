//! Session bindings from the wire: the admin API's `BindSession`, and a
//! fleet's `bind.<digest>` keys. Checked the same way from both.

use toolhost_pipeline::Binding;
use toolhost_proto::admin as pb;

/// A session binding from the wire (the admin API, or a fleet's bucket),
/// checked: a valid surface, and task and session ids.
pub fn binding_from_proto(b: pb::SessionBinding) -> Result<Binding, String> {
    if !toolhost_manifest::manifest::is_valid_surface(&b.surface) {
        return Err("binding.surface is not a valid surface name".to_owned());
    }
    if b.task_id.is_empty() || b.session_id.is_empty() {
        return Err("binding.task_id and binding.session_id are required".to_owned());
    }
    let too_long = [&b.task_id, &b.session_id, &b.workspace_id]
        .iter()
        .any(|s| s.len() > 256 || s.chars().any(char::is_control));
    if too_long {
        return Err("binding ids are at most 256 bytes, without control characters".to_owned());
    }
    let workspace = (!b.workspace_id.is_empty()).then_some(b.workspace_id);
    Ok(Binding::new(b.surface, b.task_id, b.session_id, workspace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(surface: &str, task: &str, session: &str) -> pb::SessionBinding {
        pb::SessionBinding {
            surface: surface.into(),
            task_id: task.into(),
            session_id: session.into(),
            workspace_id: String::new(),
        }
    }

    #[test]
    fn a_binding_needs_a_valid_surface_and_bounded_ids() {
        assert!(binding_from_proto(wire("chat", "t", "s")).is_ok());
        assert!(binding_from_proto(wire("Chat!", "t", "s")).is_err());
        assert!(binding_from_proto(wire("chat", "", "s")).is_err());
        assert!(binding_from_proto(wire("chat", &"t".repeat(257), "s")).is_err());
        let forged = binding_from_proto(wire("chat", "t\nINFO forged", "s"));
        assert!(forged.is_err(), "control characters are refused");
    }
}
