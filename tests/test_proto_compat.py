"""Our proto/ files must describe exactly the messages tritonclient is compiled against: same packages,
message and enum names, field names, numbers, types, labels and oneofs, same RPCs. Compiles proto/ with
grpc_tools' protoc and compares against the descriptors shipped inside the tritonclient package."""

import pathlib

import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

import tritonclient.grpc.model_config_pb2 as triton_model_config
import tritonclient.grpc.service_pb2 as triton_service

PROTO_DIR = pathlib.Path(__file__).resolve().parent.parent / "proto"


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    out = tmp_path_factory.mktemp("descriptors") / "set.pb"
    files = ["grpc_service.proto", "model_config.proto", "health.proto"]
    rc = protoc.main(["protoc", f"-I{PROTO_DIR}", f"--descriptor_set_out={out}", *[str(PROTO_DIR / f) for f in files]])
    assert rc == 0, "protoc failed to compile proto/"
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return {f.name: f for f in fds.file}


def theirs(module):
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def field_signature(field):
    return (field.name, field.number, field.type, field.label, field.type_name,
            field.oneof_index if field.HasField("oneof_index") else None, field.proto3_optional)


def flatten_messages(messages, prefix=""):
    out = {}
    for m in messages:
        name = prefix + m.name
        out[name] = (
            [field_signature(f) for f in m.field],
            [o.name for o in m.oneof_decl],
            m.options.map_entry,
        )
        out.update(flatten_messages(m.nested_type, name + "."))
        for e in m.enum_type:
            out[name + "." + e.name] = [(v.name, v.number) for v in e.value]
    return out


def flatten(file):
    out = flatten_messages(file.message_type)
    for e in file.enum_type:
        out[e.name] = [(v.name, v.number) for v in e.value]
    return out


@pytest.mark.parametrize("name, module", [("grpc_service.proto", triton_service), ("model_config.proto", triton_model_config)])
def test_messages_and_enums_match_tritonclient(ours, name, module):
    mine, reference = ours[name], theirs(module)
    assert mine.package == reference.package
    mine_types, reference_types = flatten(mine), flatten(reference)
    assert sorted(mine_types) == sorted(reference_types), "message/enum names differ"
    for type_name, signature in reference_types.items():
        assert mine_types[type_name] == signature, f"{type_name} differs from tritonclient's"


def test_service_matches_tritonclient(ours):
    mine, reference = ours["grpc_service.proto"], theirs(triton_service)

    def methods(f):
        return {
            (s.name, m.name, m.input_type, m.output_type, m.client_streaming, m.server_streaming)
            for s in f.service
            for m in s.method
        }

    assert methods(mine) == methods(reference)


def test_health_is_the_standard_protocol(ours):
    health = ours["health.proto"]
    assert health.package == "grpc.health.v1"
    assert {m.name for m in health.service[0].method} == {"Check", "Watch"}
