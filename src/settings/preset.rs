//! Agent presets: `--agent claude`, `codex` or `gemini` names a CLI people
//! already run, and the supervisor runs it as the agent contract needs —
//! non-interactively, allowed to edit files, run commands and commit, the
//! prompt from `SUPERVISE_PROMPT_FILE`, the model from `SUPERVISE_MODEL`,
//! the turn budget as its turn limit where it has one, and its
//! machine-readable report on standard output (what `engine::provider`
//! reads: usage, a provider's error, the turn limit).
//!
//! A preset is only the exact word; anything else is a command of its own,
//! run through `sh -c` as it stands (`./claude` runs a program of that name).

use crate::engine::ModelIds;

/// An agent CLI the supervisor knows how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Anthropic's Claude Code (npm `@anthropic-ai/claude-code`).
    Claude,
    /// OpenAI's Codex (npm `@openai/codex`).
    Codex,
    /// Google's Gemini CLI (npm `@google/gemini-cli`).
    Gemini,
}

impl Preset {
    /// Every preset, with the words that name it.
    pub const ALL: [(Preset, &'static [&'static str]); 3] = [
        (Preset::Claude, &["claude", "claude-code"]),
        (Preset::Codex, &["codex"]),
        (Preset::Gemini, &["gemini", "gemini-cli"]),
    ];

    /// The preset an agent setting names, if it is one of the words.
    pub fn named(agent: &str) -> Option<Preset> {
        let word = agent.trim();
        Preset::ALL
            .iter()
            .find(|(_, names)| names.contains(&word))
            .map(|(p, _)| *p)
    }

    /// The command it stands for, run through `sh -c` in the sprint's
    /// worktree like any agent command.
    ///
    /// Claude Code: `acceptEdits` with Bash, Edit and Write allowed (the
    /// agent must run commands and commit), the turn budget as
    /// `--max-turns`, its JSON result. Codex: `exec` with its JSON events;
    /// its own sandbox is off because its workspace-write mode makes `.git`
    /// read-only and the agent must commit — the agent runs where the
    /// supervisor put it (a worktree, a runner), as Claude Code does. Codex
    /// has no turn limit to set, and takes its provider's address from its
    /// configuration only: given a key and an address (the model proxy's),
    /// they are its provider, named on its command line. Gemini CLI: `--yolo` (every tool allowed)
    /// in a workspace it is told to trust, its JSON report; the prompt is
    /// its `--prompt` and standard input is closed, since it would append
    /// what it reads there (the contract also gives the prompt there). It
    /// has no turn limit flag either.
    pub fn command(self) -> &'static str {
        match self {
            Preset::Claude => concat!(
                "claude -p --output-format json --permission-mode acceptEdits",
                " --allowedTools \"Bash Edit Write\" --model \"$SUPERVISE_MODEL\"",
                " --max-turns \"$SUPERVISE_MAX_TURNS\" \"$(cat \"$SUPERVISE_PROMPT_FILE\")\""
            ),
            // Given a key and an address (the model proxy's), they are
            // Codex's provider: unquoted, the words split as flags.
            Preset::Codex => concat!(
                "codex exec ${OPENAI_BASE_URL:+${OPENAI_API_KEY:+-c model_provider=supervise",
                " -c model_providers.supervise.name=supervise",
                " -c model_providers.supervise.base_url=$OPENAI_BASE_URL",
                " -c model_providers.supervise.env_key=OPENAI_API_KEY",
                " -c model_providers.supervise.wire_api=responses}}",
                " --json --sandbox danger-full-access --model \"$SUPERVISE_MODEL\"",
                " - < \"$SUPERVISE_PROMPT_FILE\""
            ),
            Preset::Gemini => concat!(
                "gemini --yolo --skip-trust --output-format json --model \"$SUPERVISE_MODEL\"",
                " --prompt \"$(cat \"$SUPERVISE_PROMPT_FILE\")\" < /dev/null"
            ),
        }
    }

    /// The model ids each tier asks this CLI for, unless `models:` says
    /// others. Claude Code takes the tiers' names as aliases of the newest
    /// models; Codex's and Gemini CLI's are ids their catalogs list (Codex
    /// 0.171.0, Gemini CLI 0.61.0).
    pub fn models(self) -> ModelIds {
        match self {
            Preset::Claude => ModelIds::default(),
            Preset::Codex => ModelIds {
                haiku: "gpt-6-luna".into(),
                sonnet: "gpt-6.1-terra".into(),
                opus: "gpt-6.2-sol".into(),
            },
            Preset::Gemini => ModelIds {
                haiku: "gemini-3.1-flash-lite".into(),
                sonnet: "gemini-3.5-flash".into(),
                opus: "gemini-3.1-pro".into(),
            },
        }
    }

    /// The program the command runs (what must be on `PATH`).
    pub fn program(self) -> &'static str {
        match self {
            Preset::Claude => "claude",
            Preset::Codex => "codex",
            Preset::Gemini => "gemini",
        }
    }

    /// The npm package that installs the program.
    /// The agent the shipped agent workflow runs for it (its `AGENT_KIND`).
    pub fn workflow_kind(self) -> &'static str {
        match self {
            Preset::Claude => "claude-code",
            Preset::Codex => "codex",
            Preset::Gemini => "gemini",
        }
    }

    /// The repository secret the agent workflow gives it: its model key.
    pub fn secret(self) -> &'static str {
        match self {
            Preset::Claude => "ANTHROPIC_API_KEY",
            Preset::Codex => "OPENAI_API_KEY",
            Preset::Gemini => "GEMINI_API_KEY",
        }
    }

    /// The CLI's name as people know it.
    pub fn product(self) -> &'static str {
        match self {
            Preset::Claude => "Claude Code",
            Preset::Codex => "Codex",
            Preset::Gemini => "Gemini CLI",
        }
    }

    pub fn package(self) -> &'static str {
        match self {
            Preset::Claude => "@anthropic-ai/claude-code",
            Preset::Codex => "@openai/codex",
            Preset::Gemini => "@google/gemini-cli",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_word_is_a_preset() {
        assert_eq!(Preset::named("claude"), Some(Preset::Claude));
        assert_eq!(Preset::named(" claude-code "), Some(Preset::Claude));
        assert_eq!(Preset::named("codex"), Some(Preset::Codex));
        assert_eq!(Preset::named("gemini"), Some(Preset::Gemini));
        for not in [
            "./claude",
            "claude -p hi",
            "Claude",
            "codex exec",
            "",
            "gemini -p x",
        ] {
            assert_eq!(Preset::named(not), None, "{not:?}");
        }
    }

    #[test]
    fn each_preset_runs_its_program_with_the_contracts_variables() {
        for (p, _) in Preset::ALL {
            let c = p.command();
            assert!(c.starts_with(p.program()), "{c}");
            assert!(c.contains("\"$SUPERVISE_MODEL\""), "{c}");
            assert!(c.contains("$SUPERVISE_PROMPT_FILE"), "{c}");
            assert!(
                c.contains("--json") || c.contains("--output-format json"),
                "{c}"
            );
            let m = p.models();
            assert!(m.haiku != m.sonnet && m.sonnet != m.opus, "{m:?}");
        }
    }
}
