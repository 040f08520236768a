"""Every learner by name: its step function, the names of its state arrays and hyperparameters.

The order of ``vectors``/``matrices``/``scalars``/``hyperparameters`` is the index order the step
function uses (V[0] is always the weight vector w).
"""
from dataclasses import dataclass, field

from .baselines import adagrad_step, adam_step, cocob_step, sgd_step
from .kernel import STEPS
from .kotlowski import kotlowski1_step, kotlowski2_step
from .mirror_descent import omd_diagonal_step, omd_pnorm_step
from .normalized import nag_step, ng_step, snag_step
from .scinol import scinol1_step, scinol2_step


@dataclass(frozen=True)
class Algorithm:
    name: str
    step: object
    vectors: tuple
    hyperparameters: dict  # name -> default (None: taken from the loss, see new_state)
    scalars: tuple = ()
    matrices: tuple = ()
    initial: dict = field(default_factory=dict)  # vector -> hyperparameter name or constant
    invariance: str = "none"  # "diagonal": any per-feature rescaling; "linear": any invertible map
    reference: str = ""
    scale: str = None  # the vector holding each feature's scale as the learner sees it

    @property
    def code(self):
        """The learner's code for the compiled loop (``kernel.run_batch``)."""
        return STEPS.index(self.step)


_LR = {"learning_rate": 0.5}
ALGORITHMS = {a.name: a for a in [
    Algorithm("ng", ng_step, ("w", "s"), _LR, scalars=("t", "N"), invariance="diagonal",
              scale="s", reference="Ross, Mineiro, Langford 2013, Alg. 1"),
    Algorithm("nag", nag_step, ("w", "s", "G"), _LR, scalars=("t", "N"), invariance="diagonal",
              scale="s", reference="Ross, Mineiro, Langford 2013, Alg. 2"),
    Algorithm("snag", snag_step, ("w", "s", "G", "t0"), _LR, scalars=("t", "N"), invariance="diagonal",
              reference="Ross, Mineiro, Langford 2013, Sec. 3"),
    Algorithm("omd_diagonal", omd_diagonal_step, ("w", "theta", "b", "Q"),
              {"learning_rate": 1.0, "lipschitz": None}, scalars=("d",), invariance="diagonal",
              scale="b", reference="Orabona, Crammer, Cesa-Bianchi 2015, Sec. 5, regulariser (13)"),
    Algorithm("omd_pnorm", omd_pnorm_step, ("w", "theta", "b"),
              {"learning_rate": 1.0, "lipschitz": None}, scalars=("m", "B"), invariance="diagonal",
              scale="b", reference="Orabona, Crammer, Cesa-Bianchi 2015, Sec. 5, regulariser (12)"),
    Algorithm("kotlowski1", kotlowski1_step, ("w", "s2", "h"), {"alpha": 1.5}, scalars=("t", "d"),
              invariance="diagonal", reference="Kotłowski 2017, Alg. 1"),
    Algorithm("kotlowski2", kotlowski2_step, ("w", "h", "D"), {"alpha": 1.5}, scalars=("nu",),
              matrices=("S_pinv", "P", "S"), invariance="linear", scale="D", reference="Kotłowski 2017, Alg. 2"),
    Algorithm("scinol1", scinol1_step, ("w", "S2", "G", "M", "beta"), {"epsilon": 1.0},
              scalars=("t",), initial={"beta": "epsilon"}, invariance="diagonal",
              scale="M", reference="Kempka, Kotłowski 2019, ScInOL1"),
    Algorithm("scinol2", scinol2_step, ("w", "S2", "G", "M", "eta"), {"epsilon": 1.0},
              initial={"eta": "epsilon"}, invariance="diagonal",
              scale="M", reference="Kempka, Kotłowski 2019, ScInOL2"),
    Algorithm("sgd", sgd_step, ("w",), {"learning_rate": 0.1}, scalars=("t",),
              reference="SGD with η/√t"),
    Algorithm("adagrad", adagrad_step, ("w", "G"), {"learning_rate": 0.1},
              reference="Duchi, Hazan, Singer 2011"),
    Algorithm("adam", adam_step, ("w", "m", "v"),
              {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8},
              scalars=("t",), reference="Kingma, Ba 2015"),
    Algorithm("cocob", cocob_step, ("w", "L", "G", "reward", "theta"), {"alpha": 100.0},
              initial={"L": 1e-8}, reference="Orabona, Tommasi 2017, COCOB-Backprop"),
]}

# The dense d×d state of Kotłowski Alg. 2 must stay small.
MAX_MATRIX_DIM = 4096


def get_algorithm(name):
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; choose one of: "
                         f"{', '.join(sorted(ALGORITHMS))}") from None
