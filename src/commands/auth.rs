//! Who may say what. Permission is read at command time from the collaborator
//! permission API; any error while checking means no.

use super::Command;
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

/// The least permission a command needs by default (the command table's; a
/// bare `/supervise` starts or resumes, so it needs what they need).
pub fn required(cmd: &Command) -> Permission {
    super::spec_of(cmd.name()).map_or(Permission::Write, |c| c.needs)
}

/// A repository's own rules (`permissions:` and `bots:` in `.github/supervise.yml`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub overrides: std::collections::BTreeMap<String, Permission>,
    pub bots: Vec<String>,
}

impl Policy {
    /// Checks the names: a typo in a command or a role is an error, not a silent default.
    pub fn from_settings(
        permissions: Option<&std::collections::BTreeMap<String, String>>,
        bots: Option<&[String]>,
    ) -> Result<Policy, String> {
        let mut overrides = std::collections::BTreeMap::new();
        for (cmd, role) in permissions.into_iter().flatten() {
            let known = cmd == "default" || super::spec_of(cmd).is_some();
            if !known {
                return Err(format!(
                    "`permissions` names `{cmd}`, which is not a command"
                ));
            }
            let p = Permission::parse(role);
            if p == Permission::None && role != "none" {
                return Err(format!(
                    "`permissions.{cmd}` is `{role}`; use read, triage, write, maintain or admin"
                ));
            }
            overrides.insert(cmd.clone(), p);
        }
        Ok(Policy {
            overrides,
            bots: bots.map(<[String]>::to_vec).unwrap_or_default(),
        })
    }

    pub fn required(&self, cmd: &Command) -> Permission {
        let name = if cmd.name().is_empty() {
            "default"
        } else {
            cmd.name()
        };
        self.overrides
            .get(name)
            .copied()
            .unwrap_or_else(|| required(cmd))
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
/// Bots are allowed only when the service's or the repository's list names them.
pub fn authorise(
    cmd: &Command,
    actor: &Actor,
    permission: Result<Permission, String>,
    bot_allow_list: &[String],
    policy: &Policy,
) -> Verdict {
    let is_bot = actor.kind == "Bot" || actor.login.ends_with("[bot]");
    if is_bot
        && !bot_allow_list
            .iter()
            .chain(policy.bots.iter())
            .any(|b| b == actor.login)
    {
        return Verdict::Ignored;
    }
    let need = policy.required(cmd);
    match permission {
        Ok(p) if p >= need => Verdict::Allowed,
        Ok(p) => Verdict::Refused(format!(
            "Sorry {}, `/supervise {}` needs **{}** access to this repository or more; you have **{}**.",
            actor.login,
            cmd.name(),
            need,
            p
        )),
        Err(e) => {
            tracing::warn!(login = actor.login, error = %e, "permission check failed; refusing");
            Verdict::Refused(format!("Sorry {}, I could not check your permission on this repository just now, so I did not act. Please try again in a minute.", actor.login))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Permission::*;

    /// A command on the operation, by its word.
    fn op(word: &str) -> Command {
        Command::parse_bare(word).unwrap()
    }

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
            (op("resume"), Maintain, true),
            (op("stop"), Write, true),
            (op("name-feature"), Write, true),
            (Command::Analyze, Triage, false),
            (op("killall"), Write, false),
            (op("killall"), Maintain, true),
            (op("killall"), Admin, true),
            (Command::Default, Write, true),
        ];
        for (cmd, p, ok) in cases {
            let v = authorise(cmd, &user, Ok(*p), &[], &Policy::default());
            assert_eq!(v == Verdict::Allowed, *ok, "{cmd:?} with {p}: {v:?}");
        }
        let Verdict::Refused(text) =
            authorise(&op("killall"), &user, Ok(Write), &[], &Policy::default())
        else {
            panic!()
        };
        assert_eq!(text, "Sorry ana, `/supervise killall` needs **maintain** access to this repository or more; you have **write**.");
    }

    #[test]
    fn repositories_can_raise_or_lower_what_a_command_needs() {
        let mut perms = std::collections::BTreeMap::new();
        perms.insert("status".to_string(), "write".to_string());
        perms.insert("killall".to_string(), "admin".to_string());
        let p = Policy::from_settings(Some(&perms), Option::None).unwrap();
        let user = Actor {
            login: "ana",
            kind: "User",
        };
        assert!(matches!(
            authorise(&Command::Status, &user, Ok(Read), &[], &p),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            authorise(&op("killall"), &user, Ok(Maintain), &[], &p),
            Verdict::Refused(_)
        ));
        assert_eq!(
            authorise(&op("stop"), &user, Ok(Write), &[], &p),
            Verdict::Allowed,
            "others keep their defaults"
        );
        perms.insert("stpo".to_string(), "write".to_string());
        assert!(Policy::from_settings(Some(&perms), Option::None)
            .unwrap_err()
            .contains("`stpo`"));
        let mut bad = std::collections::BTreeMap::new();
        bad.insert("stop".to_string(), "owner".to_string());
        assert!(Policy::from_settings(Some(&bad), Option::None)
            .unwrap_err()
            .contains("use read, triage, write, maintain or admin"));
    }

    #[test]
    fn errors_mean_no_and_bots_are_ignored_unless_listed() {
        let user = Actor {
            login: "ana",
            kind: "User",
        };
        assert!(matches!(
            authorise(
                &Command::Status,
                &user,
                Err("502".into()),
                &[],
                &Policy::default()
            ),
            Verdict::Refused(_)
        ));
        let bot = Actor {
            login: "renovate[bot]",
            kind: "Bot",
        };
        assert_eq!(
            authorise(&Command::Status, &bot, Ok(Admin), &[], &Policy::default()),
            Verdict::Ignored
        );
        assert_eq!(
            authorise(
                &Command::Status,
                &bot,
                Ok(Admin),
                &["renovate[bot]".into()],
                &Policy::default()
            ),
            Verdict::Allowed
        );
        assert_eq!(Permission::parse("push"), Write);
        let repo_bots = Policy {
            bots: vec!["renovate[bot]".into()],
            ..Default::default()
        };
        assert_eq!(
            authorise(&Command::Status, &bot, Ok(Admin), &[], &repo_bots),
            Verdict::Allowed
        );
        assert_eq!(Permission::parse("weird"), None);
    }
}
