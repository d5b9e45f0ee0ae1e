"""The ``bernmf`` command line: fit, compare, tune, report, reproduce, demo.

Every command takes ``--quiet``, ``--json`` and ``--debug``; exit codes are 0
(success), 1 (an error, reported in one line), 2 (a usage error) and 130
(interrupted with Ctrl-C, at any moment: :mod:`bernmf._interrupt`). Results go to a
new folder, written under a temporary name and published when complete
(:func:`bernmf._output.atomic_output`): never over a folder that appeared meanwhile,
and with ``--force`` only over the folder that existed at the start.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from bernmf import _interrupt as interrupt
from bernmf import tune
from bernmf._progress import Heartbeat
from bernmf.api import fit
from bernmf.cli.commands import compare_command, declared, demo, engines_command, fit_command
from bernmf.cli.study_commands import report_command, reproduce_command, tune_command
from bernmf.data import datasets
from bernmf.data.arguments import SEED_LIMIT
from bernmf.fitting import search
from bernmf.fitting.ensemble import COMBINES
from bernmf.fitting.search_plan import PLAN_FILE
from bernmf.models import Prior
from bernmf.studies import compare as comparison
from bernmf.studies.compare import MAX_VALUES
from bernmf.studies.report import run as report
from bernmf.studies.report.budget import DEFAULT_BUDGET, QUICK_BUDGET
from bernmf.studies.runner.registry import STUDIES

# ---------------------------------------------------------------------------------------
# argument types


def comma_list(kind):
    """An argparse type: ``"2,4,8"`` -> [2, 4, 8] (a usage error otherwise)."""

    def parse(text: str) -> list:
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {kind.__name__}, got {text!r}"
            )
        return values

    return parse


def comma_text(values) -> str:
    """``values`` as the text :func:`comma_list` reads: (2, 4, 8) -> "2,4,8"."""
    return ",".join(str(v) for v in values)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a usage error naming the value otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def seed_count(text: str) -> int:
    """An argparse type: how many seeds, an integer in [1, :data:`MAX_VALUES`] (a usage
    error naming the value otherwise, before anything is read or checked per seed)."""
    value = positive_int(text)
    if value > MAX_VALUES:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, {MAX_VALUES}], got {text!r}")
    return value


def seed_int(text: str) -> int:
    """An argparse type: a seed, an integer in [0, 2**32) (a usage error naming the value
    otherwise; a fit's restarts are bounded by the checks of :func:`bernmf.fit`)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32 - 1], got {text!r}")
    return value


# ---------------------------------------------------------------------------------------
# parser

EXAMPLES = {
    "fit": """examples:
  bernmf fit animals.csv --out results/animals   (the best model within a minute)
  bernmf fit animals.csv --rank 4 --alpha 1.2 --beta 1.5 --out results/animals-k4
  bernmf fit data.npz --engine em --rank 8 --mask train.csv --seed 3 --out results/em
  bernmf fit data.csv --rank 4 --option dtype=float32 --json --out results/f32

DATA: .csv or .csv.gz (first column row names, header column names, empty cell or NA =
missing), .parquet (needs pyarrow), or .npz (array 'Y', or scipy.sparse.save_npz: the
ones of a mostly-zero matrix). --mask: same formats, 1 = use the entry. --row-groups:
a CSV with a header line, then a row's label (as DATA names it; 0, 1, ... without names)
and its group a line; rows left out, or of an empty group, are drawn as ungrouped.
Writes W.csv, H.csv, top_columns.csv and top_rows.csv (the 10 columns of largest H and
rows of largest W per component), trace.csv, summary.json, fit.npz (bernmf.load),
factors.png, trace.png; without --rank also probs.csv (P(Y=1) of every entry).""",
    "compare": """examples:
  bernmf compare --out results/compare                    # simulated data, offline
  bernmf compare --dataset animals --engines mm,em --ranks 2,4,8 --seeds 5 --out results/cmp
  bernmf compare data.csv --engines all --option mm.max_iter=500 --out results/cmp

Prior-taking engines get --alpha/--beta/--gamma; the others none. With --dataset (the
paper's split), each seed also gets the rows "stacked: all engines" and "stacked: mm grid":
its fits stacked on the validation entries (bernmf.stack), rank 0.
Writes fits.csv (every fit), summary.csv, summary.json, perplexity.png.""",
    "tune": """examples:
  bernmf tune --dataset animals --ranks 2,4,8 --alphas 1.2,2,4 --betas 1.2,2,4 --out t
  bernmf tune data.csv --engines mm,logsvd,em --ranks 2,4,8 --out t
  bernmf tune data.csv --split t/split.csv --ranks 4 --restarts 3 --out t2

Engines that take a prior (mm) are fitted at every --alphas x --betas; the others (em,
logsvd, logpca) once per rank and seed. An engine whose best rank is the largest of --ranks
(or the smallest) gets up to --extend ranks beyond it (twice, or half, the last) while they
improve its validation perplexity, and so does a best alpha or beta at the edge of two or
more values (the largest doubled, the smallest moved halfway to 1); the lines saying so are
also in summary.json ("notes").

--split: codes 2 = train, 1 = validation, 0 = test, one per entry of DATA: a CSV like
the paper's split files (no header, no row names; or labelled as DATA, any order),
.npz or .parquet.
--combine stack: best_fit.npz is the stack of every fit of the grid (bernmf.stack on the
validation entries, a setting's seeds sharing one weight), and members.csv its members and
weights; --refit fits its members of positive weight again on training + validation entries.
Writes grid.csv (one row per fit), summary.json, split.csv (the split's codes, which
--split reads back), validation.png (alpha x beta at the best rank of the best engine that
takes a prior) and best_fit.npz (the best fit as the grid made it, or the best setting's
ensemble; not fitted again).""",
    "report": """examples:
  bernmf report --quick --out results/report-quick          # animals, about a minute
  bernmf report --quick data.csv.gz --out results/mine-quick   # estimates time first
  bernmf report --engines mm,em,vb,logsvd,logpca --data-dir ../shared/data --out results/report
  bernmf report data.csv --engines mm,em --out results/mine
  bernmf report data.csv --budget 300 --out results/mine    # every engine, about 5 minutes

Each engine's rank (and mm's prior) is chosen on the validation entries of the paper's
split, then scored on its test entries over --seeds seeds, also at --shared-rank; the
--ensembles engines also as an ensemble of --restarts members combined by stacking.
Writes report.html (stands alone), fits.csv (one row per test fit), leaderboard.csv,
pareto.png (test perplexity against seconds), environment.json and each dataset's
winning fit as winner-<dataset>.npz (bernmf.load reads it).""",
    "reproduce": """examples:
  bernmf reproduce paper --quick --out results/paper-quick
  bernmf reproduce paper --as-published --data-dir ../shared/data
  bernmf reproduce modes --quick
  bernmf reproduce stacking --datasets animals paleo
  bernmf reproduce sbc --quick
  bernmf reproduce posterior_accuracy --quick

Runs a study of bernmf.studies (installed with the package): paper (the paper's
protocol; outputs in OUT/corrected or OUT/as_published), modes (single MAP fits against
ensembles), stacking (stacks across engines) and posterior_vs_map (every engine family
at matched CPU budgets), each a configuration of the study runner
(bernmf.studies.runner), sbc (simulation-based calibration of every engine's
posterior on data drawn from the prior) and posterior_accuracy (every engine's posterior
against a reference posterior, at its CPU cost); see each module for its protocol and
outputs.""",
}


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="no progress and no table")
    common.add_argument(
        "--json", action="store_true",
        help='print the result as JSON (standard: inf and NaN as the strings "inf", "-inf", "nan")',
    )  # fmt: skip
    common.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return common


def output_options(parser, default: str | None = None) -> None:
    parser.add_argument(
        "--out", required=default is None, default=default, help="results folder (must be new)"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the --out folder that exists at the start"
    )


def prior_options(parser, default: float | None = None) -> None:
    hint = "the engine's default" if default is None else default
    parser.add_argument("--alpha", type=float, default=default, help=f"Beta alpha ({hint})")
    parser.add_argument("--beta", type=float, default=default, help=f"Beta beta ({hint})")
    parser.add_argument("--gamma", type=float, default=None, help="Dirichlet gamma (engine's)")


def data_options(parser) -> None:
    parser.add_argument(
        "data", nargs="?", default=None, help="DATA file (.csv, .csv.gz, .parquet, .npz)"
    )
    parser.add_argument("--dataset", choices=tuple(datasets.DATASETS), help="a paper dataset")
    parser.add_argument("--data-dir", default=None, help="folder with <dataset>.csv or .rda")


def add_command(commands, name: str, help: str, common) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        help=help,
        description=help,
        epilog=EXAMPLES.get(name),
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bernmf",
        description="Binary matrix factorization with mean-parametrized Bernoulli models.",
        epilog="Run 'bernmf COMMAND --help' for a command's options and examples. "
        "Exit codes: 0 success, 1 error, 2 usage, 130 interrupted.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = common_options()
    fits, grids, reports = declared(fit), declared(tune.grid), declared(report.run)

    fit_parser = add_command(
        commands, "fit", "the best model of a data file, or one engine at one --rank", common
    )
    fit_parser.add_argument("data", help="DATA file (.csv, .csv.gz, .parquet, .npz)")
    fit_parser.add_argument(
        "--engine",
        default=fits["engine"],
        help="an engine (default mm); without --rank, the engines to search, comma-separated "
        f"(default {comma_text(search.ENGINES)})",
    )
    fit_parser.add_argument(
        "--rank", type=int,
        help="number of components K; without it, ranks, priors and engines are searched "
        "within --budget and the fits stacked and refit (the best model)",
    )  # fmt: skip
    fit_parser.add_argument(
        "--budget", type=float,
        help=f"without --rank: seconds of work the search aims to finish in "
        f"({search.BUDGET:g}; CPU seconds on one core of the machine its work was measured on)",
    )  # fmt: skip
    fit_parser.add_argument(
        "--plan", metavar="FILE",
        help=f"without --rank: replay the search plan FILE ({PLAN_FILE} of an earlier "
        "bernmf fit --out), fitting the same members on the same data and --seed",
    )  # fmt: skip
    prior_options(fit_parser)
    fit_parser.add_argument("--mask", help="file of the entries to fit on (1 = use)")
    fit_parser.add_argument(
        "--row-groups", metavar="FILE",
        help="CSV of row,group (a header line, then a row's label and its group a line): "
        "factors.png colours each row by its group",
    )  # fmt: skip
    seed, restarts, combine = fits["seed"], fits["restarts"], fits["combine"]
    fit_parser.add_argument(
        "--seed", type=seed_int, default=seed, help=f"initialization seed ({seed})"
    )
    fit_parser.add_argument(
        "--restarts", type=int, default=restarts,
        help=f"members of an ensemble, seeds SEED, SEED+1, ... ({restarts})",
    )  # fmt: skip
    fit_parser.add_argument(
        "--combine", choices=COMBINES, default=combine, help=f"how members combine ({combine})"
    )
    fit_parser.add_argument(
        "--validation", help="file of held-out entries that weigh --combine stack (1 = use)"
    )
    fit_parser.add_argument("--max-iter", type=int, help="iteration limit (engine's default)")
    fit_parser.add_argument("--tol", type=float, help="stopping tolerance (engine's default)")
    fit_parser.add_argument(
        "--option", action="append", metavar="KEY=VALUE", help="another engine option"
    )
    fit_parser.add_argument(
        "--distributed", action="store_true", help="one process of a multi-process fit (mm, em)"
    )
    for flag, text in [
        ("--coordinator", "host:port of process 0 (or BERNMF_COORDINATOR)"),
        ("--num-processes", "processes (or BERNMF_NUM_PROCESSES, SLURM_NTASKS)"),
        ("--process-id", "this process's index (or BERNMF_PROCESS_ID, SLURM_PROCID)"),
        ("--peer-timeout", "seconds to wait for the other processes, or a silent one (60)"),
    ]:
        fit_parser.add_argument(flag, help=text)
    output_options(fit_parser)
    fit_parser.set_defaults(run=fit_in_one_or_several_processes)

    compare_parser = add_command(
        commands, "compare", "held-out perplexity of engines x ranks x seeds", common
    )
    data_options(compare_parser)
    compare_parser.add_argument(
        "--engines", type=comma_list(str), default="mm,em", help="comma list, or 'all'"
    )
    compare_parser.add_argument(
        "--ranks", type=comma_list(int), default="4", help="comma list of K (default 4)"
    )
    seeds = len(declared(comparison.compare)["seeds"])  # range(n): n seeds from 0
    compare_parser.add_argument(
        "--seeds", type=seed_count, default=seeds, help=f"seeds per setting ({seeds})"
    )
    compare_parser.add_argument("--test", type=float, default=0.2, help="test fraction (0.2)")
    prior_options(compare_parser, default=1.2)
    compare_parser.add_argument(
        "--option", action="append", metavar="ENGINE.KEY=VALUE", help="an engine's option"
    )
    compare_parser.add_argument("--rows", type=int, default=200, help="simulated M (200)")
    compare_parser.add_argument("--cols", type=int, default=100, help="simulated N (100)")
    compare_parser.add_argument("--true-rank", type=int, default=4, help="simulated K (4)")
    compare_parser.add_argument("--seed", type=seed_int, default=0, help="data and split seed (0)")
    output_options(compare_parser)
    compare_parser.set_defaults(run=compare_command)

    tune_parser = add_command(
        commands, "tune", "choose the engine, rank and prior on validation entries", common
    )
    data_options(tune_parser)
    tune_parser.add_argument("--split", help="CSV of split codes (2 train, 1 valid., 0 test)")
    engines = comma_text(grids["engines"])
    tune_parser.add_argument(
        "--engines", type=comma_list(str), default=engines,
        help=f"comma list of engines tuned ({engines})",
    )  # fmt: skip
    tune_parser.add_argument(
        "--ranks", type=comma_list(int), default="2,4,8", help="comma list (2,4,8)"
    )
    priors = comma_text(f"{value:g}" for value in tune.PRIOR_GRID)
    for flag in ("--alphas", "--betas"):
        tune_parser.add_argument(
            flag, type=comma_list(float),
            help=f"comma list, for the engines that take a prior ({priors})",
        )  # fmt: skip
    gamma = Prior().gamma if grids["gamma"] is None else grids["gamma"]  # the command's grid
    restarts, extend = grids["restarts"], tune.EXTENSIONS
    tune_parser.add_argument(
        "--gamma", type=float, default=gamma, help=f"Dirichlet gamma ({gamma:g})"
    )
    tune_parser.add_argument(
        "--restarts", type=int, default=restarts, help=f"seeds per setting ({restarts})"
    )
    tune_parser.add_argument(
        "--extend", type=int, default=extend,
        help="ranks (and alphas, betas) added at most, per engine, beyond the grid's edge where "
        f"the best one lies, while they improve validation; 0: only say so ({extend})",
    )  # fmt: skip
    tune_parser.add_argument(
        "--combine",
        choices=("mean", "best", "stack"),
        help="score each setting's ensemble of --restarts fits (uniform mixture or best), "
        "or stack every fit of the grid on validation (stack)",
    )
    tune_parser.add_argument(
        "--refit",
        action="store_true",
        help="with --combine stack: fit the stack's members of positive weight again on the "
        "training and validation entries",
    )
    tune_parser.add_argument(
        "--seed", type=seed_int, default=grids["seed"], help=f"first seed ({grids['seed']})"
    )
    tune_parser.add_argument("--max-iter", type=int, help="iteration limit (each engine's)")
    tune_parser.add_argument("--tol", type=float, help="stopping tolerance (each engine's)")
    output_options(tune_parser)
    tune_parser.set_defaults(run=tune_command)

    report_parser = add_command(
        commands, "report", "engines tuned and scored on the paper's split: an HTML report", common
    )
    report_parser.add_argument("data", nargs="?", default=None, help="DATA file instead")
    report_parser.add_argument(
        "--datasets", type=comma_list(str), default=None, help="comma list (all; --quick: animals)"
    )
    report_parser.add_argument("--data-dir", default=None, help="folder with <dataset>.csv or .rda")
    report_parser.add_argument(
        "--engines", type=comma_list(str), default="all", help="comma list, or 'all' (all)"
    )
    ranks, ensembles = comma_text(reports["ranks"]), comma_text(report.ENSEMBLES)
    shared, seeds, restarts = reports["shared_rank"], len(reports["seeds"]), reports["restarts"]
    report_parser.add_argument(
        "--ranks", type=comma_list(int),
        help=f"ranks tuned on validation ({ranks}; not with --quick)",
    )  # fmt: skip
    report_parser.add_argument(
        "--shared-rank", type=int, default=shared, help=f"rank for all ({shared})"
    )
    report_parser.add_argument(
        "--seeds", type=seed_count, default=seeds, help=f"test fits per setting ({seeds})"
    )
    report_parser.add_argument(
        "--ensembles", type=comma_list(str),
        help=f"engines also as ensembles ({ensembles}, those among --engines)",
    )  # fmt: skip
    report_parser.add_argument(
        "--restarts", type=int, help=f"ensemble members ({restarts}; --quick: 2)"
    )
    report_parser.add_argument(
        "--quick",
        action="store_true",
        help="few iterations, one rank, 2 seeds; engines estimated over its time budget are left "
        "out, and said so (about a minute on animals)",
    )
    report_parser.add_argument(
        "--budget", type=float, default=reports["budget"], metavar="SECONDS",
        help=f"seconds the whole report aims at ({DEFAULT_BUDGET:.0f}; --quick: "
        f"{QUICK_BUDGET:.0f} per dataset): every engine is estimated first, and those over it "
        "run fewer seeds, ranks or draws, or are left out, and said so",
    )  # fmt: skip
    output_options(report_parser)
    report_parser.set_defaults(run=report_command)

    reproduce_parser = add_command(
        commands, "reproduce", "run a study: the paper's experiment, modes, stacking, SBC", common
    )
    reproduce_parser.add_argument("study", choices=tuple(STUDIES), help="what to reproduce")
    reproduce_parser.add_argument("--as-published", action="store_true", help="published defects")
    reproduce_parser.add_argument(
        "--quick", action="store_true", help="a smoke run (animals, a tiny grid; under a minute)"
    )
    reproduce_parser.add_argument("--datasets", nargs="+", choices=tuple(datasets.DATASETS))
    reproduce_parser.add_argument("--data-dir", default=None, help="folder with the data")
    output_options(reproduce_parser, default="results/<study>")
    reproduce_parser.set_defaults(run=reproduce_command)

    engines_parser = add_command(
        commands, "engines", "the engines and where each comes from (built-in or a plugin)", common
    )
    engines_parser.epilog = (
        "An installed package adds an engine by an entry point in the group 'bernmf.engines' "
        "(docs/engines-api.md)."
    )
    engines_parser.set_defaults(run=engines_command)

    demo_parser = add_command(
        commands, "demo", "fit em and mm on data simulated from the model (no download)", common
    )
    demo_parser.description = (
        "Simulate Y from the model, hold out entries, fit em and mm at several "
        "ranks, and print iterations, objective, held-out perplexity and seconds."
    )
    demo_parser.epilog = "example: bernmf demo --rows 500 --cols 200 --ranks 2 4 8"
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
    default = Prior()  # mm's
    demo_parser.add_argument(
        "--mm-alpha", type=float, default=default.alpha,
        help=f"prior alpha of the mm fits (default {default.alpha:g}, mm's)",
    )  # fmt: skip
    demo_parser.add_argument(
        "--mm-beta", type=float, default=default.beta,
        help=f"prior beta of the mm fits (default {default.beta:g}, mm's)",
    )  # fmt: skip
    demo_parser.add_argument(
        "--holdout", type=float, default=0.2, help="fraction held out (default 0.2)"
    )
    demo_parser.add_argument("--seed", type=seed_int, default=0, help="random seed (default 0)")
    demo_parser.set_defaults(run=demo)
    return parser


ADVICE_FLAGS = {
    "fit": {},
    "compare": {"--engine ": "--engines "},
    "tune": {"--alpha ": "--alphas ", "--beta ": "--betas ", "--engine ": "--engines "},
}
"""How each command spells the flags of ``bernmf fit`` that a warning's advice names; the
other commands have no flag that follows it (``report`` chooses its priors)."""


def warning_printer(command: str = "fit"):
    """A ``warnings.showwarning`` that writes each distinct warning once, as one line.

    ``bernmf: warning: ...``, without the source file and line; a warning with a ``cli``
    text (:class:`bernmf.ZeroProbabilityWarning`: its advice in flags, not Python) is
    written with that text, in ``command``'s flags (:data:`ADVICE_FLAGS`), or without
    advice where ``command`` has none to follow. A command fits many times (seeds, ranks,
    engines), and a warning that each of those fits raises alike (e.g. the same held-out
    entries at probability 0) is written the first time only: Python's own once-per-place
    rule is undone whenever a filter changes.
    """
    shown = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = str(getattr(message, "cli", message))
        if hasattr(message, "cli") and command not in ADVICE_FLAGS:
            text = message.fact
        for flag, spelled in ADVICE_FLAGS.get(command, {}).items():
            text = text.replace(flag, spelled)
        text = " ".join(text.split()) or category.__name__
        if text not in shown:
            shown.add(text)
            print(f"bernmf: warning: {text}", file=file or sys.stderr, flush=True)

    return show


def fit_in_one_or_several_processes(args) -> int:
    """``bernmf fit``: in this process, or as one process of several (``--distributed``)."""
    if args.distributed and args.row_groups is not None:
        raise ValueError("--row-groups colours factors.png, which --distributed does not draw")
    if args.distributed:  # each process with its rows (bernmf.cli.launch, loaded only then)
        from bernmf.cli import launch

        return launch.fit_command(args)
    return fit_command(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bernmf`` command; returns the exit code.

    While the command runs, each distinct warning is written once, as one line
    (:func:`warning_printer`), and, unless ``--quiet`` or ``--json``, a
    :class:`bernmf._progress.Heartbeat` writes a line to stderr whenever nothing else
    was written for 10 s (what runs, its iteration and objective, the time so far).
    Ctrl-C ends it with one line and exit code 130, nothing published
    (:mod:`bernmf._interrupt`); an error that the interrupt caused is not reported.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo" and not 0 < args.holdout < 1:
        parser.error(f"--holdout must be between 0 and 1, got {args.holdout}")
    if args.command == "compare" and not 0 < args.test < 1:
        parser.error(f"--test must be between 0 and 1, got {args.test}")
    interrupt.start()
    try:
        with (
            warnings.catch_warnings(),
            Heartbeat(f"bernmf {args.command}", enabled=not (args.quiet or args.json)),
        ):
            warnings.showwarning = warning_printer(args.command)
            code = args.run(args)
    except KeyboardInterrupt:  # the temporary output is already removed
        return interrupt.outcome(interrupt.INTERRUPTED, interrupted=True)
    except Exception as error:
        if args.debug:
            raise
        code = 1
        if not interrupt.seen():
            message = " ".join(str(error).split()) or type(error).__name__
            print(f"bernmf: error: {message}", file=sys.stderr)
    return interrupt.outcome(code)


if __name__ == "__main__":
    sys.exit(main())
