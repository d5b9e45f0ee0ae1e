"""The ``bernmf`` command line."""

from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from bernmf.api import fit
from bernmf.models import Prior, perplexity, simulate
from bernmf.split import random_split


def demo(args: argparse.Namespace) -> int:
    """Fit ``em`` and ``mm`` at several ranks on data simulated from the model."""
    truth_prior = Prior(alpha=args.alpha, beta=args.beta, gamma=args.gamma)
    map_prior = Prior(alpha=args.mm_alpha, beta=args.mm_beta)
    Y, W, H = simulate(args.seed, args.rows, args.cols, args.true_rank, truth_prior)
    split = random_split(Y.shape, (1 - args.holdout, 0.0, args.holdout), seed=args.seed)
    train, test = split.train, split.test
    print(
        f"Simulated Y: {args.rows} x {args.cols}, true rank {args.true_rank}, "
        f"H ~ Beta({args.alpha}, {args.beta}), W ~ Dirichlet({args.gamma}), "
        f"density {Y.mean():.3f}; "
        f"{test.mean():.0%} of entries held out for testing."
    )
    rows = []
    for engine in ("em", "mm"):
        for rank in args.ranks:
            prior = map_prior if engine == "mm" else None
            start = time.perf_counter()
            result = fit(Y, engine, rank, mask=train, prior=prior, seed=args.seed)
            rows.append(
                {
                    "engine": engine,
                    "rank": rank,
                    "iterations": result.n_iter,
                    "train objective": result.objective,
                    "held-out perplexity": result.perplexity(Y, test),
                    "seconds": time.perf_counter() - start,
                }
            )
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print("(seconds include compilation the first time a shape is seen)")
    print(
        f"true W @ H: held-out perplexity {perplexity(Y, W @ H, test):.4g} "
        f"(perplexity = mean negative log-likelihood per held-out entry, nats; lower is better)"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bernmf",
        description="Binary matrix factorization with mean-parametrized Bernoulli models.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser(
        "demo",
        help="fit em and mm on data simulated from the model (no download)",
        description="Simulate Y from the model, hold out entries, fit em and mm at several "
        "ranks, and print iterations, objective, held-out perplexity and seconds.\n\n"
        "example: bernmf demo --rows 500 --cols 200 --ranks 2 4 8",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo_parser.add_argument("--rows", type=int, default=400, help="rows M (default 400)")
    demo_parser.add_argument("--cols", type=int, default=200, help="columns N (default 200)")
    demo_parser.add_argument("--true-rank", type=int, default=4, help="simulated K (default 4)")
    demo_parser.add_argument(
        "--ranks", type=int, nargs="+", default=[2, 4, 8], help="ranks to fit (default 2 4 8)"
    )
    demo_parser.add_argument(
        "--alpha", type=float, default=0.3, help="simulated H ~ Beta(alpha, beta) (default 0.3)"
    )
    demo_parser.add_argument("--beta", type=float, default=0.6, help="(default 0.6)")
    demo_parser.add_argument(
        "--gamma", type=float, default=0.5, help="simulated W ~ Dirichlet(gamma) (default 0.5)"
    )
    demo_parser.add_argument(
        "--mm-alpha", type=float, default=1.2, help="prior alpha of the mm fits (default 1.2)"
    )
    demo_parser.add_argument(
        "--mm-beta", type=float, default=1.2, help="prior beta of the mm fits (default 1.2)"
    )
    demo_parser.add_argument(
        "--holdout", type=float, default=0.2, help="fraction held out (default 0.2)"
    )
    demo_parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo_parser.set_defaults(run=demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bernmf`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo" and not 0 < args.holdout < 1:
        parser.error(f"--holdout must be between 0 and 1, got {args.holdout}")
    try:
        return args.run(args)
    except (ValueError, TypeError) as error:
        print(f"bernmf: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
