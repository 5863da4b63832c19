"""The token data of programs/gp4a_rnn.tp and programs/gp4a_transformer.tp (docs/gallery_gp4a.md).

A GloVe-like embedding made here with a fixed seed: a vocabulary of 10 words, each a 300-d float32
vector (a shared direction, as GloVe vectors have, plus a word's own part), and sentences drawn from
it with repeated words (so Gram matrices are rank-deficient, as real text makes them):

* ``gp4a_tokens.npy``: 3 sentences of 4 tokens, 12 × 300 (row 4(s−1)+t is token t of sentence s);
* ``gp4a_sentence.npy``: one sentence of 5 tokens, 5 × 300.

    python programs/make_gp4a_tokens.py      # rewrites both files, bit for bit
"""
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    rng = np.random.default_rng(2024)
    common = rng.normal(size=300)
    vocab = 0.5 * common + rng.normal(size=(10, 300))          # 10 words, correlated as GloVe's are
    vocab /= np.linalg.norm(vocab, axis=1, keepdims=True) / np.sqrt(300)   # |x|² = d: xᵀx/d = 1
    sentences = [[0, 3, 7, 3], [1, 3, 7, 2], [5, 9, 9, 4]]
    np.save(HERE / "gp4a_tokens.npy", vocab[np.ravel(sentences)].astype(np.float32))
    np.save(HERE / "gp4a_sentence.npy", vocab[[6, 0, 8, 0, 2]].astype(np.float32))


if __name__ == "__main__":
    main()
