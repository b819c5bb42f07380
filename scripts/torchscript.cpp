// Makes TorchScript models with libtorch's own compiler, for the default repository and the tests (Python's
// torch cannot be imported here: its wheel needs the whole CUDA stack).
//
//   torchscript script SOURCE OUT [NAME=FILE:D0xD1... ...]
//       a module whose methods are the TorchScript in SOURCE (as torch.jit.script compiles them), with each
//       NAME a parameter read from FILE (raw little-endian float32) in the shape D0xD1...
//   torchscript submodule IN ATTRIBUTE OUT
//       the submodule ATTRIBUTE of the module in IN, saved as a module of its own
//
// Built by scripts/dev setup against the libtorch in .cache/libtorch.

#include <torch/script.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot read " + path);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// NAME=FILE:D0xD1... as a parameter of `module`.
void add_parameter(torch::jit::Module& module, const std::string& spec) {
  auto eq = spec.find('='), colon = spec.rfind(':');
  if (eq == std::string::npos || colon == std::string::npos || colon < eq) {
    throw std::runtime_error("expected NAME=FILE:D0xD1..., got " + spec);
  }
  std::vector<int64_t> shape;
  std::stringstream dims(spec.substr(colon + 1));
  for (std::string dim; std::getline(dims, dim, 'x');) {
    shape.push_back(std::stoll(dim));
  }
  std::string bytes = read_text(spec.substr(eq + 1, colon - eq - 1));
  auto tensor = torch::empty(shape, torch::kFloat32);
  if (bytes.size() != static_cast<size_t>(tensor.numel()) * sizeof(float)) {
    throw std::runtime_error(spec + ": the file's size does not match the shape");
  }
  std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  module.register_parameter(spec.substr(0, eq), tensor, false);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() >= 3 && args[0] == "script") {
      torch::jit::Module module("__torch__.Model");
      for (size_t i = 3; i < args.size(); i++) {
        add_parameter(module, args[i]);
      }
      module.define(read_text(args[1]));
      module.eval();
      module.save(args[2]);
    } else if (args.size() == 4 && args[0] == "submodule") {
      torch::jit::Module module = torch::jit::load(args[1]);
      module.attr(args[2]).toModule().save(args[3]);
    } else {
      std::cerr << "usage: torchscript script SOURCE OUT [NAME=FILE:D0xD1...]... | submodule IN ATTRIBUTE OUT\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "torchscript: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
