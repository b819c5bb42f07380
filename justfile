# The same recipes as scripts/dev, for those who have `just`.

# Set everything up and serve model_repository/ (HTTP :8000, gRPC :8001).
serve *FLAGS:
    scripts/dev serve {{FLAGS}}

# Set everything up and run the whole test suite.
test *ARGS:
    scripts/dev test {{ARGS}}

# Run every fuzz target (fuzz/) for SECONDS each under libFuzzer.
fuzz SECONDS="600":
    scripts/dev fuzz {{SECONDS}}

# Set everything up without running anything.
setup:
    scripts/dev setup

# Build everything, install the real Triton and perf_analyzer, and benchmark both side by side.
bench *ARGS:
    scripts/dev bench {{ARGS}}

# Dynamic batching on a compute-heavy ONNX model, and Tessera's serving overhead over bare ONNX Runtime.
bench-batching *ARGS:
    scripts/dev bench-batching {{ARGS}}

# Ensembles against Triton: the cost of a step, and the embed pipeline.
bench-ensembles *ARGS:
    scripts/dev bench-ensembles {{ARGS}}

# Python models against Triton's python backend: serving, first load of a new model.py, memory per instance.
bench-python *ARGS:
    scripts/dev bench-python {{ARGS}}

# Decoupled models over gRPC streams against Triton: responses per second, time to the first response.
bench-streaming *ARGS:
    scripts/dev bench-streaming {{ARGS}}

# Sequence batching against Triton: simple_sequence under perf_analyzer --sequence-length, silero_vad streams.
bench-sequences *ARGS:
    scripts/dev bench-sequences {{ARGS}}

# Shared memory against the wire (16 MiB, HTTP and gRPC) vs Triton, and response cache hits on minilm.
bench-shm *ARGS:
    scripts/dev bench-shm {{ARGS}}

# PyTorch and TensorFlow beside ONNX in one Tessera, and the overhead over torch.jit and onnxruntime in Python.
bench-frameworks *ARGS:
    scripts/dev bench-frameworks {{ARGS}}

# A good client under a flood of idle and slowloris connections, against Triton.
bench-floods *ARGS:
    scripts/dev bench-floods {{ARGS}}

# Resident memory over 100k requests a kind (simple, large BYTES, 8 MiB FP32, Python, ONNX), HTTP and gRPC.
bench-leaks *ARGS:
    scripts/dev bench-leaks {{ARGS}}

# The container image (OCI layout and docker archive in .cache/image), built without a Docker daemon.
image:
    scripts/dev image
