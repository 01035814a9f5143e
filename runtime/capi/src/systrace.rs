//! The system trace (`nrt_sys_trace.h`): while a capture runs, every execution on an enabled
//! logical core adds an `nc_exec_running` start and stop event (host wall clock, and the
//! device's own timestamps in `data.nc_timestamp_ns`); `nrt_sys_trace_fetch_events` hands
//! them out as `{"events": [...]}` and consumes them.
#![allow(unsafe_code)]

use crate::{global, guard, null, opt_str};
use neuron_runtime::model::EngineSpan;
use neuron_runtime::NrtError;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{c_char, CString};
use std::sync::{Mutex, MutexGuard};

/// The event types this runtime records.
pub const EVENT_TYPES: &[&str] = &["nc_exec_running"];
/// Default bound of the events kept per NeuronCore (oldest dropped first).
const DEFAULT_MAX_EVENTS: u64 = 100_000;
/// Logical cores a configuration can name.
const MAX_NC: u32 = 128;

/// `nrt_sys_trace_config_t`.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    disabled_nc: BTreeSet<u32>,
    disabled_types: BTreeSet<String>,
    max_events_per_nc: u64,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            disabled_nc: BTreeSet::new(),
            disabled_types: BTreeSet::new(),
            max_events_per_nc: DEFAULT_MAX_EVENTS,
        }
    }
}

/// `nrt_sys_trace_fetch_options_t`.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    nc: Option<u32>,
    max_events_per_nc: Option<u64>,
}

struct Capture {
    config: TraceConfig,
    events: BTreeMap<u32, VecDeque<serde_json::Value>>,
    next_tracking_id: u64,
}

fn capture() -> MutexGuard<'static, Option<Capture>> {
    static CAPTURE: Mutex<Option<Capture>> = Mutex::new(None);
    CAPTURE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Host wall clock, nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Record one execution on logical core `vnc` if a capture runs for it.
pub(crate) fn record(vnc: u32, model: &str, host_start: u64, host_end: u64, spans: &[EngineSpan]) {
    let mut g = capture();
    let Some(c) = g.as_mut() else { return };
    if c.config.disabled_nc.contains(&vnc) || c.config.disabled_types.contains(EVENT_TYPES[0]) {
        return;
    }
    c.next_tracking_id += 1;
    let id = c.next_tracking_id;
    let dev_start = spans.iter().map(|s| s.start_ps).min().unwrap_or(0) / 1000;
    let dev_end = spans.iter().map(|s| s.end_ps).max().unwrap_or(0) / 1000;
    let max = c.config.max_events_per_nc.max(2) as usize;
    let q = c.events.entry(vnc).or_default();
    for (phase, host, dev) in [
        ("start", host_start, dev_start),
        ("stop", host_end, dev_end),
    ] {
        if q.len() >= max {
            q.pop_front();
        }
        q.push_back(serde_json::json!({
            "event_type": EVENT_TYPES[0],
            "phase": phase,
            "tracking_id": id,
            "nc_idx": vnc,
            "timestamp_ns": host,
            "data": { "nc_timestamp_ns": dev, "model_name": model },
        }));
    }
}

/// `nrt_close` ends a capture.
pub(crate) fn reset() {
    *capture() = None;
}

unsafe fn boxed<T: Default>(out: *mut *mut T) -> Result<(), NrtError> {
    if out.is_null() {
        return Err(null("options"));
    }
    // SAFETY: checked non-null; freed by the matching *_free.
    unsafe { out.write(Box::into_raw(Box::default())) };
    Ok(())
}

unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: a handle from the matching *_allocate, freed once (API contract).
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A `malloc`ed array of `malloc`ed C strings (freed by `nrt_sys_trace_free_event_types`).
unsafe fn string_array(
    names: &[&str],
    out: *mut *mut *const c_char,
    count: *mut usize,
) -> Result<(), NrtError> {
    if out.is_null() || count.is_null() {
        return Err(null("event_types or count"));
    }
    // SAFETY: plain allocations, filled below and freed by nrt_sys_trace_free_event_types.
    unsafe {
        let arr = libc::calloc(names.len().max(1), std::mem::size_of::<*const c_char>())
            as *mut *const c_char;
        if arr.is_null() {
            return Err(NrtError::new(
                neuron_runtime::NrtStatus::Resource,
                "out of host memory",
            ));
        }
        for (i, n) in names.iter().enumerate() {
            let c = CString::new(*n).unwrap_or_default();
            arr.add(i).write(libc::strdup(c.as_ptr()));
        }
        out.write(arr);
        count.write(names.len());
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_allocate(options: *mut *mut TraceConfig) -> u32 {
    // SAFETY: checked inside.
    guard("nrt_sys_trace_config_allocate", || unsafe {
        boxed(options)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_defaults(options: *mut TraceConfig) {
    // SAFETY: a live handle or NULL.
    if let Some(o) = unsafe { options.as_mut() } {
        *o = TraceConfig::default();
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_free(options: *mut TraceConfig) {
    // SAFETY: forwarded.
    unsafe { free(options) }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_max_events_per_nc(
    options: *mut TraceConfig,
    max: u64,
) {
    // SAFETY: a live handle or NULL.
    if let Some(o) = unsafe { options.as_mut() } {
        o.max_events_per_nc = max.clamp(2, DEFAULT_MAX_EVENTS * 10);
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_capture_enabled_for_nc(
    options: *mut TraceConfig,
    nc_idx: u32,
    enabled: bool,
) {
    // SAFETY: a live handle or NULL.
    if let Some(o) = unsafe { options.as_mut() } {
        if nc_idx < MAX_NC {
            if enabled {
                o.disabled_nc.remove(&nc_idx);
            } else {
                o.disabled_nc.insert(nc_idx);
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_set_capture_enabled_for_event_type(
    options: *mut TraceConfig,
    event_type: *const c_char,
    enabled: bool,
) -> u32 {
    guard(
        "nrt_sys_trace_config_set_capture_enabled_for_event_type",
        || {
            // SAFETY: a live handle and a C string per the API contract.
            let (o, t) = unsafe {
                (
                    options.as_mut().ok_or_else(|| null("options"))?,
                    opt_str(event_type).ok_or_else(|| null("event_type"))?,
                )
            };
            if !EVENT_TYPES.contains(&t) {
                return Err(NrtError::invalid(format!(
                    "unknown event type '{t}' (known: {})",
                    EVENT_TYPES.join(", ")
                )));
            }
            if enabled {
                o.disabled_types.remove(t);
            } else {
                o.disabled_types.insert(t.to_string());
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_get_event_types(
    event_types: *mut *mut *const c_char,
    count: *mut usize,
) -> u32 {
    // SAFETY: checked inside.
    guard("nrt_sys_trace_get_event_types", || unsafe {
        string_array(EVENT_TYPES, event_types, count)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_config_get_enabled_event_types(
    options: *mut TraceConfig,
    event_types: *mut *mut *const c_char,
    count: *mut usize,
) -> u32 {
    guard("nrt_sys_trace_config_get_enabled_event_types", || {
        // SAFETY: a live handle per the API contract.
        let o = unsafe { options.as_ref() }.ok_or_else(|| null("options"))?;
        let on: Vec<&str> = EVENT_TYPES
            .iter()
            .copied()
            .filter(|t| !o.disabled_types.contains(*t))
            .collect();
        // SAFETY: checked inside.
        unsafe { string_array(&on, event_types, count) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_free_event_types(
    event_types: *mut *const c_char,
    count: usize,
) {
    if event_types.is_null() {
        return;
    }
    // SAFETY: an array of `count` strdup'ed strings from this module.
    unsafe {
        for i in 0..count {
            libc::free(event_types.add(i).read() as *mut libc::c_void);
        }
        libc::free(event_types as *mut libc::c_void);
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_start(options: *const TraceConfig) -> u32 {
    guard("nrt_sys_trace_start", || {
        global()?;
        // SAFETY: a live handle or NULL (defaults).
        let config = unsafe { options.as_ref() }.cloned().unwrap_or_default();
        *capture() = Some(Capture {
            config,
            events: BTreeMap::new(),
            next_tracking_id: 0,
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nrt_sys_trace_stop() -> u32 {
    guard("nrt_sys_trace_stop", || {
        capture()
            .take()
            .map(|_| ())
            .ok_or_else(|| NrtError::invalid("no system trace is running"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_allocate(
    options: *mut *mut FetchOptions,
) -> u32 {
    // SAFETY: checked inside.
    guard("nrt_sys_trace_fetch_options_allocate", || unsafe {
        boxed(options)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_set_defaults(options: *mut FetchOptions) {
    // SAFETY: a live handle or NULL.
    if let Some(o) = unsafe { options.as_mut() } {
        *o = FetchOptions::default();
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_free(options: *mut FetchOptions) {
    // SAFETY: forwarded.
    unsafe { free(options) }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_set_max_events_per_nc(
    options: *mut FetchOptions,
    max: u64,
) {
    // SAFETY: a live handle or NULL.
    if let Some(o) = unsafe { options.as_mut() } {
        o.max_events_per_nc = Some(max);
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_options_set_nc_idx(
    options: *mut FetchOptions,
    nc_idx: u64,
) {
    // SAFETY: a live handle or NULL.
    if let Some(o) = unsafe { options.as_mut() } {
        o.nc = u32::try_from(nc_idx).ok();
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_fetch_events(
    buffer: *mut *mut c_char,
    written_size: *mut usize,
    options: *const FetchOptions,
) -> u32 {
    guard("nrt_sys_trace_fetch_events", || {
        if buffer.is_null() || written_size.is_null() {
            return Err(null("buffer or written_size"));
        }
        // SAFETY: a live handle or NULL (all cores).
        let opts = unsafe { options.as_ref() }.cloned().unwrap_or_default();
        let mut out = Vec::new();
        {
            let mut g = capture();
            let c = g
                .as_mut()
                .ok_or_else(|| NrtError::invalid("no system trace is running"))?;
            for (nc, q) in c.events.iter_mut() {
                if opts.nc.is_some_and(|n| n != *nc) {
                    continue;
                }
                let n = opts
                    .max_events_per_nc
                    .map_or(q.len(), |m| (m as usize).min(q.len()));
                out.extend(q.drain(..n));
            }
        }
        let text = serde_json::json!({ "events": out }).to_string();
        // SAFETY: a plain allocation of len + 1 bytes, filled and NUL-terminated; freed by
        // nrt_sys_trace_buffer_free.
        unsafe {
            let p = libc::malloc(text.len() + 1) as *mut u8;
            if p.is_null() {
                return Err(NrtError::new(
                    neuron_runtime::NrtStatus::Resource,
                    "out of host memory",
                ));
            }
            std::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len());
            p.add(text.len()).write(0);
            buffer.write(p as *mut c_char);
            written_size.write(text.len());
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_sys_trace_buffer_free(buffer: *mut c_char) {
    // SAFETY: a buffer from nrt_sys_trace_fetch_events (malloc) or NULL.
    unsafe { libc::free(buffer as *mut libc::c_void) }
}
