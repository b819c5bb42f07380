// The `simple` model in JavaScript: INPUT0 + INPUT1 as OUTPUT0, INPUT0 - INPUT1 as OUTPUT1 (INT32, same
// shape). Built into a component by componentize-js against wit/backend.wit; the exports below are the
// world's (`auto-complete-config`, `initialize`, `execute`, `finalize`, in camelCase), and tensors are
// records whose data is `{ tag: 'inline', val: Uint8Array }` (small) or `{ tag: 'held', val: TensorData }`
// (large, held by the server until read).

import { log } from 'tessera:backend/host@1.3.0';

// The tensor's bytes, read from the server if it holds them.
function bytesOf(tensor) {
  return tensor.data.tag === 'inline' ? tensor.data.val : tensor.data.val.read();
}

function int32Input(request, name) {
  const tensor = request.inputs.find((t) => t.name === name);
  if (!tensor) throw new Error(`missing input ${name}`);
  if (tensor.datatype !== 'int32') throw new Error(`${name} must be INT32`);
  const bytes = bytesOf(tensor);
  // Copy into an aligned buffer: the bytes may start anywhere in the component's memory.
  return { shape: tensor.shape, values: new Int32Array(bytes.slice().buffer) };
}

function int32Output(name, shape, values) {
  return { name, datatype: 'int32', shape, data: { tag: 'inline', val: new Uint8Array(values.buffer) } };
}

function addSub(request) {
  const a = int32Input(request, 'INPUT0');
  const b = int32Input(request, 'INPUT1');
  if (a.values.length !== b.values.length) throw new Error('INPUT0 and INPUT1 differ in shape');
  const sum = a.values.map((x, i) => x + b.values[i]);
  const difference = a.values.map((x, i) => x - b.values[i]);
  return { outputs: [int32Output('OUTPUT0', a.shape, sum), int32Output('OUTPUT1', a.shape, difference)] };
}

export function autoCompleteConfig(configJson) {
  return configJson;
}

export function initialize(args) {
  const instance = args.find(([key]) => key === 'model_instance_name');
  log('info', `add_sub_js initialised as ${instance ? instance[1] : '?'}`);
}

// One result per request: an error fails only its own request.
export function execute(requests) {
  return requests.map((request) => {
    try {
      return { tag: 'ok', val: addSub(request) };
    } catch (e) {
      return { tag: 'err', val: String(e.message || e) };
    }
  });
}

export function finalize() {}
