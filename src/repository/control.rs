//! Model control, with Triton's three modes: `none` loads every model at start-up and never changes them;
//! `poll` also rescans the repositories every few seconds and loads added models, unloads removed ones and
//! reloads changed ones; `explicit` loads only the `--load-model` models at start-up and then what the
//! repository API asks for.
//!
//! Every change is made so that no request is lost. A reload loads the new state beside the serving one and
//! swaps it in only once it is complete; the versions it replaces stop taking requests at the swap, finish
//! the ones in flight, and are then finalised. If the new state fails to load, the serving versions stay and
//! the model's record says why. Unloading marks the versions UNLOADING, waits for their requests, then
//! finalises them. One model changes at a time (a lock per name); different models load concurrently.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fingerprint::Fingerprint;
use super::loader::Loader;
use super::overrides::{LoadOverrides, ScratchDir};
use super::record::{ModelRecord, VersionState, UNLOADED};
use super::{ModelRepository, ModelVersion};
use crate::error::{Error, LoadResult, Result};
use crate::model_config::ensemble;
use crate::{model_config, model_files};

/// Where a model was found in the repositories, or why it cannot be used (a name in two repositories).
type Location = std::result::Result<PathBuf, String>;

/// Triton's model control modes (`--model-control-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMode {
    None,
    Poll,
    Explicit,
}

/// How a load came about, which decides what happens around it.
#[derive(Clone, Copy, Default)]
struct Occasion {
    /// Load only if the model is not serving yet (an ensemble's composing model).
    if_absent: bool,
    /// A failure replaces the serving versions instead of leaving them in place (an ensemble whose
    /// composing model went away must stop serving).
    replace_on_failure: bool,
    /// Check the ensemble against its composing models as they are, loading none (an ensemble re-checked
    /// because one of them was unloaded must not load it again).
    leave_dependencies: bool,
}

/// What an ensemble finds when it looks up a composing model in the table.
fn composing(table: &ModelRepository, model: &str, version: i64) -> ensemble::Composing {
    let Ok(record) = table.record(model) else { return Err("which has no loaded version.".into()) };
    let Some(newest) = record.ready_versions().next_back() else {
        return Err(match record.failures().first() {
            Some(reason) => format!("which is not valid. Model '{model}' failed with error: {reason}"),
            None => "which has no loaded version.".into(),
        });
    };
    if version < 0 {
        return Ok(newest.config.clone());
    }
    match record.versions.get(&version) {
        Some(VersionState::Ready(named)) => Ok(named.config.clone()),
        _ => Err(format!("whose required version {version} is not loaded.")),
    }
}

/// One line of the repository index.
pub struct IndexEntry {
    pub name: String,
    /// Empty for a model with no version loaded or tried.
    pub version: String,
    /// READY, LOADING, UNLOADING or UNAVAILABLE; empty for a model that was never loaded.
    pub state: String,
    pub reason: String,
}

pub struct ModelControl {
    mode: ControlMode,
    repositories: Vec<PathBuf>,
    loader: Arc<Loader>,
    table: Arc<ModelRepository>,
    /// One lock per model name, held for the whole of a load or unload of that model.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// How many models may be building at once (`--model-load-thread-count`); a permit is held only while
    /// a model builds, never while it waits for the models it depends on.
    build_slots: tokio::sync::Semaphore,
}

impl ModelControl {
    /// `concurrent_builds`: how many models may build at once (at least one).
    pub fn new(
        mode: ControlMode,
        repositories: Vec<PathBuf>,
        loader: Loader,
        table: Arc<ModelRepository>,
        concurrent_builds: usize,
    ) -> Self {
        let (locks, loader) = (Mutex::new(HashMap::new()), Arc::new(loader));
        let build_slots = tokio::sync::Semaphore::new(concurrent_builds.max(1));
        ModelControl { mode, repositories, loader, table, locks, build_slots }
    }

    /// Loads what the mode asks for at start-up, every model concurrently: all of them, or in explicit mode
    /// the ones named (`*` for all). Fails only when a repository cannot be read.
    pub async fn start(self: &Arc<Self>, load_models: &[String]) -> std::result::Result<(), String> {
        let found = self.scan()?;
        let names: Vec<String> = match self.mode {
            ControlMode::Explicit if load_models.iter().all(|m| m != "*") => load_models.to_vec(),
            _ => found.keys().cloned().collect(),
        };
        let loads = names.into_iter().map(|name| {
            let location = found.get(&name).cloned().unwrap_or_else(|| Err(no_directory(&name)));
            let this = self.clone();
            tokio::spawn(async move {
                let _ = this.load_model(&name, LoadOverrides::default(), Some(location), Occasion::default()).await;
            })
        });
        for load in loads.collect::<Vec<_>>() {
            let _ = load.await;
        }
        Ok(())
    }

    /// In poll mode: rescans the repositories every `every`, for as long as the server runs.
    pub async fn poll_forever(self: Arc<Self>, every: Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            self.poll_once().await;
        }
    }

    /// Loads added models, reloads changed ones and unloads removed ones, concurrently.
    async fn poll_once(self: &Arc<Self>) {
        let found = match self.scan() {
            Ok(found) => found,
            Err(e) => return tracing::warn!("repository poll skipped: {e}"),
        };
        let mut changes = Vec::new();
        for (name, location) in &found {
            if self.changed(name, location) {
                let (this, name, location) = (self.clone(), name.clone(), location.clone());
                changes.push(tokio::spawn(async move {
                    let _ = this.load_model(&name, LoadOverrides::default(), Some(location), Occasion::default()).await;
                    this.refresh_dependents(&name).await;
                }));
            }
        }
        for record in self.table.records().into_iter().filter(|r| !found.contains_key(&r.name)) {
            let this = self.clone();
            changes.push(tokio::spawn(async move {
                this.unload_model(&record.name, true).await;
                this.refresh_dependents(&record.name).await;
            }));
        }
        for change in changes {
            let _ = change.await;
        }
    }

    /// Whether the repository content of `name` differs from what its record was loaded from.
    fn changed(&self, name: &str, location: &Location) -> bool {
        let Ok(record) = self.table.record(name) else {
            return true;
        };
        match location {
            Ok(dir) => {
                let config_file = model_config::config_path(dir, self.loader.config_name.as_deref());
                record.path != *dir || record.fingerprint.as_ref() != Some(&Fingerprint::of(dir, &config_file))
            }
            Err(reason) => record.reason.as_deref() != Some(reason.as_str()),
        }
    }

    /// The repository API's load: loads or reloads `name`, from the repositories or from the supplied
    /// files, with the supplied configuration if any. Explicit mode only.
    pub async fn load(&self, name: &str, overrides: LoadOverrides) -> Result<()> {
        self.require_explicit()?;
        model_files::check_model_name(name).map_err(Error::InvalidArgument)?;
        // Triton's message for a bad override starts "failed to load '<name>'" too (clients test for it).
        overrides.check().map_err(|e| e.context(&format!("failed to load '{name}'")))?;
        let location = if overrides.files.is_empty() {
            Some(
                self.locate(name)
                    .ok_or_else(|| Error::invalid(format!("failed to load '{name}': {}", no_directory(name))))?,
            )
        } else {
            None
        };
        let loaded = self.load_model(name, overrides, location, Occasion::default()).await;
        self.refresh_dependents(name).await;
        loaded.map_err(|reason| Error::invalid(format!("failed to load '{name}': {reason}")))
    }

    /// The repository API's unload: waits for the model's in-flight requests, then unloads it. Explicit
    /// mode only.
    pub async fn unload(&self, name: &str) -> Result<()> {
        self.require_explicit()?;
        model_files::check_model_name(name).map_err(Error::InvalidArgument)?;
        if self.table.record(name).is_err() {
            return Err(Error::invalid(format!("failed to unload '{name}': the model is not loaded")));
        }
        self.unload_model(name, false).await;
        self.refresh_dependents(name).await;
        Ok(())
    }

    /// The repository index: every model in the table, each version with its state and reason, and (as
    /// Triton lists them) the repositories' models that were never loaded, by name only.
    pub fn index(&self, ready_only: bool) -> Vec<IndexEntry> {
        let records = self.table.records();
        let mut entries: Vec<IndexEntry> = records.iter().flat_map(|r| index_entries(r)).collect();
        if let Ok(found) = self.scan() {
            let never_loaded = found.keys().filter(|name| records.iter().all(|r| &r.name != *name));
            entries.extend(never_loaded.map(|name| IndexEntry {
                name: name.clone(),
                version: String::new(),
                state: String::new(),
                reason: String::new(),
            }));
        }
        entries.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
        entries.retain(|e| !ready_only || e.state == "READY");
        entries
    }

    fn require_explicit(&self) -> Result<()> {
        match self.mode {
            ControlMode::Explicit => Ok(()),
            ControlMode::None => Err(Error::Unavailable(
                "explicit model load / unload is not allowed if model control mode is 'none' \
                 (start the server with --model-control-mode=explicit)"
                    .into(),
            )),
            ControlMode::Poll => Err(Error::Unavailable(
                "explicit model load / unload is not allowed if polling is enabled \
                 (model control mode 'poll' follows the repository instead)"
                    .into(),
            )),
        }
    }

    /// Loads `name` from `location` (or from the supplied files) and swaps it in. The error is the reason
    /// it failed; when it failed on a reload, the versions that were serving still are (unless `occasion`
    /// says otherwise). An ensemble's composing models are loaded first when they are not serving.
    fn load_model<'a>(
        &'a self,
        name: &'a str,
        overrides: LoadOverrides,
        location: Option<Location>,
        occasion: Occasion,
    ) -> Pin<Box<dyn Future<Output = LoadResult<()>> + Send + 'a>> {
        Box::pin(async move {
            let lock = self.lock_for(name);
            let _held = lock.lock().await;
            if occasion.if_absent && self.serving(name) {
                return Ok(());
            }
            let previous = self.table.record(name).ok();
            let (dir, scratch) = match (location, overrides.files.is_empty()) {
                (_, false) => {
                    let (scratch, dir) = ScratchDir::create(name, &overrides.files).map_err(|e| e.to_string())?;
                    (dir, Some(Arc::new(scratch)))
                }
                (Some(Ok(dir)), true) => (dir, None),
                (Some(Err(reason)), true) => {
                    let failed = ModelRecord::failed(name, Path::new(""), reason);
                    return self.swap_in(previous, failed, occasion.replace_on_failure);
                }
                (None, true) => return Err(no_directory(name).into()),
            };
            if previous.is_none() {
                self.table.put(ModelRecord::loading(name, &dir));
            }
            let dependencies = match occasion.leave_dependencies {
                true => Vec::new(),
                false => self.loader.dependencies(name, &dir, overrides.config.as_deref()),
            };
            for model in dependencies {
                if let Err(reason) = self.load_dependency(name, &model).await {
                    let failed = ModelRecord::failed(name, &dir, reason.to_string());
                    return self.swap_in(previous, failed, occasion.replace_on_failure);
                }
            }
            let started = Instant::now();
            let _slot = self.build_slots.acquire().await.map_err(|e| format!("loading stopped unexpectedly: {e}"))?;
            let (loader, table, model, config, before) =
                (self.loader.clone(), self.table.clone(), name.to_string(), overrides.config, previous.clone());
            let loaded = tokio::task::spawn_blocking(move || {
                let composing = |model: &str, version: i64| composing(&table, model, version);
                let mut record = loader.load(&model, &dir, config.as_deref(), before.as_deref(), &composing);
                // Supplied files are kept only for as long as a version loaded from them serves.
                if record.ready_versions().next().is_some() {
                    record.scratch = scratch;
                }
                record
            })
            .await
            .map_err(|e| format!("loading stopped unexpectedly: {e}"))?;
            let outcome = self.swap_in(previous, loaded, occasion.replace_on_failure);
            let ms = started.elapsed().as_millis() as u64;
            match &outcome {
                Ok(()) => tracing::info!(model = name, ms, "model loaded"),
                Err(reason) => tracing::warn!(model = name, ms, "model failed to load: {reason}"),
            }
            outcome
        })
    }

    /// Loads `model`, which `ensemble` uses, unless it already serves. A model missing from the repositories
    /// or failing to load is left for the ensemble's own checks to report; a cycle fails the ensemble.
    async fn load_dependency(&self, ensemble: &str, model: &str) -> LoadResult<()> {
        if model == ensemble || self.depends_on(model, ensemble, &mut Vec::new()) {
            return Err(
                format!("circular dependency between ensembles: {ensemble} -> ... -> {model} -> {ensemble}").into()
            );
        }
        if self.serving(model) {
            return Ok(());
        }
        if let Some(location) = self.locate(model) {
            let occasion = Occasion { if_absent: true, ..Occasion::default() };
            let _ = self.load_model(model, LoadOverrides::default(), Some(location), occasion).await;
        }
        Ok(())
    }

    /// Whether `model`'s config (in the repositories) names `target` as a step, directly or through other
    /// ensembles. Read from the configs, not the table, so that a cycle is found before any lock is taken.
    fn depends_on(&self, model: &str, target: &str, seen: &mut Vec<String>) -> bool {
        if seen.iter().any(|s| s == model) {
            return false;
        }
        seen.push(model.to_string());
        let Some(Ok(dir)) = self.locate(model) else { return false };
        self.loader
            .dependencies(model, &dir, None)
            .iter()
            .any(|dependency| dependency == target || self.depends_on(dependency, target, seen))
    }

    /// After `changed` loaded or went away: reloads the ensembles that use it and are not fully serving, or
    /// that it has left without a version, so that each is ready again or says why not.
    async fn refresh_dependents(&self, changed: &str) {
        let changed_serves = self.serving(changed);
        for record in self.table.records() {
            let uses_it = record
                .config
                .as_deref()
                .and_then(ensemble::scheduling)
                .is_some_and(|steps| steps.step.iter().any(|step| step.model_name == changed));
            if !uses_it || (changed_serves && record.failures().is_empty()) || record.path.as_os_str().is_empty() {
                continue;
            }
            let occasion = Occasion { replace_on_failure: true, leave_dependencies: true, ..Occasion::default() };
            let _ =
                self.load_model(&record.name, LoadOverrides::default(), Some(Ok(record.path.clone())), occasion).await;
        }
    }

    /// Whether `name` has a version serving now.
    fn serving(&self, name: &str) -> bool {
        self.table.record(name).is_ok_and(|record| record.ready_versions().next().is_some())
    }

    /// Puts a freshly loaded record in the table, unless it failed where `previous` has versions serving:
    /// those then keep serving, with the failure as the model's reason. Versions no longer used are retired
    /// in the background.
    fn swap_in(
        &self,
        previous: Option<Arc<ModelRecord>>,
        loaded: ModelRecord,
        replace_on_failure: bool,
    ) -> LoadResult<()> {
        let failures = loaded.failures();
        let serving = previous.filter(|p| !replace_on_failure && p.ready_versions().next().is_some());
        if let (false, Some(serving)) = (failures.is_empty(), &serving) {
            let reason =
                format!("the new state failed to load and the previous versions keep serving: {}", failures.join("; "));
            retire(unused(&loaded, serving));
            self.table.put(ModelRecord {
                reason: Some(reason.clone()),
                fingerprint: loaded.fingerprint,
                ..(**serving).clone()
            });
            return Err(reason.into());
        }
        if let Some(replaced) = self.table.put(loaded) {
            let current = self.table.record(&replaced.name).expect("just put");
            retire(unused(&replaced, &current));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; ").into())
        }
    }

    /// Unloads `name`: no new requests, in-flight ones finish, instances are finalised. The record then
    /// says "unloaded", or is removed (`remove`, for a model gone from the repository).
    async fn unload_model(&self, name: &str, remove: bool) {
        let lock = self.lock_for(name);
        let _held = lock.lock().await;
        let Ok(record) = self.table.record(name) else {
            return;
        };
        let ready: Vec<Arc<ModelVersion>> = record.ready_versions().cloned().collect();
        self.table.put(record.with_ready_versions(VersionState::Unloading));
        for version in &ready {
            version.retire().await;
        }
        if remove {
            self.table.remove(name);
        } else {
            let unloaded = record.with_ready_versions(VersionState::Unavailable(UNLOADED.into()));
            // A model with no versions (its load failed before any) says "unloaded" at the model level.
            let reason = unloaded.versions.is_empty().then(|| UNLOADED.to_string());
            self.table.put(ModelRecord { reason, scratch: None, ..unloaded });
        }
        tracing::info!(model = name, "model unloaded");
    }

    fn lock_for(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        locks.entry(name.to_string()).or_default().clone()
    }

    /// Every model directory of every repository, by name; a name found in two repositories is an error for
    /// that name only.
    fn scan(&self) -> std::result::Result<BTreeMap<String, Location>, String> {
        let mut found: BTreeMap<String, Location> = BTreeMap::new();
        for repository in &self.repositories {
            for (name, here) in model_directories(repository)? {
                let location = match (found.get(&name), &here) {
                    (Some(Ok(first)), Ok(dir)) => Err(duplicate(&name, first, dir)),
                    (Some(Err(reason)), _) | (_, Err(reason)) => Err(reason.clone()),
                    (None, Ok(_)) => here,
                };
                found.insert(name, location);
            }
        }
        Ok(found)
    }

    /// Where `name` is in the repositories, without scanning the others.
    fn locate(&self, name: &str) -> Option<Location> {
        let found: Vec<Location> = self.repositories.iter().filter_map(|r| model_directory(&r.join(name))).collect();
        match found.as_slice() {
            [] => None,
            [one] => Some(one.clone()),
            [Ok(first), Ok(second), ..] => Some(Err(duplicate(name, first, second))),
            [Err(reason), ..] | [_, Err(reason), ..] => Some(Err(reason.clone())),
        }
    }
}

/// The index lines of one record.
fn index_entries(record: &ModelRecord) -> Vec<IndexEntry> {
    let model_reason = record.reason.clone().unwrap_or_default();
    if record.versions.is_empty() {
        let state = if record.reason.is_some() { "UNAVAILABLE" } else { "LOADING" };
        return vec![IndexEntry {
            name: record.name.clone(),
            version: String::new(),
            state: state.into(),
            reason: model_reason,
        }];
    }
    record
        .versions
        .iter()
        .map(|(version, state)| IndexEntry {
            name: record.name.clone(),
            version: version.to_string(),
            state: state.name().into(),
            reason: match state {
                VersionState::Unavailable(reason) => reason.clone(),
                _ => model_reason.clone(),
            },
        })
        .collect()
}

/// The ready versions of `old` that `new` does not serve.
fn unused(old: &ModelRecord, new: &ModelRecord) -> Vec<Arc<ModelVersion>> {
    old.ready_versions().filter(|v| new.ready_versions().all(|n| !Arc::ptr_eq(n, v))).cloned().collect()
}

/// Retires versions in the background: each finishes its in-flight requests, then is finalised.
fn retire(versions: Vec<Arc<ModelVersion>>) {
    for version in versions {
        tokio::spawn(async move {
            version.retire().await;
            tracing::info!(model = version.name.as_str(), version = version.version, "version retired");
        });
    }
}

fn no_directory(name: &str) -> String {
    format!("no model directory named '{name}' in any model repository")
}

fn duplicate(name: &str, first: &Path, second: &Path) -> String {
    format!("model '{name}' exists in two repositories: {} and {}", first.display(), second.display())
}

/// The model directories of one repository, by name. A link to a directory is a model directory, as in
/// Triton (Kubernetes volumes are laid out with links); one that cannot be followed (a loop, a dangling
/// link) is a model that fails with the reason, rather than one silently missing.
fn model_directories(repository: &Path) -> std::result::Result<Vec<(String, Location)>, String> {
    let entries = std::fs::read_dir(repository)
        .map_err(|e| format!("cannot read model repository {}: {e}", repository.display()))?;
    let mut dirs: Vec<_> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| Some((entry.file_name().to_str()?.to_string(), entry.path())))
        .filter(|(name, _)| !name.starts_with('.'))
        .filter_map(|(name, path)| Some((name, model_directory(&path)?)))
        .collect();
    dirs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(dirs)
}

/// What the repository entry at `path` is: a model directory, a model that cannot be read (the reason),
/// or (`None`) nothing that concerns models: absent, or a plain file.
fn model_directory(path: &Path) -> Option<Location> {
    path.symlink_metadata().ok()?;
    match path.metadata() {
        Ok(metadata) if metadata.is_dir() => Some(Ok(path.to_path_buf())),
        Ok(_) => None,
        Err(e) => {
            let reason = format!("cannot read model directory {}: {e}", path.display());
            tracing::warn!("{reason}");
            Some(Err(reason))
        }
    }
}
