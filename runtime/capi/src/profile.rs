//! `nrt_profile_start` / `nrt_profile_stop` (`nrt_profile.h`): while a profile of a model runs,
//! each of its executions is recorded; stopping writes the file as the profile report of
//! `neuron-emu run --profile-json` (`neuron_runtime::profile`, `docs/profiling.md`), which also
//! opens in Perfetto (`traceEvents`: one span per engine per execution, in device time).
#![allow(unsafe_code)]

use crate::{global, guard, null, opt_str, CModel};
use neuron_runtime::model::EngineSpan;
use neuron_runtime::NrtError;
use std::sync::{Mutex, MutexGuard};

/// A running profile: the model handle, the file, the executions recorded so far.
struct Profile {
    model: usize,
    file: String,
    name: String,
    execs: Vec<Vec<EngineSpan>>,
}

/// Executions kept per profile: a bound on memory, far above a profiling session's needs.
const MAX_EXECS: usize = 100_000;

fn profiles() -> MutexGuard<'static, Vec<Profile>> {
    static PROFILES: Mutex<Vec<Profile>> = Mutex::new(Vec::new());
    PROFILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Record one execution of `model` if a profile of it is running.
pub(crate) fn record(model: usize, name: &str, spans: &[EngineSpan]) {
    for p in profiles().iter_mut().filter(|p| p.model == model) {
        if p.execs.len() < MAX_EXECS {
            p.name = name.to_string();
            p.execs.push(spans.to_vec());
        }
    }
}

/// A model was unloaded: its running profiles end unwritten.
pub(crate) fn forget(model: usize) {
    profiles().retain(|p| p.model != model);
}

/// The profile document: the report `neuron-emu run --profile-json` writes
/// (`neuron_runtime::profile`), one execution per `summary` entry. What reaches libnrt through
/// the driver ABI is each engine's start and end notification, so it holds the engine spans
/// (`engine_span`, and `traceEvents` for Perfetto) and each execution's `total_time`, but no
/// instruction, DMA or semaphore records.
fn document(p: &Profile) -> serde_json::Value {
    use neuron_runtime::profile::{Capture, Meta, Span};
    let caps: Vec<Capture> = p
        .execs
        .iter()
        .map(|exec| {
            let mut cores: Vec<u32> = exec.iter().map(|s| s.nc).collect();
            cores.sort_unstable();
            cores.dedup();
            Capture {
                cores,
                window: exec
                    .iter()
                    .map(|s| s.start_ps)
                    .min()
                    .zip(exec.iter().map(|s| s.end_ps).max()),
                detail: false,
                spans: exec
                    .iter()
                    .filter_map(|s| {
                        Some(Span {
                            nc: s.nc,
                            engine: neuron_isa::Engine::from_index(s.engine)?,
                            start_ps: s.start_ps,
                            end_ps: s.end_ps,
                        })
                    })
                    .collect(),
                ..Capture::default()
            }
        })
        .collect();
    let meta = Meta {
        profile_name: std::path::Path::new(&p.file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        neff_name: p.name.clone(),
        source: "neuron-emu libnrt (nrt_profile_start/stop)".into(),
    };
    neuron_runtime::profile::report(&meta, &caps)
}

#[no_mangle]
pub unsafe extern "C" fn nrt_profile_start(
    model: *mut CModel,
    filename: *const std::ffi::c_char,
) -> u32 {
    guard("nrt_profile_start", || {
        global()?;
        if model.is_null() {
            return Err(null("model"));
        }
        // SAFETY: a NUL-terminated C string per the API contract.
        let file = unsafe { opt_str(filename) }.ok_or_else(|| null("filename"))?;
        // A bad path is reported now, not after the executions.
        std::fs::File::create(file)
            .map_err(|e| NrtError::invalid(format!("cannot create profile file '{file}': {e}")))?;
        let mut ps = profiles();
        if ps.iter().any(|p| p.file == file) {
            return Err(NrtError::invalid(format!(
                "a profile to '{file}' is already running"
            )));
        }
        ps.push(Profile {
            model: model as usize,
            file: file.to_string(),
            name: String::new(),
            execs: Vec::new(),
        });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_profile_stop(filename: *const std::ffi::c_char) -> u32 {
    guard("nrt_profile_stop", || {
        // SAFETY: a NUL-terminated C string per the API contract.
        let file = unsafe { opt_str(filename) }.ok_or_else(|| null("filename"))?;
        let p = {
            let mut ps = profiles();
            let i = ps
                .iter()
                .position(|p| p.file == file)
                .ok_or_else(|| NrtError::invalid(format!("no profile to '{file}' is running")))?;
            ps.remove(i)
        };
        let text = serde_json::to_vec(&document(&p))
            .map_err(|e| NrtError::invalid(format!("profile: {e}")))?;
        std::fs::write(file, text)
            .map_err(|e| NrtError::invalid(format!("cannot write profile file '{file}': {e}")))
    })
}
