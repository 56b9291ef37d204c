//! `worksession get`: the sessions as a table like `kubectl get ws`, or as a Kubernetes `List` in JSON, from the
//! cluster or from a local directory.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::WorkSession;

/// How to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table with more columns.
    Wide,
    /// A Kubernetes `List` of the objects with their status.
    Json,
}

/// A compact age, like kubectl's (`45s`, `12m`, `3h`, `5d`).
pub fn age(created: Option<Timestamp>, now: Timestamp) -> String {
    let Some(created) = created else { return "<unknown>".into() };
    let secs = now.duration_since(created).as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Renders `sessions` as `kubectl get ws` would, or as JSON.
pub fn render(sessions: &[WorkSession], output: Option<Output>, now: Timestamp) -> String {
    if output == Some(Output::Json) {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": sessions, "metadata": {}});
        return serde_json::to_string_pretty(&list).expect("sessions serialize") + "\n";
    }
    let wide = output == Some(Output::Wide);
    let mut rows = vec![{
        let mut h = vec!["NAME", "NODE", "HARNESS", "PHASE", "RESUMED", "SESSION ID", "AGE"];
        if wide {
            h.extend(["TMUX", "RESPAWNS", "FAILURES", "REASON"]);
        }
        h.into_iter().map(String::from).collect::<Vec<_>>()
    }];
    for ws in sessions {
        let st = ws.status.clone().unwrap_or_default();
        let resumed = st.conditions.iter().find(|c| c.type_ == "Resumed");
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready");
        let mut id = st.harness_session_id.clone().unwrap_or_default();
        if !wide && id.len() > 8 {
            id.truncate(8);
        }
        let mut row = vec![
            ws.name_any(),
            ws.spec.node_name.clone(),
            ws.spec.harness.clone(),
            st.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
            resumed.map(|c| c.status.clone()).unwrap_or_default(),
            id,
            age(ws.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
        ];
        if wide {
            row.extend([
                st.tmux_session.clone().unwrap_or_default(),
                st.respawn_count.to_string(),
                st.failure_count.to_string(),
                ready.map(|c| c.reason.clone()).unwrap_or_default(),
            ]);
        }
        rows.push(row);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Phase, WorkSessionSpec, WorkSessionStatus};

    #[test]
    fn table_like_kubectl() {
        let now: Timestamp = "2026-11-30T00:10:00Z".parse().unwrap();
        let mut ws = WorkSession::new(
            "repo-12",
            WorkSessionSpec { node_name: "node-a".into(), harness: "claude".into(), ..Default::default() },
        );
        ws.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-11-30T00:00:00Z".parse().unwrap()));
        ws.status = Some(WorkSessionStatus {
            phase: Some(Phase::Running),
            harness_session_id: Some("0123456789abcdef".into()),
            ..Default::default()
        });
        let table = render(&[ws.clone()], None, now);
        assert_eq!(
            table,
            "NAME      NODE     HARNESS   PHASE     RESUMED   SESSION ID   AGE\nrepo-12   node-a   claude    Running             01234567     10m\n"
        );
        assert!(render(&[ws.clone()], Some(Output::Wide), now).contains("0123456789abcdef"));
        let json: serde_json::Value = serde_json::from_str(&render(&[ws], Some(Output::Json), now)).unwrap();
        assert_eq!(
            (json["kind"].as_str(), json["items"][0]["status"]["phase"].as_str()),
            (Some("List"), Some("Running"))
        );
    }
}
