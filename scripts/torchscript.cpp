// Makes TorchScript models with libtorch's own compiler, for the default repository and the tests (Python's
// torch cannot be imported here: its wheel needs the whole CUDA stack).
//
//   torchscript script SOURCE OUT [NAME=FILE:D0xD1... ...]
//       a module whose methods are the TorchScript in SOURCE (as torch.jit.script compiles them), with each
//       NAME a parameter read from FILE (raw little-endian float32) in the shape D0xD1...
//   torchscript trace SOURCE OUT D0xD1... [D0xD1... ...] [-- NAME=FILE:D0xD1... ...]
//       the module of `script`, traced as torch.jit.trace traces it: its forward run once on example float32
//       inputs (one shape each, filled with 0.5), the operations that ran recorded as the new forward's graph
//       (control flow taken once and frozen, as in a traced model), the parameters kept as attributes
//   torchscript submodule IN ATTRIBUTE OUT
//       the submodule ATTRIBUTE of the module in IN, saved as a module of its own
//
// Built by scripts/dev setup against the libtorch in .cache/libtorch.

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/fixup_trace_scope_blocks.h>
#include <torch/csrc/jit/passes/normalize_ops.h>
#include <torch/script.h>

#include <algorithm>
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

// D0xD1... as a shape.
std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream dims(text);
  for (std::string dim; std::getline(dims, dim, 'x');) {
    shape.push_back(std::stoll(dim));
  }
  return shape;
}

// NAME=FILE:D0xD1... as a parameter of `module`.
void add_parameter(torch::jit::Module& module, const std::string& spec) {
  auto eq = spec.find('='), colon = spec.rfind(':');
  if (eq == std::string::npos || colon == std::string::npos || colon < eq) {
    throw std::runtime_error("expected NAME=FILE:D0xD1..., got " + spec);
  }
  std::vector<int64_t> shape = parse_shape(spec.substr(colon + 1));
  std::string bytes = read_text(spec.substr(eq + 1, colon - eq - 1));
  auto tensor = torch::empty(shape, torch::kFloat32);
  if (bytes.size() != static_cast<size_t>(tensor.numel()) * sizeof(float)) {
    throw std::runtime_error(spec + ": the file's size does not match the shape");
  }
  std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  module.register_parameter(spec.substr(0, eq), tensor, false);
}

// A module of TorchScript `source` with the parameters of `specs` (NAME=FILE:D0xD1... each).
torch::jit::Module script(const std::string& source, const std::vector<std::string>& specs) {
  torch::jit::Module module("__torch__.Model");
  for (const auto& spec : specs) {
    add_parameter(module, spec);
  }
  module.define(source);
  module.eval();
  return module;
}

// `scripted` traced on inputs of `shapes`: a new module holding the same parameters, whose forward is the
// graph the tracer recorded while `scripted.forward` ran (what torch.jit.trace builds in Python).
torch::jit::Module trace(torch::jit::Module& scripted, const std::vector<std::string>& shapes) {
  torch::jit::Module traced("__torch__.Traced");
  for (const auto& parameter : scripted.named_parameters(false)) {
    traced.register_parameter(parameter.name, parameter.value, false);
  }
  torch::jit::Stack inputs;
  for (const auto& shape : shapes) {
    inputs.emplace_back(torch::full(parse_shape(shape), 0.5, torch::kFloat32));
  }
  auto run_forward = [&](torch::jit::Stack stack) -> torch::jit::Stack {
    return {scripted.forward(std::vector<c10::IValue>(stack.begin(), stack.end()))};
  };
  auto no_names = [](const torch::autograd::Variable&) { return std::string(); };
  auto state = std::get<0>(torch::jit::tracer::trace(inputs, run_forward, no_names, false, false, &traced));
  torch::jit::FixupTraceScopeBlocks(state->graph, &traced);
  torch::jit::NormalizeOps(state->graph);
  auto name = c10::QualifiedName(*traced.type()->name(), "forward");
  traced.type()->addMethod(traced._ivalue()->compilation_unit()->create_function(name, state->graph));
  traced.eval();
  return traced;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() >= 3 && args[0] == "script") {
      script(read_text(args[1]), {args.begin() + 3, args.end()}).save(args[2]);
    } else if (args.size() >= 4 && args[0] == "trace") {
      auto split = std::find(args.begin() + 3, args.end(), "--");
      auto parameters = split == args.end() ? split : split + 1;
      torch::jit::Module scripted = script(read_text(args[1]), {parameters, args.end()});
      trace(scripted, {args.begin() + 3, split}).save(args[2]);
    } else if (args.size() == 4 && args[0] == "submodule") {
      torch::jit::Module module = torch::jit::load(args[1]);
      module.attr(args[2]).toModule().save(args[3]);
    } else {
      std::cerr << "usage: torchscript script SOURCE OUT [NAME=FILE:D0xD1...]...\n"
                   "     | trace SOURCE OUT D0xD1... [-- NAME=FILE:D0xD1...]...\n"
                   "     | submodule IN ATTRIBUTE OUT\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "torchscript: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
