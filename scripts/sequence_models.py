"""The ONNX graphs of the default repository's sequence models, generated with the `onnx` package
(scripts/models.py calls these):

- `simple_sequence`: Triton's example, OUTPUT = (INPUT + START) * READY, all INT32 [batch, 1];
- `simple_dyna_sequence`: Triton's example, OUTPUT = ((INPUT + START) + END * CORRID) * READY, CORRID UINT64
  (truncated to INT32 as Triton's graph does);
- `silero_vad`: the Silero VAD graph wrapped so that the server can keep its memory as implicit state. A
  call takes `chunk` FP32 [batch, 512] (one chunk of 16 kHz audio) and the states `context` [batch, 64] (the
  previous chunk's last 64 samples, which silero-vad's own wrapper prepends) and `state` [batch, 2, 128]
  (silero's recurrent state, batch first, fed in as `state_batch_first`); it gives `output` [batch, 1] and the next states `context_out`,
  `state_out`. The sample rate is fixed at 16000.
"""

import numpy as np
from onnx import TensorProto, checker, helper, load, numpy_helper, save

OPSET = [helper.make_opsetid("", 17)]


def _int_io(name, element_type=TensorProto.INT32):
    return helper.make_tensor_value_info(name, element_type, ["batch", 1])


def simple_sequence_graph(path):
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["started"]),
             helper.make_node("Mul", ["started", "READY"], ["OUTPUT"])]
    inputs = [_int_io(n) for n in ("INPUT", "START", "READY")]
    graph = helper.make_graph(nodes, "simple_sequence", inputs, [_int_io("OUTPUT")])
    _save(helper.make_model(graph, opset_imports=OPSET, producer_name="tessera"), path)


def dyna_sequence_graph(path):
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["started"]),
             helper.make_node("Cast", ["CORRID"], ["corrid32"], to=TensorProto.INT32),
             helper.make_node("Mul", ["END", "corrid32"], ["ended"]),
             helper.make_node("Add", ["started", "ended"], ["sum"]),
             helper.make_node("Mul", ["sum", "READY"], ["OUTPUT"])]
    inputs = [_int_io(n) for n in ("INPUT", "START", "END", "READY")] + [_int_io("CORRID", TensorProto.UINT64)]
    graph = helper.make_graph(nodes, "simple_dyna_sequence", inputs, [_int_io("OUTPUT")])
    _save(helper.make_model(graph, opset_imports=OPSET, producer_name="tessera"), path)


def silero_state_graph(silero_path, path):
    """Silero's graph reads `input` (context + chunk), `state` [2, batch, 128] and `sr`: nodes put in front
    of it make those from the wrapper's inputs; nodes behind it make the next states."""
    model = load(silero_path)
    graph = model.graph
    floats = TensorProto.FLOAT
    before = [
        helper.make_node("Concat", ["context", "chunk"], ["input"], axis=1),
        helper.make_node("Transpose", ["state_batch_first"], ["state"], perm=[1, 0, 2]),
    ]
    after = [
        helper.make_node("Transpose", ["stateN"], ["state_out"], perm=[1, 0, 2]),
        helper.make_node("Slice", ["input", "tail_start", "tail_end", "tail_axis"], ["context_out"]),
    ]
    constants = {"sr": np.array(16000, dtype=np.int64), "tail_start": np.array([-64], dtype=np.int64),
                 "tail_end": np.array([np.iinfo(np.int64).max], dtype=np.int64),
                 "tail_axis": np.array([1], dtype=np.int64)}
    nodes = before + list(graph.node) + after
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    # `input` and `state` are silero's own names (context + chunk, and its state batch second).
    del graph.input[:]
    graph.input.extend([helper.make_tensor_value_info("chunk", floats, ["batch", 512]),
                        helper.make_tensor_value_info("context", floats, ["batch", 64]),
                        helper.make_tensor_value_info("state_batch_first", floats, ["batch", 2, 128])])
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info("output", floats, ["batch", 1]),
                         helper.make_tensor_value_info("context_out", floats, ["batch", 64]),
                         helper.make_tensor_value_info("state_out", floats, ["batch", 2, 128])])
    _save(model, path)


def _save(model, path):
    model.ir_version = 8  # the newest the server's ONNX Runtime reads is 13; the onnx package writes 14
    checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, path)
