//! Names: the naming ritual (a humorous military operation name,
//! deterministic from a seed) and the operation's branches.

/// `supervise/<op>/integration`: git cannot hold a branch `supervise/<op>` next to
/// the sprint branches below it, so the integration branch is a sibling of theirs.
pub fn integration_branch(op: &str) -> String {
    format!("supervise/{op}/integration")
}

/// The branch a sprint's agents work on, cut from the integration branch.
pub fn sprint_branch(op: &str, unit_slug: &str, sprint: &str) -> String {
    format!("supervise/{op}/{unit_slug}/sprint-{sprint}")
}

const ADJECTIVES: &[&str] = &[
    "Caffeinated",
    "Relentless",
    "Sleepless",
    "Unflappable",
    "Meticulous",
    "Stubborn",
    "Thunderous",
    "Polite",
    "Overcaffeinated",
    "Indefatigable",
    "Slightly Nervous",
    "Rubber",
    "Iron",
    "Velvet",
    "Midnight",
    "Recursive",
    "Idempotent",
    "Asynchronous",
    "Well-Tested",
    "Lint-Free",
    "Tenacious",
    "Audacious",
    "Bashful",
    "Dapper",
];

const NOUNS: &[&str] = &[
    "Badger",
    "Walrus",
    "Tortoise",
    "Heron",
    "Mongoose",
    "Capybara",
    "Narwhal",
    "Platypus",
    "Otter",
    "Yak",
    "Pelican",
    "Wombat",
    "Hedgehog",
    "Marmot",
    "Lobster",
    "Armadillo",
    "Stapler",
    "Teapot",
    "Rubber Duck",
    "Semicolon",
    "Pointer",
    "Monad",
    "Borrow Checker",
    "Merge Queue",
];

/// splitmix64: a tiny, well-mixed step so nearby seeds give unrelated names.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub fn operation_name(seed: u64) -> String {
    let a = mix(seed);
    let n = mix(a);
    format!(
        "Operation {} {}",
        ADJECTIVES[(a % ADJECTIVES.len() as u64) as usize],
        NOUNS[(n % NOUNS.len() as u64) as usize]
    )
}

pub fn announcement(name: &str, units: usize, sprints: usize) -> String {
    format!(
        "🎖️ By order of the Sprint Supervisor, this plan shall henceforth be known as **{name}**.\n{}, {}. Agents, to your stations.",
        crate::text::count(units, "work unit"),
        crate::text::count(sprints, "sprint")
    )
}

pub const REPROACH: &str = "🫡 At ease, soldier. Naming is a ritual of STARTING the plan, not a warm-up exercise. \
No operation is under way yet, so there is nothing to christen. Say `start` and the name will be bestowed with full ceremony.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_varied() {
        assert_eq!(operation_name(7), operation_name(7));
        let distinct: std::collections::BTreeSet<_> = (0..50).map(operation_name).collect();
        assert!(
            distinct.len() > 40,
            "only {} distinct names",
            distinct.len()
        );
        assert!(operation_name(1).starts_with("Operation "));
    }
}
