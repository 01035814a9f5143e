/* Every nrt call AWS's spike client makes (both its branches), and the behaviour it relies on,
 * from C against the public headers: profiles, system traces, collectives loads, logical
 * cores, device mappings, two models on one core, and the asynchronous API (queues, sequence
 * numbers, eventfd completions, the in-flight bound). Usage: client_calls MODEL.neff
 * (a single-input, single-output model). Prints "ok <check>" lines; exits 1 on a failure. */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_profile.h"
#include "nrt/nrt_status.h"
#include "nrt/nrt_sys_trace.h"

#define CHECK(cond, what)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAILED %s (line %d)\n", what, __LINE__);               \
      exit(1);                                                                 \
    }                                                                          \
    printf("ok %s\n", what);                                                   \
  } while (0)
#define OK(call) CHECK((call) == NRT_SUCCESS, #call)

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *b = malloc(n);
  if (b && fread(b, 1, n, f) != (size_t)n) { free(b); b = NULL; }
  fclose(f);
  *size = n;
  return b;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

typedef struct {
  nrt_model_t *model;
  nrt_tensor_t *in, *out;
  nrt_tensor_set_t *ins, *outs;
  size_t in_size, out_size;
} io_t;

/* Device tensors for the model's one input and one output, in two sets. */
static void make_io(nrt_model_t *model, int vnc, io_t *io) {
  nrt_tensor_info_array_t *info = NULL;
  OK(nrt_get_model_tensor_info(model, &info));
  CHECK(info->tensor_count == 2, "one input and one output");
  io->model = model;
  OK(nrt_allocate_tensor_set(&io->ins));
  OK(nrt_allocate_tensor_set(&io->outs));
  for (uint64_t i = 0; i < info->tensor_count; i++) {
    nrt_tensor_info_t *t = &info->tensor_array[i];
    nrt_tensor_t *x = NULL;
    OK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, vnc, t->size, t->name, &x));
    if (t->usage == NRT_TENSOR_USAGE_INPUT) {
      io->in = x;
      io->in_size = t->size;
      OK(nrt_add_tensor_to_tensor_set(io->ins, t->name, x));
    } else {
      io->out = x;
      io->out_size = t->size;
      OK(nrt_add_tensor_to_tensor_set(io->outs, t->name, x));
    }
  }
  OK(nrt_free_model_tensor_info(info));
}

static void free_io(io_t *io) {
  nrt_destroy_tensor_set(&io->ins);
  nrt_destroy_tensor_set(&io->outs);
  nrt_tensor_free(&io->in);
  nrt_tensor_free(&io->out);
}

/* Wait until (lnc, xu) completed `seq`, polling the registered eventfd. */
static void wait_seq(int lnc, nrta_xu_t xu, nrta_seq_t seq, int efd) {
  for (int spins = 0; spins < 6000; spins++) {
    nrta_seq_t done = 0;
    if (nrta_get_sequence(lnc, xu, 0, &done) != NRT_SUCCESS) break;
    if (NRTA_SEQ_GET_SEQ_NUM(done) >= NRTA_SEQ_GET_SEQ_NUM(seq)) return;
    struct pollfd p = {efd, POLLIN, 0};
    if (poll(&p, 1, 10) > 0) {
      uint64_t c;
      if (read(efd, &c, 8) != 8) break;
    }
  }
  fprintf(stderr, "FAILED waiting for sequence %llx\n", (unsigned long long)seq);
  exit(1);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  size_t neff_size = 0;
  void *neff = read_file(argv[1], &neff_size);
  CHECK(neff != NULL, "read the NEFF");

  /* Counts: logical cores (LNC=2 on trn2: 4 from 8 physical). */
  uint32_t visible = 0, total = 0;
  OK(nrt_get_visible_nc_count(&visible));
  OK(nrt_get_total_nc_count(&total));
  CHECK(visible == 4 && total == 4, "4 logical cores on one trn2 device");

  OK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "client", "1.0"));
  CHECK(strcmp(nrt_get_status_as_str(NRT_QUEUE_FULL), "NRT_QUEUE_FULL") == 0, "status names");

  /* Loads: nrt_load with vnc_count 1, nrt_load_collectives for one rank. */
  nrt_model_t *a = NULL, *b = NULL, *c = NULL;
  OK(nrt_load(neff, neff_size, 0, 1, &a));
  OK(nrt_load_collectives(neff, neff_size, 1, 1, 0, 1, &c));
  CHECK(nrt_load_collectives(neff, neff_size, 1, 1, 2, 2, &b) == NRT_INVALID, "rank outside the group");
  nrt_model_info_t mi;
  size_t mi_size = 0;
  OK(nrt_get_model_info(c, &mi, sizeof mi, &mi_size));
  CHECK(mi.vnc == 1, "the collectives model is on logical core 1");

  io_t ia, ic;
  make_io(a, 0, &ia);
  make_io(c, 1, &ic);
  int lnc = -1;
  OK(nrt_tensor_get_lnc_index(ic.in, &lnc));
  CHECK(lnc == 1, "tensor on logical core 1");
  CHECK(nrt_tensor_get_size(ia.in) == ia.in_size, "tensor size");
  nrt_tensor_device_allocation_info_t alloc;
  OK(nrt_tensor_get_device_allocation_info(ia.in, &alloc));
  CHECK(alloc.size >= ia.in_size && alloc.physical_address != 0, "device allocation info");
  uint32_t instances = 0;
  OK(nrt_get_model_instance_count(a, &instances));
  CHECK(instances == 1, "one instance");

  unsigned char *x = malloc(ia.in_size), *want = malloc(ia.out_size), *got = malloc(ia.out_size);
  for (size_t i = 0; i < ia.in_size; i++) x[i] = (unsigned char)((i * 7) % 61);
  OK(nrt_tensor_write(ia.in, x, 0, ia.in_size));
  OK(nrt_execute(a, ia.ins, ia.outs));
  OK(nrt_tensor_read(ia.out, want, 0, ia.out_size));
  OK(nrt_tensor_write(ic.in, x, 0, ic.in_size));
  OK(nrt_execute(c, ic.ins, ic.outs));
  OK(nrt_tensor_read(ic.out, got, 0, ic.out_size));
  CHECK(memcmp(got, want, ia.out_size) == 0, "same model on two cores, same output");

  /* Slices share the tensor's memory. */
  nrt_tensor_t *slice = NULL;
  OK(nrt_tensor_allocate_slice(ia.out, 16, 32, "slice", &slice));
  unsigned char part[32];
  OK(nrt_tensor_read(slice, part, 0, 32));
  CHECK(memcmp(part, want + 16, 32) == 0, "slice reads its window");
  nrt_tensor_free(&slice);

  /* Two models on one core, alternately and repeatedly. */
  OK(nrt_load(neff, neff_size, 0, -1, &b));
  io_t ib;
  make_io(b, 0, &ib);
  OK(nrt_tensor_write(ib.in, x, 0, ib.in_size));
  for (int round = 0; round < 3; round++) {
    memset(got, 0, ia.out_size);
    OK(nrt_execute(a, ia.ins, ia.outs));
    OK(nrt_tensor_read(ia.out, got, 0, ia.out_size));
    CHECK(memcmp(got, want, ia.out_size) == 0, "model a after model b");
    memset(got, 0, ia.out_size);
    OK(nrt_execute(b, ib.ins, ib.outs));
    OK(nrt_tensor_read(ib.out, got, 0, ib.out_size));
    CHECK(memcmp(got, want, ia.out_size) == 0, "model b after model a");
  }

  /* A profile of the emulated executions. */
  unlink("client.ntff");
  OK(nrt_profile_start(a, "client.ntff"));
  OK(nrt_execute(a, ia.ins, ia.outs));
  OK(nrt_execute(a, ia.ins, ia.outs));
  OK(nrt_profile_stop("client.ntff"));
  size_t prof_size = 0;
  char *prof = read_file("client.ntff", &prof_size);
  CHECK(prof != NULL, "profile file written");
  prof = realloc(prof, prof_size + 1);
  prof[prof_size] = 0;
  CHECK(strstr(prof, "\"traceEvents\"") && count(prof, "\"ph\":\"X\"") == 10, "2 executions x 5 engines");
  free(prof);
  CHECK(nrt_profile_stop("client.ntff") == NRT_INVALID, "stop without start");
  CHECK(nrt_profile_start(a, "/nonexistent-dir/p.ntff") == NRT_INVALID, "a bad profile path fails at start");

  /* The system trace: events of executions on the enabled core only. */
  const char **types = NULL;
  size_t ntypes = 0;
  OK(nrt_sys_trace_get_event_types(&types, &ntypes));
  CHECK(ntypes >= 1 && strcmp(types[0], "nc_exec_running") == 0, "event types");
  nrt_sys_trace_free_event_types(types, ntypes);
  nrt_sys_trace_config_t *cfg = NULL;
  OK(nrt_sys_trace_config_allocate(&cfg));
  nrt_sys_trace_config_set_capture_enabled_for_nc(cfg, 0, true);
  nrt_sys_trace_config_set_capture_enabled_for_nc(cfg, 1, false);
  OK(nrt_sys_trace_start(cfg));
  nrt_sys_trace_config_free(cfg);
  for (int i = 0; i < 3; i++) OK(nrt_execute(a, ia.ins, ia.outs));
  OK(nrt_execute(c, ic.ins, ic.outs));
  nrt_sys_trace_fetch_options_t *fo = NULL;
  OK(nrt_sys_trace_fetch_options_allocate(&fo));
  nrt_sys_trace_fetch_options_set_nc_idx(fo, 0);
  char *events = NULL;
  size_t events_size = 0;
  OK(nrt_sys_trace_fetch_events(&events, &events_size, fo));
  CHECK(events && strlen(events) == events_size, "a NUL-terminated JSON buffer");
  CHECK(count(events, "\"phase\":\"start\"") == 3 && count(events, "\"phase\":\"stop\"") == 3,
        "3 executions on core 0");
  CHECK(count(events, "\"nc_timestamp_ns\"") == 6 && !strstr(events, "\"nc_idx\":1"), "device timestamps, core 1 not captured");
  nrt_sys_trace_buffer_free(events);
  OK(nrt_sys_trace_fetch_events(&events, &events_size, fo));
  CHECK(count(events, "nc_exec_running") == 0, "fetched events are consumed");
  nrt_sys_trace_buffer_free(events);
  nrt_sys_trace_fetch_options_free(fo);
  OK(nrt_sys_trace_stop());

  /* Device memory mapped into the process (NEURON_RT_MAP_HBM=1, set by the test). */
  nrt_tensor_t *dev = NULL;
  OK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "mapped", &dev));
  unsigned char *va = nrt_tensor_get_va(dev);
  CHECK(va != NULL, "a device tensor has a VA");
  OK(nrt_tensor_write(dev, "abcd", 0, 4));
  CHECK(memcmp(va, "abcd", 4) == 0, "the mapping shows the device memory");
  OK(nrt_memcpy_to_device(va + 100, "wxyz", 4));
  char back[4];
  OK(nrt_tensor_read(dev, back, 100, 4));
  CHECK(memcmp(back, "wxyz", 4) == 0, "nrt_memcpy_to_device");
  CHECK(nrt_memcpy_to_device(back, "x", 1) == NRT_INVALID, "memcpy to a host address");
  nrt_tensor_free(&dev);

  /* The asynchronous API: write, execute, read, in order on their queues. */
  int efd_t = eventfd(0, EFD_NONBLOCK), efd_c = eventfd(0, EFD_NONBLOCK);
  OK(nrta_event_register_xu_completion(0, NRTA_XU_TENSOR_OP, 0, efd_t));
  OK(nrta_event_register_xu_completion(0, NRTA_XU_COMPUTE, 0, efd_c));
  NRT_STATUS rw = NRT_FAILURE, rx = NRT_FAILURE, rr = NRT_FAILURE;
  nrta_seq_t sw = 0, sx = 0, sr = 0;
  memset(got, 0, ia.out_size);
  OK(nrt_tensor_write(ia.out, got, 0, ia.out_size));
  OK(nrta_tensor_write(ia.in, x, 0, ia.in_size, 0, 0, &rw, &sw));
  wait_seq(0, NRTA_XU_TENSOR_OP, sw, efd_t);
  CHECK(rw == NRT_SUCCESS, "async write status");
  OK(nrta_execute_schedule(a, ia.ins, ia.outs, 0, &rx, &sx));
  CHECK(NRTA_SEQ_GET_SEQ_NUM(sx) == 1, "first compute sequence is 1");
  wait_seq(0, NRTA_XU_COMPUTE, sx, efd_c);
  CHECK(rx == NRT_SUCCESS, "async execute status");
  OK(nrta_tensor_read(got, ia.out, 0, ia.out_size, 0, 0, &rr, &sr));
  wait_seq(0, NRTA_XU_TENSOR_OP, sr, efd_t);
  CHECK(rr == NRT_SUCCESS && memcmp(got, want, ia.out_size) == 0, "async pipeline output");
  bool done = false;
  OK(nrta_is_completed(sr, &done));
  CHECK(done, "nrta_is_completed");

  /* Real asynchrony: submissions return while executions are still queued; at most 63
   * requests wait on a queue. */
  NRT_STATUS rets[1000];
  nrta_seq_t last = 0;
  int submitted = 0, full = 0;
  for (int i = 0; i < 1000; i++) {
    NRT_STATUS s = nrta_execute_schedule(a, ia.ins, ia.outs, 0, &rets[i], &last);
    if (s == NRT_QUEUE_FULL) { full = 1; break; }
    CHECK(s == NRT_SUCCESS, "schedule");
    submitted++;
  }
  nrta_seq_t now = 0;
  OK(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &now));
  CHECK(NRTA_SEQ_GET_SEQ_NUM(now) < NRTA_SEQ_GET_SEQ_NUM(last), "submission returns before completion");
  CHECK(full && NRTA_SEQ_GET_SEQ_NUM(last) - NRTA_SEQ_GET_SEQ_NUM(now) <= 63, "NRT_QUEUE_FULL beyond 63 in flight");
  OK(nrt_async_drain_queued_execs(0));
  OK(nrta_get_sequence(0, NRTA_XU_COMPUTE, 0, &now));
  CHECK(NRTA_SEQ_GET_SEQ_NUM(now) == NRTA_SEQ_GET_SEQ_NUM(last), "drained: every queued execution completed");
  for (int i = 0; i < submitted; i++) CHECK(rets[i] == NRT_SUCCESS, "queued execution status");
  OK(nrta_event_register_xu_completion(0, NRTA_XU_TENSOR_OP, 0, -1));
  OK(nrta_event_register_xu_completion(0, NRTA_XU_COMPUTE, 0, -1));
  close(efd_t);
  close(efd_c);

  free_io(&ia);
  free_io(&ib);
  free_io(&ic);
  OK(nrt_unload(a));
  OK(nrt_unload(b));
  OK(nrt_unload(c));
  nrt_close();
  free(x);
  free(want);
  free(got);
  free(neff);
  printf("all checks passed\n");
  return 0;
}
