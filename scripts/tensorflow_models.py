"""Makes the TensorFlow models of the default repository with the tensorflow package (run with the python of
.cache/tensorflow, where setup installs tensorflow-cpu; idempotent):

- `simple_tf/1/model.graphdef`: the seed's own `simple`, a frozen GraphDef: INPUT0, INPUT1 INT32 [batch, 16]
  -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1;
- `simple_tf_savedmodel/1/model.savedmodel/`: the same as a SavedModel (signature `serving_default`, tensors
  named as in the config);
- `simple_string_tf/1/model.graphdef`: Triton's `simple_string` as a GraphDef: INPUT0, INPUT1 STRING
  [batch, 16] hold decimal integers, OUTPUT0 and OUTPUT1 their sum and difference as strings.

usage: python scripts/tensorflow_models.py REPOSITORY
"""

import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402


def add_sub_graph():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.int32, [None, 16], name="INPUT0")
        b = tf.compat.v1.placeholder(tf.int32, [None, 16], name="INPUT1")
        tf.add(a, b, name="OUTPUT0")
        tf.subtract(a, b, name="OUTPUT1")
    return graph


def string_add_sub_graph():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.compat.v1.placeholder(tf.string, [None, 16], name="INPUT0")
        b = tf.compat.v1.placeholder(tf.string, [None, 16], name="INPUT1")
        x, y = (tf.strings.to_number(t, out_type=tf.int32) for t in (a, b))
        tf.strings.as_string(x + y, name="OUTPUT0")
        tf.strings.as_string(x - y, name="OUTPUT1")
    return graph


def write_graphdef(target, graph):
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(graph.as_graph_def().SerializeToString())


def write_savedmodel(target):
    class AddSub(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.int32, name="INPUT0"),
                                      tf.TensorSpec([None, 16], tf.int32, name="INPUT1")])
        def serve(self, INPUT0, INPUT1):
            return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}

    module = AddSub()
    tf.saved_model.save(module, str(target), signatures={"serving_default": module.serve})


def main(repository):
    made = []
    target = repository / "simple_tf" / "1" / "model.graphdef"
    if not target.exists():
        write_graphdef(target, add_sub_graph())
        made.append(target)
    target = repository / "simple_string_tf" / "1" / "model.graphdef"
    if not target.exists():
        write_graphdef(target, string_add_sub_graph())
        made.append(target)
    target = repository / "simple_tf_savedmodel" / "1" / "model.savedmodel"
    if not (target / "saved_model.pb").exists():
        write_savedmodel(target)
        made.append(target)
    for path in made:
        print(f"  made {path}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
