//! Which version directories of a model are served: the numeric subdirectories, filtered by the config's
//! version policy (`latest { num_versions }` — the default is the newest one — `all`, or `specific`).
//! Other subdirectories are ignored, as Triton ignores them.

use std::path::Path;

use crate::proto::inference::{model_version_policy::PolicyChoice, ModelVersionPolicy};

pub fn select(model_dir: &Path, policy: Option<&ModelVersionPolicy>) -> Result<Vec<i64>, String> {
    let mut available = numeric_subdirectories(model_dir)?;
    available.sort_unstable();
    if available.is_empty() {
        return Err(format!(
            "no version directory found in {} (versions are directories named by a number, e.g. 1/)",
            model_dir.display()
        ));
    }
    let selected: Vec<i64> = match policy.and_then(|p| p.policy_choice.as_ref()) {
        None => available.iter().rev().take(1).copied().collect(),
        Some(PolicyChoice::Latest(latest)) => {
            available.iter().rev().take(latest.num_versions.max(1) as usize).copied().collect()
        }
        Some(PolicyChoice::All(_)) => available.clone(),
        Some(PolicyChoice::Specific(specific)) => {
            available.iter().filter(|v| specific.versions.contains(v)).copied().collect()
        }
    };
    if selected.is_empty() {
        return Err(format!("none of the versions the version policy names exists (found {available:?})"));
    }
    Ok(selected)
}

/// The highest numbered version directory, if there is one.
pub fn newest(model_dir: &Path) -> Option<i64> {
    numeric_subdirectories(model_dir).ok()?.into_iter().max()
}

/// The versions present: subdirectories named by a non-negative number, in no particular order. A link to
/// a directory is a version directory, as in Triton (Kubernetes volumes are laid out with links).
pub(super) fn numeric_subdirectories(model_dir: &Path) -> Result<Vec<i64>, String> {
    let entries = std::fs::read_dir(model_dir).map_err(|e| format!("cannot read {}: {e}", model_dir.display()))?;
    Ok(entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i64>().ok())
        .filter(|&v| v >= 0)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_version_policy::{All, Latest, Specific};

    fn policy(choice: PolicyChoice) -> ModelVersionPolicy {
        ModelVersionPolicy { policy_choice: Some(choice) }
    }

    #[test]
    fn applies_each_policy() {
        let dir = std::env::temp_dir().join(format!("tessera-versions-{}", std::process::id()));
        for sub in ["1", "2", "10", "notes", "-3"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        assert_eq!(select(&dir, None).unwrap(), vec![10]);
        assert_eq!(select(&dir, Some(&policy(PolicyChoice::Latest(Latest { num_versions: 2 })))).unwrap(), vec![10, 2]);
        assert_eq!(select(&dir, Some(&policy(PolicyChoice::All(All {})))).unwrap(), vec![1, 2, 10]);
        let specific = policy(PolicyChoice::Specific(Specific { versions: vec![1, 7] }));
        assert_eq!(select(&dir, Some(&specific)).unwrap(), vec![1]);
        let missing = policy(PolicyChoice::Specific(Specific { versions: vec![7] }));
        assert!(select(&dir, Some(&missing)).unwrap_err().contains("none of the versions"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
