"""Convert a BERT-style TensorFlow checkpoint into a PyTorch ``state_dict`` without TensorFlow.

This renames and transposes variables the way Hugging Face's ``load_tf_weights_in_bert``
does, with ``saveplan`` in place of ``tf.train.list_variables``/``load_variable``:

    python convert_bert_to_pytorch.py bert_model.ckpt pytorch_model.bin

``tf_bert_to_state_dict`` needs only NumPy; writing the ``.bin`` needs PyTorch.
"""

import re
import sys

import numpy as np

import saveplan

# What load_tf_weights_in_bert skips: optimizer slots and the step counter.
SKIPPED = {"adam_v", "adam_m", "AdamWeightDecayOptimizer", "AdamWeightDecayOptimizer_1", "global_step"}


def torch_name(tf_name):
    """The PyTorch parameter name of a TF variable name and whether to transpose it, or
    ``None`` for a variable ``load_tf_weights_in_bert`` skips."""
    parts = tf_name.split("/")
    if any(part in SKIPPED for part in parts):
        return None
    out = []
    for part in parts:
        match = re.fullmatch(r"([A-Za-z]+)_(\d+)", part)
        scope, number = (match.group(1), match.group(2)) if match else (part, None)
        if scope in ("kernel", "gamma", "output_weights"):
            scope = "weight"
        elif scope in ("output_bias", "beta"):
            scope = "bias"
        elif scope == "squad":
            scope = "classifier"
        out.append(scope)
        if number is not None:
            out.append(number)
    transpose = parts[-1] == "kernel"
    if parts[-1].endswith("_embeddings"):
        out.append("weight")
    return ".".join(out), transpose


def tf_bert_to_state_dict(path):
    """``{pytorch name: numpy array}`` of the BERT checkpoint at ``path`` (a prefix, a
    directory or a ``checkpoint`` file), kernels transposed as PyTorch's ``nn.Linear`` wants."""
    state = {}
    values = saveplan.load(path)  # every tensor, read in parallel
    for name, _ in saveplan.list_variables(path):
        mapped = torch_name(name)
        if mapped is None:
            continue
        key, transpose = mapped
        array = values[name]
        state[key] = np.ascontiguousarray(np.transpose(array)) if transpose else np.asarray(array)
    return state


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: convert_bert_to_pytorch.py TF_CHECKPOINT OUT.bin")
    import torch

    state = {key: torch.from_numpy(value) for key, value in tf_bert_to_state_dict(sys.argv[1]).items()}
    torch.save(state, sys.argv[2])
    print(f"wrote {len(state)} tensors to {sys.argv[2]}")


if __name__ == "__main__":
    main()
