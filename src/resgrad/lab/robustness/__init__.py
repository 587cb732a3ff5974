"""The equal-loss robustness study (issue 37): at equal validation loss, does a GPT whose
gradient travels shorter paths lose less when a block is deleted? Models read at loss levels
they all reach (``levels``), then path length against lesion cost across them, with
intervals over training seeds and a verdict that can go either way (``stats``).
"""

from resgrad.lab.robustness.analysis import (  # noqa: F401
    Study,
    equal_loss,
    read_study,
    trajectories,
)
from resgrad.lab.robustness.experiment import (  # noqa: F401
    BUDGET_S,
    DOSE_SCHEME,
    DOSED,
    METRICS,
    QUESTION,
    SCHEMES,
    RobustnessConfig,
    Runs,
    measure_cell,
    run_cells,
    validation_text,
)
from resgrad.lab.robustness.figure import (  # noqa: F401
    robustness_figure,
    save_robustness_figure,
)
from resgrad.lab.robustness.levels import (  # noqa: F401
    Kept,
    ModelKey,
    Point,
    Trajectory,
    at_level,
    check_levels,
    check_trajectory,
    choose_levels,
    common_range,
    model_label,
)
from resgrad.lab.robustness.profiles import ProfileResult, curse_of_depth  # noqa: F401
from resgrad.lab.robustness.regression import (  # noqa: F401
    CONFIDENCE,
    Calibration,
    bootstrap,
    calibrate,
    distinct_resamples,
    regress,
    shuffled,
)
from resgrad.lab.robustness.report import describe, render  # noqa: F401
from resgrad.lab.robustness.stats import (  # noqa: F401
    VERDICTS,
    LevelResult,
    analyse,
    by_depth,
    design,
    dose_response,
    partial_spearman,
    ranks,
    spearman,
    verdict,
)
