"""The model configuration inside Tessera's Python runtime: `ModelConfig`, which `auto_complete_config` receives
and returns (its checks and messages are Triton's), the `get_*_config_by_name` helpers, and the configuration
of the model this instance serves, from which list-made tensors take their data types. Part of
`triton_python_backend_utils` (see `tessera`)."""

import json

# The configuration (Triton-style JSON as a dict) of the model being served, set at initialize.
_served = {}


def set_served(config):
    global _served
    _served = config


def configured_type(name):
    """The KServe data type name ("FP32") the configuration gives output (else input) `name`, or None."""
    declared = get_output_config_by_name(_served, name) or get_input_config_by_name(_served, name)
    if declared is None:
        return None
    config_type = declared.get("data_type", "")
    return "BYTES" if config_type == "TYPE_STRING" else config_type.removeprefix("TYPE_")


def get_input_config_by_name(model_config, name):
    return next((t for t in model_config.get("input", []) if t.get("name") == name), None)


def get_output_config_by_name(model_config, name):
    return next((t for t in model_config.get("output", []) if t.get("name") == name), None)


def using_decoupled_model_transaction_policy(model_config):
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """A model configuration being completed. `ModelConfig(json_text)`; `as_dict()` is the configuration."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config) if isinstance(model_config, (str, bytes)) else model_config
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self):
        return self._model_config

    def max_batch_size(self):
        return int(self._model_config["max_batch_size"])

    def set_max_batch_size(self, max_batch_size):
        """Sets max_batch_size; the configuration's own non-zero value may not be larger."""
        if self._model_config["max_batch_size"] > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {self._model_config['max_batch_size']}, but in "
                f"auto-complete-config function for model '{self._name()}' specified max_batch_size {max_batch_size}")
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        """Chooses dynamic batching, unless the configuration chose another scheduler."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config function for "
                    f"model '{self._name()}' tries to set scheduling_choice as 'dynamic_batching'")
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input):
        self._add("input", input, ["name", "data_type", "dims", "optional"])

    def add_output(self, output):
        self._add("output", output, ["name", "data_type", "dims"])

    def set_model_transaction_policy(self, transaction_policy_dict):
        """Sets `decoupled`; a value the configuration already sets may not change."""
        if any(key != "decoupled" for key in transaction_policy_dict):
            raise ValueError(f"model transaction property in auto-complete-config function for model '{self._name()}' "
                             "contains property other than 'decoupled'.")
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(f"trying to change decoupled property in auto-complete-config for model "
                                 f"'{self._name()}', which is already set to '{policy['decoupled']}'.")
            policy["decoupled"] = wanted

    def _name(self):
        return self._model_config.get("name", "")

    def _add(self, kind, tensor, allowed):
        """Adds an input or output, or completes the configuration's own of that name (which must agree)."""
        model, label = self._name(), tensor.get("name", "")
        if any(key not in allowed for key in tensor):
            others = ", ".join(f"'{key}'" for key in allowed[:-1]) + f" and '{allowed[-1]}'"
            raise ValueError(f"{kind} '{label}' in auto-complete-config function for model '{model}' contains "
                             f"property other than {others}.")
        if "name" not in tensor:
            raise ValueError(f"{kind} in auto-complete-config function for model '{model}' is missing 'name' property.")
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(f"{kind} '{label}' in auto-complete-config function for model '{model}' is missing "
                                 f"'{required}' property.")
        for declared in self._model_config[kind]:
            if declared.get("name") != label:
                continue
            declared_type = declared.get("data_type", "TYPE_INVALID")
            if declared_type != "TYPE_INVALID" and declared_type != tensor["data_type"]:
                raise ValueError(f"unable to load model '{model}', configuration expects datatype {declared_type} for "
                                 f"{kind} '{label}', model provides {tensor['data_type']}")
            if declared.get("dims") and list(declared["dims"]) != list(tensor["dims"]):
                raise ValueError(f"model '{model}', tensor '{label}': the model expects dims {tensor['dims']} but the "
                                 f"model configuration specifies dims {declared['dims']}")
            if "optional" in declared and "optional" in tensor and declared["optional"] != tensor["optional"]:
                raise ValueError(f"model '{model}', tensor '{label}': the model expects optional {tensor['optional']} "
                                 f"but the model configuration specifies optional {declared['optional']}")
            declared["data_type"], declared["dims"] = tensor["data_type"], list(tensor["dims"])
            if "optional" in tensor:
                declared["optional"] = tensor["optional"]
            return
        self._model_config[kind].append(dict(tensor, dims=list(tensor["dims"])))
