//! `nrt_profile_start` / `nrt_profile_stop` (`nrt_profile.h`): while a profile of a model runs,
//! each of its executions is recorded; stopping writes the file as Chrome trace-event JSON (the
//! form `neuron-emu run --trace` writes): one span per engine per execution, in device time.
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

/// The Chrome trace-event document of a profile.
fn document(p: &Profile) -> serde_json::Value {
    use serde_json::json;
    let t0 = p
        .execs
        .iter()
        .flatten()
        .map(|s| s.start_ps)
        .min()
        .unwrap_or(0);
    let mut events = Vec::new();
    let mut tracks = std::collections::BTreeSet::new();
    for (i, exec) in p.execs.iter().enumerate() {
        for s in exec {
            tracks.insert((s.nc, s.engine));
            let engine = neuron_isa::Engine::from_index(s.engine)
                .map_or_else(|| format!("engine{}", s.engine), |e| e.to_string());
            events.push(json!({
                "ph": "X",
                "name": format!("{} exec {i}", p.name),
                "cat": engine,
                "pid": s.nc,
                "tid": s.engine,
                "ts": (s.start_ps - t0) as f64 / 1e6,
                "dur": s.end_ps.saturating_sub(s.start_ps) as f64 / 1e6,
                "args": { "execution": i, "device_start_ps": s.start_ps, "device_end_ps": s.end_ps },
            }));
        }
    }
    for (nc, e) in tracks {
        let engine = neuron_isa::Engine::from_index(e)
            .map_or_else(|| format!("engine{e}"), |x| x.to_string());
        events.push(json!({"ph": "M", "name": "thread_name", "pid": nc, "tid": e, "args": {"name": engine}}));
        events.push(json!({"ph": "M", "name": "process_name", "pid": nc, "args": {"name": format!("NC {nc}")}}));
    }
    json!({
        "displayTimeUnit": "ns",
        "otherData": { "model": p.name, "executions": p.execs.len(), "source": "neuron-emu libnrt (emulated device time)" },
        "traceEvents": events,
    })
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
