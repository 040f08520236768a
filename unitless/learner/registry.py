"""Every learner by name: its step function, the names of its state arrays and hyperparameters.

The order of ``vectors``/``matrices``/``scalars``/``hyperparameters`` is the index order the step
function uses (V[0] is always the weight vector w); the compiled loop (``kernel.py``) dispatches
on an entry's position (``code``). Adding a learner, one that can be split over feature shards
included: docs/design.md, "The learner library".
"""
from dataclasses import dataclass, field
from typing import Callable, Optional

from . import baselines, coin, mixture, normalized, scinol
from .kotlowski import kotlowski1_step, kotlowski2_step
from .mirror_descent import omd_diagonal_step, omd_pnorm_step


@dataclass(frozen=True)
class Algorithm:
    name: str
    vectors: tuple
    hyperparameters: dict  # name -> default (None: taken from the loss, see new_state)
    scalars: tuple = ()
    matrices: tuple = ()
    initial: dict = field(default_factory=dict)  # vector -> hyperparameter name or constant
    invariance: str = "none"  # "diagonal": any per-feature rescaling; "linear": any invertible map
    reference: str = ""
    scale: Optional[str] = None  # the vector holding each feature's scale as the learner sees it
    about: dict = field(default_factory=dict)  # hyperparameter -> what it means for this learner
    # True when the step reads every feature's state, not only the example's (a sum or matrix
    # over all features): its state is kept in feature-index order (``LearnerState.map_features``)
    scans_all: bool = False
    # feature shards (sharded.py): the step's two halves around the loss, None when the learner
    # cannot be split; the scalars that are sums over features (each shard keeps its own part)
    predict: Optional[Callable[..., float]] = None
    update: Optional[Callable[..., None]] = None
    summed: tuple = ()
    # True when its predict leaves what its update needs in a memo (one value per feature of
    # the example): a step around its halves gives them one
    memo: bool = False
    # the whole predict-then-update on one example, for a learner that cannot be split; one
    # that can is run as its predict, the loss and its update (``kernel.step``)
    step: Optional[Callable[..., tuple[float, float]]] = None

    @property
    def shardable(self) -> bool:
        return self.predict is not None

    @property
    def shared(self) -> bool:
        """True when many models' state can share one arena of slots (``many.py``): the step
        touches only the example's slots and the model's scalars."""
        return not self.matrices and not self.scans_all

    @property
    def code(self) -> int:
        """The learner's code for the compiled loop (``kernel.run_batch``): its position in
        ALGORITHMS."""
        return list(ALGORITHMS).index(self.name)


_LR = {"learning_rate": 0.5}
# What a hyperparameter means where all learners that take it agree; ``Algorithm.about`` says it
# where they do not (ε is ScInOL's prior scale but Adam's numerical guard; α is Kotłowski's
# potential but COCOB's cap). ``RANGES``: the open interval (low, high) of each one's values.
MEANING = {"learning_rate": "η, the step size",
           "lipschitz": "L, the loss's Lipschitz constant",
           "beta1": "β₁, decay of the gradient's running mean",
           "beta2": "β₂, decay of the squared gradient's running mean",
           "quantile_tau": "τ of the quantile loss"}
RANGES = {"learning_rate": (0.0, None), "lipschitz": (0.0, None), "alpha": (0.0, None),
          "epsilon": (0.0, None), "beta1": (0.0, 1.0), "beta2": (0.0, 1.0),
          "quantile_tau": (0.0, 1.0)}
_KOTLOWSKI_ALPHA = {"alpha": "α, the scale of the potential's exponent (α > 1 in the analysis)"}
_SCINOL_EPSILON = {"epsilon": "ε, the initial wealth: how far the first weights may move"}
ALGORITHMS = {a.name: a for a in [
    Algorithm("ng", ("w", "s"), _LR, scalars=("t", "N"), invariance="diagonal",
              scale="s", reference="Ross, Mineiro, Langford 2013, Alg. 1",
              predict=normalized.ng_predict, update=normalized.ng_update, summed=("N",)),
    Algorithm("nag", ("w", "s", "G"), _LR, scalars=("t", "N"), invariance="diagonal",
              scale="s", reference="Ross, Mineiro, Langford 2013, Alg. 2",
              predict=normalized.nag_predict, update=normalized.nag_update, summed=("N",)),
    Algorithm("snag", ("w", "s", "G", "t0"), _LR, scalars=("t", "N"), invariance="diagonal",
              reference="Ross, Mineiro, Langford 2013, Sec. 3",
              predict=normalized.snag_predict, update=normalized.snag_update, summed=("N",)),
    Algorithm("omd_diagonal", ("w", "theta", "b", "Q"),
              {"learning_rate": 1.0, "lipschitz": None}, scalars=("d",), invariance="diagonal",
              scale="b", reference="Orabona, Crammer, Cesa-Bianchi 2015, Sec. 5, regulariser (13)",
              step=omd_diagonal_step),
    Algorithm("omd_pnorm", ("w", "theta", "b"),
              {"learning_rate": 1.0, "lipschitz": None}, scalars=("m", "B"), invariance="diagonal",
              scale="b", scans_all=True,
              reference="Orabona, Crammer, Cesa-Bianchi 2015, Sec. 5, regulariser (12)",
              step=omd_pnorm_step),
    Algorithm("kotlowski1", ("w", "s2", "h"), {"alpha": 1.5}, scalars=("t", "d"), about=_KOTLOWSKI_ALPHA,
              invariance="diagonal", reference="Kotłowski 2017, Alg. 1",
              step=kotlowski1_step),
    Algorithm("kotlowski2", ("w", "h", "D"), {"alpha": 1.5}, scalars=("nu",), about=_KOTLOWSKI_ALPHA,
              matrices=("S_pinv", "P", "S"), invariance="linear", scale="D",
              scans_all=True, reference="Kotłowski 2017, Alg. 2",
              step=kotlowski2_step),
    Algorithm("scinol1", ("w", "S2", "G", "M", "beta"), {"epsilon": 1.0},
              scalars=("t",), about=_SCINOL_EPSILON, initial={"beta": "epsilon"},
              invariance="diagonal",
              scale="M", reference="Kempka, Kotłowski 2019, ScInOL1",
              predict=scinol.scinol1_predict, update=scinol.scinol1_update),
    Algorithm("scinol2", ("w", "S2", "G", "M", "eta"), {"epsilon": 1.0},
              about=_SCINOL_EPSILON,
              initial={"eta": "epsilon"}, invariance="diagonal",
              scale="M", reference="Kempka, Kotłowski 2019, ScInOL2",
              predict=scinol.scinol2_predict, update=scinol.scinol2_update, memo=True),
    Algorithm("coin", ("w", "theta", "G", "M", "wealth", "L"),
              dict(coin.DEFAULTS), scalars=("N", "T"), invariance="diagonal",
              scale="M", about={**_SCINOL_EPSILON,  # VW's --ftrl_alpha
                                "lipschitz": "β, the least |∂ℓ/∂ŷ| bound assumed (VW's --ftrl_beta)"},
              reference="Orabona, Pál 2016 (KT bettor); Vowpal Wabbit --coin (ftrl.cc coin_betting)",
              step=coin.coin_step),
    Algorithm("mix", mixture.VECTORS, {}, scalars=mixture.SCALARS, invariance="diagonal",
              scale="M", step=mixture.mix_step,
              reference="coin and NAG at a grid of rates, mixed by their progressive losses "
                        "(the Bayes mixture for logistic loss; AdaHedge, de Rooij et al. 2014)"),
    Algorithm("sgd", ("w",), {"learning_rate": 0.1}, scalars=("t",),
              reference="SGD with η/√t",
              predict=baselines.sgd_predict, update=baselines.sgd_update),
    Algorithm("adagrad", ("w", "G"), {"learning_rate": 0.1},
              reference="Duchi, Hazan, Singer 2011",
              predict=baselines.adagrad_predict, update=baselines.adagrad_update),
    Algorithm("adam", ("w", "m", "v"),
              {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8},
              scalars=("t",), reference="Kingma, Ba 2015",
              about={"epsilon": "ε added to √v̂, a numerical guard (not ScInOL's ε)"},
              predict=baselines.adam_predict, update=baselines.adam_update),
    Algorithm("cocob", ("w", "L", "G", "reward", "theta"), {"alpha": 100.0},
              about={"alpha": "α, the cap on the betting fraction in early rounds"},
              initial={"L": 1e-8}, reference="Orabona, Tommasi 2017, COCOB-Backprop",
              predict=baselines.cocob_predict, update=baselines.cocob_update, memo=True),
]}

# The dense d×d state of Kotłowski Alg. 2 must stay small.
MAX_MATRIX_DIM = 4096


def meaning(algorithm: Algorithm, name: str) -> str:
    """What hyperparameter ``name`` means for ``algorithm`` (one line)."""
    return algorithm.about.get(name) or MEANING.get(name, name)


def check_hyperparameter(name: str, value: float) -> float:
    """``value`` as a float, or ValueError when it is not a finite number in the range
    ``name`` may take (RANGES)."""
    value = float(value)
    low, high = RANGES.get(name, (None, None))
    if not (value == value and abs(value) != float("inf")) or (
            low is not None and not value > low) or (high is not None and not value < high):
        bounds = f"> {low:g}" if high is None else f"in ({low:g}, {high:g})"
        raise ValueError(f"--{name.replace('_', '-')} is {value:g}; it must be {bounds}")
    return value


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; choose one of: "
                         f"{', '.join(sorted(ALGORITHMS))}") from None
