//! The status vocabulary of conditions: each condition type and, per type, the only reasons it is set with; and
//! `metav1.Condition` bookkeeping (one condition per type, `lastTransitionTime` kept unless the status flips). The
//! core sets and reads conditions only through these types, never by strings.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub use super::resume::ResumeReason;
use crate::words::words;

words! {
    /// The conditions a WorkSession's status carries.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ConditionType {
        /// The harness is running and takes prompts; otherwise why not.
        Ready,
        /// Whether the last spawn resumed the recorded conversation, with the decision table's row.
        Resumed,
        /// Whether the conversation's id is known, for a harness that shows it only after its start.
        ConversationId,
        /// Whether the harness runs in a room of its own (agent config `rooms`).
        Confined,
        /// Whether the work item's checkout (`spec.workspace`) is prepared.
        WorkspaceReady,
        /// What the live harness is doing, as its hooks say (hook-backed profiles only).
        Activity,
        /// Whether the controller placed the session on a node (sessions without `spec.nodeName`), or why not.
        Placed,
        /// Whether the session's node is lost (written by the controller).
        NodeLost,
    }
}

impl ConditionType {
    /// The conditions `worksession controller` writes (under its own field manager); the agent only reads them.
    pub fn controllers() -> &'static [ConditionType] {
        &[ConditionType::Placed, ConditionType::NodeLost]
    }
}

/// A reason of one condition type: the type a reason belongs to is part of the reason's type, so no reason is ever
/// written under another condition.
pub trait Reason: Copy + Eq + 'static {
    /// The condition these reasons explain.
    const CONDITION: ConditionType;
    /// Every reason of the condition.
    fn all() -> &'static [Self];
    /// The reason as written.
    fn name(self) -> &'static str;
}

macro_rules! reasons_of {
    ($($reason:ty => $condition:ident),* $(,)?) => {$(
        impl Reason for $reason {
            const CONDITION: ConditionType = ConditionType::$condition;
            fn all() -> &'static [Self] {
                Self::ALL
            }
            fn name(self) -> &'static str {
                self.as_str()
            }
        }
    )*};
}

words! {
    /// The `Ready` condition's reasons.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ReadyReason {
        /// `True`: the harness is running.
        Running,
        /// A spawn is about to run.
        Starting,
        /// Spawned; the probe is being waited out.
        Verifying,
        /// The workspace is being prepared.
        Preparing,
        /// The workspace could not be prepared; it is tried again.
        WorkspaceNotReady,
        /// The harness is not running; the next prompt respawns it.
        HarnessNotRunning,
        /// The harness exited; it is respawned.
        HarnessExited,
        /// tmux could not start a fresh harness.
        SpawnFailed,
        /// A fresh harness died within its probe.
        PaneDied,
        /// Failing repeatedly; respawning waits until `nextRetryTime`.
        BackOff,
        /// `spec.suspend` is set.
        Suspended,
        /// `False`: a move to another node was asked for (`worksession move`, a cordon): the harness is stopped and
        /// the session handed to the node the message names.
        Moving,
        /// Stopped after `spec.idle.suspendAfterSeconds` of quiet; the next prompt resumes it.
        Idle,
        /// Stopped because its work item is closed (`spec.archived`); the next prompt, or the work item reopening,
        /// resumes it.
        Archived,
        /// Its conversations reached `spec.budget`, or its namespace's sessions a `WorkBudget`: stopped after its
        /// turn; prompts wait until the budget is raised.
        BudgetReached,
        /// Parked: its model's API refused a turn for a usage limit (or refused another session of its harness in
        /// its namespace, on any node); prompts wait until `status.usage.limit.wakeTime`, or their credential's turn
        /// after it.
        UsageLimited,
        /// Another session of the workdir is still discovering its conversation's id.
        WaitingForDiscovery,
        /// Rooms are on and this session has none: no harness starts.
        RoomUnavailable,
        /// No tmux server answers, and the agent never starts one.
        TmuxUnavailable,
        /// The tmux session belongs to another WorkSession.
        TmuxSessionConflict,
        /// The tmux session carries no owner tag.
        TmuxSessionUntagged,
        /// The spec breaks a rule the schema cannot say (or local mode has no schema for).
        InvalidSpec,
        /// No harness profile has that name.
        UnknownHarness,
        /// The profile has no interactive argv.
        HarnessCannotBeHosted,
        /// The namespace may not check out that repository (`workspaces.repositories`).
        WorkspaceNotAllowed,
        /// `spec.workdir` is not a directory on the node, and no `spec.workspace` is there to clone into it.
        WorkdirMissing,
        /// `spec.harnessSessionId` is another WorkSession's conversation on this node.
        SessionIdTaken,
    }
}

words! {
    /// The `ConversationId` condition's reasons.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum DiscoveryReason {
        /// `False`: the harness has not shown its conversation's id yet.
        Discovering,
        /// `True`: the id is known and recorded.
        Discovered,
    }
}

words! {
    /// The `Confined` condition's reasons.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ConfinedReason {
        /// `True`: the harness runs as a uid of its own, with its own `HOME`.
        OwnRoom,
        /// `False`: rooms are off; every harness shares the tmux server's user.
        RoomsOff,
        /// `False`: rooms are on and this session has none (all uids taken, a workdir not allowed, no home).
        RoomUnavailable,
    }
}

words! {
    /// The `WorkspaceReady` condition's reasons.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum WorkspaceReason {
        /// `True`: the checkout is prepared (or an existing one adopted).
        Prepared,
        /// `False`: the checkout is being prepared.
        Preparing,
        /// `False`: preparing failed; it is tried again.
        PrepareFailed,
    }
}

words! {
    /// The `Activity` condition's reasons: what the harness's hooks last said (`True` only while it works).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ActivityReason {
        /// `True`: it took a prompt and works on it (`UserPromptSubmit`).
        Working,
        /// `False`: it waits for a person (a `Notification`: a permission to grant, a question); the message has its
        /// words.
        WaitingForInput,
        /// `False`: it asks for permission to use a tool and waits for the answer (`status.approval`); the message
        /// says what it asks and how to answer.
        WaitingForApproval,
        /// `False`: its turn is over, or it has not begun one (`Stop`, `SessionStart`, an idle `Notification`).
        Idle,
        /// `False`: its last turn failed for good (`StopFailure`: opencode's `session.error`, after its own retries);
        /// the message has its words. It takes the next prompt.
        TurnFailed,
        /// `False`: the model's API refused its turn for a usage or rate limit (HTTP 429), as its record says; it takes
        /// the next prompt (the turn is not sent again by itself).
        UsageLimited,
    }
}

words! {
    /// The `Placed` condition's reasons (written by `worksession controller`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum PlacedReason {
        /// `True`: placed on the node its message names.
        Placed,
        /// `False`: no node fits; the message says why for each node.
        NoNodeFits,
    }
}

words! {
    /// The `NodeLost` condition's reasons (written by `worksession controller`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum NodeLostReason {
        /// `True`: the session's node is NotReady and its agent's Lease ran out the grace period ago.
        NodeNotReady,
        /// `True`: the session's Node object is gone and its agent's Lease ran out the grace period ago.
        NodeDeleted,
        /// `False`: its node was lost and the session was placed again on another node (the message names both).
        MovedFromLostNode,
        /// `False`: its node was lost and is back (its agent renews its Lease again); the session stayed there.
        NodeReturned,
    }
}

reasons_of! {
    PlacedReason => Placed,
    NodeLostReason => NodeLost,
    ActivityReason => Activity,
    ReadyReason => Ready,
    ResumeReason => Resumed,
    DiscoveryReason => ConversationId,
    ConfinedReason => Confined,
    WorkspaceReason => WorkspaceReady,
}

/// The condition of `R`'s type in `conditions`, if set: whether it is `True`, and its reason (`None` for a reason
/// this release does not write).
pub fn condition<R: Reason>(conditions: &[Condition]) -> Option<(bool, Option<R>)> {
    let c = conditions.iter().find(|c| c.type_ == R::CONDITION.as_str())?;
    Some((c.status == "True", R::all().iter().copied().find(|r| r.name() == c.reason)))
}

/// Whether the condition of `reason`'s type is set with that reason.
pub fn has_reason<R: Reason>(conditions: &[Condition], reason: R) -> bool {
    find(conditions, reason).is_some()
}

/// The condition of `reason`'s type, when it is set with that reason.
pub fn find<R: Reason>(conditions: &[Condition], reason: R) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == R::CONDITION.as_str() && c.reason == reason.name())
}

/// Sets the condition of `reason`'s type, keeping `lastTransitionTime` when its status did not change; whether it says
/// something else than it did (its status, reason or message: what an Event on its change would tell).
pub fn set_condition<R: Reason>(
    conditions: &mut Vec<Condition>,
    reason: R,
    ok: bool,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let (type_, reason) = (R::CONDITION.as_str(), reason.name());
    let status = if ok { "True" } else { "False" };
    let next = |last_transition_time| Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation,
        last_transition_time,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed = (c.status.as_str(), c.reason.as_str(), c.message.as_str()) != (status, reason, message);
            let since = if c.status == status { c.last_transition_time.clone() } else { Time(now) };
            *c = next(since);
            changed
        }
        None => {
            conditions.push(next(Time(now)));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let t2: Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        let mut c = Vec::new();
        set_condition(&mut c, ReadyReason::Running, true, "a", Some(1), t0);
        set_condition(&mut c, ReadyReason::Running, true, "b", Some(2), t1);
        assert_eq!(
            (c.len(), c[0].last_transition_time.0, c[0].message.as_str(), c[0].observed_generation),
            (1, t0, "b", Some(2))
        );
        set_condition(&mut c, ReadyReason::BackOff, false, "c", Some(2), t2);
        assert_eq!((c[0].last_transition_time.0, c[0].status.as_str(), c[0].reason.as_str()), (t2, "False", "BackOff"));
        set_condition(&mut c, ResumeReason::Resumed, true, "", Some(2), t2);
        assert_eq!(c.len(), 2);
        assert_eq!(condition::<ReadyReason>(&c), Some((false, Some(ReadyReason::BackOff))));
        assert!(has_reason(&c, ResumeReason::Resumed) && !has_reason(&c, ReadyReason::Running));
        c[1].reason = "FromAnotherRelease".into();
        assert_eq!(condition::<ResumeReason>(&c), Some((true, None)), "an unknown reason reads as none");
    }
}
