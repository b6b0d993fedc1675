"""The BERT conversion recipe in docs/examples renames and transposes as
`load_tf_weights_in_bert` does."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import saveplan

SCRIPT = Path(__file__).resolve().parents[3] / "docs" / "examples" / "convert_bert_to_pytorch.py"


def load_script():
    spec = importlib.util.spec_from_file_location("convert_bert_to_pytorch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bert_names_and_kernels(tmp_prefix):
    rng = np.random.default_rng(0)
    tensors = {
        "bert/embeddings/word_embeddings": rng.standard_normal((10, 4)).astype(np.float32),
        "bert/embeddings/LayerNorm/gamma": np.ones(4, np.float32),
        "bert/embeddings/LayerNorm/beta": np.zeros(4, np.float32),
        "bert/encoder/layer_0/attention/self/query/kernel": rng.standard_normal((4, 6)).astype(np.float32),
        "bert/encoder/layer_0/attention/self/query/bias": np.zeros(6, np.float32),
        "bert/encoder/layer_11/output/dense/kernel": rng.standard_normal((6, 4)).astype(np.float32),
        "bert/encoder/layer_0/attention/self/query/kernel/adam_m": np.zeros((4, 6), np.float32),
        "cls/predictions/output_bias": np.zeros(10, np.float32),
        "cls/seq_relationship/output_weights": rng.standard_normal((2, 4)).astype(np.float32),
        "global_step": np.int64(5),
    }
    saveplan.save(tmp_prefix, tensors)
    state = load_script().tf_bert_to_state_dict(tmp_prefix)
    assert sorted(state) == [
        "bert.embeddings.LayerNorm.bias",
        "bert.embeddings.LayerNorm.weight",
        "bert.embeddings.word_embeddings.weight",
        "bert.encoder.layer.0.attention.self.query.bias",
        "bert.encoder.layer.0.attention.self.query.weight",
        "bert.encoder.layer.11.output.dense.weight",
        "cls.predictions.bias",
        "cls.seq_relationship.weight",
    ]
    np.testing.assert_array_equal(
        state["bert.encoder.layer.0.attention.self.query.weight"],
        tensors["bert/encoder/layer_0/attention/self/query/kernel"].T,
    )
    assert state["bert.encoder.layer.11.output.dense.weight"].flags.c_contiguous
    np.testing.assert_array_equal(
        state["cls.seq_relationship.weight"], tensors["cls/seq_relationship/output_weights"]
    )


@pytest.mark.pytorch
def test_the_script_writes_a_state_dict_pytorch_loads(tmp_path):
    """The script end to end, as its docstring runs it: PyTorch loads the `.bin` it writes and
    holds the transposed kernels."""
    import subprocess
    import sys

    import torch

    rng = np.random.default_rng(1)
    kernel = rng.standard_normal((4, 6)).astype(np.float32)
    prefix = str(tmp_path / "bert_model.ckpt")
    saveplan.save(prefix, {
        "bert/encoder/layer_0/attention/self/query/kernel": kernel,
        "bert/encoder/layer_0/attention/self/query/bias": np.arange(6, dtype=np.float32),
        "global_step": np.int64(3),
    })
    out = tmp_path / "pytorch_model.bin"
    done = subprocess.run([sys.executable, str(SCRIPT), prefix, str(out)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"wrote 2 tensors to {out}"
    state = torch.load(out)
    assert sorted(state) == ["bert.encoder.layer.0.attention.self.query.bias",
                             "bert.encoder.layer.0.attention.self.query.weight"]
    assert torch.equal(state["bert.encoder.layer.0.attention.self.query.weight"],
                       torch.from_numpy(kernel.T.copy()))
