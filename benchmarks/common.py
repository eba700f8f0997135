"""The training step the benchmarks time, shared by `train_step.py`, `threads.py` and `scaling.py`:
the model sizes (`CONFIGS`), a padded random batch, and one Adam step of the encoder-decoder
Transformer in tinygrad_tx (`ours`, eager or under `tx.jit`) and in PyTorch (`theirs`), both
built the same way (post-LN, dropout 0.1, label-smoothed cross-entropy that ignores padding).
"""
from __future__ import annotations

import numpy as np

CONFIGS = {
    "toy": dict(d_model=64, heads=4, layers=2, d_ff=256, vocab=20, batch=64, length=12),
    "S": dict(d_model=128, heads=4, layers=2, d_ff=512, vocab=1000, batch=64, length=32),
    "M": dict(d_model=256, heads=8, layers=3, d_ff=1024, vocab=8000, batch=32, length=64),
    # a size where a GPU pays (the paper's base width and depth); not among the CPU runs' defaults
    "L": dict(d_model=512, heads=8, layers=6, d_ff=2048, vocab=8000, batch=64, length=64),
}
PAD = 0


def make_batch(c: dict, seed: int = 0):
    """Random ids with a padded tail on half the rows, so masking is exercised."""
    rng = np.random.default_rng(seed)
    B, T, V = c["batch"], c["length"], c["vocab"]
    src, tgt = rng.integers(1, V, (B, T)), rng.integers(1, V, (B, T + 1))
    for row in range(0, B, 2):
        cut = rng.integers(T // 2, T)
        src[row, cut:], tgt[row, cut + 1:] = PAD, PAD
    return src, tgt[:, :-1], tgt[:, 1:]


def ours(c: dict, device: str, jit: bool = False, cuda_graph: bool = False):
    import tinygrad_tx as tx
    import tinygrad_tx.functional as F
    from models import Transformer

    tx.manual_seed(0)
    model = Transformer(c["vocab"], c["vocab"], d_model=c["d_model"], num_heads=c["heads"],
                        num_encoder_layers=c["layers"], num_decoder_layers=c["layers"], d_ff=c["d_ff"],
                        dropout=0.1, max_len=c["length"], pad_id=PAD).to(device)
    opt = tx.optim.Adam(model.parameters(), lr=1e-4)
    src, tgt_in, tgt_out = make_batch(c)
    target = tx.Tensor(tgt_out, device=device)

    src, tgt_in = tx.Tensor(src, device=device), tx.Tensor(tgt_in, device=device)

    def train_step(src, tgt_in, target):
        loss = F.cross_entropy(model(src, tgt_in), target, ignore_index=PAD, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    run = tx.jit(train_step, cuda_graph=cuda_graph) if jit else train_step

    def step() -> None:
        run(src, tgt_in, target).item()  # waits for the GPU, so the time is the step's

    step.run, step.args = run, (src, tgt_in, target)  # for gpu.py: the step's losses, and its graph's memory
    return step


def theirs(c: dict, device: str):
    import torch

    torch.manual_seed(0)
    dev = torch.device(device)
    D, V = c["d_model"], c["vocab"]
    core = torch.nn.Transformer(D, c["heads"], c["layers"], c["layers"], c["d_ff"], dropout=0.1,
                                batch_first=True).to(dev)
    src_emb, tgt_emb, out = (torch.nn.Embedding(V, D).to(dev), torch.nn.Embedding(V, D).to(dev),
                             torch.nn.Linear(D, V).to(dev))
    pe = torch.zeros(c["length"], D, device=dev)
    params = [*core.parameters(), *src_emb.parameters(), *tgt_emb.parameters(), *out.parameters()]
    opt = torch.optim.Adam(params, lr=1e-4)
    src, tgt_in, tgt_out = (torch.as_tensor(a, device=dev) for a in make_batch(c))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(c["length"], device=dev, dtype=torch.bool)
    scale = D ** 0.5

    def step() -> None:
        h = core(src_emb(src) * scale + pe, tgt_emb(tgt_in) * scale + pe, tgt_mask=causal,
                 src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt_in == PAD,
                 memory_key_padding_mask=src == PAD)
        loss = torch.nn.functional.cross_entropy(out(h).reshape(-1, V), tgt_out.reshape(-1),
                                                 ignore_index=PAD, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()

    return step
