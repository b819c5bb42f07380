// The `simple` model in C: INPUT0 + INPUT1 as OUTPUT0, INPUT0 - INPUT1 as OUTPUT1 (INT32, same shape).
//
// Built by setup (scripts/dev, `c_plugins`) with clang for wasm32-wasi against wasi-libc, using the C
// bindings `wit-bindgen c` generates from wit/backend.wit (backend.h / backend.c), and linked into a
// component by wasm-component-ld. The functions named `exports_backend_*` are the world's exports.
//
// Ownership follows the bindings' rules: arguments of an export belong to this code and are freed here;
// what an export returns is allocated with malloc and freed by the bindings after the host has copied it.
// A tensor the host holds (`held`) arrives as a handle that this code reads and then drops.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

typedef tessera_backend_types_tensor_t tensor_t;

// An input's elements as int32 values, copied out of the message (or the host) into aligned memory.
typedef struct {
  const tensor_t *tensor;
  int32_t *values;
  size_t count;
} int32_input_t;

static void set_error(backend_string_t *err, const char *message) { backend_string_dup(err, message); }

static bool name_is(const backend_string_t *name, const char *expected) {
  size_t len = strlen(expected);
  return name->len == len && memcmp(name->ptr, expected, len) == 0;
}

static const tensor_t *find_input(const backend_request_t *request, const char *name) {
  for (size_t i = 0; i < request->inputs.len; i++) {
    if (name_is(&request->inputs.ptr[i].name, name)) return &request->inputs.ptr[i];
  }
  return NULL;
}

// Reads `name` as INT32 into `out`; on failure writes the reason to `err` and returns false.
static bool read_int32_input(const backend_request_t *request, const char *name, int32_input_t *out,
                             backend_string_t *err) {
  char message[128];
  const tensor_t *tensor = find_input(request, name);
  if (tensor == NULL) {
    snprintf(message, sizeof message, "missing input %s", name);
    set_error(err, message);
    return false;
  }
  if (tensor->datatype != TESSERA_BACKEND_TYPES_DATA_TYPE_INT32) {
    snprintf(message, sizeof message, "%s must be INT32", name);
    set_error(err, message);
    return false;
  }
  backend_list_u8_t held_bytes = {0};
  const backend_list_u8_t *bytes = &tensor->data.val.inline_;
  if (tensor->data.tag == TESSERA_BACKEND_TYPES_TENSOR_BYTES_HELD) {
    tessera_backend_types_method_tensor_data_read(tessera_backend_types_borrow_tensor_data(tensor->data.val.held),
                                                  &held_bytes);
    bytes = &held_bytes;
  }
  out->tensor = tensor;
  out->count = bytes->len / sizeof(int32_t);
  out->values = malloc(out->count * sizeof(int32_t) + 1);
  // The message's bytes may start anywhere, so they are copied rather than cast.
  memcpy(out->values, bytes->ptr, out->count * sizeof(int32_t));
  backend_list_u8_free(&held_bytes);
  return true;
}

static bool same_shape(const tensor_t *a, const tensor_t *b) {
  return a->shape.len == b->shape.len &&
         memcmp(a->shape.ptr, b->shape.ptr, a->shape.len * sizeof(int64_t)) == 0;
}

// A new INT32 tensor called `name` with `shape` (copied) whose elements are `values` (taken over).
static tensor_t int32_output(const char *name, const backend_list_s64_t *shape, int32_t *values, size_t count) {
  tensor_t tensor = {0};
  backend_string_dup(&tensor.name, name);
  tensor.datatype = TESSERA_BACKEND_TYPES_DATA_TYPE_INT32;
  tensor.shape.len = shape->len;
  tensor.shape.ptr = malloc(shape->len * sizeof(int64_t) + 1);
  memcpy(tensor.shape.ptr, shape->ptr, shape->len * sizeof(int64_t));
  tensor.data.tag = TESSERA_BACKEND_TYPES_TENSOR_BYTES_INLINE;
  tensor.data.val.inline_.ptr = (uint8_t *)values;
  tensor.data.val.inline_.len = count * sizeof(int32_t);
  return tensor;
}

// Answers one request, or says why it cannot (only that request fails).
static bool add_sub(const backend_request_t *request, backend_response_t *response, backend_string_t *err) {
  int32_input_t a = {0}, b = {0};
  bool ok = read_int32_input(request, "INPUT0", &a, err) && read_int32_input(request, "INPUT1", &b, err);
  if (ok && !same_shape(a.tensor, b.tensor)) {
    set_error(err, "INPUT0 and INPUT1 differ in shape");
    ok = false;
  }
  if (ok) {
    int32_t *sum = malloc(a.count * sizeof(int32_t) + 1);
    int32_t *difference = malloc(a.count * sizeof(int32_t) + 1);
    for (size_t i = 0; i < a.count; i++) {
      // Unsigned arithmetic wraps on overflow as the other add_sub examples do (signed overflow is UB in C).
      sum[i] = (int32_t)((uint32_t)a.values[i] + (uint32_t)b.values[i]);
      difference[i] = (int32_t)((uint32_t)a.values[i] - (uint32_t)b.values[i]);
    }
    response->outputs.len = 2;
    response->outputs.ptr = malloc(2 * sizeof(tensor_t));
    response->outputs.ptr[0] = int32_output("OUTPUT0", &a.tensor->shape, sum, a.count);
    response->outputs.ptr[1] = int32_output("OUTPUT1", &a.tensor->shape, difference, a.count);
  }
  free(a.values);
  free(b.values);
  return ok;
}

// Drops the handles of inputs the host held; the bindings' free functions release only memory.
static void drop_held_inputs(backend_request_t *request) {
  for (size_t i = 0; i < request->inputs.len; i++) {
    tessera_backend_types_tensor_bytes_t *data = &request->inputs.ptr[i].data;
    if (data->tag == TESSERA_BACKEND_TYPES_TENSOR_BYTES_HELD) {
      tessera_backend_types_tensor_data_drop_own(data->val.held);
    }
  }
}

bool exports_backend_auto_complete_config(backend_string_t *config_json, backend_string_t *ret,
                                          backend_string_t *err) {
  (void)err;
  *ret = *config_json;  // the config is complete as written: hand it back unchanged (and with it, its memory)
  return true;
}

bool exports_backend_initialize(backend_list_tuple2_string_string_t *args, backend_string_t *err) {
  (void)err;
  for (size_t i = 0; i < args->len; i++) {
    if (name_is(&args->ptr[i].f0, "model_instance_name")) {
      char line[160];
      snprintf(line, sizeof line, "add_sub_c initialised as %.*s", (int)args->ptr[i].f1.len,
               (const char *)args->ptr[i].f1.ptr);
      backend_string_t message;
      backend_string_set(&message, line);
      tessera_backend_host_log(TESSERA_BACKEND_TYPES_LOG_LEVEL_INFO, &message);
    }
  }
  backend_list_tuple2_string_string_free(args);
  return true;
}

// One result per request: an error fails only its own request.
void exports_backend_execute(backend_list_request_t *requests, backend_list_result_response_string_t *ret) {
  ret->len = requests->len;
  ret->ptr = malloc(requests->len * sizeof(backend_result_response_string_t) + 1);
  for (size_t i = 0; i < requests->len; i++) {
    backend_result_response_string_t *result = &ret->ptr[i];
    memset(result, 0, sizeof *result);
    result->is_err = !add_sub(&requests->ptr[i], &result->val.ok, &result->val.err);
    drop_held_inputs(&requests->ptr[i]);
  }
  backend_list_request_free(requests);
}

void exports_backend_finalize(void) {}
