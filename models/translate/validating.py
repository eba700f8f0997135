"""A validation during training: greedy translations of the validation sources, scored, and a
few of them to show; and which score picks a run's best model."""
from __future__ import annotations

from .evaluation import score, summary, translate
from .preparation import Prepared
from ..transformer import Transformer

SCORES = ("exact_match", "token_accuracy", "bleu", "chrf")
"""What metrics.jsonl keeps of a validation (as valid_exact_match, ...)."""


def validation(model: Transformer, data: Prepared, what: str) -> tuple[dict, list[str]]:
    """`model`'s scores on the validation sources (every reference of each), and what to show of
    them: a line of scores said to be `what`'s, and the first three translations."""
    sources, references = [s for s, _ in data.valid_sources], [refs for _, refs in data.valid_sources]
    outputs = translate(model, sources, data.src_vocab, data.tgt_vocab, data.tokenizers)
    metrics = score(outputs, references, data.tokenizers[1])
    shown = [f"{what}: validation {summary(metrics, digits=1)}"]
    for s, o, r in list(zip(sources, outputs, references))[:3]:
        shown.append(f"  {s!r} -> {o!r}   (reference {r[0]!r}{' or others' if len(r) > 1 else ''})")
    return metrics, shown


def best_by(task: str | None, data: Prepared) -> str:
    """What picks best.npz: exact match for a task; for a corpus, which has many right translations,
    BLEU against all references, or chrF where no reference has 4 tokens (BLEU is 0 there)."""
    if task:
        return "exact_match"
    references = [refs for _, refs in data.valid_sources]
    themselves = score([refs[0] for refs in references], references, data.tokenizers[1])
    return "bleu" if themselves["bleu_defined"] else "chrf"
