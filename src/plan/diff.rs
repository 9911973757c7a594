//! What changed between the plan an operation started with and the plan on
//! disk now: units and sprints added or removed, sprints whose name, tasks or
//! criteria changed. Said to the person, who decides whether to start over.

use super::{Plan, Sprint};

fn same(a: &Sprint, b: &Sprint) -> bool {
    let texts = |c: &[super::Criterion]| c.iter().map(|c| c.text.clone()).collect::<Vec<_>>();
    a.name == b.name
        && a.tasks == b.tasks
        && texts(&a.exit_criteria) == texts(&b.exit_criteria)
        && texts(&a.entry_criteria) == texts(&b.entry_criteria)
}

/// One line per difference, in plan order; empty when nothing that matters changed.
pub fn changes(old: &Plan, new: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for u in &new.work_units {
        match old.unit(&u.name) {
            None => out.push(format!("work unit {} added", u.name)),
            Some(was) => {
                for s in &u.sprints {
                    match was.sprints.iter().find(|o| o.id == s.id) {
                        None => out.push(format!("{} Sprint {} added", u.name, s.id)),
                        Some(o) if !same(o, s) => {
                            out.push(format!("{} Sprint {} changed", u.name, s.id))
                        }
                        Some(_) => {}
                    }
                }
                for o in &was.sprints {
                    if !u.sprints.iter().any(|s| s.id == o.id) {
                        out.push(format!("{} Sprint {} removed", u.name, o.id));
                    }
                }
                if was.depends_on != u.depends_on {
                    out.push(format!("{}'s dependencies changed", u.name));
                }
            }
        }
    }
    for u in &old.work_units {
        if new.unit(&u.name).is_none() {
            out.push(format!("work unit {} removed", u.name));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(src: &str) -> Plan {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("EXECUTION_PLAN.md");
        std::fs::write(&p, src).unwrap();
        super::super::load(&p).unwrap().plan
    }

    #[test]
    fn added_removed_and_changed_sprints_are_named() {
        let old = plan("# P\n\n| Work Unit | Directory |\n|---|---|\n| api | api |\n| web | web |\n\n## api\n### Sprint 1: Types\n- [ ] `a.txt` exists\n### Sprint 2: Handlers\n- [ ] `b.txt` exists\n\n## web\n### Sprint 1: Page\n- [ ] `w.txt` exists\n");
        let new = plan("# P\n\n| Work Unit | Directory |\n|---|---|\n| api | api |\n| docs | docs |\n\n## api\n### Sprint 1: Types\n- [ ] `a.txt` exists\n### Sprint 2: Handlers\n- [ ] `c.txt` exists\n### Sprint 3: More\n- [ ] `d.txt` exists\n\n## docs\n### Sprint 1: Guide\n- [ ] `g.txt` exists\n");
        assert_eq!(
            changes(&old, &new),
            [
                "api Sprint 2 changed",
                "api Sprint 3 added",
                "work unit docs added",
                "work unit web removed"
            ]
        );
        assert!(changes(&old, &old).is_empty());
    }
}
