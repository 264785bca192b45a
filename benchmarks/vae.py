"""The Bernoulli VAE against a plain PyTorch VAE: ``python -m benchmarks.vae [--seeds N]``.

Both are the usual VAE for scikit-learn's digits (8x8 pixels in [0, 1]): encoder MLP
64-256-256-2x16 (mu and log_var), decoder 16-256-256-64 (logits), ReLU, the default
``nn.Linear`` initialization (handgrad's ``torch_default``), Adam lr 1e-3, batch 64, 60
epochs, loss the batch mean of the single-sample negative ELBO. Both train the way
``python -m handgrad train --model vae`` does: on the first 90% of the training split
(the last 10% is the CLI's validation set), each seed shuffling its own batches and
drawing its own weights and noise. Both are then scored on the test split with the same
noise array (one standard normal draw per example, seed 0), in nats per example; the
table gives mean +- sample standard deviation over the seeds and the training times, in
this process, one thread each.

A third column, "paired", trains the torch VAE once more from handgrad's initial weights
on handgrad's batches with handgrad's noise (the VAE's ``rng`` and fit's shuffling
generator, replayed): the two implementations then compute the same run up to float32
rounding, so any gap between "paired" and "handgrad" would be a difference of
implementation rather than of luck.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from handgrad.data import load_digits
from handgrad.optimizers import Adam
from handgrad.zoo import VAE
from handgrad.zoo.vae import EVAL_SEED

LATENT, HIDDEN, EPOCHS, BATCH, LR, VALIDATION_SPLIT = 16, 256, 60, 64, 1e-3, 0.1


class TorchVAE(torch.nn.Module):
    """The plain PyTorch VAE: two MLPs and the reparameterization."""

    def __init__(self, pixels, latent=LATENT, hidden=HIDDEN):
        super().__init__()
        nn = torch.nn
        self.encoder = nn.Sequential(nn.Linear(pixels, hidden), nn.ReLU(),
                                     nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, 2 * latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(),
                                     nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, pixels))

    def negative_elbo(self, x, eps):
        """Per-example reconstruction and KL terms, nats."""
        mu, log_var = self.encoder(x).chunk(2, dim=-1)
        z = mu + torch.exp(0.5 * log_var) * eps
        logits = self.decoder(z)
        reconstruction = F.binary_cross_entropy_with_logits(logits, x, reduction="none")
        kl = -0.5 * (1 + log_var - mu.pow(2) - log_var.exp())
        return reconstruction.sum(-1), kl.sum(-1)


def copy_weights(vae, model):
    """Load a handgrad VAE's weights (W is (F_in, F_out)) into a TorchVAE."""
    with torch.no_grad():
        for ours, theirs in ((vae.encoder, model.encoder), (vae.decoder, model.decoder)):
            dense = [layer for layer in ours.layers if "W" in layer.parameters]
            linear = [m for m in theirs if isinstance(m, torch.nn.Linear)]
            for layer, module in zip(dense, linear, strict=True):
                module.weight.copy_(torch.from_numpy(layer.parameters["W"].T.copy()))
                module.bias.copy_(torch.from_numpy(layer.parameters["b"]))


def train_torch(x_fit, seed, replay=None):
    """A TorchVAE trained on ``x_fit`` (N, pixels): torch's own randomness from ``seed``,
    or ``replay`` = (handgrad VAE before training, its noise Generator, the shuffling
    Generator) to start from its weights and draw its batches and noise."""
    torch.manual_seed(seed)
    model = TorchVAE(x_fit.shape[1])
    if replay is not None:
        copy_weights(replay[0], model)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    data = torch.from_numpy(x_fit)
    for _ in range(EPOCHS):
        order = (torch.randperm(len(data)) if replay is None
                 else torch.from_numpy(replay[2].permutation(len(data))))
        for batch in order.split(BATCH):
            xb = data[batch]
            eps = (torch.randn(len(xb), LATENT) if replay is None else torch.from_numpy(
                replay[1].standard_normal((len(xb), LATENT), dtype=np.float32)))
            reconstruction, kl = model.negative_elbo(xb, eps)
            loss = (reconstruction + kl).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def torch_negative_elbo(model, x, eps):
    with torch.no_grad():
        reconstruction, kl = model.negative_elbo(torch.from_numpy(x), torch.from_numpy(eps))
    return float((reconstruction + kl).double().mean())


def run_seed(x_train, x_test, seed):
    """``(handgrad NELBO, torch NELBO, paired torch NELBO, handgrad s, torch s)``."""
    n_fit = int(len(x_train) * (1 - VALIDATION_SPLIT))  # what fit's validation_split keeps
    flat_fit, flat_test = x_train[:n_fit].reshape(n_fit, -1), x_test.reshape(len(x_test), -1)
    eps = np.random.default_rng(EVAL_SEED).standard_normal((1, len(x_test), LATENT),
                                                           dtype=np.float32)[0]
    start = time.perf_counter()
    vae = VAE(LATENT, (HIDDEN, HIDDEN), seed=seed, input_shape=x_train.shape[1:])
    replay = (copy.deepcopy(vae), copy.deepcopy(vae.rng), np.random.default_rng(seed))
    vae.compile(Adam(lr=LR), loss=None)
    vae.fit(x_train, epochs=EPOCHS, batch_size=BATCH, validation_split=VALIDATION_SPLIT,
            rng=seed, verbose=0)
    ours_s = time.perf_counter() - start
    ours = vae.negative_elbo(x_test)  # the same noise as eps
    start = time.perf_counter()
    model = train_torch(flat_fit, seed)
    torch_s = time.perf_counter() - start
    theirs = torch_negative_elbo(model, flat_test, eps)
    paired = torch_negative_elbo(train_torch(flat_fit, seed, replay), flat_test, eps)
    return ours, theirs, paired, ours_s, torch_s


def _summary(values):
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{statistics.mean(values):7.3f} +- {sd:5.3f}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vae",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="how many seeds (default 5)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    args = parser.parse_args(argv)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - the BLAS library's own thread count
        threadpool_limits = None
    if threadpool_limits is not None:
        threadpool_limits(limits=1, user_api="blas")
    torch.set_num_threads(1)
    data = load_digits()
    print(f"test negative ELBO, nats per example ({len(data.x_test)} test digits); "
          f"{EPOCHS} epochs, batch {BATCH}, Adam {LR:g}, latent {LATENT}")
    print(f"{'seed':>4} {'handgrad':>9} {'torch':>9} {'paired':>9} {'handgrad s':>11} "
          f"{'torch s':>8}")
    rows = []
    for seed in range(args.first, args.first + args.seeds):
        rows.append(run_seed(data.x_train, data.x_test, seed))
        ours, theirs, paired, ours_s, torch_s = rows[-1]
        print(f"{seed:>4} {ours:9.3f} {theirs:9.3f} {paired:9.3f} {ours_s:11.1f} "
              f"{torch_s:8.1f}", flush=True)
    columns = list(zip(*rows))
    gaps = [ours - paired for ours, _, paired, *_ in rows]
    print(f"mean +- sd over {len(rows)} seeds: handgrad {_summary(columns[0])}, torch "
          f"{_summary(columns[1])}, paired torch {_summary(columns[2])} (handgrad - paired "
          f"{_summary(gaps)}); training time handgrad {_summary(columns[3])} s, torch "
          f"{_summary(columns[4])} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
