"""The real compute model of the local stack: a small ONNX MLP run by onnxruntime.

The sleep model (model_repo.py) takes exactly the time a profile says, which is what the
calibration tests need; no user's model is a sleep. This one computes: an MLP of 512 inputs,
three 2,048-wide Gemm+Relu layers and 16 outputs (about 9.4 M float32 weights, 38 MB, more
than this machine's 32 MB L3 cache), built with onnx's helper API from a seeded generator
(random weights, nothing downloaded) and run by onnxruntime inside Triton's python backend,
one forward pass per batch Triton hands it. Its curve has the shape batching exploits: at
batch 1 the pass reads every weight from memory for one row; a larger batch reuses each
weight for every row, so time per inference falls with the batch. onnxruntime runs one
thread per instance (`threads` in the config) so a replica fits beside the stack on two
cores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from batchop_dev.local.triton.model_repo import render_config

INPUTS = 512
HIDDEN = 2048
LAYERS = 3
OUTPUTS = 16
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_SEED = 26
OPSET = 17
MODEL_FILE = "model.onnx"


@dataclass(frozen=True)
class Weights:
    """The network's parameters: per layer (W, b), then the output projection."""

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    output: np.ndarray

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The same network in numpy: an independent reference for the served answers."""
        h = x.astype(np.float64)
        for w, b in self.layers:
            h = np.maximum(h @ w + b, 0.0)
        return (h @ self.output).astype(np.float32)


def make_weights(
    seed: int = DEFAULT_SEED,
    inputs: int = INPUTS,
    hidden: int = HIDDEN,
    layers: int = LAYERS,
    outputs: int = OUTPUTS,
) -> Weights:
    """Random weights, scaled so activations neither vanish nor blow up through the layers."""
    rng = np.random.default_rng(seed)
    found = []
    width = inputs
    for _ in range(layers):
        w = rng.standard_normal((width, hidden), dtype=np.float32) * np.float32(
            np.sqrt(2.0 / width)
        )
        b = rng.standard_normal(hidden, dtype=np.float32) * np.float32(0.01)
        found.append((w, b))
        width = hidden
    out = rng.standard_normal((width, outputs), dtype=np.float32) * np.float32(np.sqrt(1.0 / width))
    return Weights(layers=tuple(found), output=out)


def build_onnx(weights: Weights, input_name: str = "INPUT0", output_name: str = "OUTPUT0") -> Any:
    """The network as an onnx ModelProto (dynamic batch dimension), checked by onnx."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes = [], []
    previous = input_name
    for i, (w, b) in enumerate(weights.layers):
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("Gemm", [previous, f"w{i}", f"b{i}"], [f"gemm{i}"]),
            helper.make_node("Relu", [f"gemm{i}"], [f"relu{i}"]),
        ]
        previous = f"relu{i}"
    inits.append(numpy_helper.from_array(weights.output, "w_out"))
    nodes.append(helper.make_node("MatMul", [previous, "w_out"], [output_name]))
    n_in, n_out = weights.layers[0][0].shape[0], weights.output.shape[1]
    graph = helper.make_graph(
        nodes,
        "batchop_mlp",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", n_in])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["batch", n_out])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # what onnxruntime releases since 1.10 read
    onnx.checker.check_model(model)
    return model


def write_mlp_repository(
    directory: str | Path,
    name: str,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    max_queue_delay_us: int = 0,
    preferred_batch_sizes: list[int] | None = None,
    instances: int = 1,
    threads: int = 1,
    seed: int = DEFAULT_SEED,
) -> Path:
    """Write (or overwrite) the MLP as model `name` in repository `directory`; return its dir.

    The layout is a python-backend model like the sleep model's, with the network in
    `1/model.onnx` and `weights.json` naming the seed it was drawn from.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    weights = make_weights(seed)
    model_dir = Path(directory) / name
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    config = render_config(
        name,
        max_batch_size,
        max_queue_delay_us,
        preferred_batch_sizes,
        instances,
        input_elements=INPUTS,
        output_elements=OUTPUTS,
        parameters={"threads": str(threads)},
    )
    (model_dir / "config.pbtxt").write_text(config)
    tmp = version / f".{MODEL_FILE}.tmp"
    tmp.write_bytes(build_onnx(weights).SerializeToString())
    tmp.replace(version / MODEL_FILE)
    meta = {"seed": seed, "inputs": INPUTS, "hidden": HIDDEN, "layers": LAYERS}
    (model_dir / "weights.json").write_text(json.dumps({**meta, "outputs": OUTPUTS}) + "\n")
    source = resources.files("batchop_dev.local.triton").joinpath("mlp_model.py.txt").read_text()
    (version / "model.py").write_text(source)
    return model_dir


def mlp_payload(seed: int = DEFAULT_SEED, pool: int = 16) -> Any:
    """The load generator's payload for the MLP drawn from `seed`: random rows, each answer
    checked against the numpy forward pass (to onnxruntime's float32 rounding)."""
    from batchop_dev.local.load import Payload
    from batchop_dev.local.triton.model_repo import INPUT_NAME, OUTPUT_NAME

    weights = make_weights(seed)
    rng = np.random.default_rng(seed + 1)
    xs = tuple(rng.standard_normal((1, INPUTS), dtype=np.float32) for _ in range(pool))
    return Payload(
        INPUT_NAME, OUTPUT_NAME, xs, tuple(weights.forward(x) for x in xs), tolerance=2e-3
    )
