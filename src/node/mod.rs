//! The node's edges: what the agent's executor touches on its node, each behind a narrow interface. [`tmux`] hosts
//! the harnesses (one call observes them all); [`room`] gives each its own Unix user; [`workspace`] prepares and
//! removes a work item's checkout with real `git`; [`transcript`] and [`hook`] read what a harness recorded. The
//! core never calls them: the agent gathers their answers as evidence and runs the plan's ops through them.
//! [`egress`] is the rooms' one way out, a proxy the agent serves beside them; [`answers`] carries the answers to a
//! harness's permission requests to its hook.

pub mod answers;
pub mod egress;
pub mod hook;
pub mod room;
pub mod tmux;
pub mod transcript;
pub mod workspace;
