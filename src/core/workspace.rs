//! The workspace gate, part of decide: a session with `spec.workspace` spawns only once its checkout is prepared.
//! Preparation runs beside the reconcile (the executor's task; the reconcile looks again, like a probe's wait) so it
//! never holds up other sessions; meanwhile the session is `Preparing`. A failure says what git printed and backs
//! off like a failing spawn; a checkout once prepared is never prepared again while its directory is there.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    BACKOFF_BASE, CONFLICT_RECHECK, Decision, EventReason, Notice, Op, ReadyReason, Workspace, WorkspaceReason,
    backoff, later, until,
};
use crate::api::{Phase, WorkspaceSpec};

/// How often a preparation is looked at while it runs.
pub const PREPARE_RECHECK: Duration = Duration::from_secs(1);

impl Decision<'_, '_> {
    /// Before a spawn: whether the workspace lets it go ahead (else the plan says what waits).
    pub(super) fn workspace_ready(&mut self) -> bool {
        let input = self.input;
        let Some(spec) = &input.object.spec.workspace else { return true };
        match &input.evidence.workspace {
            // A workdir a preparation makes is never missing: only a session without one is told so (workdir_ready).
            Workspace::Ready | Workspace::NoWorkdir => true,
            Workspace::Prepared { branch, commit, adopted } => {
                (self.status.failure_count, self.status.next_retry_time) = (0, None);
                let how = if *adopted { "adopted the checkout" } else { "prepared a checkout" };
                let message = format!("{how} {} on branch {branch} at {commit}", input.object.spec.workdir);
                self.condition(WorkspaceReason::Prepared, true, message.clone());
                self.notice(Notice::new(EventReason::WorkspacePrepared, message));
                true
            }
            Workspace::Preparing => {
                self.preparing(spec);
                false
            }
            Workspace::Missing => {
                if let Some(retry) = self.status.next_retry_time.as_ref().filter(|t| input.context.now < t.0) {
                    let retry = retry.0;
                    self.status.phase = Some(Phase::BackOff);
                    self.requeue(until(input.context.now, retry));
                    return false;
                }
                self.ops.push(Op::PrepareWorkspace);
                self.preparing(spec);
                false
            }
            Workspace::Failed(output) => {
                self.status.failure_count += 1;
                let wait = backoff(self.status.failure_count).max(BACKOFF_BASE);
                self.status.last_failure_time = Some(Time(input.context.now));
                self.status.next_retry_time = Some(Time(later(input.context.now, wait)));
                self.status.phase = Some(Phase::BackOff);
                let message =
                    format!("git could not prepare {} from {}: {output}", input.object.spec.workdir, spec.url);
                self.condition(WorkspaceReason::PrepareFailed, false, message.clone());
                self.ready(
                    false,
                    ReadyReason::WorkspaceNotReady,
                    format!("the workspace is tried again in {}s", wait.as_secs()),
                );
                self.notice(Notice::new(EventReason::WorkspaceFailed, message));
                self.requeue(wait);
                false
            }
        }
    }

    /// Before a spawn: whether the workdir is there (else the plan says so). A person's mistake, not a harness's
    /// failure: a spawn there would die at once, again and again. Looked at again shortly, so creating the directory
    /// is all it takes. Only a spawn is held: an idle, archived or failed session keeps its phase.
    pub(super) fn workdir_ready(&mut self) -> bool {
        if self.input.evidence.workspace != Workspace::NoWorkdir {
            return true;
        }
        let workdir = &self.input.object.spec.workdir;
        // A stopped session stays so until the spawn goes ahead: it is what a prompt or a reopening wakes.
        if !matches!(self.status.phase, Some(Phase::Idle | Phase::Archived | Phase::Paused)) {
            self.status.phase = Some(Phase::Pending);
        }
        let message = format!(
            "the workdir {workdir} is not a directory on this node: create it, or name a spec.workspace for the agent \
             to clone into it"
        );
        self.ready(false, ReadyReason::WorkdirMissing, message);
        self.requeue(CONFLICT_RECHECK);
        false
    }

    fn preparing(&mut self, spec: &WorkspaceSpec) {
        self.status.phase = Some(Phase::Preparing);
        let message = format!("preparing {} from {}", self.input.object.spec.workdir, crate::api::redact(&spec.url));
        self.condition(WorkspaceReason::Preparing, false, message.clone());
        self.ready(false, ReadyReason::Preparing, message);
        self.requeue(PREPARE_RECHECK);
    }
}
