//! The manager loop (seed 004): the supervisor writes the kanban once, then
//! alternates a manager agent, which answers with JSON naming the next task,
//! and a task agent on that task, until the manager answers `null`. The
//! supervisor never reads the kanban or the task files: it checks the answer's
//! shape, mirrors its task list for people, and runs what it names.

use super::phases::quoted;
use super::{answer_of, status_of, unit, Next};
use crate::engine::state::{OperationState, UnitStatus};
use crate::plan::{SprintType, WorkUnit};
use serde::{Deserialize, Serialize};

/// Seed 004's MAX_RETRIES: the first answer and three more tries.
pub const MANAGER_ATTEMPTS: u32 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manager {
    pub request: String,
    /// The kanban file the supervisor creates and the agents keep.
    pub kanban: String,
    pub max_tasks: u32,
}

/// What the manager must answer (seed 004's schema). Unknown fields are
/// refused: a misspelt `next-task` must not read as "no next task".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagerAnswer {
    pub next_task: Option<String>,
    pub tasks: Vec<TaskEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskEntry {
    pub state: TaskState,
    pub file: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Done,
    Todo,
}

/// Whether `path` names a file inside the repository: relative, no `..`, no
/// `.git`, no control characters.
fn inside_repository(path: &str) -> bool {
    let p = std::path::Path::new(path);
    !path.chars().any(char::is_control)
        && p.is_relative()
        && !path.starts_with('~')
        && p.components().all(|c| match c {
            std::path::Component::Normal(n) => n != ".git",
            std::path::Component::CurDir => true,
            _ => false,
        })
}

impl ManagerAnswer {
    /// Reads and checks an answer; the error is what the manager's retry is
    /// told (seed 004's message, plus what exactly is wrong).
    pub fn parse(text: &str) -> Result<ManagerAnswer, String> {
        let got: String = text.trim().chars().take(200).collect();
        let invalid = |why: String| {
            format!(
                "Invalid JSON. Expected: {{\"next_task\": str, \"tasks\": [...]}}. Got: {got}. ({why})"
            )
        };
        // `next_task` must be present, even as null: serde would take a
        // missing Option as None and end the loop on a forgotten field.
        let value: serde_json::Value =
            serde_json::from_str(text.trim()).map_err(|e| invalid(e.to_string()))?;
        if value.get("next_task").is_none() {
            return Err(invalid("missing field `next_task`".into()));
        }
        let answer: ManagerAnswer =
            serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        if let Some(next) = &answer.next_task {
            let listed = answer
                .tasks
                .iter()
                .any(|t| &t.file == next && t.state == TaskState::Todo);
            if !listed {
                return Err(invalid(format!(
                    "next_task `{next}` is not a task marked todo in `tasks`"
                )));
            }
        }
        if let Some(t) = answer.tasks.iter().find(|t| t.file.trim().is_empty()) {
            return Err(invalid(format!("a task has an empty file ({:?})", t.state)));
        }
        // A task file is handed to the task agent as a path in the
        // repository: one that leaves it (`../../.git/config`, `/etc/passwd`)
        // is refused, whatever the manager was talked into.
        if let Some(t) = answer.tasks.iter().find(|t| !inside_repository(&t.file)) {
            return Err(invalid(format!(
                "task file `{}` is not a relative path inside the repository",
                t.file.chars().take(100).collect::<String>()
            )));
        }
        Ok(answer)
    }
}

impl Manager {
    pub fn new(request: &str, topic: &str, max_tasks: u32) -> Manager {
        Manager {
            request: request.trim().to_string(),
            kanban: format!("{topic}/KANBAN.md"),
            max_tasks: max_tasks.max(1),
        }
    }

    pub fn kanban_text(&self) -> String {
        format!(
            "# Workflow\n\n## Request\n\n{}\n\n## Tasks\n\n(none yet: the manager adds them)\n",
            self.request
        )
    }

    fn manager_name(k: usize) -> String {
        format!("manager-{k}")
    }

    fn task_name(k: usize) -> String {
        format!("task-{k}")
    }

    fn manager_unit(&self, k: usize, done: Option<&str>) -> WorkUnit {
        let done = match done {
            Some(f) => format!("The task just done: `{f}`."),
            None => "No task has run yet: break the request into task files and list them.".into(),
        };
        let body = format!(
            "You are the manager of a kanban workflow for this request:\n\n{req}\n\nThe kanban is `{kanban}`. {done}\n\nRead the kanban, update it (and the task files) and commit, then choose the next task. Your answer goes in the file named by $SUPERVISE_RESULT_FILE (not committed): exactly one JSON object\n\n{{\"next_task\": \"path/to/task.md\" or null, \"tasks\": [{{\"state\": \"done\" or \"todo\", \"file\": \"path/to/task.md\"}}]}}\n\n`next_task` must be one of the tasks marked todo; null ends the workflow. No other fields.",
            req = quoted(&self.request),
            kanban = self.kanban,
        );
        let mut u = unit(
            &Self::manager_name(k),
            if k > 1 {
                vec![Self::task_name(k - 1)]
            } else {
                Vec::new()
            },
            "Choose the next task",
            SprintType::Command,
            body,
            Vec::new(),
        );
        u.sprints[0].tasks = vec!["Answer with the next task as JSON".into()];
        u
    }

    fn task_unit(&self, k: usize, file: &str) -> WorkUnit {
        let body = format!(
            "You are a task agent of a kanban workflow. The kanban is `{kanban}`; your task is `{file}`.\n\nRead both, do the task, write your work log where the kanban says, commit your work, and end with DONE.",
            kanban = self.kanban,
        );
        unit(
            &Self::task_name(k),
            vec![Self::manager_name(k)],
            file,
            SprintType::Code,
            body,
            Vec::new(),
        )
    }

    pub fn initial_units(&self) -> Vec<WorkUnit> {
        vec![self.manager_unit(1, None)]
    }

    pub fn check_answer(&self, unit: &str, answer: Option<&str>) -> Result<(), String> {
        if !unit.starts_with("manager-") {
            return Ok(());
        }
        let text = answer.ok_or_else(|| {
            "no answer: write the JSON object to the file named by $SUPERVISE_RESULT_FILE"
                .to_string()
        })?;
        ManagerAnswer::parse(text).map(|_| ())
    }

    pub fn max_attempts(&self, unit: &str) -> Option<u32> {
        unit.starts_with("manager-").then_some(MANAGER_ATTEMPTS)
    }

    fn rounds(st: &OperationState) -> usize {
        (1..)
            .take_while(|&k| status_of(st, &Self::manager_name(k)).is_some())
            .count()
    }

    /// The manager's latest valid answer.
    pub fn latest(&self, st: &OperationState) -> Option<ManagerAnswer> {
        (1..=Self::rounds(st))
            .rev()
            .find_map(|k| answer_of(st, &Self::manager_name(k)))
            .and_then(|t| ManagerAnswer::parse(t).ok())
    }

    pub fn next(&self, st: &OperationState) -> Next {
        let k = Self::rounds(st);
        let manager = Self::manager_name(k);
        let task = Self::task_name(k);
        match status_of(st, &task) {
            Some(UnitStatus::Completed) if k >= self.max_tasks as usize => Next::Finish {
                why: format!(
                    "{k} tasks ran, the cap (`workflow.max_tasks`); the manager's list is left as it is"
                ),
            },
            Some(UnitStatus::Completed) => {
                let file = st
                    .unit_index(&task)
                    .map(|u| st.plan.work_units[u].sprints[0].name.clone())
                    .unwrap_or_default();
                Next::Add {
                    units: vec![self.manager_unit(k + 1, Some(&file))],
                    why: format!("task {k} done: the manager chooses the next"),
                }
            }
            Some(_) => Next::Nothing,
            None if status_of(st, &manager) == Some(UnitStatus::Completed) => {
                let answer = answer_of(st, &manager).map(ManagerAnswer::parse);
                match answer {
                    Some(Ok(a)) => match a.next_task {
                        None => Next::Finish {
                            why: "the manager answered that no task is left".into(),
                        },
                        Some(file) => Next::Add {
                            units: vec![self.task_unit(k, &file)],
                            why: format!("the manager chose `{file}`"),
                        },
                    },
                    Some(Err(e)) => Next::Block { why: e },
                    None => Next::Block {
                        why: "the manager's answer is missing".into(),
                    },
                }
            }
            None => Next::Nothing,
        }
    }

    pub fn summary(&self, st: &OperationState) -> Vec<String> {
        let mut out = vec![format!("Workflow: manager loop · kanban {}", self.kanban)];
        match self.latest(st) {
            Some(a) => {
                for t in &a.tasks {
                    let mark = if t.state == TaskState::Done { "x" } else { " " };
                    out.push(format!("- [{mark}] {}", t.file));
                }
            }
            None => out.push("Tasks: none yet (the manager has not answered)".into()),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_with_the_error_the_retry_needs() {
        let ok = r#"{"next_task": "t/1.md", "tasks": [{"state": "todo", "file": "t/1.md"}]}"#;
        assert_eq!(
            ManagerAnswer::parse(ok).unwrap().next_task.as_deref(),
            Some("t/1.md")
        );
        let end = r#"{"next_task": null, "tasks": [{"state": "done", "file": "t/1.md"}]}"#;
        assert_eq!(ManagerAnswer::parse(end).unwrap().next_task, None);
        for (bad, says) in [
            ("not json", "expected"),
            (r#"{"tasks": []}"#, "missing field `next_task`"),
            (r#"{"next_task": null}"#, "missing field `tasks`"),
            (r#"{"next_task": 3, "tasks": []}"#, "invalid type"),
            (
                r#"{"next_task": null, "tasks": [{"state": "doing", "file": "a"}]}"#,
                "unknown variant",
            ),
            (
                r#"{"next_task": null, "tasks": [], "note": 1}"#,
                "unknown field `note`",
            ),
            (
                r#"{"next_task": "t/9.md", "tasks": [{"state": "todo", "file": "t/1.md"}]}"#,
                "not a task marked todo",
            ),
            (r#"[1, 2]"#, "missing field `next_task`"),
            (
                r#"{"next_task": "../../.git/config", "tasks": [{"state": "todo", "file": "../../.git/config"}]}"#,
                "not a relative path inside the repository",
            ),
            (
                r#"{"next_task": null, "tasks": [{"state": "done", "file": "/etc/passwd"}]}"#,
                "not a relative path inside the repository",
            ),
            (
                r#"{"next_task": "a/.git/hooks/x", "tasks": [{"state": "todo", "file": "a/.git/hooks/x"}]}"#,
                "not a relative path inside the repository",
            ),
        ] {
            let e = ManagerAnswer::parse(bad).unwrap_err();
            assert!(
                e.starts_with(
                    "Invalid JSON. Expected: {\"next_task\": str, \"tasks\": [...]}. Got: "
                ),
                "{e}"
            );
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
