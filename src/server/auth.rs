//! Who may say what. Permission is read at command time from the collaborator
//! permission API; any error while checking means no.

use super::command::Command;
use std::fmt;

/// A collaborator's role on the repository, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    None,
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

impl Permission {
    /// From the API's `role_name` (preferred) or legacy `permission` field.
    pub fn parse(s: &str) -> Permission {
        match s {
            "admin" => Permission::Admin,
            "maintain" => Permission::Maintain,
            "write" | "push" => Permission::Write,
            "triage" => Permission::Triage,
            "read" | "pull" => Permission::Read,
            _ => Permission::None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::None => "none",
            Permission::Read => "read",
            Permission::Triage => "triage",
            Permission::Write => "write",
            Permission::Maintain => "maintain",
            Permission::Admin => "admin",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The least permission a command needs (overridable per repository).
pub fn required(cmd: &Command) -> Permission {
    match cmd {
        Command::Status | Command::Help => Permission::Read,
        Command::Killall => Permission::Maintain,
        _ => Permission::Write,
    }
}

/// The verdict on one command from one person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// A polite refusal that says what is needed.
    Refused(String),
    /// Bots (this App included) are not answered at all, unless allow-listed.
    Ignored,
}

pub struct Actor<'a> {
    pub login: &'a str,
    /// The webhook's `sender.type` ("User", "Bot", "Organization").
    pub kind: &'a str,
}

/// Decides; `permission` is the API's answer, or an error (which means no).
pub fn authorise(
    cmd: &Command,
    actor: &Actor,
    permission: Result<Permission, String>,
    bot_allow_list: &[String],
) -> Verdict {
    let is_bot = actor.kind == "Bot" || actor.login.ends_with("[bot]");
    if is_bot && !bot_allow_list.iter().any(|b| b == actor.login) {
        return Verdict::Ignored;
    }
    let need = required(cmd);
    match permission {
        Ok(p) if p >= need => Verdict::Allowed,
        Ok(p) => Verdict::Refused(format!(
            "Sorry @{}, `/supervise {}` needs **{}** access to this repository or more; you have **{}**.",
            actor.login,
            cmd.name(),
            need,
            p
        )),
        Err(e) => {
            tracing::warn!(login = actor.login, error = %e, "permission check failed; refusing");
            Verdict::Refused(format!("Sorry @{}, I could not check your permission on this repository just now, so I did not act. Please try again in a minute.", actor.login))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Permission::*;

    #[test]
    fn the_authorisation_matrix() {
        let user = Actor {
            login: "ana",
            kind: "User",
        };
        let cases: &[(Command, Permission, bool)] = &[
            (Command::Status, Read, true),
            (Command::Status, None, false),
            (Command::Help, Read, true),
            (Command::Start { plan: Option::None }, Write, true),
            (Command::Start { plan: Option::None }, Triage, false),
            (Command::Start { plan: Option::None }, Read, false),
            (Command::Resume { unit: Option::None }, Maintain, true),
            (Command::Stop, Write, true),
            (Command::NameFeature, Write, true),
            (Command::Analyze, Triage, false),
            (Command::Killall, Write, false),
            (Command::Killall, Maintain, true),
            (Command::Killall, Admin, true),
            (Command::Default, Write, true),
        ];
        for (cmd, p, ok) in cases {
            let v = authorise(cmd, &user, Ok(*p), &[]);
            assert_eq!(v == Verdict::Allowed, *ok, "{cmd:?} with {p}: {v:?}");
        }
        let Verdict::Refused(text) = authorise(&Command::Killall, &user, Ok(Write), &[]) else {
            panic!()
        };
        assert_eq!(text, "Sorry @ana, `/supervise killall` needs **maintain** access to this repository or more; you have **write**.");
    }

    #[test]
    fn errors_mean_no_and_bots_are_ignored_unless_listed() {
        let user = Actor {
            login: "ana",
            kind: "User",
        };
        assert!(matches!(
            authorise(&Command::Status, &user, Err("502".into()), &[]),
            Verdict::Refused(_)
        ));
        let bot = Actor {
            login: "renovate[bot]",
            kind: "Bot",
        };
        assert_eq!(
            authorise(&Command::Status, &bot, Ok(Admin), &[]),
            Verdict::Ignored
        );
        assert_eq!(
            authorise(&Command::Status, &bot, Ok(Admin), &["renovate[bot]".into()]),
            Verdict::Allowed
        );
        assert_eq!(Permission::parse("push"), Write);
        assert_eq!(Permission::parse("weird"), None);
    }
}
