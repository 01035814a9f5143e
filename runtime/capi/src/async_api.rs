//! The asynchronous API (`nrt_async.h`). Each (logical core, execution unit, queue) channel
//! has a submission queue serviced by its own worker thread, so requests run in submission
//! order while the caller goes on. A request's sequence number is `xu_id << 48 | n` (n from
//! 1); when it completes its status is stored through the caller's `ret`, the channel's
//! completed sequence advances, and an eventfd registered for the channel is signalled. At
//! most [`MAX_INFLIGHT`] requests wait on a channel; more are refused with `NRT_QUEUE_FULL`.
#![allow(unsafe_code)]

use crate::{global, guard, null, tensor_ref, CModel, CTensor, CTensorSet};
use neuron_runtime::{NrtError, NrtStatus};
use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// `nrta_xu_t`.
pub const XU_TENSOR_OP: u32 = 0;
pub const XU_COMPUTE: u32 = 1;
pub const XU_COLLECTIVES: u32 = 2;
pub const XU_TYPE_NUM: u32 = 3;
/// Pending requests per channel (AWS documents 63 in flight).
pub const MAX_INFLIGHT: u64 = 63;
const SEQ_MASK: u64 = (1 << 48) - 1;

type Job = Box<dyn FnOnce() -> u32 + Send>;

#[derive(Debug, Default)]
struct Progress {
    submitted: u64,
    completed: u64,
    fd: Option<i32>,
}

struct Channel {
    xu_id: u64,
    progress: Mutex<Progress>,
    done: Condvar,
    tx: Mutex<Option<Sender<(Job, usize, u64)>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

type Key = (u32, u32, i32);

fn channels() -> MutexGuard<'static, BTreeMap<Key, Arc<Channel>>> {
    static CHANNELS: Mutex<BTreeMap<Key, Arc<Channel>>> = Mutex::new(BTreeMap::new());
    CHANNELS.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn xu_id(lnc: u32, xu: u32) -> u64 {
    u64::from(lnc) * u64::from(XU_TYPE_NUM) + u64::from(xu)
}

/// The channel for (lnc, xu, queue), its worker started on first use.
fn channel_for(lnc: u32, xu: u32, queue: i32) -> Result<Arc<Channel>, NrtError> {
    let mut all = channels();
    if let Some(c) = all.get(&(lnc, xu, queue)) {
        return Ok(c.clone());
    }
    let (tx, rx) = channel::<(Job, usize, u64)>();
    let c = Arc::new(Channel {
        xu_id: xu_id(lnc, xu),
        progress: Mutex::new(Progress::default()),
        done: Condvar::new(),
        tx: Mutex::new(Some(tx)),
        worker: Mutex::new(None),
    });
    let me = c.clone();
    let worker = std::thread::Builder::new()
        .name(format!("nrta-lnc{lnc}-xu{xu}"))
        .spawn(move || {
            for (job, ret, seq) in rx {
                // A panic in a request fails that request, not the queue.
                let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                    .unwrap_or(NrtStatus::Failure.code());
                if ret != 0 {
                    // SAFETY: the caller's NRT_STATUS slot, valid until the request completes
                    // (API contract).
                    unsafe { (ret as *mut u32).write_volatile(status) };
                }
                let mut p = lock(&me.progress);
                p.completed = seq & SEQ_MASK;
                if let Some(fd) = p.fd {
                    let one = 1u64;
                    // SAFETY: writes 8 bytes from a local to the caller's eventfd.
                    let _ =
                        unsafe { libc::write(fd, &one as *const u64 as *const libc::c_void, 8) };
                }
                drop(p);
                me.done.notify_all();
            }
        })
        .map_err(|e| {
            NrtError::new(
                NrtStatus::Resource,
                format!("cannot start the queue worker: {e}"),
            )
        })?;
    *lock(&c.worker) = Some(worker);
    all.insert((lnc, xu, queue), c.clone());
    Ok(c)
}

/// Queue `job` on (lnc, xu, queue); its sequence number goes to `seq_out`.
unsafe fn submit(
    lnc: u32,
    xu: u32,
    queue: i32,
    ret: *mut u32,
    seq_out: *mut u64,
    job: Job,
) -> Result<(), NrtError> {
    let g = global()?;
    if lnc >= g.nrt.visible_vnc_count() {
        return Err(NrtError::invalid(format!(
            "logical core {lnc} is not visible ({} visible)",
            g.nrt.visible_vnc_count()
        )));
    }
    if queue != 0 {
        return Err(NrtError::invalid(format!(
            "queue {queue}: only queue 0 exists"
        )));
    }
    if seq_out.is_null() {
        return Err(null("req_sequence"));
    }
    let c = channel_for(lnc, xu, queue)?;
    let mut p = lock(&c.progress);
    if p.submitted - p.completed >= MAX_INFLIGHT {
        return Err(NrtError::new(
            NrtStatus::QueueFull,
            format!("{MAX_INFLIGHT} requests are already pending on logical core {lnc}"),
        ));
    }
    let seq = (c.xu_id << 48) | ((p.submitted + 1) & SEQ_MASK);
    let tx = lock(&c.tx);
    let tx = tx
        .as_ref()
        .ok_or_else(|| NrtError::new(NrtStatus::Closed, "the runtime is closing"))?;
    tx.send((job, ret as usize, seq))
        .map_err(|_| NrtError::new(NrtStatus::Failure, "the queue worker has stopped"))?;
    p.submitted += 1;
    // SAFETY: checked non-null.
    unsafe { seq_out.write(seq) };
    Ok(())
}

/// `nrt_close`: finish what was submitted, then stop every worker.
pub(crate) fn shutdown() {
    let all: Vec<Arc<Channel>> = std::mem::take(&mut *channels()).into_values().collect();
    for c in &all {
        lock(&c.tx).take();
    }
    for c in &all {
        if let Some(w) = lock(&c.worker).take() {
            let _ = w.join();
        }
    }
}

fn status_of(r: Result<(), NrtError>) -> u32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(target: "NRT", "nrta request failed: {}", e.message);
            e.status.code()
        }
    }
}

/// The checked arguments of an async tensor transfer: the tensor, the caller's buffer address
/// (null only for an empty transfer) and length, and the logical core.
///
/// # Safety
/// `tensor` must be null or a tensor handed out by this library.
unsafe fn transfer_args(
    tensor: *mut CTensor,
    addr: usize,
    size: u64,
    lnc: i32,
) -> Result<(neuron_runtime::api::Tensor, usize, usize, u32), NrtError> {
    // SAFETY: checked helper; the caller vouches for the handle.
    let t = unsafe { tensor_ref(tensor)? }.t.clone();
    if addr == 0 && size > 0 {
        return Err(null("buf"));
    }
    let len = usize::try_from(size).map_err(|_| NrtError::invalid("size too large"))?;
    let lnc = u32::try_from(lnc).map_err(|_| NrtError::invalid(format!("lnc {lnc}")))?;
    Ok((t, addr, len, lnc))
}

#[no_mangle]
pub unsafe extern "C" fn nrta_tensor_write(
    tensor: *mut CTensor,
    buf: *const libc::c_void,
    offset: u64,
    size: u64,
    lnc: i32,
    queue: i32,
    ret: *mut u32,
    req_sequence: *mut u64,
) -> u32 {
    guard("nrta_tensor_write", || {
        // SAFETY: pointers checked inside.
        let (t, addr, len, lnc) = unsafe { transfer_args(tensor, buf as usize, size, lnc)? };
        let job: Job = Box::new(move || {
            let data = if len == 0 {
                &[][..]
            } else {
                // SAFETY: the caller keeps `len` bytes at `buf` valid until completion.
                unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
            };
            status_of(t.write(data, offset))
        });
        // SAFETY: pointers checked inside.
        unsafe { submit(lnc, XU_TENSOR_OP, queue, ret, req_sequence, job) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrta_tensor_read(
    buf: *mut libc::c_void,
    tensor: *mut CTensor,
    offset: u64,
    size: u64,
    lnc: i32,
    queue: i32,
    ret: *mut u32,
    req_sequence: *mut u64,
) -> u32 {
    guard("nrta_tensor_read", || {
        // SAFETY: pointers checked inside.
        let (t, addr, len, lnc) = unsafe { transfer_args(tensor, buf as usize, size, lnc)? };
        let job: Job = Box::new(move || {
            let out = if len == 0 {
                &mut [][..]
            } else {
                // SAFETY: the caller keeps `len` writable bytes at `buf` until completion.
                unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
            };
            status_of(t.read(out, offset))
        });
        // SAFETY: pointers checked inside.
        unsafe { submit(lnc, XU_TENSOR_OP, queue, ret, req_sequence, job) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrta_execute_schedule(
    model: *mut CModel,
    input: *const CTensorSet,
    output: *mut CTensorSet,
    queue: i32,
    ret: *mut u32,
    req_sequence: *mut u64,
) -> u32 {
    guard("nrta_execute_schedule", || {
        // SAFETY: handles per API contract, checked non-null; the tensors are cloned now.
        let (m, ins, outs) = unsafe {
            (
                crate::model_ref(model)?,
                input.as_ref().ok_or_else(|| null("input_set"))?.to_set(),
                output.as_ref().ok_or_else(|| null("output_set"))?.to_set(),
            )
        };
        let lnc = m.vnc;
        let handle = model as usize;
        let job: Job = Box::new(move || {
            // SAFETY: the model stays loaded until its requests complete (API contract);
            // nrt_close drains the queues before unloading.
            let m = unsafe { &*(handle as *const CModel) };
            status_of(m.run(&ins, &outs))
        });
        // SAFETY: pointers checked inside.
        unsafe { submit(lnc, XU_COMPUTE, queue, ret, req_sequence, job) }
    })
}

fn progress_of(lnc: u32, xu: u32, queue: i32) -> Option<(u64, u64)> {
    let c = channels().get(&(lnc, xu, queue)).cloned()?;
    let p = lock(&c.progress);
    Some((p.submitted, p.completed))
}

#[no_mangle]
pub unsafe extern "C" fn nrta_get_sequence(lnc: u32, xu: u32, queue: i32, seq: *mut u64) -> u32 {
    guard("nrta_get_sequence", || {
        global()?;
        if xu >= XU_TYPE_NUM {
            return Err(NrtError::invalid(format!("unknown execution unit {xu}")));
        }
        if seq.is_null() {
            return Err(null("seq"));
        }
        let done = progress_of(lnc, xu, queue).map_or(0, |(_, c)| c & SEQ_MASK);
        // SAFETY: checked non-null.
        unsafe { seq.write((xu_id(lnc, xu) << 48) | done) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrta_is_completed(seq: u64, is_completed: *mut bool) -> u32 {
    guard("nrta_is_completed", || {
        global()?;
        if is_completed.is_null() {
            return Err(null("is_completed"));
        }
        let id = seq >> 48;
        let (lnc, xu) = (
            u32::try_from(id / u64::from(XU_TYPE_NUM)).unwrap_or(u32::MAX),
            (id % u64::from(XU_TYPE_NUM)) as u32,
        );
        let n = seq & SEQ_MASK;
        let (submitted, completed) = progress_of(lnc, xu, 0).unwrap_or((0, 0));
        if n == 0 || n > submitted & SEQ_MASK {
            return Err(NrtError::invalid(format!(
                "sequence 0x{seq:x} was never submitted"
            )));
        }
        // SAFETY: checked non-null.
        unsafe { is_completed.write(completed & SEQ_MASK >= n) };
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nrta_event_register_xu_completion(lnc: i32, xu: u32, queue: i32, fd: i32) -> u32 {
    guard("nrta_event_register_xu_completion", || {
        global()?;
        let lnc = u32::try_from(lnc).map_err(|_| NrtError::invalid(format!("lnc {lnc}")))?;
        if xu >= XU_TYPE_NUM {
            return Err(NrtError::invalid(format!("unknown execution unit {xu}")));
        }
        if fd < 0 {
            // Unregister; a channel never used needs no entry.
            if let Some(c) = channels().get(&(lnc, xu, queue)).cloned() {
                lock(&c.progress).fd = None;
            }
            return Ok(());
        }
        let c = channel_for(lnc, xu, queue)?;
        lock(&c.progress).fd = Some(fd);
        Ok(())
    })
}

/// `nrt_async_drain_queued_execs`: wait until every channel of logical core `vnc` completed
/// what was submitted to it.
#[no_mangle]
pub extern "C" fn nrt_async_drain_queued_execs(vnc: i32) -> u32 {
    guard("nrt_async_drain_queued_execs", || {
        global()?;
        let vnc = u32::try_from(vnc).map_err(|_| NrtError::invalid(format!("vnc {vnc}")))?;
        let mine: Vec<Arc<Channel>> = channels()
            .iter()
            .filter(|((l, _, _), _)| *l == vnc)
            .map(|(_, c)| c.clone())
            .collect();
        for c in mine {
            let mut p = lock(&c.progress);
            while p.completed < p.submitted {
                p = c.done.wait(p).unwrap_or_else(|e| e.into_inner());
            }
        }
        Ok(())
    })
}
