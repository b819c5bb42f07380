// The two things the PyTorch backend needs from libtorch that `tch` does not expose: the argument list of a
// TorchScript module's `forward` (Triton's PyTorch backend names inputs by it and refuses arguments that are
// not tensors), and an InferenceMode guard held by an instance thread. Every C++ exception stops here and
// comes back as a message.

#include <torch/script.h>

#include <cstring>
#include <string>

namespace {

void copy_message(const std::string& message, char* error, size_t error_len) {
  if (error_len == 0) {
    return;
  }
  size_t length = std::min(message.size(), error_len - 1);
  std::memcpy(error, message.data(), length);
  error[length] = '\0';
}

// One letter for each kind of argument the backend tells apart: a tensor, a list, a dictionary, other.
char kind_of(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return 'T';
    case c10::TypeKind::ListType:
      return 'L';
    case c10::TypeKind::DictType:
      return 'D';
    default:
      return 'O';
  }
}

}  // namespace

extern "C" {

// Loads the TorchScript module at `path` and calls `argument(data, name, kind, type)` for each argument of
// its `forward`, `self` left out. Returns 0, or -1 with the reason in `error`.
int shim_forward_arguments(
    const char* path, void* data, void (*argument)(void*, const char*, char, const char*), char* error,
    size_t error_len) {
  try {
    torch::jit::Module module = torch::jit::load(path, torch::kCPU);
    const auto& arguments = module.get_method("forward").function().getSchema().arguments();
    size_t first = 0;
    if (!arguments.empty() && arguments[0].type()->kind() == c10::TypeKind::ClassType) {
      first = 1;
    }
    for (size_t i = first; i < arguments.size(); i++) {
      std::string type = arguments[i].type()->str();
      argument(data, arguments[i].name().c_str(), kind_of(arguments[i].type()), type.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_len);
    return -1;
  }
}

// Enters InferenceMode (`enabled`) on the calling thread until the returned guard is given to
// `shim_inference_mode_end` on the same thread.
void* shim_inference_mode(bool enabled) {
  return new c10::InferenceMode(enabled);
}

void shim_inference_mode_end(void* guard) {
  delete static_cast<c10::InferenceMode*>(guard);
}

}  // extern "C"
