//! Where a failing build gate's failure came in, on GitHub. The gate there
//! is the repository's CI on the integration head; CI ran on each of the
//! phase's merge commits as it landed too, so the results are already there
//! to read, and nothing is run again: the commit before the phase's first
//! merge and each merge, in the order they landed, the first red merge
//! after a green commit is the one charged. CI that did not run on those
//! commits (a workflow that runs on pull requests only) leaves it unknown,
//! and the gate's output decides as before.

use super::{OpContext, OpError, OperationState, Operations, Repo};
use crate::contract::sprint_branch;
use crate::engine::GateBlame;
use crate::plan::SprintId;

/// What CI said of one commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ci {
    Green,
    Red,
    /// No CI ran there, or it has not finished.
    Unknown,
}

/// One of the phase's merges, in the order it landed.
#[derive(Debug, Clone)]
pub(super) struct Landed {
    pub unit: String,
    pub sprint: SprintId,
    pub ci: Ci,
}

/// The blame from CI's results, for the red that lasts to the newest
/// merge: the merge that turned it red after a green commit; the phase's
/// inheritance (a BLOCKED unit's missing work, or a break already there)
/// when it was red before the phase's first merge and never green since.
/// A gap in CI before the red, or a newest merge that is not red, leaves
/// it unknown. A sprint done again lands again: its earlier merge, red
/// and mended since, is not charged.
pub(super) fn blame(before: Ci, merges: &[Landed]) -> GateBlame {
    let mut culprit = match before {
        Ci::Red => Some(GateBlame::BeforePhase),
        _ => None,
    };
    let mut prev = before;
    for m in merges {
        culprit = match (m.ci, prev) {
            (Ci::Red, Ci::Green) => Some(GateBlame::Merge {
                unit: m.unit.clone(),
                sprint: m.sprint.clone(),
            }),
            (Ci::Red, Ci::Red) => culprit,
            _ => None,
        };
        prev = m.ci;
    }
    culprit.unwrap_or(GateBlame::Unknown)
}

impl Operations {
    /// The blame of a gate that failed after the phase of `units`: CI's
    /// results on the phase's merge commits, read through their pull
    /// requests.
    pub(super) async fn gate_blame(
        &self,
        ctx: &OpContext,
        st: &OperationState,
        units: &[String],
    ) -> Result<GateBlame, OpError> {
        let repo = self.repo(ctx);
        let mut merges = Vec::new();
        for u in st.units.iter().filter(|u| units.contains(&u.name)) {
            // A sprint found done merged nothing of its own.
            for s in u.sprints.iter().filter(|s| {
                s.completion
                    .as_ref()
                    .is_some_and(|c| c.already_done.is_none())
            }) {
                let branch = sprint_branch(&ctx.op, &u.slug, s.id.as_str());
                // Each time it landed (a sprint done again after a gate
                // charged it lands again).
                for pr in repo.pulls_for(&branch).await? {
                    if let (Some(sha), Some(at)) = (pr.merge_sha, pr.merged_at) {
                        merges.push((at, sha, u.name.clone(), s.id.clone()));
                    }
                }
            }
        }
        if merges.is_empty() {
            return Ok(GateBlame::Unknown);
        }
        // In the order they landed: by time, and where two landed in one
        // second, by how many of the others lie on its first-parent chain
        // (a key, so the order is total whatever GitHub answers).
        let mut parents = std::collections::HashMap::new();
        for (_, sha, _, _) in &merges {
            parents.insert(sha.clone(), repo.parents(sha).await?.unwrap_or_default());
        }
        let first_parent = |sha: &String| parents.get(sha).and_then(|p| p.first());
        let depth = |sha: &String| {
            let mut at = sha;
            let mut n = 0;
            while let Some(p) = first_parent(at).filter(|p| parents.contains_key(*p)) {
                n += 1;
                at = p;
                if n > parents.len() {
                    break;
                }
            }
            n
        };
        merges.sort_by_cached_key(|m| (m.0.clone(), depth(&m.1)));
        let before = match first_parent(&merges[0].1) {
            Some(p) => ci_of(&repo, p).await?,
            None => Ci::Unknown,
        };
        let mut landed = Vec::new();
        for (_, sha, unit, sprint) in merges {
            landed.push(Landed {
                unit,
                sprint,
                ci: ci_of(&repo, &sha).await?,
            });
        }
        Ok(blame(before, &landed))
    }
}

/// The repository's CI on `sha` (the supervisor's own check runs aside).
async fn ci_of(repo: &Repo<'_>, sha: &str) -> Result<Ci, OpError> {
    let app = repo.gh.app_id();
    let ci: Vec<_> = repo
        .checks(sha)
        .await?
        .into_iter()
        .filter(|c| !c.is_supervisors(app))
        .collect();
    Ok(if ci.is_empty() || ci.iter().any(|c| !c.completed) {
        Ci::Unknown
    } else if ci.iter().all(|c| c.green()) {
        Ci::Green
    } else {
        Ci::Red
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(unit: &str, ci: Ci) -> Landed {
        Landed {
            unit: unit.into(),
            sprint: SprintId::ordinal(1),
            ci,
        }
    }

    #[test]
    fn the_first_red_merge_after_green_is_charged() {
        use Ci::*;
        let charged = |before, merges: &[Landed]| match blame(before, merges) {
            GateBlame::Merge { unit, .. } => unit,
            other => format!("{other:?}"),
        };
        assert_eq!(
            charged(Green, &[m("a", Green), m("b", Red), m("c", Red)]),
            "b"
        );
        assert_eq!(charged(Green, &[m("a", Red), m("b", Red)]), "a");
        // A gap in CI hides where the break came in.
        assert_eq!(charged(Green, &[m("a", Unknown), m("b", Red)]), "Unknown");
        assert_eq!(charged(Unknown, &[m("a", Red)]), "Unknown");
        assert_eq!(charged(Red, &[m("a", Red)]), "BeforePhase");
        assert_eq!(charged(Green, &[m("a", Green)]), "Unknown");
        // Red, mended, red again: the newest break is charged.
        assert_eq!(
            charged(Green, &[m("b", Red), m("b", Green), m("c", Red)]),
            "c"
        );
        assert_eq!(charged(Red, &[m("a", Green), m("c", Red)]), "c");
        // Red from before the phase, never green since.
        assert_eq!(charged(Red, &[m("a", Red), m("b", Red)]), "BeforePhase");
        // The newest merge is green: the break came after the merges.
        assert_eq!(charged(Green, &[m("a", Red), m("b", Green)]), "Unknown");
    }
}
